"""The files of a dataset version: what an ingest run (`app.ingest`) writes and an index build (`app.index`) reads.

A version is a list of parquet files in the catalog: chunk files (one row per chunk, with its embedding) from every
run so far, and one `documents.parquet` per run (the documents it kept: ids, hashes and MinHash signatures, which
later runs deduplicate against).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.catalog import Manifest
from app.storage import Storage

DOCUMENTS_FILE = "documents.parquet"

# A chunk file's columns, before the embedder appends `embedding` (a fixed-size list of float32).
CHUNK_SCHEMA = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("chunk_index", pa.int32()),
                          ("source", pa.string()), ("title", pa.string()), ("text", pa.string()),
                          ("start_char", pa.int32()), ("end_char", pa.int32()), ("n_tokens", pa.int32()),
                          ("pages", pa.list_(pa.int32())), ("section", pa.string()), ("location", pa.string()),
                          ("original", pa.string()), ("metadata", pa.string())])
DOCUMENTS_FILE_SCHEMA = pa.schema([("doc_id", pa.string()), ("source", pa.string()), ("title", pa.string()),
                                   ("content_hash", pa.string()), ("n_chars", pa.int64()),
                                   ("minhash", pa.list_(pa.uint64())), ("run_id", pa.string())])
# The columns an index version keeps of each chunk (its `chunks.parquet`).
CHUNK_COLUMNS = ["chunk_id", "doc_id", "chunk_index", "source", "title", "text", "start_char", "end_char",
                 "pages", "section", "location", "original", "metadata"]


def documents_files(dataset: Manifest | None) -> list[str]:
    """The documents files of a dataset version (none without one)."""
    return [f.path for f in dataset.files if f.path.endswith(DOCUMENTS_FILE)] if dataset else []


def load_chunks(storage: Storage, dataset: Manifest) -> pa.Table:
    """All chunk rows of a dataset version (with embeddings), sorted by chunk id."""
    tables = []
    for f in dataset.files:
        if not f.path.endswith(DOCUMENTS_FILE):
            with storage.fs.open_input_file(storage.path(f.path)) as fh:
                tables.append(_chunk_file(fh))
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
