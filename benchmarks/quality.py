"""Retrieval quality on SciFact: dev nDCG@10 and recall@100 of dense, BM25 and hybrid search, alone and reranked by
the cross-encoder Ragline trains on the train qrels (fused with the retriever's order as served, and alone).

    .venv/bin/python benchmarks/quality.py [--dataset ../shared/datasets/scifact] [--runs 1] [--rerank-top 50]

Each step is the `ragline` command a user runs, on a local Ray this script starts, in a fresh storage root:

    ragline train reranker --in-process --config deployments/jobs/reranker.yaml --set reranker.beir_dir=DATASET \\
        --set seed=S            (ingests the corpus once into <storage>/eval/scifact, then trains: ≈25 min)
    ragline models promote reranker N
    ragline eval retrieval --dataset DATASET --split dev --rerank --rerank-top 50    (≈16 min)

With --runs R, R rerankers are trained (seeds 0..R-1) and each is evaluated; the summary is the median over runs.
Writes benchmarks/results/quality-<date>.json and regenerates the README's quality table from it
(benchmarks/readme_tables.py). Reranking reorders each mode's top `rerank_top`, so recall@100 is the retriever's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

RAGLINE = str(Path(sys.executable).parent / "ragline")
MODES = ("dense", "lexical", "hybrid")


def ragline(store: Path, address: str, *args: str) -> dict[str, Any]:
    cmd = [RAGLINE, "--storage", str(store), "--address", address, *args, "--json"]
    print("$", " ".join(cmd[0:1] + cmd[5:]), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=4 * 3600)  # progress goes to stderr
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with status {done.returncode}")
    return dict(json.loads(done.stdout))


def one_run(store: Path, address: str, dataset: Path, seed: int, rerank_top: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    run = ragline(store, address, "train", "reranker", "--in-process", "--config",
                  str(ROOT / "deployments" / "jobs" / "reranker.yaml"), "--set", f"reranker.beir_dir={dataset}",
                  "--set", f"seed={seed}", "--set", f"name=quality-{seed}")
    train_s = time.perf_counter() - t0
    assert run["state"] == "succeeded", run
    version = run["model"]["version"]
    ragline(store, address, "models", "promote", "reranker", str(version))
    t0 = time.perf_counter()
    result = ragline(store, address, "eval", "retrieval", "--dataset", str(dataset), "--split", "dev", "--rerank",
                     "--rerank-top", str(rerank_top))
    return {"seed": seed, "reranker": result["reranker"], "train_s": round(train_s, 1),
            "eval_s": round(time.perf_counter() - t0, 1), "train_counts": run["counts"],
            "train_metrics": run["metrics"], "result": result}


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mode and variant, the median over runs of each metric."""
    names = runs[0]["result"]["modes"]
    return {name: {metric: round(statistics.median(r["result"]["modes"][name][metric] for r in runs), 4)
                   for metric in names[name]} for name in names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "datasets" / "scifact")
    ap.add_argument("--runs", type=int, default=1, help="rerankers trained and evaluated (seeds 0..runs-1)")
    ap.add_argument("--rerank-top", type=int, default=50)
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default benchmarks/results/quality-<date>.json, and the README is updated)")
    args = ap.parse_args(argv)
    dataset = args.dataset.resolve()
    if not (dataset / "corpus.jsonl").is_file():
        raise SystemExit(f"{dataset} is not a BEIR dataset (no corpus.jsonl)")
    import ray

    from app.raycluster import NAMESPACE

    ray.init(address="local", num_cpus=os.cpu_count(), namespace=NAMESPACE, include_dashboard=False,
             log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl-quality-") as tmp:
        runs = [one_run(Path(tmp) / "store", address, dataset, seed, args.rerank_top) for seed in range(args.runs)]
    ray.shutdown()
    first = runs[0]["result"]
    today = dt.date.today().isoformat()
    results = {
        "benchmark": "quality", "date": today,
        "command": f"benchmarks/quality.py --runs {args.runs} --rerank-top {args.rerank_top}",
        "dataset": first["dataset"], "split": first["split"], "queries": first["queries"],
        "rerank_top": args.rerank_top, "retriever_weight": first["retriever_weight"], "runs": runs,
        "median": summarise(runs), "wall_s": round(time.perf_counter() - t0, 1),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
    }
    for mode in MODES:
        m = results["median"]
        print(f"{mode:8s} nDCG@10 {m[mode]['ndcg@10']:.4f} → fused {m[mode + '+rerank']['ndcg@10']:.4f} "
              f"(cross-encoder alone {m[mode + '+ce']['ndcg@10']:.4f}); recall@100 {m[mode]['recall@100']:.4f}")
    readme_tables.save("quality", results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
