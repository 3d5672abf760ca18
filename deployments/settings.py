"""What every deployment is constructed with: the storage root and the validated config, as plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.config import AppConfig
from app.storage import Storage


@dataclass(frozen=True)
class Settings:
    storage: str  # the storage root URI (absolute local path or pyarrow.fs URI)
    config: dict[str, Any]  # AppConfig.model_dump(): plain data pickles into replicas across versions

    @property
    def app(self) -> AppConfig:
        return AppConfig.model_validate(self.config)

    def open_storage(self) -> Storage:
        return Storage(self.storage)
