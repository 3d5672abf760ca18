"""The pipeline's stages as Ray Data map_batches UDFs, and the run ledger they all report to.

Every stage reports (rows in, rows out, busy seconds) and every dropped document to one `RunLedger` actor, so
counts reconcile across all workers and the dedup stages see the whole run (plus the latest published dataset),
not one block at a time.

Ray Data runs a task again when its node dies, so every report is replay-safe: a batch is reported under a key made
from its rows' identities (a file's path; a document's source and position in it), a report under a key already
seen changes nothing, and a dedup decision already made for a document is returned again as it was. Without that,
a re-run batch would find its own documents "already seen" and drop them as duplicates of themselves.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict

import numpy as np
import pyarrow as pa
import ray

from app.config import DocumentsConfig, IngestConfig
from app.dataset import CHUNK_SCHEMA
from app.ingest import chunk as chunking
from app.ingest.dedup import DedupIndex, signature
from app.ingest.documents import DOCUMENT_FORMATS
from app.ingest.documents.detect import HEAD_BYTES, describe, detect
from app.ingest.normalize import content_hash, derived_doc_id, normalize
from app.ingest.parse import Doc, Parsed, Unreadable, parse_file
from app.ingest.parts import join_parts, locate, sections
from app.ingest.sandbox import Sandbox
from app.models import embedder
from app.storage import Storage

DROP_REASONS = ("unreadable", "too_large", "outside_roots", "empty", "exact_duplicate", "duplicate_id",
                "near_duplicate")

_PART = pa.struct([("text", pa.string()), ("page", pa.int32()), ("section", pa.string())])
_SEGMENT = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("page", pa.int32()), ("section", pa.string())])
# A document as parsed (`Doc`, keyed), and as normalised: `parts` joined into `text`, with each part's `segments`.
DOC_SCHEMA = pa.schema([("key", pa.string()), ("doc_id", pa.string()), ("source", pa.string()),
                        ("title", pa.string()), ("text", pa.string()), ("metadata", pa.string()),
                        ("parts", pa.list_(_PART)), ("unit", pa.string())])
NORMALIZED_SCHEMA = pa.schema([*(f for f in DOC_SCHEMA if f.name != "parts"), ("segments", pa.list_(_SEGMENT)),
                               ("content_hash", pa.string())])


class StageCounts(TypedDict):
    """One stage's totals over the run: rows in and out, busy seconds summed over its batches, and the wall-clock
    times (epoch seconds) its first batch started and its last one ended."""

    rows_in: int
    rows_out: int
    seconds: float
    first: float
    last: NotRequired[float]


class NearDedupRow(TypedDict):
    """What near_dedup sends the ledger of each document: its row key, identity, MinHash signature (`num_perm`
    uint64 values) and length in characters."""

    key: str
    doc_id: str
    source: str
    title: str
    content_hash: str
    minhash: list[int]
    n_chars: int


class KeptDocument(TypedDict):
    """A kept document's row in the dataset version's documents file (`app.dataset.DOCUMENTS_FILE_SCHEMA`)."""

    doc_id: str
    source: str
    title: str
    content_hash: str
    minhash: list[int]
    n_chars: int
    run_id: str
    key: str  # its place in its source (`_doc_key`)


class Snapshot(TypedDict):
    """The ledger's counts so far (what `ragline ingest` shows as progress, and the run report is made from)."""

    files: dict[str, int]  # read, unreadable
    documents_read: int
    kept: int
    dropped: dict[str, int]  # per DROP_REASONS
    replaced: dict[str, int]  # bytes, documents (undecodable bytes replaced)
    quarantined: list[dict[str, str]]  # {source, reason, error, path}
    stages: dict[str, StageCounts]
    elapsed_s: float
    stage_nodes: dict[str, dict[str, int]]  # stage -> Ray node id -> rows it took in there
    embeddings_reused: int  # chunk vectors taken from the documents the run replaces (their text unchanged)
    drops: NotRequired[list[dict[str, str]]]  # full snapshots only: {reason, source, doc_id, duplicate_of, detail}
    kept_documents: NotRequired[list[KeptDocument]]  # full snapshots only: rows of the documents file
    hashes: NotRequired[dict[str, str]]  # full snapshots only: source file -> SHA-256 of what was read


