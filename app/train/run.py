"""A training run from the driver's side: prepare data, launch the TorchTrainer, track it in MLflow, register
the exported model in the catalog.

Layout under the storage root:

    train/<run name>/...              Ray Train's run directory (checkpoints step-00000050/, its state snapshot)
    train/<run name>/export/          the exported Hugging Face model (rank 0 writes it at the end)
    runs/train/<run name>.json        the run record (state, config, counts, metrics, model version)
    mlruns/                           the default MLflow file store
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast

from app import tracking
from app.catalog import Catalog, now_iso
from app.errors import UserError
from app.runs import RunRecord, RunStore
from app.storage import Storage
from app.train.config import TrainJobConfig
from app.train.tasks import task_named

if TYPE_CHECKING:  # Ray Data and torch: not for a CLI that only lists runs
    from app.train.data import DataCounts, DataSource
    from app.train.loop import LoopConfig, MlflowRun
    from app.train.metrics import StepMetrics

class ModelRef(TypedDict):
    """The model version a run registered in the catalog."""

    name: str
    version: int


class TrainRunRecord(RunRecord, total=False):
    """`runs/train/<name>.json`: the run as submitted, then how it went (`state`: queued → preparing → running →
    succeeded | failed | stopped). `TrainingService.status` and the CLI hand it on as it is (`live` holds the one a
    running run last reported, ahead of storage)."""

    name: Required[str]
    task: Required[str]  # a registered task's name (app.train.tasks.TASKS)
    config: Required[dict[str, object]]  # the TrainJobConfig (`model_dump`), validated again when the run starts
    storage: Required[str]  # the storage root's URI
    submitted_at: str  # ISO 8601, UTC (`app.catalog.now_iso`), as are the other times; queued runs only
    started_at: str
    finished_at: str
    counts: DataCounts  # from `running` on: the training records, reconciled
    data: DataSource  # from `running` on: what the data was, for the model's lineage
    total_steps: int  # optimizer steps the run will make
    prepare_s: float  # seconds preparing the data (one decimal)
    mlflow: MlflowRun
    metrics: StepMetrics  # succeeded runs: rank 0's last report, less `worker_nodes`
    worker_nodes: list[str] | None  # succeeded runs: the Ray node id of each rank (of the last attempt)
    train_s: float  # succeeded runs: seconds in `TorchTrainer.fit` (one decimal)
    checkpoint: str | None  # succeeded runs: the last checkpoint's directory
    model: ModelRef  # succeeded runs
    error: str  # failed or stopped runs: "<exception type>: <message>"


def run_name(cfg: TrainJobConfig) -> str:
    return cfg.name or f"{cfg.task}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}"


def validate(cfg: TrainJobConfig) -> str:
    """Checks that need no cluster (the model and the data exist); returns the resolved model path or hub id.
    Pass that on as `run_training(..., model_path=)` so the run does not check (and resolve) it all over again."""
    task = task_named(cfg.task)
    task.check_inputs(cfg)
    return task.resolve_model(cfg)


def training_runs(storage: Storage) -> RunStore[TrainRunRecord]:
    """Training runs' records (`runs/train/<name>.json`), oldest start first."""
    return RunStore(storage, "train", key="name", order="started_at", noun="training run")


def run_training(cfg: TrainJobConfig, storage: Storage,
                 on_update: Callable[[TrainRunRecord], None] | None = None, *,
                 model_path: str | None = None) -> TrainRunRecord:
    """Run (or resume, when a run of this name stopped before) one job to the end; returns its record with the
    registered model version. Needs a connected Ray. Raises UserError for bad config or data, before any
    training worker starts. `model_path`: what `validate(cfg)` returned, where the caller validated already in
    this process; None: validated here."""
    name = run_name(cfg)
    if model_path is None:
        model_path = validate(cfg)
    record: TrainRunRecord = {"name": name, "task": cfg.task, "state": "preparing", "started_at": now_iso(),
                              "config": cfg.model_dump(), "storage": storage.uri}
    update = on_update or (lambda r: None)
    training_runs(storage).save(record)
    update(record)
    try:
        return _run(cfg, storage, name, model_path, record, update)
    except BaseException as e:  # recorded for `ragline train status`, then raised to the caller
        record.update({"state": "failed" if not isinstance(e, KeyboardInterrupt) else "stopped",
                       "finished_at": now_iso(), "error": f"{type(e).__name__}: {e}"})
        training_runs(storage).save(record)
        raise


