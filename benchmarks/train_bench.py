"""Training benchmark: the scaling efficiency of Ragline's TorchTrainer SFT job on two CPU workers (DDP, FSDP2,
DeepSpeed ZeRO-2) against a plain single-process PyTorch loop on the same model, data, global batch and step, in
one run.

The plain loop gets every core (torch threads = all CPUs); each Ray worker gets its share (one core), so the ratio
is what data parallelism costs on this machine: the goal is overhead, not speed-up. Both sides compute the same
step (Ragline's `collate_lm` with the job's `pad_to_multiple_of`, `model_inputs` / `loss`, its fused AdamW
`strategies.adamw`, clipping, `--grad-accum` micro-batches per optimizer step, the DDP side skipping the all-reduce
inside the window with `no_sync`), so only distribution differs.
Throughput is wall-clock: real (unpadded) tokens of optimizer steps 2 .. N-1 over the time from the end of step 1
to the end of step N-1, data loading, collectives and metric logging included (for the Ray side, the times its
MLflow metrics were logged at; step N, which saves the checkpoint, is left out and its save time reported
apart). Median of --repeats runs. Writes benchmarks/results/train-<date>.json and regenerates README's table.

    python benchmarks/train_bench.py [--steps 5] [--grad-accum 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import tracking  # noqa: E402
from app.storage import Storage  # noqa: E402
from app.train.config import TrainJobConfig  # noqa: E402
from app.train.run import run_training  # noqa: E402
from app.train.sft_data import SFTTokenize, collate_lm  # noqa: E402
from app.train.strategies import adamw  # noqa: E402
from app.train.tasks import TASKS  # noqa: E402
from benchmarks.readme_tables import publish  # noqa: E402

SFT = TASKS["sft"]  # the task this benchmark measures

SAMPLE = ROOT / "deployments" / "jobs" / "data" / "sft-sample.jsonl"
# The 41-record sample repeated, so that an epoch outlasts the measured steps: Ray Data starts each epoch of a
# streaming split with a barrier across workers (about 1 s here), which on 41 records fell inside every step.
COPIES = 10
WORKERS = 2
PER_WORKER_BATCH = 4
STRATEGIES: dict[str, dict[str, Any]] = {"ddp": {"strategy": "ddp"}, "fsdp": {"strategy": "fsdp"},
                                         "deepspeed-zero2": {"strategy": "deepspeed", "zero_stage": 2}}


def plain_loop(cfg: TrainJobConfig) -> dict[str, float]:
    """What a user writes without Ray: tokenize, one model, AdamW, a loop over micro-batches of the global size."""
    torch.set_num_threads(os.cpu_count() or 1)
    path = SFT.resolve_model(cfg)
    tok = SFTTokenize(path, cfg.sft.model_dump())
    lines = [line for file in cfg.sft.paths for line in Path(file).read_text().splitlines() if line.strip()]
    rows = tok({"record": np.array(lines), "source": np.array(["x"] * len(lines))})
    model = SFT.build_model(cfg, path)
    opt = adamw(list(model.parameters()), cfg)
    size, cpu = WORKERS * cfg.batch_size, torch.device("cpu")
    ends, tokens, micro = [], [], 0
    assert cfg.max_steps is not None
    for _ in range(cfg.max_steps):
        step_tokens = 0
        for _ in range(cfg.grad_accum):
            start = (micro * size) % (len(lines) - size)
            micro += 1
            batch = collate_lm({"input_ids": np.array(rows["input_ids"][start:start + size], dtype=object),
                                "labels": np.array(rows["labels"][start:start + size], dtype=object)},
                               tok.tokenizer.pad_token_id or 0, cfg.sft.pad_to_multiple_of)
            (SFT.loss(model(**SFT.model_inputs(cfg, batch, cpu)), batch) / cfg.grad_accum).backward()
            step_tokens += int(batch["attention_mask"].sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm or 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        ends.append(time.perf_counter())
        tokens.append(step_tokens)
    return {"tokens_per_s": sum(tokens[1:-1]) / (ends[-2] - ends[0])}


def ray_run(cfg: TrainJobConfig, storage_root: str) -> dict[str, float]:
    record = run_training(cfg, Storage(storage_root))
    client = tracking.client(record["mlflow"]["uri"])
    run_id = record["mlflow"]["run_id"]
    logged = {m.step: m for m in client.get_metric_history(run_id, "tokens")}
    assert cfg.max_steps is not None
    last = cfg.max_steps - 1  # step max_steps saves the checkpoint: left out, reported apart
    tokens = sum(logged[s].value for s in range(2, last + 1))
    seconds = (logged[last].timestamp - logged[1].timestamp) / 1000  # MLflow timestamps are ms
    saves = [m.value for m in client.get_metric_history(run_id, "checkpoint_save_s")]
    return {"tokens_per_s": tokens / seconds, "checkpoint_save_s": statistics.median(saves),
            "wall_s": record["train_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=5, help="Optimizer steps per run (at least 4)")
    ap.add_argument("--grad-accum", type=int, default=4, help="Micro-batches per optimizer step")
    ap.add_argument("--repeats", type=int, default=3, help="Runs per configuration; the median is reported")
    args = ap.parse_args()
    assert args.steps >= 4, "steps 2 .. N-1 are measured: at least two of them"
    ray.init(address="local", namespace="ragline", include_dashboard=False, log_to_driver=False)
    names = ["plain", *STRATEGIES]
    results: dict[str, list[dict[str, float]]] = {k: [] for k in names}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sft.jsonl"
        data.write_text(SAMPLE.read_text() * COPIES)
        base = {"task": "sft", "model": args.model, "sft": {"paths": [str(data)], "max_length": 256},
                "num_workers": WORKERS, "batch_size": PER_WORKER_BATCH, "grad_accum": args.grad_accum,
                "max_steps": args.steps, "epochs": 100, "lr": 2e-5, "max_grad_norm": 1.0,
                "checkpoint_every": args.steps}
        for r in range(args.repeats):
            for name in names:
                cfg = TrainJobConfig.model_validate(base | STRATEGIES.get(name, {}) | {"name": f"{name}-{r}"})
                out = plain_loop(cfg) if name == "plain" else ray_run(cfg, f"{tmp}/{name}")
                results[name].append(out)
                print(f"  repeat {r + 1} {name:16s} {out['tokens_per_s']:8.1f} tokens/s", flush=True)
    summary: dict[str, dict[str, float]] = {name: {k: statistics.median(o[k] for o in outs) for k in outs[0]}
                                            for name, outs in results.items()}
    plain = summary["plain"]["tokens_per_s"]
    for s in summary.values():
        s["vs_plain"] = round(s["tokens_per_s"] / plain, 3)
    print(f"\nSFT of {args.model}, {WORKERS} CPU workers x micro-batch {PER_WORKER_BATCH} vs one process x "
          f"{WORKERS * PER_WORKER_BATCH}, {args.grad_accum} micro-batches a step (median of {args.repeats}):")
    for name, s in summary.items():
        save = f"  checkpoint save {s['checkpoint_save_s']:.2f} s" if "checkpoint_save_s" in s else ""
        print(f"  {name:16s} {s['tokens_per_s']:8.1f} tokens/s  {s['vs_plain']:5.2f}x plain{save}")
    result = {"date": dt.date.today().isoformat(), "model": args.model, "workers": WORKERS,
              "micro_batch": PER_WORKER_BATCH, "grad_accum": args.grad_accum, "steps": args.steps,
              "repeats": args.repeats, "cpus": os.cpu_count(), "command": "python benchmarks/train_bench.py",
              "runs": results, "summary": summary}
    publish("train", result)


if __name__ == "__main__":
    main()
