"""One ingest run, end to end, on the current Ray: streaming Ray Data pipeline → segment files → dataset version.

`app.indexing.run_ingest` chains it with an index build (what the IngestService, `ragline ingest --in-process` and
Ray jobs call): this package writes dataset versions and never reads or builds an index.
"""

from __future__ import annotations

import math
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
from app.dataset import DOCUMENTS_FILE, DOCUMENTS_FILE_SCHEMA, documents_files
from app.errors import Conflict, RaglineError
from app.ingest import stages
from app.ingest.inputs import Inputs, expand
from app.models import embedder
from app.storage import Storage

OnStart = Callable[[Any], None]  # receives the run's RunLedger handle, for live progress


BLOCK_BYTES = 512 << 10  # 512 KiB ≈ 400 chunks of ~220 tokens: one embedding batch per block


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
    dataset_version: int | None = None  # the latest version once the run is done (None: none published yet)
    note: str | None = None
    index_version: int | None = None  # set by `app.indexing.run_ingest` when it built one

    @property
    def published(self) -> bool:
        """Whether the run published a dataset version (it does when it added any chunk)."""
        return self.chunks > 0

    def to_dict(self) -> IngestReportDict:
        """As the run record stores it and `ragline ingest --json` prints it: fields never set left out."""
        # model_dump's result is typed as a plain dict; its shape is this model's, which IngestReportDict spells out
        return cast(IngestReportDict, self.model_dump(exclude_unset=True))


def too_many_unreadable(unreadable: int, files: int, max_fraction: float) -> bool:
    """Whether a run fails for its unreadable (quarantined) files: more than `max_fraction` of them, and never for
    one alone (one bad file in a corpus of three is that file's problem, quarantined; many say the input or a
    setting is wrong, and publishing the rest would hide it)."""
    return unreadable > 1 and unreadable > max_fraction * files


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def _embed_concurrency(cfg: AppConfig) -> int:
    e = cfg.ingest.embed
    if e.concurrency:
        return e.concurrency
    res = ray.cluster_resources()
    if e.num_gpus > 0:
        return max(1, int(res.get("GPU", 0) / e.num_gpus))
    # One actor per core, counting only the cores free now (a Serve graph may hold some), minus what the cheap
    # stages and writers reserve: a pool sized to the whole cluster would wait forever for actors that cannot start.
    free = ray.available_resources().get("CPU", 1) - 2 * cfg.ingest.light_stage_num_cpus
    return max(1, min(math.floor(res.get("CPU", 1)), math.floor(free / e.num_cpus)))


def _udf(fn: Callable[..., pa.Table]) -> Any:
    """A stage function with keyword-only parameters (passed as fn_kwargs), which Ray's map_batches stub does not
    describe; the function keeps its name, so the operator shows as MapBatches(<stage>) in the dashboard."""
    return fn


class LightStageArgs(TypedDict):
    """map_batches arguments every cheap (CPU, pyarrow-batch) stage shares."""

    num_cpus: float  # CPUs reserved per task (a fraction: several run beside the embedding actors)
    batch_format: Literal["pyarrow"]


def _embed_device(cfg: AppConfig) -> str:
    return "cuda" if cfg.ingest.embed.num_gpus > 0 else "cpu"


def _variant(cfg: AppConfig, previous: Manifest | None) -> embedder.Variant:
    """The embedder runtime and precision of this run: a dataset's versions all share one model, revision,
    runtime and precision (their vectors are searched together); `auto` follows the existing versions, else the
    hardware and the model."""
    ec, device = cfg.ingest.embed, _embed_device(cfg)
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


def build_dataset(inputs: Inputs, cfg: AppConfig, storage: Storage, run_id: str, ledger: Any,
                  variant: embedder.Variant) -> ray.data.Dataset:
    """The lazy Ray Data pipeline; nothing runs until it is written."""
    ic = cfg.ingest
    light: LightStageArgs = {"num_cpus": ic.light_stage_num_cpus, "batch_format": "pyarrow"}
    model_path = embedder.resolve(ic.embed.model)
    revision = embedder.revision(ic.embed.model)
    threads = hardware.threads(ic.embed.num_cpus)
    # Small blocks (≈ a few embedding batches each) so every embedding actor has work: one big input file would
    # otherwise flow through the pipeline as one block and keep a single actor busy.
    ray.data.DataContext.get_current().target_max_block_size = BLOCK_BYTES
    ds = ray.data.read_binary_files(inputs.files, include_paths=True, filesystem=inputs.filesystem,
                                    num_cpus=ic.light_stage_num_cpus)
    ds = ds.map_batches(_udf(stages.parse_files), batch_size=8, **light,
                        fn_kwargs={"ledger": ledger, "cfg": ic.model_dump(), "storage_uri": storage.uri,
                                   "run_id": run_id, "uri_prefix": inputs.uri_prefix})
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
                        compute=ray.data.ActorPoolStrategy(size=_embed_concurrency(cfg),
                                                           max_tasks_in_flight_per_actor=1),
                        num_cpus=ic.embed.num_cpus,
                        num_gpus=ic.embed.num_gpus or None,
                        fn_constructor_kwargs={"ledger": ledger, "model": model_path, "variant": variant,
                                               "encode_batch_size": ic.embed.encode_batch_size,
                                               "include_title": ic.embed.include_title,
                                               "device": _embed_device(cfg),
                                               "threads": threads})
    return ds


