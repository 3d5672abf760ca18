"""The sft task: a causal LM fine-tuned on chat-templated records, the loss on the assistant turns only; it exports
a generator (LoRA merged) that transformers and vLLM load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from app import envs
from app.errors import NotFound, UserError
from app.train.config import TrainJobConfig
from app.train.hf_models import save_pretrained, with_checkpointing
from app.train.sft_data import IGNORE, Batch, collate_lm

if TYPE_CHECKING:
    import torch

    from app.storage import Storage
    from app.train.data import Prepared


def validate(cfg: TrainJobConfig) -> None:
    if not cfg.sft.paths and cfg.sft.rag_qa is None:
        raise ValueError("sft.paths: give at least one jsonl or parquet file of training records (or sft.rag_qa)")


def check_inputs(cfg: TrainJobConfig) -> None:
    from app.ingest.inputs import expand

    if cfg.sft.paths:
        expand(cfg.sft.paths)
    if cfg.sft.rag_qa is not None and not Path(cfg.sft.rag_qa.dataset).is_file():
        raise NotFound(f"sft.rag_qa.dataset {cfg.sft.rag_qa.dataset} is not a file")


def resolve_model(cfg: TrainJobConfig) -> str:
    """The packaged GGUF converted once to safetensors, a local directory or a hub id."""
    from app.models import generator

    return generator.resolve(cfg.model_name, envs.cache_dir())


def build_model(cfg: TrainJobConfig, path: str) -> torch.nn.Module:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(cfg.seed)
    model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if cfg.freeze_layers:
        from app.train.strategies import transformer_blocks

        blocks = transformer_blocks(model)
        if cfg.freeze_layers >= len(blocks):
            raise UserError(f"freeze_layers {cfg.freeze_layers} leaves nothing to train: {cfg.model_name} has "
                            f"{len(blocks)} blocks")
        model.get_input_embeddings().requires_grad_(False)
        for block in blocks[: cfg.freeze_layers]:
            block.requires_grad_(False)
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=cfg.lora.r, lora_alpha=cfg.lora.alpha,
                                                 lora_dropout=cfg.lora.dropout,
                                                 target_modules=cfg.lora.target_modules))
    return with_checkpointing(cfg, model)


def prepare(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    from app.train.data import prepare_sft

    return prepare_sft(cfg, model_path, storage)


def collate(cfg: TrainJobConfig, pad_id: int) -> Callable[[dict[str, np.ndarray]], Batch]:
    return lambda b: collate_lm(b, pad_id, cfg.sft.pad_to_multiple_of)


def batched_in_data(cfg: TrainJobConfig) -> bool:
    return cfg.sft.group_by_length > 0  # rows come as micro-batches of like length, in a seeded order


def _predicting(labels: torch.Tensor) -> torch.Tensor:
    """Positions t (1-D, ascending) whose next token is labelled in some row of the micro-batch (B, T)."""
    return (labels[:, 1:] != IGNORE).any(dim=0).nonzero().squeeze(1)


def model_inputs(cfg: TrainJobConfig, batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    # Logits only where the loss needs them: at every position, the LM head over a 49k-token vocabulary was
    # almost half of a bf16 SmolLM2-135M step on CPU, and an answer is a few tokens after hundreds of prompt.
    keep = _predicting(batch["labels"])
    assert keep.numel() > 0, "a micro-batch with no labelled token (empty answers are dropped before)"
    return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device),
            "logits_to_keep": keep.to(device)}


def loss(out: Any, batch: Batch) -> torch.Tensor:
    """Token cross-entropy of the logits kept at `_predicting` positions against the next tokens (the mean over
    labelled tokens, as the model's own loss)."""
    import torch

    keep = _predicting(batch["labels"])
    targets = batch["labels"][:, keep + 1].to(out.logits.device)  # (B, K)
    return torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), targets.flatten(),
                                             ignore_index=IGNORE)


def export(cfg: TrainJobConfig, model: Any, path: str, directory: Path) -> None:
    """The causal LM with its tokenizer, LoRA merged: loadable by transformers and vLLM."""
    save_pretrained(model.merge_and_unload() if cfg.lora is not None else model, path, directory)