def _run(cfg: TrainJobConfig, storage: Storage, name: str, model_path: str, record: TrainRunRecord,
         update: Callable[[TrainRunRecord], None]) -> TrainRunRecord:
    import ray.train
    from ray.train.torch import TorchTrainer

    from app.train.data import prepare
    from app.train.loop import train_loop

    t0 = time.perf_counter()
    prepared = prepare(cfg, model_path, storage)
    per_worker = prepared.rows // cfg.num_workers  # streaming_split(equal=True) gives each worker this many rows
    steps_per_epoch = per_worker // cfg.batch_size // cfg.grad_accum
    if steps_per_epoch == 0:
        raise UserError(f"{prepared.rows} training rows make no optimizer step with {cfg.num_workers} workers × "
                        f"batch_size {cfg.batch_size} × grad_accum {cfg.grad_accum}")
    total_steps = min(cfg.max_steps or 1 << 62, steps_per_epoch * cfg.epochs)
    record.update({"state": "running", "counts": prepared.counts, "data": prepared.source, "total_steps": total_steps,
                   "prepare_s": round(time.perf_counter() - t0, 1)})
    training_runs(storage).save(record)
    update(record)

    uri = tracking.tracking_uri(cfg.mlflow_tracking_uri, storage)
    # a resumed run keeps the MLflow run of its earlier attempts: one history
    mlflow_id = tracking.start_run(uri, name, cfg.model_dump(), _mlflow_run(storage, name))
    storage.write_bytes(f"train/{name}/mlflow-run-id", mlflow_id.encode())
    record["mlflow"] = {"uri": uri, "run_id": mlflow_id}

    train_root = storage.uri.rstrip("/") + "/train" if "://" in storage.uri else str(storage.local_path("train"))
    export_dir = f"train/{name}/export"
    loop_config: LoopConfig = {"job": cfg.model_dump(), "model_path": model_path, "pad_id": prepared.pad_id,
                               "total_steps": total_steps, "storage": storage.uri, "run_dir": f"train/{name}",
                               "export_dir": export_dir, "mlflow": record["mlflow"]}
    trainer = TorchTrainer(
        # Ray types the loop's config as a plain dict: it passes on `train_loop_config`, a LoopConfig, as it is
        cast("Callable[[dict[Any, Any]], None]", train_loop),
        train_loop_config=cast("dict[Any, Any]", loop_config),
        scaling_config=ray.train.ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu,
                                               resources_per_worker={"CPU": cfg.cpus_per_worker},
                                               placement_strategy=cfg.placement_strategy),
        run_config=ray.train.RunConfig(
            name=name, storage_path=train_root,
            failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.keep_checkpoints)),
        datasets={"train": prepared.dataset},
        # the same order on every attempt, so a resumed run can skip exactly the micro-batches it consumed
        dataset_config=ray.train.DataConfig(execution_options=_ordered()),
    )
    t1 = time.perf_counter()
    result = _fit(trainer)
    train_s = time.perf_counter() - t1
    # rank 0's last `StepReport.metrics()` (Ray Train keeps the last report)
    metrics = cast("StepMetrics", dict(result.metrics or {}))
    worker_nodes = metrics.pop("worker_nodes", None)  # Ray node id of each rank (of the last attempt)
    version = register(storage, cfg, name, export_dir, metrics, prepared.counts, prepared.source)
    tracking.finish(uri, mlflow_id, {"ragline.model": cfg.catalog_name, "ragline.model_version": str(version)})
    record.update({"state": "succeeded", "finished_at": now_iso(), "metrics": metrics, "worker_nodes": worker_nodes,
                   "train_s": round(train_s, 1),
                   "checkpoint": result.checkpoint.path if result.checkpoint else None,
                   "model": {"name": cfg.catalog_name, "version": version}})
    training_runs(storage).save(record)
    update(record)
    return record


def register(storage: Storage, cfg: TrainJobConfig, run: str, export_dir: str, metrics: Mapping[str, object],
             counts: DataCounts, source: DataSource) -> int:
    """Copy the export into its own directory under models/<name>/ and publish a model version for it."""
    import uuid

    catalog = Catalog(storage)
    rel = f"models/{cfg.catalog_name}/files-{uuid.uuid4().hex[:12]}"
    for f in storage.list_files(export_dir):
        storage.copy_file(f, f"{rel}/{f[len(export_dir) + 1:]}")
    manifest = catalog.publish_model(cfg.catalog_name, {
        "task": cfg.task, "run": run, "base_model": cfg.model_name, "dir": rel,
        "metrics": {k: v for k, v in metrics.items() if isinstance(v, int | float)},
        "data": {"counts": counts, **source}, "config": cfg.model_dump()})
    return manifest.version


def _fit(trainer: Any) -> Any:
    """`trainer.fit()`, leaving Ctrl-C as it found it. In the main thread Ray Train installs a SIGINT handler that
    aborts its controller and never removes it; the handler holds the controller's handle, so in a process that
    stays up (a test session, `ragline adapt` between its trainings) the finished run's TrainController,
    DatasetManager and SplitCoordinator lived on (0.8 GB, 6% of a core) until the next run replaced the handler."""
    if threading.current_thread() is not threading.main_thread():
        return trainer.fit()  # no handler is installed off the main thread (the TrainingService's runner)
    previous = signal.getsignal(signal.SIGINT)
    try:
        return trainer.fit()
    finally:
        signal.signal(signal.SIGINT, previous)


def _ordered() -> Any:
    from ray.data import ExecutionOptions

    return ExecutionOptions(preserve_order=True)


def _mlflow_run(storage: Storage, name: str) -> str | None:
    rel = f"train/{name}/mlflow-run-id"
    return storage.read_bytes(rel).decode() if storage.exists(rel) else None
