"""How the model is distributed across workers: DDP, FSDP2 or DeepSpeed ZeRO, behind one small interface.

Each strategy wraps the model, owns the optimizer and schedule, takes one optimizer step per `grad_accum`
micro-batches, and saves/loads its whole training state into one directory that may hold every rank's files
(Ray Train merges the workers' checkpoint directories): rank-specific file names, so nothing collides.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from pathlib import Path
from typing import Any, Required, TypedDict

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from app import hardware
from app.errors import UserError
from app.train.config import TrainJobConfig


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step `step`: linear warm-up over `warmup` steps, then
    cosine decay to zero at `total`."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def schedule(cfg: TrainJobConfig, total_steps: int) -> Any:
    return functools.partial(lr_factor, warmup=cfg.warmup_steps, total=total_steps)


def adamw(params: list[torch.nn.Parameter], cfg: TrainJobConfig) -> torch.optim.AdamW:
    """torch's fused AdamW (CPU since torch 2.4, and CUDA): one vectorised pass over each parameter's tensors instead
    of a loop of small ops per tensor. Clipping and a step of SmolLM2-135M's parameters on this 2-core machine:
    0.14 s against 0.55-0.59 s on one thread (what each DDP worker has), 0.10-0.13 against 0.36-0.42 on two."""
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def autocast_dtype(cfg: TrainJobConfig, device: torch.device) -> torch.dtype | None:
    """bf16 where asked, or under `auto` on a GPU that has it natively (`app.hardware`); None: fp32. On CPU `auto`
    is fp32 whatever the CPU: `precision: bf16` asks for autocast there."""
    if cfg.precision == "bf16":
        return torch.bfloat16
    if cfg.precision == "auto" and device.type == "cuda" and hardware.detect().native_bf16("cuda"):
        return torch.bfloat16
    return None


def transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks FSDP shards one by one (decoder layers of causal LMs, encoder layers of BERTs)."""
    for path in ("model.layers", "base_model.model.model.layers", "bert.encoder.layer", "roberta.encoder.layer",
                 "encoder.layer"):
        node: Any = model
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, torch.nn.ModuleList):
            return list(node)
    raise UserError(f"fsdp: no transformer block list found in {type(model).__name__}")


