"""One ingest run, end to end, on the current Ray: streaming Ray Data pipeline → segment files → dataset version.

`app.indexing.run_ingest` chains it with an index build (what the IngestService, `ragline ingest --in-process` and
Ray jobs call): this package writes dataset versions and never reads or builds an index.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypedDict, cast

import pyarrow as pa
import pyarrow.parquet as pq
import ray
from pydantic import BaseModel
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from app import hardware
from app.catalog import Catalog, Manifest, now_iso
from app.config import AppConfig
from app.dataset import (
    DOCUMENTS_FILE,
    DOCUMENTS_FILE_SCHEMA,
    REMOVED_FILE,
    REMOVED_FILE_SCHEMA,
    SOURCES_FILE,
    SOURCES_FILE_SCHEMA,
    chunks_of,
    live_documents,
    source_records,
)
from app.errors import Conflict, NotFound, RaglineError, UserError
from app.ingest import delta, stages, sync
from app.ingest.inputs import Inputs, expand
from app.models import embedder
from app.storage import Storage

OnStart = Callable[[Any], None]  # receives the run's RunLedger handle, for live progress


BLOCK_BYTES = 128 << 10  # 128 KiB ≈ 120 chunks of ~220 tokens: about one embedding batch per block


class IngestError(RaglineError):
    """The run failed for a reason the user can act on (the message says which files)."""


class InputCounts(BaseModel):
    files: int
    unreadable_files: int
    skipped_files: list[dict[str, str]]  # inside given directories, with unsupported types: {source, type}
    refused_files: list[dict[str, str]]  # {source, reason (too_large|outside_roots), detail}


class DocumentCounts(BaseModel):
    read: int
    kept: int
    dropped: dict[str, int]  # per stages.DROP_REASONS


class StageReport(BaseModel):
    rows_in: int
    rows_out: int
    busy_s: float  # summed over the stage's batches
    wall_s: float  # from its first batch's start to its last batch's end
    rows_by_node: dict[str, int]  # Ray node id -> rows it took in there


class InputCountsDict(TypedDict):
    """`InputCounts` as stored (`IngestReportDict.inputs`)."""

    files: int
    unreadable_files: int
    skipped_files: list[dict[str, str]]
    refused_files: list[dict[str, str]]


class DocumentCountsDict(TypedDict):
    """`DocumentCounts` as stored."""

    read: int
    kept: int
    dropped: dict[str, int]


class StageReportDict(TypedDict):
    """`StageReport` as stored: busy and wall seconds, rows by Ray node id."""

    rows_in: int
    rows_out: int
    busy_s: float
    wall_s: float
    rows_by_node: dict[str, int]


class IngestReportDict(TypedDict):
    """`IngestReport.to_dict()`: the report as the run record stores it and `ragline ingest --json` prints it.
    The three optional fields are there only once set (`exclude_unset`)."""

    run_id: str
    inputs: InputCountsDict
    documents: DocumentCountsDict
    reconciled: bool
    chunks: int
    embeddings: int
    decode_replacements: dict[str, int]
    quarantined: list[dict[str, str]]
    near_duplicates: list[dict[str, str]]
    stages: dict[str, StageReportDict]
    wall_s: float
    files: dict[str, int]
    changes: dict[str, int]
    embeddings_reused: int
    dataset_version: NotRequired[int | None]
    note: NotRequired[str | None]
    index_version: NotRequired[int | None]


class IngestReport(BaseModel):
    """One run's report: counts that reconcile (documents read = kept + dropped), per-stage rows and times, and the
    versions it published."""

    run_id: str
    inputs: InputCounts
    documents: DocumentCounts
    reconciled: bool
    chunks: int
    embeddings: int
    decode_replacements: dict[str, int]  # bytes, documents
    quarantined: list[dict[str, str]]  # {source, reason, error, path}
    near_duplicates: list[dict[str, str]]  # the first 100 drops for near duplication
    stages: dict[str, StageReport]
    wall_s: float
    files: sync.FileCounts  # input files by what the run did with them (new, changed, unchanged, deleted, ...)
    changes: sync.ChangeCounts  # documents added, updated, unchanged, removed: the corpus before and after
    embeddings_reused: int  # chunk vectors taken from the documents the run replaced, not computed again
    dataset_version: int | None = None  # the latest version once the run is done (None: none published yet)
    note: str | None = None
    index_version: int | None = None  # set by `app.indexing.run_ingest` when it built one

    @property
    def published(self) -> bool:
        """Whether the run changed the corpus, so publishes a dataset version: it added a chunk or removed a
        document."""
        return self.chunks > 0 or self.changes.removed > 0

    def to_dict(self) -> IngestReportDict:
        """As the run record stores it and `ragline ingest --json` prints it: fields never set left out."""
        # model_dump's result is typed as a plain dict; its shape is this model's, which IngestReportDict spells out
        optional = {"dataset_version", "note", "index_version"} - self.model_fields_set
        return cast(IngestReportDict, self.model_dump(exclude=optional))


def too_many_unreadable(unreadable: int, files: int, max_fraction: float) -> bool:
    """Whether a run fails for its unreadable (quarantined) files: more than `max_fraction` of them, and never for
    one alone (one bad file in a corpus of three is that file's problem, quarantined; many say the input or a
    setting is wrong, and publishing the rest would hide it)."""
    return unreadable > 1 and unreadable > max_fraction * files


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _udf(fn: Callable[..., pa.Table]) -> Any:
    """A stage function with keyword-only parameters (passed as fn_kwargs), which Ray's map_batches stub does not
    describe; the function keeps its name, so the operator shows as MapBatches(<stage>) in the dashboard."""
    return fn


class LightStageArgs(TypedDict):
    """map_batches arguments every cheap (CPU, pyarrow-batch) stage shares."""

    num_cpus: float  # CPUs reserved per task (a fraction: several run beside the embedding actors)
    batch_format: Literal["pyarrow"]


def _variant(cfg: AppConfig, previous: Manifest | None) -> embedder.Variant:
    """The embedder runtime and precision of this run: a dataset's versions all share one model, revision,
    runtime and precision (their vectors are searched together); `auto` follows the existing versions, else the
    hardware and the model."""
    ec, device = cfg.ingest.embed, embedder.device_for(cfg.ingest.embed)
    if previous is None:
        return embedder.Variant(embedder.choose_runtime(ec.runtime, ec.model, device),
                                hardware.choose_precision(ec.precision, device))
    had = previous.embedder
    if (had.name, had.revision) != (ec.model, embedder.revision(ec.model)):
        raise Conflict(f"dataset version {previous.version} was embedded with {had.name} ({had.revision}); "
                       f"ingest.embed.model is {ec.model}: use another storage root for another embedder")
    for field, wanted, was in (("precision", ec.precision, had.precision), ("runtime", ec.runtime, had.runtime)):
        if wanted not in ("auto", was):
            raise Conflict(f"dataset version {previous.version} was embedded with {field} {was}; "
                           f"ingest.embed.{field} is {wanted}: use 'auto' or {was!r} here, or another storage root")
    return embedder.Variant(had.runtime, had.precision)


def build_dataset(inputs: Inputs, files: list[str], cfg: AppConfig, storage: Storage, run_id: str, ledger: Any,
                  variant: embedder.Variant, reuse: Mapping[str, Any]) -> ray.data.Dataset:
    """The lazy Ray Data pipeline over `files` (paths on `inputs.filesystem`); nothing runs until it is written.
    `reuse`: vectors of the replaced documents' chunks (`Embedder`)."""
    ic = cfg.ingest
    light: LightStageArgs = {"num_cpus": ic.light_stage_num_cpus, "batch_format": "pyarrow"}
    # Small blocks (≈ a few embedding batches each) so every embedding actor has work: one big input file would
    # otherwise flow through the pipeline as one block and keep a single actor busy.
    ray.data.DataContext.get_current().target_max_block_size = BLOCK_BYTES
    ds = ray.data.read_binary_files(files, include_paths=True, filesystem=inputs.filesystem,
                                    num_cpus=ic.light_stage_num_cpus)
    ds = ds.map_batches(_udf(stages.parse_files), batch_size=8, **light,
                        fn_kwargs={"ledger": ledger, "cfg": ic.model_dump(), "storage_uri": storage.uri,
                                   "run_id": run_id, "uri_prefix": inputs.uri_prefix})
    return chunk_documents(ds, cfg, ledger, variant, reuse)


