"""Expand the user's input paths (files, directories, globs; local or any pyarrow.fs URI) into files to read."""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from app.ingest.parse import file_format


@dataclass
class Inputs:
    filesystem: pafs.FileSystem
    files: list[str]  # paths on `filesystem`, sorted
    skipped: list[str] = field(default_factory=list)  # files inside given directories with unsupported types
    uri_prefix: str = ""  # "s3://" etc., to show sources as URIs

    def source(self, path: str) -> str:
        return f"{self.uri_prefix}{path}"


def _scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else "file"


def expand(paths: list[str]) -> Inputs:
    """Raises ValueError naming the path when one does not exist or inputs mix filesystems."""
    if not paths:
        raise ValueError("no input paths given")
    schemes = {_scheme(p) for p in paths}
    if len(schemes) > 1:
        raise ValueError(f"inputs mix filesystems ({', '.join(sorted(schemes))}); ingest them in separate runs")
    scheme = schemes.pop()
    if scheme == "file":
        fs: pafs.FileSystem = pafs.LocalFileSystem()
        prefix = ""
    else:
        fs, _ = pafs.FileSystem.from_uri(paths[0])
        prefix = f"{scheme}://"
    files: set[str] = set()
    skipped: set[str] = set()
    for raw in paths:
        found = _expand_one(fs, raw, scheme)
        if found is None:
            raise ValueError(f"input path {raw} does not exist")
        given_file, listed = found
        if given_file:
            files.update(listed)  # named explicitly: an unsupported type is quarantined, not silently skipped
            continue
        for f in listed:
            (files if file_format(f) else skipped).add(f)
    if not files:
        raise ValueError(f"no supported files (jsonl, parquet, txt, md, html) under {', '.join(paths)}")
    return Inputs(filesystem=fs, files=sorted(files), skipped=sorted(skipped), uri_prefix=prefix)


def _expand_one(fs: pafs.FileSystem, raw: str, scheme: str) -> tuple[bool, list[str]] | None:
    """(named a single file?, files) or None if nothing is there."""
    if scheme == "file":
        path = os.path.abspath(os.path.expanduser(raw.removeprefix("file://")))
    else:
        path = raw.split("://", 1)[1]
    if any(ch in path for ch in "*?["):
        if scheme == "file":
            matches = [m for m in glob.glob(path, recursive=True) if os.path.isfile(m)]
        else:
            base = path.split("*", 1)[0].rsplit("/", 1)[0]
            sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
            matches = [i.path for i in fs.get_file_info(sel)
                       if i.type == pafs.FileType.File and fnmatch.fnmatch(i.path, path)]
        return (False, matches) if matches else None
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return True, [path]
    if info.type == pafs.FileType.Directory:
        sel = pafs.FileSelector(path, recursive=True)
        return False, [i.path for i in fs.get_file_info(sel)
                       if i.type == pafs.FileType.File and not i.base_name.startswith(".")]
    return None
