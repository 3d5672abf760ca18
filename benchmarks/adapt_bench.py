"""`ragline adapt` on SciFact's corpus alone (no qrels, no queries), judged on SciFact's dev qrels, which adapt
never reads; side by side in one run with what a user without labels has otherwise:

- the retriever alone (dense, BM25, hybrid: nothing trained);
- the reranker `ragline train reranker` makes without labels today (pseudo-queries: a chunk's title or first
  sentence, `reranker.self_queries`), trained the same way on as many queries as adapt kept;
- adapt's reranker, trained on the synthetic questions (SmolLM2 on vLLM through Ray Data, round-trip filtered);
- adapt's embedder trained on the same questions, taught by adapt's reranker (GPL's MarginMSE over the mined hard
  negatives; what adapt does when the gate promoted that reranker): the corpus re-embedded by it (dense, BM25,
  hybrid), and with adapt's reranker on top;
- the same embedder trained contrastively on the same questions, without a teacher (what adapt does when no
  reranker is promoted: the positives are the only labels), judged by the gate against the taught one's index.
  Each embedder is measured whatever the gate decided: a refused candidate index is published in the benchmark's
  own store to be measured.

Each reranker is scored as served: the hybrid retriever's top `serve.reranker.candidates` reordered by the
cross-encoder fused with the retriever's order ("hybrid+rerank"). The qrels-trained reranker's figure is quoted
from the newest benchmarks/results/quality-*.json (benchmarks/quality.py trains it: 25 minutes), not rerun.

    .venv/bin/python benchmarks/adapt_bench.py [--chunks 800] [--dataset ../shared/datasets/scifact] \
        [--writer prompted|qgen|DIR]

`--writer qgen`: the question writer is first trained here by `ragline train qgen` (deployments/jobs/qgen.yaml:
SmolLM2 fine-tuned on SQuAD's train articles; bf16 where the CPU has it natively), and adapt writes with it; a
directory: a writer that job trained before; `prompted` (the default): the packaged SmolLM2, prompted.

Writes benchmarks/results/adapt-<date>-<cpu>.json (with each stage's time on this machine) and the table in
docs/benchmarks.md. One run of each (training is minutes on 2 cores): the quality figures are one seed's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

if TYPE_CHECKING:
    from app.storage import Storage


def evaluate(dataset: Path, root: str, cfg: Any, reranker: str | None) -> dict[str, Any]:
    from app.eval.retrieval import evaluate_retrieval

    modes = ("dense", "lexical", "hybrid") if reranker is None else ("hybrid",)
    result = evaluate_retrieval(dataset, "dev", root, cfg, modes=modes, reranker=reranker,
                                rerank_top=cfg.serve.reranker.candidates, progress=False)
    return dict(result["modes"])


def train_writer(root: Storage) -> str:
    """`ragline train qgen` with deployments/jobs/qgen.yaml into storage `root` (bf16 where the CPU has it
    natively); the trained writer's directory."""
    from app import hardware
    from app.catalog import Catalog
    from app.models import trained
    from app.train.config import load_job_config
    from app.train.run import run_training

    job = load_job_config(ROOT / "deployments/jobs/qgen.yaml", "qgen",
                          ["precision=bf16"] if hardware.detect().cpu_bf16 else [])
    record = run_training(job, root)
    assert record["state"] == "succeeded", record
    return trained.local_dir(Catalog(root).get_model("qgen", int(record["model"]["version"])), root)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=ROOT.parent / "shared" / "datasets" / "scifact")
    ap.add_argument("--chunks", type=int, default=800, help="chunks adapt writes a question about")
    ap.add_argument("--writer", default="prompted", help="prompted: the packaged SmolLM2; qgen: SmolLM2 "
                    "fine-tuned first by deployments/jobs/qgen.yaml; a directory: a writer that job trained")
    ap.add_argument("--out", type=Path, default=None, help="results file (default: benchmarks/results/, and the "
                    "docs table is rewritten)")
    args = ap.parse_args(argv)
    dataset = args.dataset.resolve()
    import ray

    from app.adapt.run import TRAIN, adapt
    from app.catalog import Catalog
    from app.config import AppConfig
    from app.config_files import merge
    from app.index.build import build_index
    from app.indexing import ensure_index
    from app.models import embedder, trained
    from app.raycluster import NAMESPACE
    from app.storage import Storage
    from app.train.config import parse_job_config
    from app.train.run import run_training

    ray.init(address="local", num_cpus=os.cpu_count(), namespace=NAMESPACE, include_dashboard=False,
             log_to_driver=False)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl-adapt-") as tmp:
        root = f"{tmp}/store"
        corpus = Storage(f"{root}/eval/{dataset.name}")  # where evaluate_retrieval ingests the corpus
        qgen_s = None
        writer: dict[str, Any] = {}
        if args.writer == "qgen":
            t0 = time.perf_counter()
            writer = {"writer": {"model": train_writer(Storage(root))}}
            qgen_s = time.perf_counter() - t0
        elif args.writer != "prompted":
            writer = {"writer": {"model": str(Path(args.writer).resolve())}}
        cfg = AppConfig.model_validate({"adapt": {"chunks": args.chunks} | writer})
        t0 = time.perf_counter()
        ensure_index(dataset, corpus, cfg)
        ingest_s = time.perf_counter() - t0
        untrained = evaluate(dataset, root, cfg, None)

        t0 = time.perf_counter()
        report = adapt(corpus, "default", cfg.model_copy(update={"adapt": cfg.adapt.model_copy(
            update={"roles": ["reranker"]})}))
        adapt_s = time.perf_counter() - t0
        catalog = Catalog(corpus)
        adapted_dir = trained.local_dir(catalog.get_model("reranker", 1), corpus)
        adapted = evaluate(dataset, root, cfg, adapted_dir)

        # today's no-label reranker: as many pseudo-queries as adapt kept questions, trained the same way
        t0 = time.perf_counter()
        job = parse_job_config(merge(TRAIN["reranker"], {
            "task": "reranker", "name": "self-pairs", "register_as": "self-pairs",
            "reranker": {"self_queries": report.questions.counts.train}}), "bench")
        record = run_training(job, corpus)
        self_pairs_s = time.perf_counter() - t0
        assert record["state"] == "succeeded", record
        self_dir = trained.local_dir(catalog.get_model("self-pairs", int(record["model"]["version"])), corpus)
        self_pairs = evaluate(dataset, root, cfg, self_dir)

        def adapt_embedder(name: str, teacher: str | None) -> tuple[Any, dict[str, Any], dict[str, Any], float]:
            """adapt's embedder role on the same questions (judged by the gate against the served index), then
            measured on dev alone and under adapt's reranker: (report, retrieval, reranked, seconds)."""
            t0 = time.perf_counter()
            got = adapt(corpus, "default", cfg.model_copy(update={"adapt": cfg.adapt.model_copy(
                update={"roles": ["embedder"], "embedder_name": name, "teacher": teacher})}),
                questions=report.questions)
            seconds = time.perf_counter() - t0
            (role,) = got.roles
            if role.decision == "refused":  # measured all the same: published in this benchmark's own store
                base = Catalog(corpus).resolve("indexes", None).embedder
                build_index(corpus, cfg, None, embedder.target(f"catalog:{role.candidate.replace(':v', ':')}",
                                                               corpus, embedder.Variant(base.runtime,
                                                                                        base.precision)))
            return got, evaluate(dataset, root, cfg, None), evaluate(dataset, root, cfg, adapted_dir), seconds

        # GPL: taught by adapt's reranker, promoted or not (adapt.teacher auto takes it only promoted); then the
        # same questions without a teacher
        taught_by = "catalog:" + report.roles[0].candidate.replace(":v", ":")
        embedder_report, reembedded, both, embedder_s = adapt_embedder("embedder", taught_by)
        contrastive_report, contrastive, contrastive_both, contrastive_s = adapt_embedder("contrastive", None)
    ray.shutdown()

    quality = json.loads(readme_tables.latest("quality").read_text())
    metric = "ndcg@10"
    row = {"untrained": {m: untrained[m][metric] for m in ("dense", "lexical", "hybrid")},
           "self_pairs_rerank": self_pairs["hybrid+rerank"][metric], "adapt_rerank": adapted["hybrid+rerank"][metric],
           "adapt_embedder": {m: reembedded[m][metric] for m in ("dense", "lexical", "hybrid")},
           "adapt_embedder_rerank": both["hybrid+rerank"][metric],
           "contrastive_embedder": {m: contrastive[m][metric] for m in ("dense", "lexical", "hybrid")},
           "contrastive_embedder_rerank": contrastive_both["hybrid+rerank"][metric],
           "qrels_rerank": quality["median"]["hybrid+rerank"][metric]}
    role, plain = embedder_report.roles[0], contrastive_report.roles[0]
    result = {
        "benchmark": "adapt", "date": dt.date.today().isoformat(),
        "command": f"benchmarks/adapt_bench.py --chunks {args.chunks} --writer "
                   + (args.writer if args.writer in ("prompted", "qgen") else "DIR"),
        "writer": args.writer if args.writer == "prompted" else "qgen", "dataset": dataset.name, "split": "dev",
        "metric": metric, "ndcg": row,
        "ratios": {"adapt_over_self_pairs": round(row["adapt_rerank"] / row["self_pairs_rerank"], 4),
                   "adapt_over_hybrid": round(row["adapt_rerank"] / row["untrained"]["hybrid"], 4),
                   "adapt_embedder_dense_over_untrained": round(row["adapt_embedder"]["dense"]
                                                                / row["untrained"]["dense"], 4),
                   "adapt_both_over_hybrid": round(row["adapt_embedder_rerank"] / row["untrained"]["hybrid"], 4),
                   "gpl_over_contrastive_dense": round(row["adapt_embedder"]["dense"]
                                                       / row["contrastive_embedder"]["dense"], 4)},
        "qrels_source": readme_tables.latest("quality").name,
        "adapt": report.model_dump(), "adapt_embedder": embedder_report.model_dump(),
        "contrastive_embedder": contrastive_report.model_dump(),
        "seconds": {"ingest": round(ingest_s, 1), **({"qgen_train": round(qgen_s, 1)} if qgen_s else {}),
                    "write_questions": report.questions.write_s,
                    "round_trip": report.questions.round_trip_s, "train": report.roles[0].train_s,
                    "judge": report.roles[0].judge_s, "adapt": round(adapt_s, 1),
                    "self_pairs_train": round(self_pairs_s, 1), "embedder_train": role.train_s,
                    "embedder_judge": role.judge_s, "adapt_embedder": round(embedder_s, 1),
                    "contrastive_train": plain.train_s, "contrastive_judge": plain.judge_s,
                    "contrastive_embedder": round(contrastive_s, 1)},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps({k: result[k] for k in ("ndcg", "ratios", "seconds")}, indent=2))
    readme_tables.save("adapt", result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