def batch_key(row_keys: list[str]) -> str:
    """The identity of a batch: its rows' identities, which a re-run of its task reproduces."""
    return hashlib.sha256("\n".join(row_keys).encode()).hexdigest()


class RunLedger:
    """Owned by the run's driver: dies with it, so a killed run leaves nothing behind but unreferenced files.
    Every method is idempotent under the keys it is given (see the module docstring)."""

    def __init__(self, run_id: str, cfg: Mapping[str, object], seed: pa.Table):
        """`cfg`: the run's IngestConfig as a dict (`model_dump`), as it crosses to the actor. `seed`: the corpus's
        documents this run deduplicates against (doc_id, content_hash, minhash): the latest version's, less those
        the run replaces or deletes (an edited document must not be dropped as a near copy of its old self)."""
        self.run_id = run_id
        self.cfg = IngestConfig.model_validate(cfg)
        self.index = DedupIndex(threshold=self.cfg.dedup.near_threshold, num_perm=self.cfg.dedup.num_perm)
        for row in seed.to_pylist():
            sig = np.asarray(row["minhash"], dtype=np.uint64) if row["minhash"] else None
            if sig is not None and len(sig) != self.cfg.dedup.num_perm:
                sig = None  # signatures from another num_perm cannot be compared
            self.index.add(row["doc_id"], row["content_hash"], sig)
        self.hashes: dict[str, str] = {}  # source file -> SHA-256 of its bytes
        self.reuse_batches: dict[str, int] = {}  # embed batch key -> vectors reused
        self.parsed_batches: dict[str, tuple[int, int, int, int]] = {}  # key -> files, docs, bytes, docs replaced
        self.drops: dict[tuple[str, str], dict[str, str]] = {}  # (reason, row key) -> drop
        self.quarantined: dict[str, dict[str, str]] = {}  # source -> {source, reason, error, path}
        self.exact: dict[str, bool] = {}  # row key -> kept by exact dedup
        self.near: dict[str, bool] = {}  # row key -> kept by near dedup
        self.kept: dict[str, KeptDocument] = {}  # row key -> the document's row in the documents file
        self.stages: dict[str, StageCounts] = {}
        self.stage_nodes: dict[str, dict[str, int]] = {}  # stage -> Ray node id -> rows it took in there
        self.stage_batches: set[tuple[str, str]] = set()
        self.started = time.time()

    def stage(self, name: str, key: str, rows_in: int, rows_out: int, seconds: float, node: str = "") -> None:
        if (name, key) in self.stage_batches:
            return
        self.stage_batches.add((name, key))
        now = time.time()
        s = self.stages.setdefault(name, {"rows_in": 0, "rows_out": 0, "seconds": 0.0, "first": now - seconds})
        s["first"] = min(s["first"], now - seconds)
        s["rows_in"] += rows_in
        s["rows_out"] += rows_out
        s["seconds"] += seconds
        s["last"] = now
        by_node = self.stage_nodes.setdefault(name, {})
        by_node[node] = by_node.get(node, 0) + rows_in

    def parsed(self, key: str, n_files: int, n_docs: int, replaced_bytes: int, replaced_docs: int,
               bad_files: list[dict[str, str]], bad_records: list[dict[str, str]], hashes: dict[str, str]) -> None:
        """One parse batch: files read, documents out, what could not be read (files are quarantined), and each
        file's SHA-256."""
        self.parsed_batches[key] = (n_files, n_docs, replaced_bytes, replaced_docs)
        self.hashes.update(hashes)
        for it in [*bad_files, *bad_records]:
            self.drops["unreadable", it["source"]] = {"reason": "unreadable", "source": it["source"],
                                                      "detail": it["reason"], "doc_id": "", "duplicate_of": ""}
        self.quarantined.update((it["source"], it) for it in bad_files)

    def forget(self, doc_ids: list[str]) -> None:
        """Documents of files a later wave of the run reads again (`app.ingest.sync.readmit`)."""
        for doc_id in doc_ids:
            self.index.remove(doc_id)

    def reused(self, key: str, n: int) -> None:
        """An embed batch that took `n` vectors from the replaced documents' instead of computing them."""
        self.reuse_batches[key] = n

    def refused(self, items: list[dict[str, str]]) -> None:
        """Input files refused before reading (`Inputs.refused`): each counts as one document read and dropped."""
        for it in items:
            self.drops[it["reason"], it["source"]] = {**it, "doc_id": "", "duplicate_of": ""}

    def dropped(self, items: list[dict[str, str]]) -> None:
        """Drops keyed by the document's row key (`key`, not stored with the drop)."""
        for it in items:
            self.drops[it["reason"], it["key"]] = {k: v for k, v in it.items() if k != "key"}

    def check_exact(self, keys: list[str], doc_ids: list[str], hashes: list[str], sources: list[str]) -> list[bool]:
        for key, doc_id, h, src in zip(keys, doc_ids, hashes, sources, strict=True):
            if key in self.exact:
                continue  # decided when this batch ran before
            hit = self.index.check_exact(doc_id, h) if self.cfg.dedup.exact else None
            if hit is None and not self.cfg.dedup.exact and doc_id in self.index.ids:
                hit = ("duplicate_id", doc_id)  # ids must stay unique even with exact dedup off
            if hit is None:
                self.index.ids.add(doc_id)
            else:
                self.drops[hit[0], key] = {"reason": hit[0], "source": src, "doc_id": doc_id,
                                           "duplicate_of": hit[1], "detail": ""}
            self.exact[key] = hit is None
        return [self.exact[k] for k in keys]

    def check_near(self, rows: list[NearDedupRow]) -> list[bool]:
        for row in rows:
            key = row["key"]
            if key in self.near:
                continue
            sig = np.asarray(row["minhash"], dtype=np.uint64)
            dup = self.index.check_near(row["doc_id"], sig) if self.cfg.dedup.near else None
            if dup is None:
                self.kept[key] = {"doc_id": row["doc_id"], "source": row["source"], "title": row["title"],
                                  "content_hash": row["content_hash"], "minhash": row["minhash"],
                                  "n_chars": row["n_chars"], "run_id": self.run_id, "key": key}
            else:
                self.drops["near_duplicate", key] = {"reason": "near_duplicate", "source": row["source"],
                                                     "doc_id": row["doc_id"], "duplicate_of": dup, "detail": ""}
            self.near[key] = dup is None
        return [self.near[r["key"]] for r in rows]

    def snapshot(self, full: bool = False) -> Snapshot:
        dropped = dict.fromkeys(DROP_REASONS, 0)
        for reason, _ in self.drops:
            dropped[reason] += 1
        batches = list(self.parsed_batches.values())
        unreadable_files = len(self.quarantined)
        out: Snapshot = {
            "files": {"read": sum(b[0] for b in batches) - unreadable_files, "unreadable": unreadable_files},
            # documents parsed, plus one per file or record that could not be read, plus one per refused file
            "documents_read": sum(b[1] for b in batches) + dropped["unreadable"] + dropped["too_large"]
            + dropped["outside_roots"],
            "kept": len(self.kept), "dropped": dropped,
            "replaced": {"bytes": sum(b[2] for b in batches), "documents": sum(b[3] for b in batches)},
            "quarantined": list(self.quarantined.values()),
            "stages": {k: v.copy() for k, v in self.stages.items()}, "elapsed_s": time.time() - self.started,
            "stage_nodes": {k: dict(v) for k, v in self.stage_nodes.items()},
            "embeddings_reused": sum(self.reuse_batches.values()),
        }
        if full:
            out["drops"] = list(self.drops.values())
            out["kept_documents"] = list(self.kept.values())
            out["hashes"] = dict(self.hashes)
        return out