def reconcile(snap: stages.Snapshot) -> bool:
    return snap["documents_read"] == snap["kept"] + sum(snap["dropped"].values())


def ingest_dataset(paths: list[str], cfg: AppConfig, storage: Storage, run_id: str | None = None,
                   on_start: OnStart | None = None) -> IngestReport:
    """Ingest `paths`; returns the run report. Publishes a dataset version when anything new was kept. Raises
    UserError for bad inputs and IngestError when too many files are unreadable."""
    run_id = run_id or new_run_id()
    inputs = expand(paths, cfg.ingest.read.max_file_bytes, cfg.ingest.read.follow_symlinks)
    catalog = Catalog(storage)
    previous = catalog.latest("datasets")
    variant = _variant(cfg, previous)
    t0 = time.time()
    # on the driver's node: a worker node lost mid-run must not take the run's ledger with it
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    ledger: Any = stages.RunLedgerActor.options(scheduling_strategy=here).remote(
        run_id, cfg.ingest.model_dump(), storage.uri, documents_files(previous))
    if inputs.refused:
        ray.get(ledger.refused.remote(inputs.refused))
    if on_start:
        on_start(ledger)
    segment = f"datasets/segments/{run_id}"
    ds = build_dataset(inputs, cfg, storage, run_id, ledger, variant)
    # Writers reserve a light share, not a whole CPU, so shards stream out beside busy embedding actors.
    ds.write_parquet(storage.path(segment), filesystem=storage.fs, max_rows_per_file=cfg.ingest.rows_per_file,
                     ray_remote_args={"num_cpus": cfg.ingest.light_stage_num_cpus})
    snap: stages.Snapshot = ray.get(ledger.snapshot.remote(full=True))  # the ledger exits with its last handle
    chunk_files = [f for f in storage.list_files(segment) if f.endswith(".parquet")]
    report = _report(run_id, inputs, snap, storage, chunk_files, time.time() - t0)
    assert reconcile(snap), f"ingest counts do not reconcile: {report.documents.model_dump()}"
    files = inputs.files
    if too_many_unreadable(snap["files"]["unreadable"], len(files), cfg.ingest.read.max_error_fraction):
        bad = sorted(snap["quarantined"], key=lambda q: q["source"])
        names = "; ".join(f"{q['source']}: {q['reason']}" for q in bad)
        raise IngestError(f"{snap['files']['unreadable']} of {len(files)} input files are unreadable (more than "
                          f"ingest.read.max_error_fraction={cfg.ingest.read.max_error_fraction}); no version was "
                          f"published. Unreadable: {names}")
    storage.write_bytes(f"runs/ingest/{run_id}.drops.parquet", _parquet_bytes(snap.get("drops", []), _DROPS_SCHEMA))
    if not report.published:
        report.dataset_version = previous.version if previous else None
        report.note = "nothing new to add: no version published"
        return report
    docs_rel = f"{segment}/{DOCUMENTS_FILE}"
    storage.write_bytes(docs_rel, _parquet_bytes(snap.get("kept_documents", []), DOCUMENTS_FILE_SCHEMA))
    manifest = _publish_dataset(catalog, cfg, inputs, run_id, previous, chunk_files, docs_rel, report, variant)
    report.dataset_version = manifest.version
    return report


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
            wall: float) -> IngestReport:
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
        reconciled=reconcile(snap),
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
    )


def _publish_dataset(catalog: Catalog, cfg: AppConfig, inputs: Inputs, run_id: str, previous: Manifest | None,
                     chunk_files: list[str], docs_rel: str, report: IngestReport,
                     variant: embedder.Variant) -> Manifest:
    new_files = [catalog.file_entry(f, rows=parquet_rows(catalog.storage, f)) for f in [*chunk_files, docs_rel]]
    prev_counts = previous.counts if previous else {}
    dim = pq.read_schema(catalog.storage.fs.open_input_file(catalog.storage.path(chunk_files[0]))).field(
        "embedding").type.list_size
    manifest = Manifest(
        kind="datasets", version=0, created_at=now_iso(), parent=previous.version if previous else None,
        inputs=[inputs.source(f) for f in inputs.files], run_id=run_id,
        embedder=embedder.info(cfg.ingest.embed.model, dim, variant),
        counts={"documents": prev_counts.get("documents", 0) + report.documents.kept,
                "chunks": prev_counts.get("chunks", 0) + report.chunks},
        files=[*(previous.files if previous else []), *new_files],
        config=cfg.ingest.model_dump(),
        extra={"run_report": report.model_dump(include={"documents", "chunks", "embeddings"})},
    )
    # Exactly the version after the one we deduplicated against: if another run published meanwhile, this
    # one's dedup did not see that version's documents, so it must not publish on top of it.
    expected = (previous.version if previous else 0) + 1
    if not catalog.publish_as(manifest, expected):
        raise IngestError(f"another run published dataset version {expected} while run {run_id} was running; "
                          "nothing was published: run the ingest again to deduplicate against it")
    return manifest
