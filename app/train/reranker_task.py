"""The reranker task: a cross-encoder fine-tuned listwise on (query, positive, hard negatives) groups; it exports
a sequence classifier that sentence-transformers loads as a CrossEncoder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import NotFound
from app.train.config import RerankerDataConfig, TrainJobConfig
from app.train.hf_models import save_pretrained, with_checkpointing
from app.train.reranker_data import collate_groups

if TYPE_CHECKING:
    import torch

    from app.storage import Storage
    from app.train.data import Prepared
    from app.train.sft_data import Batch


def validate(cfg: TrainJobConfig) -> None:
    if cfg.lora is not None or cfg.freeze_layers:
        raise ValueError("lora and freeze_layers are for sft; the reranker is small enough to train whole")


def check_inputs(cfg: TrainJobConfig) -> None:
    check_pairs(cfg.reranker, "reranker")


def check_pairs(pairs: RerankerDataConfig, section: str) -> None:
    """The pairs' sources exist (the reranker's and the embedder's read the same way)."""
    if pairs.beir_dir and not Path(pairs.beir_dir).is_dir():
        raise NotFound(f"{section}.beir_dir {pairs.beir_dir} is not a directory")
    if pairs.questions and not Path(pairs.questions).is_file():
        raise NotFound(f"{section}.questions {pairs.questions} is not a file")


def resolve_model(cfg: TrainJobConfig) -> str:
    from app.models import cross_encoder

    return cross_encoder.resolve(cfg.model_name)


def build_model(cfg: TrainJobConfig, path: str) -> torch.nn.Module:
    """A one-logit sequence classifier; its new head is seeded by cfg.seed, so every rank starts alike."""
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(cfg.seed)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    return with_checkpointing(cfg, model)


def prepare(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    from app.train.data import prepare_reranker

    return prepare_reranker(cfg, model_path, storage)


def collate(cfg: TrainJobConfig, pad_id: int) -> Callable[[dict[str, np.ndarray]], Batch]:
    return lambda b: collate_groups(b, pad_id)


def batched_in_data(cfg: TrainJobConfig) -> bool:
    return False


def model_inputs(cfg: TrainJobConfig, batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    return {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}


def loss(out: Any, batch: Batch) -> torch.Tensor:
    """Listwise softmax cross-entropy over each group's logits (B, G), the positive at index 0."""
    import torch

    logits = out.logits.view(-1, batch["group_size"]).float()
    return torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long,
                                                                   device=logits.device))


def export(cfg: TrainJobConfig, model: Any, path: str, directory: Path) -> None:
    """The sequence classifier with its tokenizer: loadable as a sentence-transformers CrossEncoder."""
    save_pretrained(model, path, directory)
