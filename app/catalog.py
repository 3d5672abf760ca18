"""Versions of datasets and indexes, kept in storage: storage is the source of truth, actors only cache it.

Layout under the storage root:

    datasets/segments/<run_id>/chunks-*.parquet    shards written by one ingest run (invisible until referenced)
    datasets/segments/<run_id>/documents.parquet   the run's kept documents (ids, hashes, MinHash signatures)
    datasets/<n>/manifest.json                     version n: the list of segment files it is made of
    indexes/<n>/...                                index version n (FAISS, BM25, chunk table) + manifest.json
    runs/ingest/<run_id>.json                      ingest run records (state, progress, report)
    models/<name>/files-<id>/...                   an exported model (Hugging Face format)
    models/<name>/<n>/manifest.json                model version n of <name>: its files, metrics, data, config
    models/<name>/promoted.json                    {"version": n}: the version the serving graph loads
    quarantine/<run_id>/...                        unreadable input files, with reason.json

A version exists exactly when its manifest exists, and the manifest is written last and atomically, so a run
that dies part way leaves files nobody references and no visible version.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, NotRequired, TypedDict

from pydantic import BaseModel, Field

from app.errors import Conflict, NotFound
from app.storage import Storage

Kind = Literal["datasets", "indexes"]
NOUN = {"datasets": "dataset", "indexes": "index"}


class FileEntry(BaseModel):
    path: str = Field(description="Root-relative path.")
    bytes: int
    sha256: str
    rows: int | None = None


Precision = Literal["fp32", "bf16"]
Runtime = Literal["torch", "openvino"]


class EmbedderInfo(BaseModel):
    name: str
    revision: str
    dim: int
    precision: Precision = Field(default="fp32", description="What the vectors were computed at; questions are "
                                 "embedded at the same. Versions written before it existed are fp32.")
    runtime: Runtime = Field(default="torch", description="What computed the vectors (PyTorch or OpenVINO); "
                             "questions are embedded by the same. Versions written before it existed are torch.")
    files: str | None = Field(default=None, description="A trained embedder's files (its catalog version's "
                              "directory, a path or storage URI); `name` is then `catalog:NAME:VERSION`. None: "
                              "`name` is a packaged model, a local directory or a hub id.")


class Manifest(BaseModel):
    """What a version is, where it came from, and how to check it is intact."""

    kind: Kind
    version: int
    created_at: str
    parent: int | None = Field(default=None, description="Version this one extends (datasets) or reads (indexes).")
    inputs: list[str] = Field(default_factory=list, description="Input paths of the run that produced it.")
    run_id: str | None = None
    embedder: EmbedderInfo
    counts: dict[str, int] = Field(default_factory=dict)
    files: list[FileEntry] = Field(default_factory=list)
    # JSON as the producing run wrote it (pydantic validates `object` as anything, like Any); readers narrow it
    config: dict[str, object] = Field(default_factory=dict)  # the IngestConfig or IndexConfig, as a dict
    extra: dict[str, object] = Field(default_factory=dict)  # indexes: dense, include_title, build_s, dir


class ModelManifest(BaseModel):
    """A trained model version: where its files are, what it scored, and the data and config it came from."""

    name: str
    version: int = 0
    created_at: str = ""
    task: str
    run: str = Field(description="Training run that exported it.")
    base_model: str
    dir: str = Field(description="Root-relative directory of the Hugging Face files.")
    files: list[FileEntry] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    data: dict[str, object] = Field(default_factory=dict)  # the training data: counts, and where it came from
    config: dict[str, object] = Field(default_factory=dict)  # the training job's config, as a dict


class ModelFields(TypedDict):
    """What `Catalog.publish_model` is told of a new model version (the catalog sets the rest)."""

    task: str
    run: str
    base_model: str
    dir: str
    metrics: NotRequired[dict[str, float]]
    data: NotRequired[dict[str, object]]
    config: NotRequired[dict[str, object]]


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Catalog:
    def __init__(self, storage: Storage):
        self.storage = storage

    # ---- versions -------------------------------------------------------------------------------------------
    def versions(self, kind: Kind) -> list[Manifest]:
        out = []
        for name in self.storage.listdir(kind):
            if name.isdigit() and self.storage.exists(f"{kind}/{name}/manifest.json"):
                out.append(Manifest.model_validate(self.storage.read_json(f"{kind}/{name}/manifest.json")))
        return sorted(out, key=lambda m: m.version)

    def latest(self, kind: Kind) -> Manifest | None:
        """The newest published version, reading its manifest alone: every replica that follows the catalog calls
        this every poll, and on an object store each manifest read is a request or two."""
        for name in sorted((n for n in self.storage.listdir(kind) if n.isdigit()), key=int, reverse=True):
            if self.storage.exists(rel := f"{kind}/{name}/manifest.json"):
                return Manifest.model_validate(self.storage.read_json(rel))
        return None

    def get(self, kind: Kind, version: int) -> Manifest:
        rel = f"{kind}/{version}/manifest.json"
        if not self.storage.exists(rel):
            have = [m.version for m in self.versions(kind)]
            raise NotFound(f"{NOUN[kind]} version {version} does not exist (published: {have or 'none'})")
        return Manifest.model_validate(self.storage.read_json(rel))

    def resolve(self, kind: Kind, version: int | None) -> Manifest:
        """The given version, or the latest; NotFound if there is none."""
        if version is not None:
            return self.get(kind, version)
        latest = self.latest(kind)
        if latest is None:
            hint = "run `ragline ingest PATH`" if kind == "datasets" else "run `ragline ingest` (or `index build`)"
            raise NotFound(f"no {NOUN[kind]} version is published yet: {hint}")
        return latest

    def next_version(self, kind: Kind) -> int:
        used = [int(n) for n in self.storage.listdir(kind) if n.isdigit()]
        return max(used, default=0) + 1

    def publish(self, manifest: Manifest) -> Manifest:
        """Make `manifest` visible as the next free version number of its kind (its files are already written).

        The manifest is created exclusively, so two publishers never get the same number."""
        while not self.publish_as(manifest, self.next_version(manifest.kind)):
            pass
        return manifest

    def publish_as(self, manifest: Manifest, version: int) -> bool:
        """Publish `manifest` as exactly `version`; False (nothing written) if that version exists already."""
        manifest.version = version
        manifest.created_at = now_iso()
        data = manifest.model_dump_json(indent=2).encode()
        return self.storage.create_exclusive(f"{manifest.kind}/{version}/manifest.json", data)

    def verify(self, manifest: Manifest | ModelManifest) -> list[str]:
        """Files of a version that are missing or whose size/checksum differ (empty when intact)."""
        bad = []
        for f in manifest.files:
            if not self.storage.exists(f.path):
                bad.append(f"{f.path}: missing")
                continue
            size, digest = self.storage.file_digest(f.path)
            if (size, digest) != (f.bytes, f.sha256):
                bad.append(f"{f.path}: checksum mismatch")
        return bad

    def file_entry(self, rel: str, rows: int | None = None) -> FileEntry:
        size, digest = self.storage.file_digest(rel)
        return FileEntry(path=rel, bytes=size, sha256=digest, rows=rows)

    # ---- trained models ---------------------------------------------------------------------------------------
    def model_versions(self, name: str) -> list[ModelManifest]:
        base = f"models/{name}"
        found = [n for n in self.storage.listdir(base)
                 if n.isdigit() and self.storage.exists(f"{base}/{n}/manifest.json")]
        return sorted((ModelManifest.model_validate(self.storage.read_json(f"{base}/{n}/manifest.json"))
                       for n in found), key=lambda m: m.version)

    def model_names(self) -> list[str]:
        return [n for n in self.storage.listdir("models") if self.model_versions(n)]

    def get_model(self, name: str, version: int) -> ModelManifest:
        rel = f"models/{name}/{version}/manifest.json"
        if not self.storage.exists(rel):
            have = [m.version for m in self.model_versions(name)]
            raise NotFound(f"model {name!r} has no version {version} (versions: {have or 'none'})")
        return ModelManifest.model_validate(self.storage.read_json(rel))

    def publish_model(self, name: str, fields: ModelFields) -> ModelManifest:
        """Publish the files already written under fields["dir"] as the next version of `name`."""
        manifest = ModelManifest(name=name, **fields)
        manifest.files = [self.file_entry(f) for f in self.storage.list_files(manifest.dir)]
        while True:
            used = [int(n) for n in self.storage.listdir(f"models/{name}") if n.isdigit()]
            manifest.version, manifest.created_at = max(used, default=0) + 1, now_iso()
            if self.storage.create_exclusive(f"models/{name}/{manifest.version}/manifest.json",
                                             manifest.model_dump_json(indent=2).encode()):
                return manifest

    def promote(self, name: str, version: int) -> ModelManifest:
        """Mark `version` as the one to serve (the serving graph picks it up without a restart)."""
        manifest = self.get_model(name, version)
        if bad := self.verify(manifest):
            raise Conflict(f"model {name} version {version} is damaged: {'; '.join(bad)}")
        self.storage.write_json(f"models/{name}/promoted.json", {"version": version, "promoted_at": now_iso()})
        return manifest

    def promoted(self, name: str) -> ModelManifest | None:
        rel = f"models/{name}/promoted.json"
        if not self.storage.exists(rel):
            return None
        return self.get_model(name, int(self.storage.read_json(rel)["version"]))
