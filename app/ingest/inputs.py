"""Expand the user's input paths (files, directories, globs; local or any pyarrow.fs URI) into files to read.

Files over `ingest.read.max_file_bytes` are refused before a byte is read (drop reason `too_large`). On a local
filesystem, directories are walked without following symlinked directories (a link to `..` would list the tree
forever), and a symlink whose target lies outside every input root is refused (`outside_roots`) unless
`ingest.read.follow_symlinks`: pointing a corpus directory at a link to ~/.ssh must not ingest the keys.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from app.errors import NotFound, UserError
from app.ingest.documents.detect import HEAD_BYTES, describe, detect


@dataclass
class Inputs:
    filesystem: pafs.FileSystem
    files: list[str]  # paths on `filesystem`, sorted
    # files inside given directories whose type (by content, then extension) is unsupported: {source, type}
    skipped: list[dict[str, str]] = field(default_factory=list)
    uri_prefix: str = ""  # "s3://" etc., to show sources as URIs
    refused: list[dict[str, str]] = field(default_factory=list)  # {source, reason (too_large|outside_roots), detail}
    roots: list[str] = field(default_factory=list)  # the inputs as given, as sources: directories, globs, files
    delta: str = ""  # the Delta table (its URI or path) the run reads instead of files

    def source(self, path: str) -> str:
        return f"{self.uri_prefix}{path}"

    def holds(self, source: str) -> bool:
        """Whether `source` is on this run's filesystem."""
        return source.startswith(self.uri_prefix) if self.uri_prefix else "://" not in source


SUPPORTED = "pdf, docx, pptx, xlsx, csv, eml, msg, images, jsonl, parquet, txt, md, html"


def _head(fs: pafs.FileSystem, path: str) -> bytes:
    """A file's first bytes, by which its type is known."""
    with fs.open_input_stream(path) as f:
        return bytes(f.read(HEAD_BYTES))


