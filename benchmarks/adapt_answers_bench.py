"""The generator taught by `ragline adapt`'s questions, with no labels: SQuAD half A's dev articles' paragraphs alone
→ questions and answer spans written by the question writer (vLLM on Ray Data) → `rag_qa` fine-tuning on them →
`ragline eval answers` on the dev questions, which nothing before read.

Side by side in one run, through the same served graph (every paragraph of the file indexed, no reranker; only
`serve.generator.model` differs): the untuned default generator and the one trained on adapt's synthetic questions.
The generator trained on the train articles' gold questions (deployments/jobs/rag_qa.yaml, 54 minutes here) is
quoted from the newest benchmarks/results/answers-*.json (its row without a reranker), not rerun.

The question writer is `ragline train qgen`'s (deployments/jobs/qgen.yaml: SmolLM2 fine-tuned on the *train*
articles' first question of each paragraph), trained here first unless `--writer` names one.

    .venv/bin/python benchmarks/adapt_answers_bench.py [--limit 200] [--epochs 3] [--writer DIR]
        [--questions-per-chunk 1]

Writes benchmarks/results/adapt_answers-<date>-<cpu>.json (each stage's seconds on this machine) and the table in
docs/benchmarks.md. The graph answers greedily, so each side is scored once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

DEV = "dev"  # the collection of the dev articles' paragraphs adapt writes questions about


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", type=Path, default=ROOT.parent / "shared/datasets/squad/dev-a-v1.1.json")
    ap.add_argument("--limit", type=int, default=200, help="dev questions asked, spread evenly over the articles")
    ap.add_argument("--epochs", type=int, default=3, help="rag_qa epochs over the synthetic questions")
    ap.add_argument("--questions-per-chunk", type=int, default=1, help="adapt.writer.questions_per_chunk (above 1: "
                    "sampled at temperature 0.7)")
    ap.add_argument("--writer", default=None, help="a trained question writer (default: trained here by qgen.yaml)")
    ap.add_argument("--port", type=int, default=8767)
    args = ap.parse_args(argv)
    dataset = args.dataset.resolve()
    from ray import serve

    from app import apikeys, collections, hardware
    from app.adapt.synthesize import local_file, synthesize
    from app.config import AppConfig, load_config
    from app.eval.answers import Endpoint, evaluate_answers
    from app.indexing import run_ingest
    from app.qa.questions import dev_articles, squad_corpus, write_corpus
    from app.raycluster import init_local
    from app.storage import Storage
    from app.train.config import load_job_config, with_serving
    from app.train.run import run_training
    from benchmarks.adapt_bench import train_writer
    from benchmarks.serve_bench import deploy

    init_local(namespace="ragline", include_dashboard=False, log_to_driver=False)
    bf16 = ["precision=bf16"] if hardware.detect().cpu_bf16 else ["precision=fp32"]
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rl-adapt-answers-") as tmp:
        root = Storage(f"{tmp}/store")
        cfg = AppConfig()
        t0 = time.perf_counter()
        corpus = Path(tmp) / "squad.jsonl"
        write_corpus(dataset, corpus)
        run_ingest([str(corpus)], cfg, root)
        docs = squad_corpus(dataset)
        dev = dev_articles(sorted({d["id"].rsplit("#", 1)[0] for d in docs}))
        dev_corpus = Path(tmp) / "squad-dev.jsonl"
        dev_docs = [d for d in docs if d["id"].rsplit("#", 1)[0] in dev]
        dev_corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in dev_docs))
        dev_storage = collections.storage_of(root, DEV)
        run_ingest([str(dev_corpus)], cfg, dev_storage)
        seconds["ingest"] = time.perf_counter() - t0

        writer = args.writer
        if writer is None:
            t0 = time.perf_counter()
            writer = train_writer(root)
            seconds["qgen_train"] = time.perf_counter() - t0

        # every chunk of the dev paragraphs is asked about, questions_per_chunk times
        sampled = {"questions_per_chunk": args.questions_per_chunk,
                   **({"temperature": 0.7} if args.questions_per_chunk > 1 else {})}
        adapt_cfg = AppConfig.model_validate({"adapt": {"chunks": 100_000, "writer": sampled}})
        questions = synthesize(dev_storage, adapt_cfg.adapt, adapt_cfg.search, writer,
                               "qgen" if args.writer is None else args.writer)
        seconds["write_questions"], seconds["round_trip"] = questions.write_s, questions.round_trip_s

        t0 = time.perf_counter()
        job = load_job_config(ROOT / "deployments/jobs/rag_qa.yaml", "sft", [
            f"sft.rag_qa.dataset={local_file(dev_storage, questions.train_file)}", "sft.rag_qa.split=all",
            f"epochs={args.epochs}", "warmup_steps=2", *bf16])
        record = run_training(with_serving(job, cfg), root)
        assert record["state"] == "succeeded", record
        version = int(record["model"]["version"])
        seconds["sft_train"] = time.perf_counter() - t0

        key = apikeys.load(root)[0][0]
        runs: dict[str, Any] = {}
        for name, overrides in {"default": [], "adapted": [f"serve.generator.model=catalog:sft:{version}"]}.items():
            t0 = time.perf_counter()
            deploy(root, overrides, args.port)
            report = evaluate_answers(dataset, "dev", Endpoint(f"http://127.0.0.1:{args.port}", key), root,
                                      idk=load_config(None, overrides).serve.generator.idk_answer, limit=args.limit)
            runs[name] = report.model_dump()
            seconds[f"eval_{name}"] = time.perf_counter() - t0
            print(f"{name}: F1 {report.f1:.1f}, EM {report.exact_match:.1f}, citations "
                  f"{report.citation_accuracy:.3f}", flush=True)
        serve.shutdown()
        sft_counts = record["counts"]

    answers = json.loads(readme_tables.latest("answers").read_text())
    supervised = next((r for n, r in answers["runs"].items() if n.endswith("(no reranker)")), None)
    result = {
        "benchmark": "adapt_answers", "date": dt.date.today().isoformat(),
        "command": "benchmarks/adapt_answers_bench.py" + (f" --limit {args.limit}" if args.limit != 200 else "")
        + (f" --epochs {args.epochs}" if args.epochs != 3 else "") + (" --writer DIR" if args.writer else "")
        + (f" --questions-per-chunk {args.questions_per_chunk}" if args.questions_per_chunk != 1 else ""),
        "dataset": dataset.name, "split": "dev", "limit": args.limit, "epochs": args.epochs,
        "questions_per_chunk": args.questions_per_chunk,
        "questions": questions.model_dump(), "sft_counts": sft_counts, "runs": runs,
        "supervised": supervised, "supervised_source": readme_tables.latest("answers").name,
        "ratios": {"f1_adapted_over_default": round(runs["adapted"]["f1"] / runs["default"]["f1"], 2)},
        "seconds": {k: round(v, 1) for k, v in seconds.items()}, "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps({k: result[k] for k in ("ratios", "seconds")}, indent=2))
    readme_tables.publish("adapt_answers", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
