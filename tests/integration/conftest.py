"""The fixture corpus and the config it is ingested with (the session's Ray and tiny models: tests/conftest.py)."""

from pathlib import Path

import pytest

from app.config import AppConfig, load_config
from tests.helpers import write_corpus


@pytest.fixture
def corpus(tmp_path) -> tuple[Path, dict[str, int]]:
    d = tmp_path / "corpus"
    return d, write_corpus(d)


@pytest.fixture
def cfg() -> AppConfig:
    # the corpus has 1 corrupt file of 7: allow it
    return load_config(None, ["ingest.read.max_error_fraction=0.5"])