def _scheme(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else "file"


def expand(paths: list[str], max_file_bytes: int | None = None, follow_symlinks: bool = False) -> Inputs:
    """Raises UserError naming the path when one does not exist (NotFound), inputs mix filesystems, or nothing
    readable is left. `max_file_bytes`: None reads files of any size (training streams its files line by line)."""
    if not paths:
        raise UserError("no input paths given")
    schemes = {_scheme(p) for p in paths}
    if len(schemes) > 1:
        raise UserError(f"inputs mix filesystems ({', '.join(sorted(schemes))}); ingest them in separate runs")
    scheme = schemes.pop()
    if scheme == "file":
        fs: pafs.FileSystem = pafs.LocalFileSystem()
        prefix = ""
    else:
        # the bucket's URI: the path may be a glob, whose ? and [ are no URI's
        fs, _ = pafs.FileSystem.from_uri("/".join(paths[0].split("/", 3)[:3]))
        prefix = f"{scheme}://"
    tables = [p for p in paths if _is_delta(fs, _fs_path(p, scheme))]
    if tables:
        if len(paths) > 1:
            raise UserError(f"{tables[0]} is a Delta table: ingest it on its own, not with other inputs")
        source = paths[0].rstrip("/") if scheme != "file" else _fs_path(paths[0], scheme)
        return Inputs(filesystem=fs, files=[], uri_prefix=prefix, roots=[source], delta=source)
    files: set[str] = set()
    skipped: dict[str, str] = {}  # path -> its type
    refused: dict[str, dict[str, str]] = {}
    roots = []
    for raw in paths:
        roots.append(raw if scheme != "file" else os.path.abspath(os.path.expanduser(raw.removeprefix("file://"))))
        found = _expand_one(fs, raw, scheme, follow_symlinks)
        if found is None:
            raise NotFound(f"input path {raw} does not exist")
        given_file, listed, outside = found
        for f in outside:
            refused[f] = {"source": f"{prefix}{f}", "reason": "outside_roots",
                          "detail": f"a symlink to {os.path.realpath(f)}, outside the input paths (set "
                                    "ingest.read.follow_symlinks to read it)"}
        if given_file:
            files.update(listed)  # named explicitly: an unsupported type is quarantined, not silently skipped
            continue
        for f in listed:
            head = _head(fs, f)
            if detect(f, head):
                files.add(f)
            else:
                skipped[f] = describe(f, head)
    for info in fs.get_file_info(sorted(files)) if files and max_file_bytes is not None else []:
        if info.size is not None and info.size > max_file_bytes:
            files.discard(info.path)
            refused[info.path] = {"source": f"{prefix}{info.path}", "reason": "too_large",
                                  "detail": f"{info.size:,} bytes, over ingest.read.max_file_bytes "
                                            f"({max_file_bytes:,})"}
    # a Delta table met in a walk is read by its log, in a run of its own: its data files are not documents
    for table in sorted({f.split(f"/{DELTA_LOG}/")[0] for f in [*files, *skipped] if f"/{DELTA_LOG}/" in f}):
        files = {f for f in files if not f.startswith(f"{table}/")}
        skipped = {f: t for f, t in skipped.items() if not f.startswith(f"{table}/")}
        skipped[table] = "a Delta table (ingest it by its own path)"
    if not files:
        names = ", ".join(f"{r['source']} ({r['reason']})" for r in refused.values())
        why = f"; refused: {names}" if refused else ""
        if skipped:
            why += "; skipped: " + ", ".join(f"{prefix}{f} ({t})" for f, t in sorted(skipped.items())[:10])
        raise UserError(f"no supported files ({SUPPORTED}) under {', '.join(paths)}{why}")
    return Inputs(filesystem=fs, files=sorted(files), uri_prefix=prefix,
                  skipped=[{"source": f"{prefix}{f}", "type": t} for f, t in sorted(skipped.items())],
                  refused=[refused[k] for k in sorted(refused)], roots=roots)


DELTA_LOG = "_delta_log"


def _fs_path(raw: str, scheme: str) -> str:
    if scheme != "file":
        return raw.split("://", 1)[1].rstrip("/")
    return os.path.abspath(os.path.expanduser(raw.removeprefix("file://")))


def _is_delta(fs: pafs.FileSystem, path: str) -> bool:
    """A directory holding a `_delta_log` directory is a Delta table, read by its log, not file by file."""
    if any(ch in path for ch in "*?["):
        return False
    return bool(fs.get_file_info(f"{path}/{DELTA_LOG}").type == pafs.FileType.Directory)


def _expand_one(fs: pafs.FileSystem, raw: str, scheme: str,
                follow: bool) -> tuple[bool, list[str], list[str]] | None:
    """(named a single file?, files, symlinks refused as outside the roots) or None if nothing is there."""
    if scheme != "file":
        return _expand_remote(fs, raw.split("://", 1)[1])
    path = os.path.abspath(os.path.expanduser(raw.removeprefix("file://")))
    if any(ch in path for ch in "*?["):
        # the root of a glob is its directory part before the first wildcard
        root = os.path.dirname(path[: min(path.index(ch) for ch in "*?[" if ch in path)] + "x")
        matches = [m for m in glob.glob(path, recursive=True) if os.path.isfile(m)]
        if not matches:
            return None
        inside, outside = _split_by_root(matches, root, follow)
        return False, inside, outside
    if os.path.isfile(path):
        return True, [path], []  # named explicitly (a symlink too): the user chose it
    if os.path.isdir(path):
        return (False, *_walk(path, follow))
    return None


def _walk(root: str, follow: bool) -> tuple[list[str], list[str]]:
    """Files under `root` (hidden ones left out), and the symlinks refused as leading outside it."""
    found, seen, links = [], {os.path.realpath(root)}, []
    for top, dirs, names in os.walk(root, followlinks=follow):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if not follow:  # os.walk does not descend into linked directories; name those leading outside
            links += [os.path.join(top, d) for d in dirs if os.path.islink(os.path.join(top, d))]
        # a directory reached twice (a link loop, or two links to one place) is walked once
        dirs[:] = [d for d in dirs if _first_visit(os.path.join(top, d), seen)]
        found += [os.path.join(top, n) for n in sorted(names) if not n.startswith(".")]
    files = [f for f in found if os.path.isfile(f)]  # a dangling link is no file
    inside, outside = _split_by_root(files, root, follow)
    return inside, sorted(outside + _split_by_root(links, root, follow)[1])


def _first_visit(path: str, seen: set[str]) -> bool:
    real = os.path.realpath(path)
    if real in seen:
        return False
    seen.add(real)
    return True


def _split_by_root(files: list[str], root: str, follow: bool) -> tuple[list[str], list[str]]:
    if follow:
        return files, []
    real_root = os.path.realpath(root)
    inside = [f for f in files if os.path.commonpath([os.path.realpath(f), real_root]) == real_root]
    return inside, sorted(set(files) - set(inside))


def _expand_remote(fs: pafs.FileSystem, path: str) -> tuple[bool, list[str], list[str]] | None:
    if any(ch in path for ch in "*?["):
        base = path[: min(path.index(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0]
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        matches = [i.path for i in fs.get_file_info(sel)
                   if i.type == pafs.FileType.File and _glob_match(i.path.split("/"), path.split("/"))]
        return (False, matches, []) if matches else None
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return True, [path], []
    if info.type == pafs.FileType.Directory:
        sel = pafs.FileSelector(path, recursive=True)
        return False, [i.path for i in fs.get_file_info(sel)
                       if i.type == pafs.FileType.File and not i.base_name.startswith(".")], []
    return None


def _glob_match(parts: list[str], pattern: list[str]) -> bool:
    """A key's components against a glob's, by the rules of the local `glob.glob(recursive=True)`: a wildcard
    stays inside one component, `**` stands for any number of them, and hidden names match only a pattern that
    starts with a dot."""
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_glob_match(parts[i:], pattern[1:]) for i in range(len(parts) + 1)
                   if not any(p.startswith(".") for p in parts[:i]))
    return (bool(parts) and (pattern[0].startswith(".") or not parts[0].startswith("."))
            and fnmatch.fnmatchcase(parts[0], pattern[0]) and _glob_match(parts[1:], pattern[1:]))
