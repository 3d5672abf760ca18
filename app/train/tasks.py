"""The training tasks, each registered once (as torchtitan's `TrainSpec`): what a task trains, from which data, with
which loss, and what it exports for which Serve stage. The job config, the driver, the data preparation, the
training loop and the CLI look a task up here by `TrainJobConfig.task` instead of branching on its name, so a new
task (an embedder, a question generator) is one module and one entry in `TASKS`.

Nothing heavy is imported here or in the task modules at import time (torch, transformers, Ray Data): the CLI and
the job config's validation read the registry too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from app.errors import UserError
from app.train import embedder_task, qgen_task, reranker_task, sft_task

if TYPE_CHECKING:
    import numpy as np
    import torch

    from app.storage import Storage
    from app.train.config import TrainJobConfig
    from app.train.data import Prepared
    from app.train.sft_data import Batch

# Where a task's promoted models are used: a stage of the Serve graph, or adapt's question writer. retriever: an
# embedder is served as the index's, so promoting one re-embeds the collection into a new index version
# (`app.index.build`).
Stage = Literal["generator", "reranker", "retriever", "writer"]


def model_setting(stage: Stage) -> str:
    """The config key that names a stage's model: `catalog:NAME` there follows NAME's promotions."""
    return "adapt.writer.model" if stage == "writer" else f"serve.{stage}.model"


@dataclass(frozen=True)
class TrainTask:
    """One training task's parts. Each hook takes the job config; none is optional, so a task cannot be half
    registered (tests/unit/test_tasks.py checks each)."""

    name: str  # `TrainJobConfig.task`, `ragline train <name>`, the catalog name by default
    summary: str  # `ragline train <name> --help`
    stage: Stage  # where a promoted model of this task is used (`model_setting(stage)`=catalog:NAME)
    default_model: str  # when the job names none: a packaged name, local directory or hub id
    # config rules of this task beyond each field's own (raise ValueError: pydantic reports it as the config's)
    validate: Callable[[TrainJobConfig], None]
    check_inputs: Callable[[TrainJobConfig], None]  # before any cluster work: the data exists (NotFound)
    resolve_model: Callable[[TrainJobConfig], str]  # a local directory (packaged defaults resolved) or a hub id
    build_model: Callable[[TrainJobConfig, str], torch.nn.Module]  # fresh, the same on every rank
    prepare: Callable[[TrainJobConfig, str, Storage], Prepared]  # the training rows as a Ray dataset
    collate: Callable[[TrainJobConfig, int], Callable[[dict[str, np.ndarray]], Batch]]  # (cfg, pad id) → collate
    batched_in_data: Callable[[TrainJobConfig], bool]  # rows come as formed micro-batches: no shuffle buffer
    model_inputs: Callable[[TrainJobConfig, Batch, torch.device], dict[str, torch.Tensor]]
    loss: Callable[[Any, Batch], torch.Tensor]  # (the model's output, the micro-batch) → the scalar loss
    export: Callable[[TrainJobConfig, Any, str, Path], None]  # (cfg, trained model, model path, directory)


def _task(module: ModuleType, name: str, summary: str, stage: Stage, default_model: str) -> TrainTask:
    """A task whose hooks are the functions of `module` named as TrainTask's fields."""
    hooks = {f.name: getattr(module, f.name) for f in dataclasses.fields(TrainTask)
             if f.name not in ("name", "summary", "stage", "default_model")}
    return TrainTask(name=name, summary=summary, stage=stage, default_model=default_model, **hooks)


TASKS: dict[str, TrainTask] = {t.name: t for t in (
    _task(sft_task, "sft", "Supervised fine-tuning of a causal LM (chat template applied, loss on the responses "
          "only).", "generator", "SmolLM2-135M-Instruct"),
    _task(reranker_task, "reranker", "A cross-encoder reranker fine-tuned from MiniLM on (query, positive) pairs "
          "with hard negatives.", "reranker", "all-MiniLM-L6-v2"),
    _task(embedder_task, "embedder", "The retriever's bi-encoder fine-tuned from MiniLM on (query, positive) pairs "
          "with hard and in-batch negatives.", "retriever", "all-MiniLM-L6-v2"),
    _task(qgen_task, "qgen", "`ragline adapt`'s question writer: a causal LM fine-tuned to ask a question, and "
          "give its answer, about a passage (from a SQuAD-format file).", "writer", "SmolLM2-135M-Instruct"),
)}


def unknown(name: str) -> str:
    return f"unknown training task {name!r}: the tasks are {', '.join(TASKS)}"


def task_named(name: str) -> TrainTask:
    """The registered task, or a UserError naming the known ones (a catalog model or run of a task this version
    does not have)."""
    if name not in TASKS:
        raise UserError(unknown(name))
    return TASKS[name]


def export(cfg: TrainJobConfig, path: str, state: dict[str, torch.Tensor], directory: Path) -> None:
    """The trained weights (`state`, the full state dict) in the task's own serving format in `directory`."""
    task = task_named(cfg.task)
    model = task.build_model(cfg.model_copy(update={"activation_checkpointing": False}), path)
    model.load_state_dict(state)
    task.export(cfg, model, path, directory)
