"""Models Ragline trained itself, named in configs as `catalog:NAME` (the promoted version, followed as it
changes) or `catalog:NAME:VERSION` (pinned)."""

from __future__ import annotations

from pathlib import Path

from app import envs
from app.catalog import Catalog, ModelManifest
from app.errors import UserError
from app.storage import Storage

PREFIX = "catalog:"


def is_catalog(spec: str | None) -> bool:
    return bool(spec) and str(spec).startswith(PREFIX)


def lookup(spec: str, storage: Storage) -> ModelManifest | None:
    """The manifest `spec` names; None when it names a promoted version and none is promoted yet."""
    name, _, version = spec[len(PREFIX):].partition(":")
    catalog = Catalog(storage)
    if version:
        if not version.isdigit():
            raise UserError(f"{spec!r}: the version after the name must be a number")
        return catalog.get_model(name, int(version))
    return catalog.promoted(name)


def local_dir(manifest: ModelManifest, storage: Storage) -> str:
    """A local directory with the version's files (remote storage is mirrored into the cache once)."""
    if storage.is_local:
        return str(storage.local_path(manifest.dir))
    cache = Path(envs.cache_dir()) / "models" / manifest.name / manifest.dir.rsplit("/", 1)[-1]
    if not (cache / "config.json").exists():
        storage.download_dir(manifest.dir, cache)
    return str(cache)


def label(manifest: ModelManifest) -> str:
    return f"{manifest.name}:v{manifest.version}"