def chunk_documents(ds: ray.data.Dataset, cfg: AppConfig, ledger: Any, variant: embedder.Variant,
                    reuse: Mapping[str, Any]) -> ray.data.Dataset:
    """Document rows (`stages.DOC_SCHEMA`) → normalised, deduplicated, chunked and embedded chunk rows."""
    ic = cfg.ingest
    light: LightStageArgs = {"num_cpus": ic.light_stage_num_cpus, "batch_format": "pyarrow"}
    model_path = embedder.resolve(ic.embed.model)
    revision = embedder.revision(ic.embed.model)
    threads = hardware.threads(ic.embed.num_cpus)
    pool = embedder.pool_size(ic.embed, 2 * ic.light_stage_num_cpus)
    ds = ds.map_batches(_udf(stages.normalize_docs), batch_size=256, **light,
                        fn_kwargs={"ledger": ledger, "min_chars": ic.normalize.min_chars})
    ds = ds.map_batches(_udf(stages.exact_dedup), batch_size=256, **light, fn_kwargs={"ledger": ledger})
    ds = ds.map_batches(_udf(stages.minhash), batch_size=256, **light,
                        fn_kwargs={"ledger": ledger, "num_perm": ic.dedup.num_perm,
                                   "shingle_words": ic.dedup.shingle_words})
    ds = ds.map_batches(_udf(stages.near_dedup), batch_size=256, **light, fn_kwargs={"ledger": ledger})
    ds = ds.map_batches(_udf(stages.chunk_docs), batch_size=64, **light,
                        fn_kwargs={"ledger": ledger, "model": ic.embed.model, "revision": revision,
                                               "chunk_tokens": ic.chunk.chunk_tokens,
                                               "overlap_tokens": ic.chunk.overlap_tokens})
    ds = ds.map_batches(stages.Embedder, batch_size=ic.embed.batch_size, batch_format="pyarrow",
                        # One task at a time per actor: the first actor up must not queue every block while the
                        # others load, then see the rest stopped as idle once the inputs run out.
                        compute=ray.data.ActorPoolStrategy(size=pool, max_tasks_in_flight_per_actor=1),
                        num_cpus=ic.embed.num_cpus,
                        num_gpus=ic.embed.num_gpus or None,
                        fn_constructor_kwargs={"ledger": ledger, "model": model_path, "variant": variant,
                                               "encode_batch_size": ic.embed.encode_batch_size,
                                               "include_title": ic.embed.include_title,
                                               "device": embedder.device_for(cfg.ingest.embed),
                                               "threads": threads, "reuse": reuse})
    return ds


