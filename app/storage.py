"""One storage root for everything Ragline keeps: a local directory or any pyarrow.fs URI (s3://, gs://, ...).

All paths handed around are relative to the root ("datasets/3/manifest.json"), so a catalog written on a laptop
reads the same from a cluster pointed at a copy of it. Writes that must never be seen half-done go through
`write_bytes(..., atomic=True)`: a temp file renamed into place locally; on object stores a single PUT, which
those stores make visible whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from app.errors import Unavailable, UserError

PIECE = 16 << 20  # bytes read at once where a file is read in pieces: a request each on an object store
READ_ATTEMPTS = 10  # reads of a file rewritten meanwhile before `read_bytes` gives up


class Storage:
    """A storage root. Picklable (holds only its URI), so it can travel to Ray workers."""

    def __init__(self, uri: str):
        if not uri:
            raise UserError("storage root is empty")
        self.uri = uri
        self._fs: pafs.FileSystem | None = None
        self._base = ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (Storage, (self.uri,))

    def _resolve(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:
            if "://" in self.uri:
                self._fs, self._base = pafs.FileSystem.from_uri(self.uri)
            else:
                self._fs, self._base = pafs.LocalFileSystem(), os.path.abspath(self.uri)
            self._base = self._base.rstrip("/")
        return self._fs, self._base

    @property
    def fs(self) -> pafs.FileSystem:
        return self._resolve()[0]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def path(self, rel: str = "") -> str:
        """Filesystem path (for `self.fs`) of a root-relative path. Empty components are dropped ("a//b/" is
        "a/b"): on an object store they would name another key, which pyarrow refuses."""
        base = self._resolve()[1]
        rel = _clean(rel)
        return f"{base}/{rel}" if rel else base

    def local_path(self, rel: str = "") -> Path:
        assert self.is_local, "local_path() is only for a local storage root"
        return Path(self.path(rel))

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def makedirs(self, rel: str) -> None:
        self.fs.create_dir(self.path(rel), recursive=True)

    def listdir(self, rel: str) -> list[str]:
        """Names directly under `rel` (empty if it does not exist)."""
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=False)
        return sorted(info.base_name for info in self.fs.get_file_info(sel))

    def list_files(self, rel: str) -> list[str]:
        """Root-relative paths of all files under `rel`, recursively."""
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True, recursive=True)
        base = self.path()
        return sorted(
            info.path[len(base) + 1 :] for info in self.fs.get_file_info(sel) if info.type == pafs.FileType.File
        )

    def read_bytes(self, rel: str) -> bytes:
        """The file's bytes, all of one version of it. On an object store a read is a HEAD (the size) and a GET of
        that many bytes, so an object replaced by a longer one in between comes back cut short: the size is looked
        at again after the read, and the read repeated while it differs (run records and the key file are
        rewritten while replicas and status calls read them)."""
        path = self.path(rel)
        for _ in range(READ_ATTEMPTS):
            # A file, not a stream: its read() is one GET, where a stream's takes a request per piece (86 MB in
            # 21.9 s against 0.2 s from moto's server).
            with self.fs.open_input_file(path) as f:
                data = bytes(f.read())
            if self.is_local or self.fs.get_file_info(path).size == len(data):
                return data
        raise Unavailable(f"{path} changed during each of {READ_ATTEMPTS} reads")

    def write_bytes(self, rel: str, data: bytes, atomic: bool = True) -> None:
        target = self.path(rel)
        if not isinstance(self.fs, pafs.S3FileSystem):  # S3 needs no parents: their markers are 4 more requests
            self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        if not (atomic and self.is_local):
            with self.fs.open_output_stream(target) as f:
                f.write(data)
            return
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)

    def copy_file(self, src: str, dest: str) -> None:
        """Copy a stored file within the root: on an object store the store copies it (S3's CopyObject), no byte
        passes through this process."""
        if self.is_local:
            self.makedirs(os.path.dirname(dest))
        self.fs.copy_file(self.path(src), self.path(dest))

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write `rel` only if it does not exist yet; False if it did. Atomic on local storage (a hard link
        either appears whole or fails); on object stores a check-then-PUT, so keep one writer per catalog kind."""
        target = self.path(rel)
        if not self.is_local:
            if self.exists(rel):
                return False
            self.write_bytes(rel, data)
            return True
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_bytes(rel))

    def write_json(self, rel: str, obj: Any) -> None:
        self.write_bytes(rel, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())

    def delete_dir(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.delete_dir(self.path(rel))

    def file_digest(self, rel: str) -> tuple[int, str]:
        """(size in bytes, sha256 hex) of a stored file, read in 16 MiB pieces (a request each on an object
        store)."""
        h = hashlib.sha256()
        size = 0
        with self.fs.open_input_file(self.path(rel)) as f:
            while piece := f.read(PIECE):
                h.update(piece)
                size += len(piece)
        return size, h.hexdigest()

    def upload_dir(self, local_dir: Path, rel: str) -> list[str]:
        """Copy a local directory's files under `rel`; returns the root-relative paths written."""
        written = []
        for p in sorted(local_dir.rglob("*")):
            if p.is_file():
                dest = f"{rel}/{p.relative_to(local_dir).as_posix()}"
                self.write_bytes(dest, p.read_bytes(), atomic=False)
                written.append(dest)
        return written

    def download_dir(self, rel: str, local_dir: Path) -> Path:
        """Mirror the files under `rel` into `local_dir` (for libraries that only read local files), whole or not
        at all: they are written to a temporary sibling renamed into place, so whoever finds `local_dir` finds
        every file. A download cut short leaves no `local_dir`; of two at once (replicas on one node) the first
        rename wins and the other's copy is dropped. An existing `local_dir` is kept as it is."""
        prefix = f"{_clean(rel)}/" if _clean(rel) else ""
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{local_dir.name}.tmp-", dir=local_dir.parent))
        try:
            for f in self.list_files(rel):
                dest = tmp / f.removeprefix(prefix)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(self.read_bytes(f))
            try:
                os.rename(tmp, local_dir)  # onto an empty directory too
            except OSError:
                if not local_dir.is_dir():
                    raise  # else a full one is there: another download won
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return local_dir


def _clean(rel: str) -> str:
    """A root-relative path with single slashes and none at either end."""
    return "/".join(part for part in rel.split("/") if part)
