"""The files of a dataset version: what an ingest run (`app.ingest`) writes and an index build (`app.index`) reads.

A version is a list of parquet files in the catalog, each run's under `datasets/segments/<run_id>/`: its chunk files
(one row per chunk, with its embedding), its `documents.parquet` (the documents it kept: ids, hashes and MinHash
signatures, which later runs deduplicate against), its `sources.parquet` (every file it read or found deleted:
size, mtime and hash, by which a later sync knows a file unchanged without parsing it) and its `removed.parquet`
(documents of earlier runs that are no longer in the corpus from this version on: replaced by a new parse of their
file, or deleted). Like a Delta table's deletion vectors, removals never rewrite an earlier run's files, so every
earlier version still holds exactly what it held.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.catalog import Manifest
from app.storage import Storage

DOCUMENTS_FILE = "documents.parquet"
SOURCES_FILE = "sources.parquet"
REMOVED_FILE = "removed.parquet"

# A chunk file's columns, before the embedder appends `embedding` (a fixed-size list of float32).
CHUNK_SCHEMA = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("chunk_index", pa.int32()),
                          ("source", pa.string()), ("title", pa.string()), ("text", pa.string()),
                          ("start_char", pa.int32()), ("end_char", pa.int32()), ("n_tokens", pa.int32()),
                          ("pages", pa.list_(pa.int32())), ("section", pa.string()), ("location", pa.string()),
                          ("original", pa.string()), ("metadata", pa.string())])
# `key`: the document's place in its source (the source, or "<source>#line 3" for a record of a JSONL file)
DOCUMENTS_FILE_SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("title", pa.string()),
                                   ("content_hash", pa.string()), ("n_chars", pa.int64()),
                                   ("minhash", pa.list_(pa.uint64())), ("run_id", pa.string()), ("key", pa.string())])
# A source file as a run last saw it. `status`: read | unreadable (quarantined: its earlier documents were kept) |
# deleted (gone from a synced tree, or forgotten by `ragline delete --source`). `duplicate_of`: ids of the
# documents its own were dropped as duplicates of, so that removing those re-reads it. `mtime_ns` 0 where the
# filesystem gives none. `reader`: the `app.ingest.sync.reader_of` of the run that read it (absent in files written
# before it was kept; null for deleted files).
SOURCES_FILE_SCHEMA = pa.schema([("source", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
                                 ("sha256", pa.string()), ("status", pa.string()),
                                 ("duplicate_of", pa.list_(pa.string())), ("run_id", pa.string()),
                                 ("reader", pa.string())])
# A document of run `run_id` that is not in the corpus from the removing run's version on. `reason`: updated (its
# file was read again and it is there) | deleted (its file is gone, or it is no longer in its file) | removed
# (`ragline delete`).
REMOVED_FILE_SCHEMA = pa.schema([("run_id", pa.string()), ("doc_id", pa.string()), ("source", pa.string()),
                                 ("reason", pa.string())])
# The columns an index version keeps of each chunk (its `chunks.parquet`).
CHUNK_COLUMNS = ["chunk_id", "doc_id", "chunk_index", "source", "title", "text", "start_char", "end_char",
                 "pages", "section", "location", "original", "metadata"]


_META_FILES = (DOCUMENTS_FILE, SOURCES_FILE, REMOVED_FILE)


def run_of(rel: str) -> str:
    """The run a segment file belongs to: datasets/segments/<run_id>/<file>."""
    parts = rel.split("/")
    assert parts[:2] == ["datasets", "segments"] and len(parts) >= 4, rel
    return parts[2]


def files_named(dataset: Manifest | None, name: str) -> list[str]:
    """A dataset version's segment files called `name` (documents, sources, removed), oldest run first."""
    return [f.path for f in dataset.files if f.path.endswith(f"/{name}")] if dataset else []


def chunk_files_of(dataset: Manifest) -> list[str]:
    return [f.path for f in dataset.files if not f.path.endswith(_META_FILES)]


