"""Training benchmark: SFT tokens/s of Ragline's TorchTrainer job (two CPU workers; ddp, fsdp, deepspeed ZeRO-2)
against a plain single-process PyTorch loop on the same model, data and global batch, in one run.

The plain loop gets every core (torch threads = all CPUs); each Ray worker gets its share (cpus_per_worker), so
the ratio is the scaling efficiency of data-parallel training on this machine. Throughput is the median over
the steps after the first (warm-up), in real (unpadded) tokens per second; the checkpoint save time is the
median over a run's checkpoints. Prints a table and the ratios; writes benchmarks/results/train.json.

    python benchmarks/train_bench.py [--steps 8] [--repeats 3] [--model SmolLM2-135M-Instruct]
"""

from __future__ import annotations

import argparse
import json
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
from app.train.task import build_model, resolve_model  # noqa: E402

DATA = ROOT / "deployments" / "jobs" / "data" / "sft-sample.jsonl"
WORKERS = 2
PER_WORKER_BATCH = 4


def plain_loop(cfg: TrainJobConfig, steps: int) -> dict[str, float]:
    """What a user writes without Ray: tokenize, one model, AdamW, a loop over batches of the global size."""
    torch.set_num_threads(os.cpu_count() or 1)
    path = resolve_model(cfg)
    tok = SFTTokenize(path, cfg.sft.model_dump())
    lines = [line for line in DATA.read_text().splitlines() if line.strip()]
    rows = tok({"record": np.array(lines), "source": np.array(["x"] * len(lines))})
    model = build_model(cfg, path)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    batch_size = WORKERS * PER_WORKER_BATCH
    rates = []
    for step in range(steps):
        start = (step * batch_size) % (len(lines) - batch_size)
        batch = collate_lm({"input_ids": np.array(rows["input_ids"][start:start + batch_size], dtype=object),
                            "labels": np.array(rows["labels"][start:start + batch_size], dtype=object)},
                           tok.tokenizer.pad_token_id or 0)
        t0 = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        rates.append(int(batch["attention_mask"].sum()) / (time.perf_counter() - t0))
    return {"tokens_per_s": statistics.median(rates[1:])}


def ray_run(cfg: TrainJobConfig, storage_root: str) -> dict[str, float]:
    record = run_training(cfg, Storage(storage_root))
    client = tracking.client(record["mlflow"]["uri"])
    run_id = record["mlflow"]["run_id"]
    tps = [m.value for m in client.get_metric_history(run_id, "tokens_per_s") if m.step > 1]
    saves = [m.value for m in client.get_metric_history(run_id, "checkpoint_save_s")]
    return {"tokens_per_s": statistics.median(tps), "checkpoint_save_s": statistics.median(saves),
            "wall_s": record["train_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=8, help="Optimizer steps per run")
    ap.add_argument("--repeats", type=int, default=3, help="Runs per configuration; the median is reported")
    args = ap.parse_args()
    ray.init(address="local", namespace="ragline", include_dashboard=False, log_to_driver=False)
    base = {"task": "sft", "model": args.model, "sft": {"paths": [str(DATA)], "max_length": 256},
            "num_workers": WORKERS, "batch_size": PER_WORKER_BATCH, "max_steps": args.steps, "epochs": 10,
            "lr": 2e-5, "checkpoint_every": max(1, args.steps // 2)}
    configs = {"plain": None, "ddp": {"strategy": "ddp"}, "fsdp": {"strategy": "fsdp"},
               "deepspeed-zero2": {"strategy": "deepspeed", "zero_stage": 2}}
    results: dict[str, list[dict[str, float]]] = {k: [] for k in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, extra in configs.items():
                cfg = TrainJobConfig.model_validate(base | (extra or {}) | {"name": f"{name}-{r}"})
                out = plain_loop(cfg, args.steps) if extra is None else ray_run(cfg, f"{tmp}/{name}")
                results[name].append(out)
                print(f"  repeat {r + 1} {name:16s} {out['tokens_per_s']:8.1f} tokens/s", flush=True)
    summary: dict[str, Any] = {name: {k: statistics.median(o[k] for o in outs) for k in outs[0]}
                               for name, outs in results.items()}
    plain = summary["plain"]["tokens_per_s"]
    print(f"\nSFT of {args.model}, {WORKERS} CPU workers × batch {PER_WORKER_BATCH} vs one process × batch "
          f"{WORKERS * PER_WORKER_BATCH} (median of {args.repeats}):")
    for name, s in summary.items():
        ratio = s["tokens_per_s"] / plain
        save = f"  checkpoint save {s['checkpoint_save_s']:.2f} s" if "checkpoint_save_s" in s else ""
        print(f"  {name:16s} {s['tokens_per_s']:8.1f} tokens/s  {ratio:5.2f}× plain{save}")
        s["vs_plain"] = ratio
    out = ROOT / "benchmarks" / "results" / "train.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "steps": args.steps, "repeats": args.repeats,
                               "runs": results, "summary": summary}, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
