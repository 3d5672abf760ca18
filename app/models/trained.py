"""Models Ragline trained itself, named in configs as `catalog:NAME` (the promoted version, followed as it
changes) or `catalog:NAME:VERSION` (pinned)."""

from __future__ import annotations

import hashlib
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


def files_uri(manifest: ModelManifest, storage: Storage) -> str:
    """Where the version's files are, absolute: a path, or a URI of the storage's object store."""
    return str(storage.local_path(manifest.dir)) if storage.is_local else f"{storage.uri.rstrip('/')}/{manifest.dir}"


def mirror(uri: str) -> str:
    """A local directory with the files at `uri` (`files_uri`): the path itself, or a copy in the cache."""
    if "://" not in uri:
        return uri
    parent, _, name = uri.rstrip("/").rpartition("/")
    cache = Path(envs.cache_dir()) / "models" / hashlib.sha256(uri.encode()).hexdigest()[:16]
    if not (cache / "config.json").exists():
        Storage(parent).download_dir(name, cache)
    return str(cache)


def label(manifest: ModelManifest) -> str:
    return f"{manifest.name}:v{manifest.version}"