def reconcile(snap: stages.Snapshot) -> bool:
    return snap["documents_read"] == snap["kept"] + sum(snap["dropped"].values())


def ingest_dataset(paths: list[str], cfg: AppConfig, storage: Storage, run_id: str | None = None,
                   on_start: OnStart | None = None, sync_roots: bool = False) -> IngestReport:
    """Ingest `paths`: new and changed files are read (a changed file's documents replace its earlier ones), unchanged
    ones skipped; with `sync_roots`, known files gone from under the paths are deleted with their documents (see
    `app.ingest.sync`). Publishes a dataset version when the corpus changed; returns the run report. Raises
    UserError for bad inputs and IngestError when too many files are unreadable."""
    run_id = run_id or new_run_id()
    inputs = expand(paths, cfg.ingest.read.max_file_bytes, cfg.ingest.read.follow_symlinks)
    catalog = Catalog(storage)
    previous = catalog.latest("datasets")
    variant = _variant(cfg, previous)
    t0 = time.time()
    live = live_documents(storage, previous)
    records = source_records(storage, previous)
    reader = sync.reader_of(cfg.ingest)
    changes_in: delta.DeltaChanges | None = None
    if inputs.delta:
        rec = records.get(inputs.delta)
        since = int(str(rec["sha256"]).removeprefix(DELTA_VERSION)) if rec else None
        changes_in = delta.read_changes(inputs.delta, cfg.ingest.delta, since)
        plan = sync.plan_delta(inputs.delta, (d["doc_id"] for d in changes_in.upserts), changes_in.deleted,
                               changes_in.since is None, live)
    else:
        plan = sync.plan(inputs, live, records, sync_roots, reader)
    seed = pa.Table.from_pylist([d for d in live if not plan.replaces(d)],
                                DOCUMENTS_FILE_SCHEMA).select(["doc_id", "content_hash", "minhash"])
    # on the driver's node: a worker node lost mid-run must not take the run's ledger with it
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    ledger: Any = stages.RunLedgerActor.options(scheduling_strategy=here).remote(run_id, cfg.ingest.model_dump(),
                                                                                 seed)
    if inputs.refused:
        ray.get(ledger.refused.remote(inputs.refused))
    if on_start:
        on_start(ledger)
    segment = f"datasets/segments/{run_id}"
    write = functools.partial(_write, cfg, storage, segment)
    if changes_in is not None:
        ray.get(ledger.parsed.remote(stages.batch_key([inputs.delta]), 1, len(changes_in.upserts), 0, 0, [],
                                     changes_in.bad_records, {inputs.delta: f"{DELTA_VERSION}{changes_in.version}"}))
        if changes_in.upserts:
            docs = ray.data.from_arrow(stages.doc_table(changes_in.upserts))
            write(chunk_documents(docs, cfg, ledger, variant, _reusable(storage, previous, live, plan,
                                                                        cfg.ingest.embed.include_title)))
    wave = list(plan.read)
    while wave:  # a second wave reads the files whose documents duplicated ones the first removed (sync.readmit)
        reuse = _reusable(storage, previous, live, plan, cfg.ingest.embed.include_title)
        write(build_dataset(inputs, wave, cfg, storage, run_id, ledger, variant, reuse))
        snap: stages.Snapshot = ray.get(ledger.snapshot.remote(full=True))
        extra = sync.readmit(plan, inputs, live, records, snap.get("kept_documents", []),
                             {q["source"] for q in snap["quarantined"]})
        wave = list(extra.values())
        ray.get(ledger.forget.remote([str(d["doc_id"]) for d in live if sync.file_of(str(d["source"])) in extra]))
    snap = ray.get(ledger.snapshot.remote(full=True))  # the ledger exits with its last handle
    chunk_files = [f for f in storage.list_files(segment) if f.endswith(".parquet")]
    kept = snap.get("kept_documents", [])
    unreadable = {q["source"] for q in snap["quarantined"]}
    removals, changes = sync.changes(plan, live, kept, unreadable)
    report = _report(run_id, inputs, snap, storage, chunk_files, time.time() - t0, plan.files, changes)
    if changes_in is not None and changes_in.note:
        report.note = changes_in.note  # why the table was read whole (its older version is gone)
    assert reconcile(snap) and changes.reconciled, \
        f"ingest counts do not reconcile: {report.documents.model_dump()} {changes.model_dump()}"
    if too_many_unreadable(snap["files"]["unreadable"], len(plan.read), cfg.ingest.read.max_error_fraction):
        bad = sorted(snap["quarantined"], key=lambda q: q["source"])
        names = "; ".join(f"{q['source']}: {q['reason']}" for q in bad)
        raise IngestError(f"{snap['files']['unreadable']} of {len(plan.read)} input files are unreadable (more "
                          f"than ingest.read.max_error_fraction={cfg.ingest.read.max_error_fraction}); no version "
                          f"was published. Unreadable: {names}")
    storage.write_bytes(f"runs/ingest/{run_id}.drops.parquet", _parquet_bytes(snap.get("drops", []), _DROPS_SCHEMA))
    if not report.published:
        report.dataset_version = previous.version if previous else None
        report.note = "nothing new to add: no version published"
        return report
    if changes.live_after == 0:
        raise UserError(_EMPTY)
    meta = [f"{segment}/{DOCUMENTS_FILE}", f"{segment}/{SOURCES_FILE}"]
    storage.write_bytes(meta[0], _parquet_bytes(kept, DOCUMENTS_FILE_SCHEMA))
    storage.write_bytes(meta[1], _parquet_bytes(_source_rows(plan, snap, run_id, reader), SOURCES_FILE_SCHEMA))
    if removals:
        meta.append(f"{segment}/{REMOVED_FILE}")
        storage.write_bytes(meta[2], _parquet_bytes([r.model_dump() for r in removals], REMOVED_FILE_SCHEMA))
    removed_chunks = _count_chunks(storage, previous, {(r.run_id, r.doc_id) for r in removals})
    manifest = _publish_dataset(catalog, cfg, inputs, run_id, previous, [*chunk_files, *meta], report, variant,
                                removed_chunks)
    report.dataset_version = manifest.version
    return report


