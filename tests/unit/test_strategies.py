"""The DDP and FSDP2 strategies on two real gloo ranks (torch.distributed, no Ray): DDP all-reduces gradients once
per optimizer step, not once per micro-batch; FSDP2 gathers parameters once per step unless asked to reshard after
every forward; the ranks end with the same weights."""

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from app.train.config import TrainJobConfig
from app.train.strategies import FSDP, Strategy

GRAD_ACCUM, STEPS = 4, 2


class Tiny(torch.nn.Module):
    """One bucket's worth of parameters: DDP all-reduces them in one call."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).pow(2).mean()


def _rank(rank: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)  # the same initial weights on both ranks (DDP would broadcast rank 0's anyway)
    cfg = TrainJobConfig.model_validate({"task": "sft", "sft": {"paths": ["x.jsonl"]}, "num_workers": 2,
                                         "grad_accum": GRAD_ACCUM, "lr": 0.1, "warmup_steps": 0})
    strategy = Strategy(cfg, Tiny(), total_steps=STEPS, device=torch.device("cpu"))
    assert strategy.optimizer.defaults["fused"]  # one vectorised pass per tensor (strategies.adamw)
    allreduces: list[int] = []

    # DDP checks the hook's annotations as objects (so no `from __future__ import annotations` in this file)
    def count(group: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        allreduces.append(bucket.index())
        return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None: the default group

    strategy.model.register_comm_hook(None, count)  # type: ignore[operator]
    torch.manual_seed(1 + rank)  # each rank its own data
    stepped = [strategy.backward(strategy.forward({"x": torch.randn(4, 8)}, micro), micro)
               for micro in range(GRAD_ACCUM * STEPS)]
    assert stepped == ([False] * (GRAD_ACCUM - 1) + [True]) * STEPS
    assert allreduces == [0] * STEPS, f"rank {rank}: {len(allreduces)} all-reduces for {STEPS} optimizer steps"
    weights = torch.cat([p.detach().flatten() for p in strategy.module.parameters()])
    both = [torch.zeros_like(weights) for _ in range(2)]
    dist.all_gather(both, weights)
    assert torch.equal(both[0], both[1])
    # Both ranks are done with gloo here; leave without tearing it down: a rank destroying the group (or exiting
    # with it alive) while its peer still closes its side aborted one run in about ten ("terminate called without
    # an active exception", SIGABRT), which fails mp.spawn.
    dist.barrier()
    os._exit(0)


def test_ddp_all_reduces_once_per_optimizer_step_not_per_micro_batch(tmp_path: Path) -> None:
    # a forward outside no_sync makes its backward all-reduce even under no_sync: this counted 8, not 2
    mp.spawn(_rank, args=(str(tmp_path / "store"),), nprocs=2)


class Blocks(torch.nn.Module):
    """Two blocks where FSDP looks for a causal LM's decoder layers (`model.layers`): two parameter groups."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.model.layers:
            x = layer(x)
        return x.pow(2).mean()


def _fsdp_rank(rank: int, store: str, reshard: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    cfg = TrainJobConfig.model_validate({"task": "sft", "sft": {"paths": ["x.jsonl"]}, "num_workers": 2,
                                         "strategy": "fsdp", "reshard_after_forward": reshard,
                                         "grad_accum": GRAD_ACCUM, "lr": 0.1, "warmup_steps": 0})
    strategy = FSDP(cfg, Blocks(), total_steps=STEPS, device=torch.device("cpu"))
    gathers = 0
    all_gather = dist.all_gather_single  # what FSDP2's default all-gather calls, looked up on each call

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal gathers
        gathers += 1
        return all_gather(*args, **kwargs)

    dist.all_gather_single = counted  # type: ignore[assignment]
    torch.manual_seed(1 + rank)
    for micro in range(GRAD_ACCUM * STEPS):
        strategy.backward(strategy.forward({"x": torch.randn(4, 8)}, micro), micro)
    # two blocks: each gathered once per step kept gathered, or in every forward and again in every backward
    expected = 2 * STEPS if not reshard else 2 * 2 * GRAD_ACCUM * STEPS
    assert gathers == expected, f"rank {rank}: {gathers} all-gathers for {STEPS} steps (reshard {reshard})"
    dist.all_gather_single = all_gather
    weights = strategy.full_state_dict()  # a collective; rank 0's
    if rank == 0:
        torch.save(weights, f"{store}.weights.pt")
    dist.barrier()
    os._exit(0)  # as _rank


def test_fsdp_gathers_parameters_once_per_optimizer_step_unless_resharding(tmp_path: Path) -> None:
    for reshard in (False, True):
        mp.spawn(_fsdp_rank, args=(str(tmp_path / f"store-{reshard}"), reshard), nprocs=2)
    kept, resharded = (torch.load(tmp_path / f"store-{r}.weights.pt") for r in (False, True))
    assert kept.keys() == resharded.keys() and all(torch.equal(kept[k], resharded[k]) for k in kept)
