"""CPU fine-tuning benchmark: what each part of the `rag_qa` recipe buys on this CPU, against the plain PyTorch
step a user writes first (fp32, `model(**batch).loss`, every layer trained), in one run.

Examples are in the serving format at serving length: for SQuAD half A train questions, the prompt
`rag_prompt` builds (the default generator config) over the gold paragraph and two other paragraphs of its
article, and the short cited answer (`answer_for`). Every configuration trains the same freshly loaded model on the
same micro-batches with the same seed and thread count (`--threads`, both cores by default), one process, no Ray,
so only the step differs:

- plain: fp32, logits at every position, all layers trained;
- bf16: the same under `torch.autocast("cpu", bfloat16)` (AVX512-BF16 / AMX where the CPU has them);
- bf16 + answer logits: the LM head only where the loss needs it (Ragline's `model_inputs` / `loss`);
- rag_qa recipe: that, with the lowest `--freeze` blocks frozen (deployments/jobs/rag_qa.yaml).

Tokens/s counts real (unpadded) tokens over the steps after the first; loss is the mean answer-token loss of the
last step (equal batches, so fp32 and bf16 can be compared). Median of --repeats runs. Writes
benchmarks/results/sft_cpu-<date>.json and regenerates README's table.

    python benchmarks/sft_cpu_bench.py [--steps 4] [--repeats 3] [--batch 4]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.config import GeneratorConfig  # noqa: E402
from app.models.generator import ChatTemplateTokens  # noqa: E402
from app.qa.questions import load_questions, sample, squad_corpus  # noqa: E402
from app.rag.prompt import rag_prompt  # noqa: E402
from app.train.config import TrainJobConfig  # noqa: E402
from app.train.rag_qa import answer_for, with_gold  # noqa: E402
from app.train.sft_data import collate_lm, encode  # noqa: E402
from app.train.tasks import TASKS  # noqa: E402
from benchmarks.readme_tables import publish  # noqa: E402

SFT = TASKS["sft"]  # the task this benchmark measures

CONFIGS: dict[str, dict[str, Any]] = {
    "plain": {"bf16": False, "answer_logits": False, "freeze": 0},
    "bf16": {"bf16": True, "answer_logits": False, "freeze": 0},
    "bf16_answer_logits": {"bf16": True, "answer_logits": True, "freeze": 0},
    "rag_qa": {"bf16": True, "answer_logits": True, "freeze": None},  # None: --freeze
}


def examples(dataset: Path, n: int, tokenizer: Any) -> list[tuple[list[int], list[int]]]:
    """n serving-format examples as (input_ids, labels)."""
    gen = GeneratorConfig()
    tokens = ChatTemplateTokens(tokenizer)
    paragraphs = {p["id"]: p for p in squad_corpus(dataset)}
    out = []
    for q in sample(load_questions(dataset, "train"), n):
        title, num = q.doc_id.rsplit("#", 1)
        others = [paragraphs[f"{title}#{i}"] for i in (int(num) + 1, int(num) + 2, int(num) - 1, int(num) - 2)
                  if f"{title}#{i}" in paragraphs][:gen.passages - 1]
        hits = with_gold(q.qid, [{"doc_id": p["id"], "title": p["title"], "text": p["text"], "source": p["id"]}
                                 for p in others], {**paragraphs[q.doc_id], "doc_id": q.doc_id,
                                                    "source": q.doc_id}, gen.passages)
        prompt = rag_prompt(q.question, hits, gen, tokens.count_tokens)
        messages = [*prompt.messages, {"role": "assistant", "content": answer_for(q, prompt.passages, gen.idk_answer)}]
        out.append(encode(messages, tokenizer, 2048))
    return out


def run(name: str, flags: dict[str, Any], cfg: TrainJobConfig, path: str,
        batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    model = SFT.build_model(cfg.model_copy(update={"freeze_layers": flags["freeze"]}), path)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
    rates, loss = [], float("nan")
    for batch in batches:
        start = time.perf_counter()
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if flags["bf16"] else contextlib.nullcontext()
        with autocast:
            if flags["answer_logits"]:
                value = SFT.loss(model(**SFT.model_inputs(cfg, batch, torch.device("cpu"))), batch)
            else:
                value = model(**batch).loss
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        rates.append(int(batch["attention_mask"].sum()) / (time.perf_counter() - start))
        loss = float(value.detach())
    print(f"  {name:20s} {statistics.median(rates[1:]):7.1f} tokens/s  last loss {loss:.3f}", flush=True)
    return {"tokens_per_s": statistics.median(rates[1:]), "loss": loss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared/datasets/squad/dev-a-v1.1.json"))
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--steps", type=int, default=4, help="Optimizer steps per run (the first is warm-up)")
    ap.add_argument("--batch", type=int, default=4, help="Examples per step")
    ap.add_argument("--freeze", type=int, default=20, help="Blocks frozen in the rag_qa recipe")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    cfg = TrainJobConfig.model_validate({"task": "sft", "model": args.model, "sft": {"paths": ["unused.jsonl"]},
                                         "lr": 1e-4})
    path = SFT.resolve_model(cfg)
    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = examples(Path(args.dataset), args.steps * args.batch, tokenizer)
    batches = [collate_lm({"input_ids": np.array([x for x, _ in rows[i:i + args.batch]], dtype=object),
                           "labels": np.array([y for _, y in rows[i:i + args.batch]], dtype=object)},
                          tokenizer.pad_token_id or 0) for i in range(0, len(rows), args.batch)]
    mean_tokens = float(np.mean([len(x) for x, _ in rows]))
    results: dict[str, list[dict[str, float]]] = {k: [] for k in CONFIGS}
    for r in range(args.repeats):
        print(f"repeat {r + 1} of {args.repeats}", flush=True)
        for name, flags in CONFIGS.items():
            flags = flags | {"freeze": args.freeze if flags["freeze"] is None else flags["freeze"]}
            results[name].append(run(name, flags, cfg, path, batches))
    summary = {name: {k: statistics.median(o[k] for o in outs) for k in outs[0]} for name, outs in results.items()}
    plain = summary["plain"]["tokens_per_s"]
    ratios = {f"{name}_over_plain": round(s["tokens_per_s"] / plain, 2)
              for name, s in summary.items() if name != "plain"}
    result = {"date": dt.date.today().isoformat(), "model": args.model, "threads": args.threads, "batch": args.batch,
              "steps": args.steps, "repeats": args.repeats, "freeze": args.freeze, "mean_tokens": round(mean_tokens),
              "command": "python benchmarks/sft_cpu_bench.py", "runs": results, "summary": summary, "ratios": ratios}
    print(json.dumps(ratios))
    publish("sft_cpu", result)


if __name__ == "__main__":
    main()
