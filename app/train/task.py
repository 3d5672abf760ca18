"""What differs between the two training tasks: the model, how a micro-batch becomes a loss, and the export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from app import envs
from app.train.config import TrainJobConfig


def resolve_model(cfg: TrainJobConfig) -> str:
    """A local directory (the packaged defaults resolved, the GGUF converted once) or a hub id."""
    from app.models import embedder, generator

    if cfg.task == "sft":
        return generator.resolve(cfg.model_name, envs.cache_dir())
    return embedder.resolve(cfg.model_name)


def build_model(cfg: TrainJobConfig, path: str) -> torch.nn.Module:
    """Fresh from `path` (the same on every rank: new heads are seeded by cfg.seed)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    torch.manual_seed(cfg.seed)
    model: Any
    if cfg.task == "sft":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if cfg.lora is not None:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=cfg.lora.r, lora_alpha=cfg.lora.alpha,
                                                     lora_dropout=cfg.lora.dropout,
                                                     target_modules=cfg.lora.target_modules))
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    if cfg.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def loss_of(cfg: TrainJobConfig, out: Any, batch: dict[str, Any]) -> torch.Tensor:
    """sft: the model's shifted token cross-entropy over labelled tokens. reranker: listwise softmax
    cross-entropy over each group's logits (B, G), the positive at index 0."""
    if cfg.task == "sft":
        return out.loss
    logits = out.logits.view(-1, batch["group_size"]).float()
    return torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long,
                                                                   device=logits.device))


def model_inputs(cfg: TrainJobConfig, batch: dict[str, Any], device: torch.device) -> dict[str, torch.Tensor]:
    keys = ("input_ids", "attention_mask", "labels") if cfg.task == "sft" else \
        ("input_ids", "attention_mask", "token_type_ids")
    return {k: batch[k].to(device) for k in keys}


def export(cfg: TrainJobConfig, path: str, state: dict[str, torch.Tensor], directory: Path) -> None:
    """Hugging Face format into `directory`: the causal LM (LoRA merged) with its tokenizer, loadable by
    transformers and vLLM; or the sequence classifier + tokenizer, loadable as a sentence-transformers
    CrossEncoder."""
    from transformers import AutoTokenizer

    model: Any = build_model(cfg.model_copy(update={"activation_checkpointing": False}), path)
    model.load_state_dict(state)
    if cfg.lora is not None:
        model = model.merge_and_unload()
    model.save_pretrained(directory, safe_serialization=True)
    AutoTokenizer.from_pretrained(path).save_pretrained(directory)
