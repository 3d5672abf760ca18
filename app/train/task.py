"""What differs between the two training tasks: the model, how a micro-batch becomes a loss, and the export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from app import envs
from app.errors import UserError
from app.train.config import TrainJobConfig
from app.train.sft_data import IGNORE, Batch


def resolve_model(cfg: TrainJobConfig) -> str:
    """A local directory (the packaged defaults resolved, the GGUF converted once) or a hub id."""
    from app.models import cross_encoder, generator

    if cfg.task == "sft":
        return generator.resolve(cfg.model_name, envs.cache_dir())
    return cross_encoder.resolve(cfg.model_name)


def build_model(cfg: TrainJobConfig, path: str) -> torch.nn.Module:
    """Fresh from `path` (the same on every rank: new heads are seeded by cfg.seed)."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    torch.manual_seed(cfg.seed)
    model: Any
    if cfg.task == "sft":
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
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
    else:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    if cfg.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    return model


def _predicting(labels: torch.Tensor) -> torch.Tensor:
    """Positions t (1-D, ascending) whose next token is labelled in some row of the micro-batch (B, T)."""
    return (labels[:, 1:] != IGNORE).any(dim=0).nonzero().squeeze(1)


def loss_of(cfg: TrainJobConfig, out: Any, batch: Batch) -> torch.Tensor:
    """sft: token cross-entropy of the logits kept at `_predicting` positions against the next tokens (the mean
    over labelled tokens, as the model's own loss). reranker: listwise softmax cross-entropy over each group's
    logits (B, G), the positive at index 0."""
    if cfg.task == "sft":
        keep = _predicting(batch["labels"])
        targets = batch["labels"][:, keep + 1].to(out.logits.device)  # (B, K)
        return torch.nn.functional.cross_entropy(out.logits.flatten(0, 1).float(), targets.flatten(),
                                                 ignore_index=IGNORE)
    logits = out.logits.view(-1, batch["group_size"]).float()
    return torch.nn.functional.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long,
                                                                   device=logits.device))


def model_inputs(cfg: TrainJobConfig, batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    if cfg.task == "sft":
        # Logits only where the loss needs them: at every position, the LM head over a 49k-token vocabulary was
        # almost half of a bf16 SmolLM2-135M step on CPU, and an answer is a few tokens after hundreds of prompt.
        keep = _predicting(batch["labels"])
        assert keep.numel() > 0, "a micro-batch with no labelled token (empty answers are dropped before)"
        return {"input_ids": batch["input_ids"].to(device), "attention_mask": batch["attention_mask"].to(device),
                "logits_to_keep": keep.to(device)}
    return {k: batch[k].to(device) for k in ("input_ids", "attention_mask", "token_type_ids")}


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
