"""Answer-quality benchmark: `ragline eval answers` on the held-out dev articles of SQuAD half A, for the plain RAG
prompt a user would write first against Ragline's tuned default, and against fine-tuned generator versions, in one
run, through the same served graph (only `serve.generator` and `serve.reranker` differ).

- plain: "answer using only the numbered passages, cite them, say you do not know otherwise" (Ragline's earlier
  default), 4 passages, up to 160 tokens, no stop string, the retriever's order (no reranker);
- default: the tuned answer style (short phrase + citation, 2 passages, 64 tokens, one line), passages ordered by
  the storage's promoted reranker when it has one (`serve.reranker.model: catalog:reranker`, the default);
- each --model (catalog:sft:N, a directory): the default style with that generator, and, where a reranker is
  promoted, once more without it (what the reranker adds).

The graph answers greedily, so each configuration is scored once (a repeat gives the same answers); latency is
reported as measured. Writes benchmarks/results/answers-<date>.json and regenerates README's table.

    python benchmarks/answers_bench.py [--limit 200] [--model catalog:sft:1 ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from ray import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys  # noqa: E402
from app.catalog import Catalog  # noqa: E402
from app.config import load_config  # noqa: E402
from app.eval.answers import Endpoint, evaluate_answers  # noqa: E402
from app.indexing import run_ingest  # noqa: E402
from app.qa.questions import write_corpus  # noqa: E402
from app.raycluster import init_local  # noqa: E402
from app.storage import Storage  # noqa: E402
from benchmarks.readme_tables import publish  # noqa: E402
from benchmarks.serve_bench import deploy  # noqa: E402

PLAIN = ["serve.generator.system_prompt=Answer the question using only the numbered passages. After each fact, cite "
         "the passage it comes from by its number in square brackets, like [1]. If the passages do not contain the "
         "answer, say that you do not know.",
         "serve.generator.passages=4", "serve.generator.max_new_tokens=160", "serve.generator.stop=[]",
         "serve.reranker.model=null"]
NO_RERANKER = " (no reranker)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared/datasets/squad/dev-a-v1.1.json"))
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=200, help="Questions, spread evenly over the split")
    ap.add_argument("--model", action="append", default=[], help="A fine-tuned generator to compare (repeatable)")
    ap.add_argument("--storage", default=str(ROOT / ".ragline-answers-bench"), help="Storage root (corpus indexed)")
    ap.add_argument("--port", type=int, default=8766)
    args = ap.parse_args()
    dataset = Path(args.dataset).resolve()
    storage = Storage(str(Path(args.storage).resolve()))
    init_local(namespace="ragline", include_dashboard=False, log_to_driver=False)
    if not storage.exists("indexes"):
        corpus = storage.local_path("corpus/squad.jsonl")
        write_corpus(dataset, corpus)
        run_ingest([str(corpus)], load_config(None, []), storage)
    key = apikeys.load(storage)[0][0]
    configs: dict[str, list[str]] = {"plain": PLAIN, "default": []}
    reranked = Catalog(storage).promoted("reranker") is not None
    for m in args.model:
        configs[m] = [f"serve.generator.model={m}"]
        if reranked:
            configs[m + NO_RERANKER] = [f"serve.generator.model={m}", "serve.reranker.model=null"]
    runs: dict[str, Any] = {}
    for name, overrides in configs.items():
        print(f"{name}:", flush=True)
        deploy(storage, overrides, args.port)
        report = evaluate_answers(dataset, args.split, Endpoint(f"http://127.0.0.1:{args.port}", key), storage,
                                  idk=load_config(None, overrides).serve.generator.idk_answer, limit=args.limit)
        runs[name] = report.model_dump()
        print(f"  F1 {report.f1:.1f}, EM {report.exact_match:.1f}, citations {report.citation_accuracy:.3f}",
              flush=True)
    serve.shutdown()
    result = {"date": dt.date.today().isoformat(), "dataset": dataset.name, "split": args.split, "limit": args.limit,
              "command": "python benchmarks/answers_bench.py" + "".join(f" --model {m}" for m in args.model),
              "runs": runs, "ratios": {f"f1_{n}_over_plain": round(r["f1"] / runs["plain"]["f1"], 2)
                                       for n, r in runs.items() if n != "plain"}}
    print(json.dumps(result["ratios"]))
    publish("answers", result)


if __name__ == "__main__":
    main()
