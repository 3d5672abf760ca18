"""What an ingest run must read, and what it replaces and removes: a corpus kept in step with its files.

A document belongs to its source file (an e-mail's attachments to the e-mail). A file read again replaces all its
documents in the next version: the new parse is the truth for that file (its documents matched to the old ones by
id, then by place, to count what was updated, unchanged, added and removed). A file is read only when it is new or
changed: its size and mtime as the last run saw them are the short-cut, its SHA-256 the judge, so a file touched but
not changed costs one hash and no parse. A file is also read again, changed or not, when the config that turns files
into chunks (chunking, normalisation, OCR, added metadata: `reader_of`) is not the one that read it last, so one
index never mixes chunks cut two ways. With `sync`, known files under the run's input roots that are gone are
deleted with their documents; files of other roots are never touched.

Documents are removed only once the run that replaces them publishes: a file that cannot be parsed keeps its
previous documents, and a run that dies publishes nothing, so the served version stays whole.

Duplicates: a document dropped as a (near) duplicate is not in the index, only its file's record of whom it
duplicated (`duplicate_of`). When a run removes or replaces those documents, it reads those files again in the
same run, so the duplicate takes the original's place instead of being lost with it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pydantic import BaseModel

from app.config import IngestConfig
from app.ingest.inputs import Inputs
from app.storage import PIECE

ATTACHMENT = "#attachment/"


def file_of(source: str) -> str:
    """The file a document's source is in: an attachment's e-mail, else the source itself."""
    return source.split(ATTACHMENT, 1)[0]


def file_sha256(fs: pafs.FileSystem, path: str) -> str:
    h = hashlib.sha256()
    with fs.open_input_file(path) as f:  # a file: one request per piece on an object store (`Storage.read_bytes`)
        while piece := f.read(PIECE):
            h.update(piece)
    return h.hexdigest()


def under(source: str, roots: Iterable[str]) -> bool:
    """Whether `source` is in one of the input roots (a directory, a glob, a file)."""
    return any(source == r or source.startswith(r.rstrip("/") + "/") or fnmatch.fnmatchcase(source, r)
               for r in roots)


class FileCounts(BaseModel):
    """Input files by what a run did with them."""

    new: int = 0
    changed: int = 0  # known, and their content differs: read again
    unchanged: int = 0  # known, same size and mtime or same SHA-256: not parsed
    deleted: int = 0  # known, gone from a synced root: their documents removed
    readmitted: int = 0  # unchanged, read again because documents they duplicated were removed
    reread: int = 0  # unchanged, read again because another config reads files into chunks now (`reader_of`)


class ChangeCounts(BaseModel):
    """Documents by what the run did to the corpus: `live_after = live_before + added - removed`."""

    added: int = 0
    updated: int = 0  # a new version of a document of the same id or place
    unchanged: int = 0  # read again (its file changed) and the same
    removed: int = 0  # gone: its file deleted, or no longer in its file, or deleted by name
    live_before: int = 0
    live_after: int = 0

    @property
    def reconciled(self) -> bool:
        return self.live_after == self.live_before + self.added - self.removed


@dataclass
class Plan:
    """What a run reads, known before it starts (paths are `Inputs.files`' filesystem paths, sources are URIs)."""

    read: list[str]  # files to run through the pipeline
    stat: dict[str, tuple[int, int]]  # source -> (size, mtime ns) of each file to read
    replacing: set[str]  # known sources among `read`: their documents give way to the new parse
    deleted: set[str]  # known sources gone from a synced root
    touched: dict[str, dict[str, object]]  # known, same bytes, new mtime: source -> its record, with that mtime
    files: FileCounts = field(default_factory=FileCounts)
    # sources replaced row by row (a Delta table's changes): source -> ids of the documents the run replaces or
    # deletes; a source in `replacing` but not here is replaced whole
    rows: dict[str, set[str]] = field(default_factory=dict)

    def replaces(self, doc: Mapping[str, object]) -> bool:
        """Whether the run replaces or removes this document of the corpus (once it publishes)."""
        source = file_of(str(doc["source"]))
        if source in self.deleted:
            return True
        return source in self.replacing and (source not in self.rows or doc["doc_id"] in self.rows[source])


def reader_of(cfg: IngestConfig) -> str:
    """A digest of the settings that decide what a file's chunks are; a source record keeps the one that read it.
    Limits (time, memory, sizes a file is refused past) and dedup decide whether a file or document is taken, not
    what it becomes, and are left out."""
    documents = cfg.documents.model_dump(include={"ocr", "ocr_languages", "ocr_min_chars", "ocr_dpi", "max_pages"})
    fields = {"chunk": cfg.chunk.model_dump(), "normalize": cfg.normalize.model_dump(), "metadata": cfg.metadata,
              "documents": documents}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def plan(inputs: Inputs, live: Sequence[Mapping[str, object]], records: Mapping[str, Mapping[str, object]],
         sync: bool, reader: str = "") -> Plan:
    """`live`: the latest version's documents (`app.dataset.live_documents`); `records`: its source files
    (`app.dataset.source_records`); `reader`: this run's `reader_of` (records from before readers were kept, and
    an empty `reader`, match any)."""
    fs = inputs.filesystem
    infos = {inputs.source(i.path): i for i in fs.get_file_info(inputs.files)} if inputs.files else {}
    known = set(records) | {file_of(str(d["source"])) for d in live}
    files = FileCounts()
    read: dict[str, str] = {}  # source -> path
    stat: dict[str, tuple[int, int]] = {}
    touched: dict[str, dict[str, object]] = {}
    for source, info in infos.items():
        size, mtime = int(info.size or 0), int(info.mtime_ns or 0)
        rec = records.get(source)
        quick = rec is not None and (rec["size"], rec["mtime_ns"]) == (size, mtime) and bool(mtime)
        hashed = (not quick and rec is not None and rec["size"] == size
                  and rec["sha256"] == file_sha256(fs, info.path))
        stale = rec is not None and bool(reader) and rec.get("reader") not in (None, "", reader)
        if (quick or hashed) and not stale:
            files.unchanged += 1
            if hashed:
                assert rec is not None
                touched[source] = {**rec, "mtime_ns": mtime}
            continue
        read[source], stat[source] = info.path, (size, mtime)
        if quick or hashed:
            files.reread += 1
        elif source in known:
            files.changed += 1
        else:
            files.new += 1
    present = set(infos) | {s["source"] for s in [*inputs.skipped, *inputs.refused]}
    deleted = {s for s in known if sync and s not in present and under(s, inputs.roots)}
    files.deleted = len(deleted)
    return Plan(read=sorted(read.values()), stat=stat, replacing=set(read) & known, deleted=deleted,
                touched=touched, files=files)


def readmit(p: Plan, inputs: Inputs, live: Sequence[Mapping[str, object]],
            records: Mapping[str, Mapping[str, object]], kept: Sequence[Mapping[str, object]],
            unreadable: set[str]) -> dict[str, str]:
    """Files to read in another wave of the same run (source -> path), now added to `p`: those whose documents were
    dropped as duplicates of documents the run removed or changed, so the duplicate takes the original's place.
    Only files on the run's filesystem that still exist; each at most once."""
    still = {(d["doc_id"], d["content_hash"]) for d in kept}
    going = {str(d["doc_id"]) for d in live if p.replaces(d) and file_of(str(d["source"])) not in unreadable
             and (d["doc_id"], d["content_hash"]) not in still}
    out: dict[str, str] = {}
    for source, rec in records.items():
        dup_of = rec.get("duplicate_of") or []
        assert isinstance(dup_of, list)
        if source in p.stat or source in p.deleted or not going.intersection(dup_of) or not inputs.holds(source):
            continue
        path = source.removeprefix(inputs.uri_prefix)
        info = inputs.filesystem.get_file_info(path)
        if info.type == pafs.FileType.File:
            out[source] = path
            p.stat[source] = (int(info.size or 0), int(info.mtime_ns or 0))
            p.replacing.add(source)
            p.touched.pop(source, None)
            p.files.unchanged -= under(source, inputs.roots)  # counted unchanged when listed
            p.files.readmitted += 1
    p.read += sorted(out.values())
    return out


def plan_delta(source: str, upserted: Iterable[str], deleted: Iterable[str], whole: bool,
               live: Sequence[Mapping[str, object]]) -> Plan:
    """A Delta table's changes as a plan: the documents of the upserted and deleted ids are replaced row by row, or
    all of the table's (`whole`: a snapshot was read)."""
    known = any(file_of(str(d["source"])) == source for d in live)
    ids = {*upserted, *deleted}
    files = FileCounts(new=int(not known), changed=int(known and (whole or bool(ids))),
                       unchanged=int(known and not whole and not ids))
    return Plan(read=[], stat={source: (0, 0)}, replacing={source} if known else set(), deleted=set(), touched={},
                files=files, rows={} if whole else {source: ids})


class Removal(BaseModel):
    """A row of `app.dataset.REMOVED_FILE_SCHEMA`."""

    run_id: str
    doc_id: str
    source: str
    reason: str


def changes(p: Plan, live: Sequence[Mapping[str, object]], kept: Sequence[Mapping[str, object]],
            unreadable: set[str]) -> tuple[list[Removal], ChangeCounts]:
    """The removals a finished run makes, and its counts. `kept`: the run's kept documents (doc_id, source, key,
    content_hash); `unreadable`: sources the run quarantined (their earlier documents stay)."""
    counts = ChangeCounts(live_before=len(live))
    old_by_file: dict[str, list[Mapping[str, object]]] = {}
    for d in live:
        old_by_file.setdefault(file_of(str(d["source"])), []).append(d)
    new_by_file: dict[str, list[Mapping[str, object]]] = {}
    for d in kept:
        new_by_file.setdefault(file_of(str(d["source"])), []).append(d)
    removals: list[Removal] = []
    for source in sorted(p.deleted):
        for d in old_by_file.get(source, []):
            removals.append(Removal(run_id=str(d["run_id"]), doc_id=str(d["doc_id"]), source=str(d["source"]),
                                    reason="deleted"))
            counts.removed += 1
    for source in sorted(p.replacing - unreadable):
        old = [d for d in old_by_file.get(source, []) if p.replaces(d)]
        by_id = {d["doc_id"]: d for d in old}
        by_key = {d["key"]: d for d in old}
        matched: set[int] = set()
        for d in new_by_file.get(source, []):
            was = by_id.get(d["doc_id"]) or by_key.get(d["key"])
            if was is None or id(was) in matched:
                counts.added += 1
                continue
            matched.add(id(was))
            if was["content_hash"] == d["content_hash"]:
                counts.unchanged += 1
            else:
                counts.updated += 1
        for d in old:
            removals.append(Removal(run_id=str(d["run_id"]), doc_id=str(d["doc_id"]), source=str(d["source"]),
                                    reason="updated" if id(d) in matched else "deleted"))
            counts.removed += id(d) not in matched
    counts.added += sum(len(docs) for source, docs in new_by_file.items() if source not in p.replacing)
    counts.live_after = counts.live_before - len(removals) + len(kept)
    return removals, counts