class DeleteReportDict(TypedDict):
    """`DeleteReport.model_dump()`, as the run record stores it."""

    run_id: str
    documents: int
    chunks: int
    sources: list[str]
    not_found: list[str]
    dataset_version: int
    index_version: int | None


class DeleteReport(BaseModel):
    """What `ragline delete` removed, and the versions it published."""

    run_id: str
    documents: int  # documents removed
    chunks: int  # their chunks
    sources: list[str]  # source files forgotten (a later ingest of them reads them again)
    not_found: list[str]  # ids and prefixes that named no document in the corpus
    dataset_version: int
    index_version: int | None = None  # set by `app.indexing.delete` when it built one

    def to_dict(self) -> DeleteReportDict:
        return cast(DeleteReportDict, self.model_dump())


def delete_documents(storage: Storage, doc_ids: list[str], prefixes: list[str],
                     run_id: str | None = None) -> DeleteReport:
    """Remove the documents with the given ids, and every document whose source is, or is under, one of
    `prefixes` (a path, a directory, a glob or a URI), in a new dataset version; earlier versions keep them. Raises
    UserError when nothing is named and NotFound when nothing named is in the corpus."""
    if not doc_ids and not prefixes:
        raise UserError("name the documents to delete: document ids, or --source with a path, directory or glob")
    run_id = run_id or new_run_id()
    catalog = Catalog(storage)
    previous = catalog.resolve("datasets", None)
    roots = [p if "://" in p else os.path.abspath(os.path.expanduser(p)) for p in prefixes]
    live = live_documents(storage, previous)
    ids = set(doc_ids)
    gone = [d for d in live if d["doc_id"] in ids or sync.under(sync.file_of(str(d["source"])), roots)]
    forgotten = sorted(s for s in source_records(storage, previous) if sync.under(s, roots))
    not_found = sorted(ids - {str(d["doc_id"]) for d in gone})
    not_found += [p for p, r in zip(prefixes, roots, strict=True) if not any(
        sync.under(sync.file_of(str(d["source"])), [r]) for d in gone)]
    if not gone:
        raise NotFound(f"no document of dataset version {previous.version} is named by: "
                       f"{', '.join([*doc_ids, *prefixes])}")
    if len(gone) == len(live):
        raise UserError(_EMPTY)
    segment = f"datasets/segments/{run_id}"
    removed = [{"run_id": d["run_id"], "doc_id": d["doc_id"], "source": d["source"], "reason": "removed"}
               for d in gone]
    files = [f"{segment}/{REMOVED_FILE}", f"{segment}/{SOURCES_FILE}"]
    storage.write_bytes(files[0], _parquet_bytes(removed, REMOVED_FILE_SCHEMA))
    storage.write_bytes(files[1], _parquet_bytes(
        [{"source": s, "size": 0, "mtime_ns": 0, "sha256": "", "status": "deleted", "duplicate_of": [],
          "run_id": run_id} for s in forgotten], SOURCES_FILE_SCHEMA))
    chunks = _count_chunks(storage, previous, {(str(d["run_id"]), str(d["doc_id"])) for d in gone})
    manifest = previous.model_copy(update={
        "parent": previous.version, "run_id": run_id, "inputs": [],
        "counts": {"documents": len(live) - len(gone), "chunks": previous.counts.get("chunks", 0) - chunks},
        "files": [*previous.files, *(catalog.file_entry(f, rows=parquet_rows(storage, f)) for f in files)],
        "extra": {"deleted": {"documents": len(gone), "chunks": chunks}}})
    if not catalog.publish_as(manifest, previous.version + 1):
        raise Conflict(f"another run published dataset version {previous.version + 1} meanwhile; nothing was "
                       "deleted: run the delete again")
    return DeleteReport(run_id=run_id, documents=len(gone), chunks=chunks, sources=forgotten, not_found=not_found,
                        dataset_version=manifest.version)


