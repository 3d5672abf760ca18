"""The function every training worker runs (`train_loop_per_worker`): resume, train, report, checkpoint, export.

A checkpoint holds the whole training state: the strategy's model/optimizer/scheduler files, every rank's RNG
state, and `progress.json` (optimizer step, epoch, micro-batches consumed in that epoch). Resuming replays the
epoch's data order (Ray Data with preserved order and a seeded local shuffle) and skips the consumed micro-batches,
so a run that failed at step k continues from its last checkpoint's step with the data it had not seen yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

import numpy as np
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist

from app import tracking
from app.storage import Storage
from app.train import metrics
from app.train.config import TrainJobConfig
from app.train.strategies import STRATEGIES
from app.train.tasks import export, task_named

SHUFFLE_BUFFER = 256  # rows per worker mixed by the seeded local shuffle
# Ray Train's controller takes one report per worker every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s) from a queue
# of one: a report sooner blocks until then, which held fast steps (tiny models, GPUs) to one per 2 s. Metrics go
# to MLflow every step; Ray Train gets a checkpoint's report, the attempt's first step, and then one report per
# this much training time.
REPORT_EVERY_S = 2.0


class MlflowRun(TypedDict):
    """The MLflow run a training run logs to (the run record's `mlflow`)."""

    uri: str  # tracking URI
    run_id: str


class LoopConfig(TypedDict):
    """`train_loop`'s config: what the driver (`app.train.run`) tells every worker."""

    job: dict[str, object]  # the TrainJobConfig (`model_dump`)
    model_path: str  # local directory or hub id (the task's `resolve_model`)
    pad_id: int
    total_steps: int  # optimizer steps of the whole run
    storage: str  # the storage root's URI
    run_dir: str  # root-relative: train/<run name>
    export_dir: str  # root-relative: where rank 0 uploads the exported model
    mlflow: MlflowRun


class RngState(TypedDict):
    """One rank's random generators, as `rng-rank<k>.pt` holds them."""

    python: tuple[Any, ...]  # random.getstate()
    numpy: tuple[Any, ...]  # the legacy form (name, keys, pos, has_gauss, gauss), its keys as an int64 tensor
    torch: torch.Tensor


def _rng_state() -> RngState:
    """Only tensors and plain values, so a checkpoint loads with `torch.load(weights_only=True)`: unpickling
    arbitrary objects from a checkpoint directory would run whatever code a tampered file names."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    assert isinstance(keys, np.ndarray)  # the legacy form: (name, 624 uint32 keys, position, has_gauss, gauss)
    return {"python": random.getstate(), "numpy": (name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss,
                                                   gauss), "torch": torch.get_rng_state()}


def _set_rng_state(state: RngState) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])


def train_loop(config: LoopConfig) -> None:
    cfg = TrainJobConfig.model_validate(config["job"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    torch.set_num_threads(cfg.torch_threads or max(1, round(cfg.cpus_per_worker)))
    if device.type == "cpu":
        _normal_priority()
    random.seed(cfg.seed + rank)
    np.random.seed(cfg.seed + rank)

    task = task_named(cfg.task)
    model = task.build_model(cfg, config["model_path"])
    n_params = metrics.non_embedding_params(model)
    strategy = STRATEGIES[cfg.strategy](cfg, model, config["total_steps"], device)
    step = epoch = position = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            progress = json.loads((Path(d) / "progress.json").read_text())
            strategy.load(Path(d))
            _set_rng_state(torch.load(Path(d) / f"rng-rank{rank}.pt", weights_only=True))
        step, epoch, position = progress["step"], progress["epoch"], progress["position"]
        print(f"[rank {rank}] resumed at step {step} (epoch {epoch}, micro-batch {position})")

    start_step = step  # reported with every metric: where this attempt began (0, or a checkpoint's step)
    nodes = _worker_nodes(world)  # reported too: the Ray node each rank runs on
    shard = ray.train.get_dataset_shard("train")
    collate = task.collate(cfg, config["pad_id"])
    storage = Storage(config["storage"])
    window = metrics.Window()
    last_saved = step if checkpoint else -1
    unreported_s = REPORT_EVERY_S  # the attempt's first step is reported
    done = step >= config["total_steps"]
    grouped = task.batched_in_data(cfg)  # micro-batches formed in the data already
    while not done and epoch < cfg.epochs:
        batches = shard.iter_torch_batches(batch_size=cfg.batch_size, collate_fn=collate, drop_last=True,
                                           local_shuffle_buffer_size=None if grouped else SHUFFLE_BUFFER,
                                           local_shuffle_seed=cfg.seed * 1000 + epoch)
        for micro, batch in enumerate(batches):
            if micro < position:  # consumed before the checkpoint we resumed from
                continue
            t0 = time.perf_counter()
            out = strategy.forward(task.model_inputs(cfg, batch, device), micro)
            loss = task.loss(out, batch)
            stepped = strategy.backward(loss, micro)
            position = micro + 1
            window.add(loss.item(), int(batch["attention_mask"].sum()), len(batch["input_ids"]),
                       batch["attention_mask"].shape[1], time.perf_counter() - t0)
            if not stepped:
                continue
            step += 1
            if cfg.chaos_fail_at_step == step and rank == world - 1 and \
                    storage.create_exclusive(f"{config['run_dir']}/chaos-fired", b"1"):
                print(f"[rank {rank}] chaos: exiting at step {step}")
                os._exit(1)
            done = step >= config["total_steps"]
            report = metrics.gather(window, step, strategy.lr, epoch, n_params, model, cfg, device)
            report.attempt_start_step = start_step
            report.worker_nodes = nodes
            window = metrics.Window()
            # every rank decides alike (report is a collective): compute_s is the gathered slowest worker's
            unreported_s += report.compute_s
            if step % cfg.checkpoint_every == 0 or done:
                _save(strategy, report, rank, {"step": step, "epoch": epoch, "position": position})
                last_saved, unreported_s = step, 0.0
            elif unreported_s >= REPORT_EVERY_S:
                ray.train.report(report.metrics())
                unreported_s = 0.0
            if rank == 0:
                tracking.log_metrics(config["mlflow"]["uri"], config["mlflow"]["run_id"], report.metrics(), step)
            if done:
                break
        if not done:
            epoch, position = epoch + 1, 0
    # total_steps never exceeds the steps the data makes, so the last step ended the loop with a checkpoint
    assert last_saved == step, (last_saved, step)

    state = strategy.full_state_dict()  # a collective: every rank takes part
    if rank == 0:
        assert state is not None
        with tempfile.TemporaryDirectory() as d:
            export(cfg, config["model_path"], state, Path(d))
            storage.delete_dir(config["export_dir"])
            storage.upload_dir(Path(d), config["export_dir"])
    if dist.is_initialized():
        dist.barrier()


def _normal_priority() -> None:
    """Run this thread (and the math threads it starts later) at nice 0. Ray starts worker processes at nice 15 so
    that its daemons stay responsive; a CPU trainer then yields its cores to every other Ray process: the same
    training loop in a Ray task did 153 tokens/s at nice 15 and 161 at nice 0 on 2 cores. Linux nice is per thread,
    so nothing else in the process changes: gloo's threads (started with Ray Train's process group, before this
    loop) stay at 15, which measured faster than all of the trainer's threads at 0 (0.81 of the plain loop against
    0.77, in turns, 3 repeats; two cores leave no free core for the all-reduce to overlap backward). Lowering nice
    needs CAP_SYS_NICE (root, as in Ray's images); without it the thread stays at 15."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)  # who=0: the calling thread


def _worker_nodes(world: int) -> list[str]:
    """Every rank's Ray node id, by rank (a collective: every rank calls it)."""
    mine = ray.get_runtime_context().get_node_id()
    if not dist.is_initialized():
        return [mine]
    nodes: list[str] = [""] * world
    dist.all_gather_object(nodes, mine)
    return nodes


def _save(strategy: Any, report: metrics.StepReport, rank: int, progress: dict[str, int]) -> None:
    """Every rank writes its part into its own directory; Ray Train merges them into one checkpoint and registers
    it only once every rank's upload is done, so a crash mid-save never leaves a checkpoint that looks valid."""
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        strategy.save(Path(d))
        torch.save(_rng_state(), Path(d) / f"rng-rank{rank}.pt")
        if rank == 0:
            (Path(d) / "progress.json").write_text(json.dumps(progress))
        report.checkpoint_save_s = round(time.perf_counter() - t0, 3)
        ray.train.report(report.metrics(), checkpoint=ray.train.Checkpoint.from_directory(d),
                         checkpoint_dir_name=f"step-{progress['step']:08d}")

