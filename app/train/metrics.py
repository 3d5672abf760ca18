"""Training throughput and utilisation: tokens/s and samples/s (global and per worker), MFU, peak memory.

FLOPs per token follow the PaLM paper's appendix B: 6·N for the weights (forward + backward, N = parameters
outside the embeddings) plus 12·L·d·T for attention (L layers, d model width, T sequence length).
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass, field
from typing import Any, Required, TypedDict, cast

import torch
import torch.distributed as dist

from app.train.config import TrainJobConfig

# Dense bf16 peak FLOP/s by GPU name fragment (vendor data sheets); CPUs have no entry: give
# peak_flops_per_worker in the job config to get an MFU there.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10G": 70e12}


@dataclass
class Window:
    """What one worker did since the last report."""

    loss_sum: float = 0.0
    micro_batches: int = 0
    tokens: int = 0  # real (unpadded) tokens
    samples: int = 0
    seq_len_sum: int = 0  # padded length of each micro-batch, for the attention FLOPs
    seconds: float = 0.0

    def add(self, loss: float, tokens: int, samples: int, seq_len: int, seconds: float) -> None:
        self.loss_sum += loss
        self.micro_batches += 1
        self.tokens += tokens
        self.samples += samples
        self.seq_len_sum += seq_len
        self.seconds += seconds


class StepMetrics(TypedDict, total=False):
    """`StepReport.metrics()`: its fields that are set, with the same meanings and units."""

    step: Required[int]
    epoch: Required[int]
    loss: Required[float]
    lr: Required[float]
    tokens_per_s: Required[float]
    samples_per_s: Required[float]
    tokens_per_s_per_worker: Required[list[float]]
    samples_per_s_per_worker: Required[list[float]]
    tokens: Required[int]
    peak_memory_mb: Required[float]  # MiB
    compute_s: Required[float]
    mfu: float
    attempt_start_step: Required[int]
    worker_nodes: list[str]  # always reported; the driver moves it out of the run record's `metrics`
    checkpoint_save_s: float


@dataclass
class StepReport:
    """One optimizer step, all workers combined: what Ray Train and MLflow get (`metrics()`), and the last one is
    the run record's `metrics`."""

    step: int
    epoch: int
    loss: float
    lr: float
    tokens_per_s: float
    samples_per_s: float
    tokens_per_s_per_worker: list[float]
    samples_per_s_per_worker: list[float]
    tokens: int
    peak_memory_mb: float
    compute_s: float  # forward and backward of this step, on the slowest worker
    mfu: float | None = None  # None: the device's peak FLOP/s is unknown
    attempt_start_step: int = 0  # where this attempt began (0, or a checkpoint's step)
    worker_nodes: list[str] = field(default_factory=list)  # the Ray node each rank runs on
    checkpoint_save_s: float | None = None  # set on a step that saved a checkpoint

    def metrics(self) -> StepMetrics:
        """As Ray Train's `report` takes it: the fields that are set."""
        # StepMetrics names the fields of this class; the ones left out are those that are None
        return cast(StepMetrics, {k: v for k, v in asdict(self).items() if v is not None})


def non_embedding_params(model: torch.nn.Module) -> int:
    embedding = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    return sum(p.numel() for p in model.parameters()) - embedding


def flops_per_token(model: torch.nn.Module, n_params: int, seq_len: float) -> float:
    config: Any = getattr(model, "config", None)
    layers = getattr(config, "num_hidden_layers", 0)
    width = getattr(config, "hidden_size", 0)
    return 6.0 * n_params + 12.0 * layers * width * seq_len


def peak_flops(cfg: TrainJobConfig, device: torch.device) -> float | None:
    if cfg.peak_flops_per_worker:
        return cfg.peak_flops_per_worker
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        return next((v for k, v in PEAK_BF16.items() if k in name), None)
    return None


def peak_memory_mb() -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # ru_maxrss is KiB on Linux


def gather(w: Window, step: int, lr: float, epoch: int, n_params: int, model: torch.nn.Module,
           cfg: TrainJobConfig, device: torch.device) -> StepReport:
    """All workers' windows combined (a collective: every rank calls it). Rank 0's is what Ray Train keeps."""
    mine = torch.tensor([w.loss_sum, w.micro_batches, w.tokens, w.samples, w.seq_len_sum, w.seconds,
                         peak_memory_mb()], dtype=torch.float64, device=device)  # NCCL gathers CUDA tensors
    if dist.is_initialized():
        parts = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, mine)
        table = torch.stack(parts).cpu()
    else:
        table = mine.unsqueeze(0).cpu()
    loss_sum, micro, tokens, samples, seq_sum, seconds, mem = (table[:, i] for i in range(7))
    wall = float(seconds.max()) or 1e-9  # workers run in lock-step: the slowest sets the pace
    per_worker_tps = (tokens / seconds.clamp(min=1e-9)).tolist()
    seq_len = float(seq_sum.sum() / micro.sum().clamp(min=1))
    fpt = flops_per_token(model, n_params, seq_len)
    peak = peak_flops(cfg, device)
    return StepReport(
        step=step,
        epoch=epoch,
        loss=float(loss_sum.sum() / micro.sum().clamp(min=1)),
        lr=lr,
        tokens_per_s=float(tokens.sum()) / wall,
        samples_per_s=float(samples.sum()) / wall,
        tokens_per_s_per_worker=[round(x, 1) for x in per_worker_tps],
        samples_per_s_per_worker=[round(x, 2) for x in (samples / seconds.clamp(min=1e-9)).tolist()],
        tokens=int(tokens.sum()),
        peak_memory_mb=round(float(mem.max()), 1),
        compute_s=wall,
        mfu=float(tokens.sum()) / wall / len(per_worker_tps) * fpt / peak if peak else None,
    )
