"""The qgen task: `ragline adapt`'s question writer, a causal LM fine-tuned on a SQuAD-format file's paragraphs
and questions (`app.train.qgen_data`). It trains, and exports, as the sft task does; only its records differ."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import NotFound, UserError
from app.train.config import TrainJobConfig
from app.train.sft_task import (  # noqa: F401  (registered as this task's hooks by name, app/train/tasks.py)
    batched_in_data,
    build_model,
    collate,
    export,
    loss,
    model_inputs,
    resolve_model,
)

if TYPE_CHECKING:
    from app.storage import Storage
    from app.train.data import Prepared


def validate(cfg: TrainJobConfig) -> None:
    if not cfg.qgen.dataset:
        raise ValueError("qgen.dataset: give a SQuAD v1.1 JSON file of paragraphs and their questions")
    if cfg.sft.rag_qa is not None:
        raise ValueError("sft.rag_qa is for the sft task; a qgen job learns from qgen.dataset")


def check_inputs(cfg: TrainJobConfig) -> None:
    from app.ingest.inputs import expand
    from app.qa.questions import is_squad

    assert cfg.qgen.dataset is not None
    path = Path(cfg.qgen.dataset)
    if not path.is_file():
        raise NotFound(f"qgen.dataset {path} is not a file")
    if not is_squad(path):
        raise UserError(f"qgen.dataset {path}: a SQuAD v1.1 JSON file is needed (its paragraphs are the passages "
                        "shown; a JSONL question set has none)")
    if cfg.sft.paths:
        expand(cfg.sft.paths)


def prepare(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    from app.train.data import prepare_qgen

    return prepare_qgen(cfg, model_path, storage)