class Strategy:
    """DDP: every rank holds the whole model; gradients are all-reduced in backward."""

    def __init__(self, cfg: TrainJobConfig, model: torch.nn.Module, total_steps: int, device: torch.device):
        self.cfg, self.device = cfg, device
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.amp = autocast_dtype(cfg, device)
        self.module = model  # the unwrapped model (its state dict is what gets exported)
        self.model = self.wrap(model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = adamw(params, cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule(cfg, total_steps))

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        # what ray.train.torch.prepare_model does, without needing a Ray Train session (so that the unit tests
        # can run it on a plain gloo group)
        model.to(self.device)
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return model
        return DistributedDataParallel(model, device_ids=[self.device] if self.device.type == "cuda" else None)

    def boundary(self, micro: int) -> bool:
        """Whether micro-batch `micro` (0-based, within the epoch) ends an accumulation window."""
        return (micro + 1) % self.cfg.grad_accum == 0

    def forward(self, batch: dict[str, torch.Tensor], micro: int) -> Any:
        # DDP skips the gradient all-reduce inside an accumulation window, and decides so in forward: a backward
        # under no_sync after a forward outside it all-reduces anyway (4x the traffic at grad_accum 4: 0.82 of
        # the plain loop on 2 CPU workers, against 0.94 with the forward under no_sync)
        model = self.model
        sync: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if isinstance(model, DistributedDataParallel) and not self.boundary(micro):
            sync = model.no_sync()
        with sync, torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            return model(**batch)

    def backward(self, loss: torch.Tensor, micro: int) -> bool:
        """Backward one micro-batch; step the optimizer on the last of `grad_accum`. True if it stepped."""
        (loss / self.cfg.grad_accum).backward()
        if not self.boundary(micro):
            return False
        if self.cfg.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return True

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    def save(self, directory: Path) -> None:
        if self.rank == 0:
            torch.save({"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "scheduler": self.scheduler.state_dict()}, directory / "state.pt")

    def load(self, directory: Path) -> None:
        state = torch.load(directory / "state.pt", map_location="cpu", weights_only=True)
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The whole model's weights on rank 0 (None elsewhere); every rank must call it."""
        return {k: v.detach().cpu() for k, v in self.module.state_dict().items()} if self.rank == 0 else None


class FSDP(Strategy):
    """FSDP2: `fully_shard` on each transformer block, then the root; parameters, gradients and optimizer state
    are sharded across ranks. Checkpoints are torch.distributed.checkpoint shards (one file per rank)."""

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        model.to(self.device)
        mesh = init_device_mesh(self.device.type, (dist.get_world_size(),))
        mp = MixedPrecisionPolicy(param_dtype=self.amp, reduce_dtype=torch.float32) if self.amp else \
            MixedPrecisionPolicy()
        reshard = self.cfg.reshard_after_forward
        for block in transformer_blocks(model):
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        self.amp = None  # FSDP casts parameters itself; no autocast on top
        return model

    def backward(self, loss: torch.Tensor, micro: int) -> bool:
        # reduce-scatter gradients only on the micro-batch that ends an accumulation window; without
        # reshard_after_forward the gathered parameters also stay until then, so the next micro-batch's forward
        # gathers nothing (one all-gather per optimizer step instead of two per micro-batch)
        boundary = self.boundary(micro)
        self.model.set_requires_gradient_sync(boundary)  # type: ignore[operator]
        if not self.cfg.reshard_after_forward:
            self.model.set_reshard_after_backward(boundary)  # type: ignore[operator]
        return super().backward(loss, micro)

    def save(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(directory / "fsdp"))
        if self.rank == 0:
            torch.save(self.scheduler.state_dict(), directory / "scheduler.pt")

    def load(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        dcp.load({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(directory / "fsdp"))  # in place
        set_state_dict(self.model, self.optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)
        self.scheduler.load_state_dict(torch.load(directory / "scheduler.pt", weights_only=True))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full: Any = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return full if self.rank == 0 else None


class Offload(TypedDict):
    """DeepSpeed's `offload_optimizer` / `offload_param` config."""

    device: str  # "cpu"
    pin_memory: bool


class ZeroConfig(TypedDict, total=False):
    """DeepSpeed's `zero_optimization` config, the keys Ragline sets."""

    stage: Required[int]  # ZeRO stage 1, 2 or 3
    offload_optimizer: Offload
    offload_param: Offload


class DeepSpeed(Strategy):
    """DeepSpeed ZeRO 1/2/3 with optional CPU offload; the engine owns accumulation, clipping and the schedule.
    Checkpoints are DeepSpeed's own per-rank files under `ds/`."""

    def __init__(self, cfg: TrainJobConfig, model: torch.nn.Module, total_steps: int, device: torch.device):
        if device.type == "cpu":
            # DeepSpeed picks its accelerator at import from this variable: CPU workers need "cpu" (gloo).
            os.environ.setdefault("DS_ACCELERATOR", "cpu")
        import deepspeed

        if device.type == "cpu":
            # Its CPU comm backend compiles a shared-memory all-reduce op (C++, into the torch extensions cache)
            # when it starts: 26 s on 2 cores on every fresh machine, for tensor-parallel inference only; training
            # never calls it. DeepSpeed keeps this dict once probed, and skips an op marked incompatible.
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

        self.cfg, self.device = cfg, device
        self.rank = dist.get_rank()
        self.amp = autocast_dtype(cfg, device)
        self.module = model
        zero: ZeroConfig = {"stage": cfg.zero_stage}
        if cfg.offload_optimizer:
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": device.type == "cuda"}
        if cfg.offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": device.type == "cuda"}
        ds_config = {
            "train_micro_batch_size_per_gpu": cfg.batch_size,
            "gradient_accumulation_steps": cfg.grad_accum,
            "gradient_clipping": cfg.max_grad_norm or 0.0,
            "zero_optimization": zero,
            "bf16": {"enabled": self.amp is not None},
            # torch's AdamW is our optimizer on every device (DeepSpeedCPUAdam would compile a C++ op on first use)
            "zero_force_ds_cpu_optimizer": False,
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30,
            "wall_clock_breakdown": False,
        }
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = adamw(params, cfg)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(cfg, total_steps))
        self.model, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config, dist_init_required=False)
        self.amp = None  # the engine casts to bf16 itself

    def backward(self, loss: torch.Tensor, micro: int) -> bool:
        engine: Any = self.model
        engine.backward(loss)
        boundary = bool(engine.is_gradient_accumulation_boundary())
        engine.step()
        return boundary

    def save(self, directory: Path) -> None:
        self.model.save_checkpoint(str(directory / "ds"), tag="state")  # type: ignore[operator]

    def load(self, directory: Path) -> None:
        self.model.load_checkpoint(str(directory / "ds"), tag="state")  # type: ignore[operator]

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        import deepspeed

        module: Any = self.model.module
        params = list(module.parameters()) if self.cfg.zero_stage == 3 else []
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=bool(params)):
            if self.rank != 0:
                return None
            return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


STRATEGIES: dict[str, type[Strategy]] = {"ddp": Strategy, "fsdp": FSDP, "deepspeed": DeepSpeed}