RunLedgerActor = ray.remote(num_cpus=0)(RunLedger)


def reuse_key(embed_input: str) -> str:
    """The key of a chunk's vector among those a run reuses: a hash of exactly what the embedder reads."""
    return hashlib.sha256(embed_input.encode()).hexdigest()


def _stage_done(ledger: Any, name: str, key: str, rows_in: int, rows_out: int, t0: float) -> None:
    ray.get(ledger.stage.remote(name, key, rows_in, rows_out, time.perf_counter() - t0,
                                ray.get_runtime_context().get_node_id()))


def _doc_key(doc: Doc) -> str:
    """A document's identity in the run: its source, and its position there when a file holds several."""
    position = json.loads(doc["metadata"]).get("position", "")
    return f"{doc['source']}#{position}" if position else doc["source"]


def doc_table(docs: Sequence[Doc]) -> pa.Table:
    """Parsed documents as the rows the normalize stage takes (`DOC_SCHEMA`)."""
    return _table([{**d, "key": _doc_key(d)} for d in docs], DOC_SCHEMA)


def _table(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def parse_files(batch: pa.Table, *, ledger: Any, cfg: Mapping[str, object], storage_uri: str, run_id: str,
                uri_prefix: str) -> pa.Table:
    """read_binary_files rows (bytes, path) → document rows. Unreadable files are copied to quarantine/. `cfg`: the
    run's IngestConfig as a dict (`model_dump`)."""
    t0 = time.perf_counter()
    ingest_cfg = IngestConfig.model_validate(cfg)
    docs: list[Doc] = []
    bad_files: list[dict[str, str]] = []
    bad_records: list[dict[str, str]] = []
    replaced_bytes = replaced_docs = 0
    hashes = {}
    for data, path in zip(batch.column("bytes").to_pylist(), batch.column("path").to_pylist(), strict=True):
        source = f"{uri_prefix}{path}"
        hashes[source] = hashlib.sha256(data).hexdigest()
        try:
            parsed = _parse(source, data, ingest_cfg, storage_uri)
        except Exception as e:
            reason = str(e) if isinstance(e, Unreadable) else f"{type(e).__name__} while parsing: {str(e)[:500]}"
            bad_files.append({"source": source, "reason": reason, "error": type(e).__name__,
                              "path": _quarantine(storage_uri, run_id, source, data, reason)})
            continue
        docs.extend(parsed.docs)
        bad_records.extend(parsed.bad_records)
        replaced_bytes += parsed.replaced_bytes
        replaced_docs += len(parsed.docs) if parsed.replaced_bytes else 0
    key = batch_key(batch.column("path").to_pylist())
    ray.get(ledger.parsed.remote(key, batch.num_rows, len(docs), replaced_bytes, replaced_docs, bad_files,
                                 bad_records, hashes))
    _stage_done(ledger, "parse", key, batch.num_rows, len(docs), t0)
    return doc_table(docs)


def _parse(source: str, data: bytes, cfg: IngestConfig, storage_uri: str) -> Parsed:
    """One file's documents, its type known by its content: documents (PDF, Office, e-mail, images) parsed in this
    worker's sandbox, record and text formats here. A PDF's original is kept for the console's page view."""
    fmt = detect(source, data)
    if fmt is None:
        raise Unreadable(f"unsupported file type: {describe(source, data[:HEAD_BYTES])}")
    if fmt not in DOCUMENT_FORMATS:
        return _with_metadata(parse_file(source, data, cfg.read, fmt), cfg.metadata)
    docs = _sandbox(cfg.documents.model_dump_json()).parse(fmt, source, data)
    if fmt == "pdf" and cfg.documents.keep_originals:
        rel = f"originals/{hashlib.sha256(data).hexdigest()[:32]}.pdf"  # one copy per content, however named
        storage = Storage(storage_uri)
        if not storage.exists(rel):
            storage.write_bytes(rel, data)
        for d in docs:
            d["metadata"] = json.dumps({**json.loads(d["metadata"]), "original": rel})
    return _with_metadata(Parsed(docs=docs), cfg.metadata)


def _with_metadata(parsed: Parsed, fields: Mapping[str, object]) -> Parsed:
    """`ingest.metadata`'s fields added to each document's, under its own."""
    if fields:
        for d in parsed.docs:
            d["metadata"] = json.dumps({**fields, **json.loads(d["metadata"])})
    return parsed


@functools.cache
def _sandbox(cfg_json: str) -> Sandbox:
    """One sandbox per worker process and `DocumentsConfig` (as JSON), kept for the worker's life: its child
    starts once, not per file (it exits when the worker does, its stdin closed)."""
    return Sandbox(DocumentsConfig.model_validate_json(cfg_json))


def _quarantine(storage_uri: str, run_id: str, source: str, data: bytes, reason: str) -> str:
    storage = Storage(storage_uri)
    name = source.rsplit("/", 1)[-1]
    rel = f"quarantine/{run_id}/{content_hash(source)[:8]}-{name}"  # the prefix keeps same-named files apart
    storage.write_bytes(rel, data)
    storage.write_json(f"{rel}.reason.json", {"source": source, "reason": reason, "run_id": run_id})
    return rel


def normalize_docs(batch: pa.Table, *, ledger: Any, min_chars: int) -> pa.Table:
    """NFC + clean-up; derives missing ids from source + content; drops empty documents; adds content_hash."""
    t0 = time.perf_counter()
    out, empty = [], []
    for row in batch.to_pylist():
        parts = row.pop("parts")
        text, segments = join_parts(parts) if parts else (normalize(row["text"]), [])
        doc_id = row["doc_id"] or derived_doc_id(row["source"], text)
        if len(text) < min_chars:
            empty.append({"reason": "empty", "key": row["key"], "source": row["source"], "doc_id": doc_id,
                          "duplicate_of": "", "detail": f"{len(text)} characters after normalisation"})
            continue
        out.append({**row, "doc_id": doc_id, "text": text, "segments": segments, "content_hash": content_hash(text)})
    if empty:
        ray.get(ledger.dropped.remote(empty))
    _stage_done(ledger, "normalize", batch_key(batch.column("key").to_pylist()), batch.num_rows, len(out), t0)
    return _table(out, NORMALIZED_SCHEMA)


def exact_dedup(batch: pa.Table, *, ledger: Any) -> pa.Table:
    t0 = time.perf_counter()
    keys = batch.column("key").to_pylist()
    keep = ray.get(ledger.check_exact.remote(keys, batch.column("doc_id").to_pylist(),
                                             batch.column("content_hash").to_pylist(),
                                             batch.column("source").to_pylist()))
    out = batch.filter(pa.array(keep, pa.bool_())) if batch.num_rows else batch
    _stage_done(ledger, "exact_dedup", batch_key(keys), batch.num_rows, out.num_rows, t0)
    return out


def minhash(batch: pa.Table, *, ledger: Any, num_perm: int, shingle_words: int) -> pa.Table:
    t0 = time.perf_counter()
    sigs = [signature(t, num_perm, shingle_words).tolist() for t in batch.column("text").to_pylist()]
    out = batch.append_column("minhash", pa.array(sigs, pa.list_(pa.uint64())))
    _stage_done(ledger, "minhash", batch_key(batch.column("key").to_pylist()), batch.num_rows, out.num_rows, t0)
    return out


def near_dedup(batch: pa.Table, *, ledger: Any) -> pa.Table:
    """Keeps documents with no near copy among everything kept so far; the ledger remembers kept documents
    (id, hash, signature) for the version's documents table."""
    t0 = time.perf_counter()
    rows = batch.select(["key", "doc_id", "source", "title", "content_hash", "minhash"]).to_pylist()
    for row, n in zip(rows, (len(t) for t in batch.column("text").to_pylist()), strict=True):
        row["n_chars"] = n
    keep = ray.get(ledger.check_near.remote(rows))
    out = batch.filter(pa.array(keep, pa.bool_())) if batch.num_rows else batch
    out = out.drop_columns(["minhash", "content_hash"])
    _stage_done(ledger, "near_dedup", batch_key([r["key"] for r in rows]), batch.num_rows, out.num_rows, t0)
    return out


@functools.cache
def _tokenizer(model: str) -> Any:
    return embedder.load_tokenizer(model)  # once per worker process, reused by every task it runs


def chunk_docs(batch: pa.Table, *, ledger: Any, model: str, revision: str, chunk_tokens: int,
               overlap_tokens: int) -> pa.Table:
    """Splits documents into windows of the embedder's tokens; ids from (doc id, index, embedder, revision)."""
    tokenizer = _tokenizer(model)  # loaded before the clock starts: load time is not chunking time
    t0 = time.perf_counter()
    rows = []
    for doc in batch.to_pylist():
        segments, metadata = doc["segments"], json.loads(doc["metadata"])
        spans = chunking.chunk_text(doc["text"], tokenizer, chunk_tokens, overlap_tokens, sections(segments))
        for i, span in enumerate(spans):
            pages, section, location = locate(span.start_char, span.end_char, segments, doc["unit"])
            rows.append({
                "chunk_id": chunking.chunk_id(doc["doc_id"], i, model, revision),
                "doc_id": doc["doc_id"], "chunk_index": i, "source": doc["source"], "title": doc["title"],
                "text": doc["text"][span.start_char : span.end_char], "start_char": span.start_char,
                "end_char": span.end_char, "n_tokens": span.n_tokens, "pages": pages, "section": section,
                "location": location, "original": metadata.get("original", ""),
                "metadata": json.dumps({**metadata, "n_chunks": len(spans)}),
            })
    _stage_done(ledger, "chunk", batch_key(batch.column("key").to_pylist()), batch.num_rows, len(rows), t0)
    return _table(rows, CHUNK_SCHEMA)


class Embedder:
    """The embedding model loaded once per actor; normalised float32 vectors appended as `embedding`."""

    def __init__(self, *, ledger: Any, model: str, variant: embedder.Variant, encode_batch_size: int,
                 include_title: bool, device: str, threads: int, reuse: Mapping[str, np.ndarray]):
        """`reuse`: vectors already computed (by `embedder.embed_text` key hash, `reuse_key`) for the chunks of
        documents this run replaces: a chunk whose text did not change is not embedded again."""
        self.ledger = ledger
        self.encoder = embedder.Encoder(model, variant.precision, device, variant.runtime, threads)
        self.encode_batch_size, self.include_title = encode_batch_size, include_title
        self.dim = self.encoder.dim
        self.reuse = reuse

    def __call__(self, batch: pa.Table) -> pa.Table:
        t0 = time.perf_counter()
        titles, texts = batch.column("title").to_pylist(), batch.column("text").to_pylist()
        inputs = [embedder.embed_text(t, x, self.include_title) for t, x in zip(titles, texts, strict=True)]
        vecs = np.empty((len(inputs), self.dim), dtype=np.float32)
        todo = []
        for i, text in enumerate(inputs):
            if (known := self.reuse.get(reuse_key(text))) is not None:
                vecs[i] = known
            else:
                todo.append(i)
        # Shortest first by token count, so each forward pass pads to a near-equal length (no padding waste).
        n_tokens = batch.column("n_tokens").to_numpy()
        order = [todo[j] for j in np.argsort(n_tokens[todo], kind="stable")] if todo else []
        if order:
            vecs[order] = self.encoder.encode([inputs[i] for i in order], self.encode_batch_size)
        if len(order) < len(inputs):
            ray.get(self.ledger.reused.remote(batch_key(batch.column("chunk_id").to_pylist()),
                                              len(inputs) - len(order)))
        flat = pa.array(vecs.reshape(-1), pa.float32())
        out = batch.append_column("embedding", pa.FixedSizeListArray.from_arrays(flat, self.dim))
        _stage_done(self.ledger, "embed", batch_key(batch.column("chunk_id").to_pylist()), batch.num_rows,
                    out.num_rows, t0)
        return out