_EMPTY = ("this would remove every document of the corpus, and an index holds at least one: nothing was "
          "published (to start over, use a new storage root; earlier versions stay servable)")
DELTA_VERSION = "delta-version:"  # a Delta table's sources row holds the version synced as its "sha256"
_DUPLICATE = ("exact_duplicate", "near_duplicate", "duplicate_id")


def _source_rows(plan: sync.Plan, snap: stages.Snapshot, run_id: str, reader: str) -> list[dict[str, object]]:
    """The run's rows of the sources file: each file it read (with whom its dropped documents duplicated, and the
    reader that read it), each it found touched but unchanged (with the reader that read it before), each it
    deleted."""
    unreadable = {q["source"] for q in snap["quarantined"]}
    dup_of: dict[str, set[str]] = {}
    for d in snap.get("drops", []):
        if d["reason"] in _DUPLICATE:
            dup_of.setdefault(sync.file_of(d["source"]), set()).add(d["duplicate_of"])
    hashes = snap.get("hashes", {})
    rows: list[dict[str, object]] = []
    for source, (size, mtime) in sorted(plan.stat.items()):
        rows.append({"source": source, "size": size, "mtime_ns": mtime, "sha256": hashes.get(source, ""),
                     "status": "unreadable" if source in unreadable else "read",
                     "duplicate_of": sorted(dup_of.get(source, ())), "run_id": run_id, "reader": reader})
    rows += [{**rec, "run_id": run_id} for _, rec in sorted(plan.touched.items())]
    rows += [{"source": s, "size": 0, "mtime_ns": 0, "sha256": "", "status": "deleted", "duplicate_of": [],
              "run_id": run_id} for s in sorted(plan.deleted)]
    return rows


