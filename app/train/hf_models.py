"""What the tasks that train Hugging Face transformers share: activation checkpointing and the export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.train.config import TrainJobConfig


def with_checkpointing(cfg: TrainJobConfig, model: Any) -> Any:
    """`model`, recomputing activations in backward when the job asks for it (no KV cache then: nothing reuses
    it in training)."""
    if cfg.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def save_pretrained(model: Any, path: str, directory: Path) -> None:
    """Hugging Face format into `directory`: the weights (safetensors) and the tokenizer of `path`."""
    from transformers import AutoTokenizer

    model.save_pretrained(directory, safe_serialization=True)
    AutoTokenizer.from_pretrained(path).save_pretrained(directory)