def _read(storage: Storage, rel: str, columns: list[str] | None = None) -> pa.Table:
    with storage.fs.open_input_file(storage.path(rel)) as fh:
        return pq.read_table(fh, columns=columns)


def removed_documents(storage: Storage, dataset: Manifest | None) -> set[tuple[str, str]]:
    """(run id, doc id) of every document a run of this version removed."""
    out: set[tuple[str, str]] = set()
    for rel in files_named(dataset, REMOVED_FILE):
        t = _read(storage, rel, ["run_id", "doc_id"])
        out.update(zip(t.column("run_id").to_pylist(), t.column("doc_id").to_pylist(), strict=True))
    return out


def live_documents(storage: Storage, dataset: Manifest | None) -> list[dict[str, object]]:
    """The rows (`DOCUMENTS_FILE_SCHEMA`) of the documents a dataset version holds: every run's kept documents but
    those a later run removed. Files of runs before documents had keys give the source as the key."""
    removed = removed_documents(storage, dataset)
    out = []
    for rel in files_named(dataset, DOCUMENTS_FILE):
        table = _read(storage, rel)
        if "key" not in table.column_names:
            table = table.append_column("key", table.column("source"))
        run = run_of(rel)
        out += [r for r in table.to_pylist() if (run, r["doc_id"]) not in removed]
    return out


def source_records(storage: Storage, dataset: Manifest | None) -> dict[str, dict[str, object]]:
    """Each source file's latest row (`SOURCES_FILE_SCHEMA`) in a dataset version, deleted ones left out."""
    latest: dict[str, dict[str, object]] = {}
    for rel in files_named(dataset, SOURCES_FILE):
        latest.update((r["source"], r) for r in _read(storage, rel).to_pylist())
    return {s: r for s, r in latest.items() if r["status"] != "deleted"}


def load_chunks(storage: Storage, dataset: Manifest) -> pa.Table:
    """The chunk rows of a dataset version (with embeddings), sorted by chunk id: every run's chunks but those of
    documents a later run removed."""
    removed: dict[str, list[str]] = {}  # run id -> ids of its documents removed since
    for run, doc_id in removed_documents(storage, dataset):
        removed.setdefault(run, []).append(doc_id)
    tables = []
    for rel in chunk_files_of(dataset):
        with storage.fs.open_input_file(storage.path(rel)) as fh:
            table = _chunk_file(fh)
        if gone := removed.get(run_of(rel)):
            table = table.filter(pc.invert(pc.is_in(table.column("doc_id"), pa.array(gone, pa.string()))))
        tables.append(table)
    table = pa.concat_tables(tables)
    return table.take(pc.sort_indices(table, sort_keys=[("chunk_id", "ascending")]))


def _chunk_file(f: pa.NativeFile) -> pa.Table:
    """One chunk file's columns. Files written before documents had structure lack the location columns: those
    come empty (no pages, no section)."""
    table = pq.read_table(f)
    for name in ("pages", "section", "location", "original"):
        if name not in table.column_names:
            field = CHUNK_SCHEMA.field(name)
            table = table.append_column(field, pa.array([[] if name == "pages" else ""] * table.num_rows, field.type))
    return table.select([*CHUNK_COLUMNS, "embedding"])


def chunks_of(storage: Storage, dataset: Manifest, documents: set[tuple[str, str]],
              columns: list[str]) -> Iterator[pa.Table]:
    """`columns` of the chunks of the given (run id, doc id) documents of a dataset version, a table per chunk file
    that has any: only the files of their runs are read."""
    by_run: dict[str, list[str]] = {}
    for run, doc_id in documents:
        by_run.setdefault(run, []).append(doc_id)
    for rel in chunk_files_of(dataset):
        if ids := by_run.get(run_of(rel)):
            table = _read(storage, rel, list({*columns, "doc_id"}))
            yield table.filter(pc.is_in(table.column("doc_id"), pa.array(ids, pa.string()))).select(columns)