def _write(cfg: AppConfig, storage: Storage, segment: str, ds: ray.data.Dataset) -> None:
    # Writers reserve a light share, not a whole CPU, so shards stream out beside busy embedding actors.
    ds.write_parquet(storage.path(segment), filesystem=storage.fs, max_rows_per_file=cfg.ingest.rows_per_file,
                     ray_remote_args={"num_cpus": cfg.ingest.light_stage_num_cpus})


def _reusable(storage: Storage, previous: Manifest | None, live: list[dict[str, object]], plan: sync.Plan,
              include_title: bool) -> dict[str, Any]:
    """The vectors of the chunks of the documents a run replaces, by `stages.reuse_key`: a chunk that comes out of
    the new parse with the same text is not embedded again."""
    docs = {(str(d["run_id"]), str(d["doc_id"])) for d in live if plan.replaces(d)}
    if previous is None or not docs:
        return {}
    out = {}
    for t in chunks_of(storage, previous, docs, ["title", "text", "embedding"]):
        dim = t.schema.field("embedding").type.list_size
        vectors = t.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)
        for title, text, v in zip(t.column("title").to_pylist(), t.column("text").to_pylist(), vectors, strict=True):
            out[stages.reuse_key(embedder.embed_text(title, text, include_title))] = v
    return out


def _count_chunks(storage: Storage, dataset: Manifest | None, documents: set[tuple[str, str]]) -> int:
    if dataset is None or not documents:
        return 0
    return sum(t.num_rows for t in chunks_of(storage, dataset, documents, ["doc_id"]))


_DROPS_SCHEMA = pa.schema([(k, pa.string()) for k in ("reason", "source", "doc_id", "duplicate_of", "detail")])


def _parquet_bytes(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
    return bytes(sink.getvalue().to_pybytes())


def parquet_rows(storage: Storage, rel: str) -> int:
    """Row count from the footer alone (no data read)."""
    with storage.fs.open_input_file(storage.path(rel)) as f:
        return int(pq.ParquetFile(f).metadata.num_rows)


def _report(run_id: str, inputs: Inputs, snap: stages.Snapshot, storage: Storage, chunk_files: list[str],
            wall: float, files: sync.FileCounts, changes: sync.ChangeCounts) -> IngestReport:
    rows_written = sum(parquet_rows(storage, f) for f in chunk_files)
    stage_rows, stage_nodes = snap["stages"], snap["stage_nodes"]
    chunks = stage_rows["chunk"]["rows_out"] if "chunk" in stage_rows else 0
    embeddings = stage_rows["embed"]["rows_out"] if "embed" in stage_rows else 0
    assert chunks == embeddings == rows_written, (chunks, embeddings, rows_written)
    return IngestReport(
        run_id=run_id,
        inputs=InputCounts(files=len(inputs.files), unreadable_files=snap["files"]["unreadable"],
                           skipped_files=inputs.skipped, refused_files=inputs.refused),
        documents=DocumentCounts(read=snap["documents_read"], kept=snap["kept"], dropped=snap["dropped"]),
        reconciled=reconcile(snap) and changes.reconciled,
        chunks=chunks,
        embeddings=embeddings,
        decode_replacements=snap["replaced"],
        quarantined=snap["quarantined"],
        near_duplicates=[d for d in snap.get("drops", []) if d["reason"] == "near_duplicate"][:100],
        stages={name: StageReport(rows_in=int(s["rows_in"]), rows_out=int(s["rows_out"]),
                                  busy_s=round(s["seconds"], 3),
                                  wall_s=round(s.get("last", s["first"]) - s["first"], 3),
                                  rows_by_node=stage_nodes.get(name, {}))
                for name, s in stage_rows.items()},
        wall_s=round(wall, 3),
        files=files,
        changes=changes,
        embeddings_reused=snap["embeddings_reused"],
    )


def _publish_dataset(catalog: Catalog, cfg: AppConfig, inputs: Inputs, run_id: str, previous: Manifest | None,
                     files: list[str], report: IngestReport, variant: embedder.Variant,
                     removed_chunks: int) -> Manifest:
    """`files`: the run's chunk files, then its documents, sources and removed files."""
    new_files = [catalog.file_entry(f, rows=parquet_rows(catalog.storage, f)) for f in files]
    prev_counts = previous.counts if previous else {}
    dim = previous.embedder.dim if previous else 0
    if report.chunks:
        dim = pq.read_schema(catalog.storage.fs.open_input_file(catalog.storage.path(files[0]))).field(
            "embedding").type.list_size
    manifest = Manifest(
        kind="datasets", version=0, created_at=now_iso(), parent=previous.version if previous else None,
        inputs=[inputs.source(f) for f in inputs.files], run_id=run_id,
        embedder=embedder.info(cfg.ingest.embed.model, dim, variant),
        counts={"documents": report.changes.live_after,
                "chunks": prev_counts.get("chunks", 0) - removed_chunks + report.chunks},
        files=[*(previous.files if previous else []), *new_files],
        config=cfg.ingest.model_dump(),
        extra={"run_report": report.model_dump(include={"documents", "chunks", "embeddings", "files", "changes"})},
    )
    # Exactly the version after the one we deduplicated against: if another run published meanwhile, this
    # one's dedup did not see that version's documents, so it must not publish on top of it.
    expected = (previous.version if previous else 0) + 1
    if not catalog.publish_as(manifest, expected):
        raise IngestError(f"another run published dataset version {expected} while run {run_id} was running; "
                          "nothing was published: run the ingest again to deduplicate against it")
    return manifest
