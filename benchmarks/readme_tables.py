"""Benchmark tables are generated from the benchmark results files, never typed by hand.

    .venv/bin/python benchmarks/readme_tables.py          rewrite each table from the latest results file
    .venv/bin/python benchmarks/readme_tables.py --check  exit 1 if a page differs from what the files give

Each full table sits between `<!-- table:NAME -->` and `<!-- /table:NAME -->` in docs/benchmarks.md, and is
rendered from the newest `benchmarks/results/NAME-<date>.json` of each CPU level; the README keeps only the headline
numbers, between `<!-- table:headline -->` and `<!-- /table:headline -->`, rendered from the same files.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: `app` for the scale table
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
PAGE = ROOT / "docs" / "benchmarks.md"  # the full tables
MODE_NAMES = {"dense": "dense (MiniLM)", "lexical": "BM25", "hybrid": "hybrid (RRF)"}


def latest(name: str, results: Path = RESULTS) -> Path:
    files = sorted(results.glob(f"{name}-*.json"))  # ISO dates sort by time
    if not files:
        raise FileNotFoundError(f"no {results}/{name}-<date>.json: run benchmarks/{SCRIPTS[name]} first")
    return files[-1]


def cpu_level(r: dict[str, Any]) -> str:
    """The CPU level a result was measured at; results from before CPUs were recorded all came from AVX512-BF16
    machines."""
    return str(r.get("hardware", {}).get("level", "avx512_bf16"))


def cpu_amx(r: dict[str, Any]) -> bool:
    """Whether the CPU has AMX: one level with AVX512-BF16 (app.hardware), but its bf16 matrix products run on tiles,
    so a Xeon with AMX and one without keep a table each."""
    return "amx_bf16" in r.get("hardware", {}).get("flags", [])


def cpu_model(r: dict[str, Any]) -> str:
    """The CPU model a result was measured on (those from before CPUs were recorded: an AMD EPYC)."""
    return str(r.get("hardware", {}).get("cpu", "AMD EPYC"))


def latest_per_cpu(name: str, results: Path = RESULTS) -> list[Path]:
    """The newest results file of each CPU (level and model), fastest level first and, within a level, the newest
    first: a rerun on another CPU adds a table, it does not replace the other CPU's."""
    latest(name, results)  # the error when there is none
    newest: dict[tuple[str, bool, str], tuple[str, Path]] = {}  # (level, AMX, model) -> (date, file)
    for path in sorted(results.glob(f"{name}-*.json")):
        r = json.loads(path.read_text())
        key, date = (cpu_level(r), cpu_amx(r), cpu_model(r)), str(r.get("date", ""))
        if key not in newest or date >= newest[key][0]:
            newest[key] = (date, path)
    order = sorted(newest, key=lambda k: (LEVEL_ORDER.index(k[0]), k[1], newest[k][0]), reverse=True)
    return [newest[k][1] for k in order]


def cpu_slug(cpu: str) -> str:
    """A CPU model as a file-name part: "Intel(R) Xeon(R) Processor" -> "intel-xeon"."""
    words = re.sub(r"\((r|tm)\)|\b(processor|cpu)\b", " ", cpu.lower())
    return "-".join(re.findall(r"[a-z0-9]+", words))


LEVEL_ORDER = ["baseline", "avx2", "avx512", "avx512_bf16"]  # app.hardware.LEVELS


def machine(r: dict[str, Any]) -> str:
    """The line above a table that says what it ran on."""
    hw = r.get("hardware")
    if hw is None:
        return "On an AMD EPYC with AVX512-BF16 (measured before results files named their CPU):"
    if hw.get("forced"):
        from app.envs import CPU_HOLD_AVX2

        # Results from before the caps were recorded were held with oneDNN's and ATen's alone.
        hold = hw.get("hold", {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"})
        unset = [k for k in CPU_HOLD_AVX2 if not hold.get(k)]
        gaps = f"; {', '.join(unset)} unset, so its kernels ran this CPU's own" if unset else ""
        return (f"On {hw['cpu']} held to {hw['forced']} (`RAGLINE_CPU_ISA` and the kernel libraries' caps: an "
                f"{hw['forced']} machine's choices and kernels on a faster CPU, OpenVINO's MLAS products excepted"
                f"{gaps}; see Measuring another CPU), {hw['cores']} cores, {hw['memory_gib']:.0f} GiB:")
    amx = ", amx_bf16" if cpu_amx(r) else ""
    return f"On {hw['cpu']} ({hw['level']}{amx}), {hw['cores']} cores, {hw['memory_gib']:.0f} GiB:"


def quality_table(r: dict[str, Any], source: str) -> str:
    m = r["median"]
    runs = len(r["runs"])
    lines = [
        f"SciFact {r['split']} ({r['queries']} queries), each mode's top {r['rerank_top']} reranked; "
        f"{'one training run' if runs == 1 else f'median of {runs} training runs'} "
        f"(`{r['command']}`, {r['date']}, {source}):",
        "",
        "| mode | nDCG@10 retriever | cross-encoder alone (`+ce`) | fused, as served (`+rerank`) | gain | "
        "recall@100 |",
        "|---|---|---|---|---|---|",
    ]
    for mode, label in MODE_NAMES.items():
        base, ce, fused = m[mode]["ndcg@10"], m[f"{mode}+ce"]["ndcg@10"], m[f"{mode}+rerank"]["ndcg@10"]
        lines.append(f"| {label} | {base:.3f} | {ce:.3f} | {fused:.3f} | {fused - base:+.3f} | "
                     f"{m[mode]['recall@100']:.3f} |")
    return "\n".join(lines)


def adapt_table(r: dict[str, Any], source: str) -> str:
    n, a, sec = r["ndcg"], r["adapt"], r["seconds"]
    counts = a["questions"]["counts"]
    reranker = a["roles"][0] if "roles" in a else a  # results before the embedder joined hold one role, unnamed
    writer = ("SmolLM2 fine-tuned on SQuAD's train articles (`ragline train qgen`)" if r.get("writer") == "qgen"
              else "the packaged SmolLM2, prompted")
    lines = [
        f"SciFact {r['split']} nDCG@10, no labels read (`{r['command']}`, {r['date']}, {source}); question writer: "
        f"{writer}:",
        "",
        "| ranking | nDCG@10 |",
        "|---|---|",
        f"| dense / BM25 / hybrid, untrained | {n['untrained']['dense']:.3f} / {n['untrained']['lexical']:.3f} / "
        f"{n['untrained']['hybrid']:.3f} |",
        f"| hybrid + reranker from pseudo-queries (titles, first sentences) | {n['self_pairs_rerank']:.3f} |",
        f"| hybrid + reranker from `ragline adapt`'s synthetic questions | {n['adapt_rerank']:.3f} |",
    ]
    if "contrastive_embedder" in n:  # GPL's MarginMSE against the contrastive loss on the same questions
        for key, how in (("contrastive_embedder", "contrastive, the questions alone (adapt's default while no "
                          "reranker is promoted)"),
                         ("adapt_embedder", "taught by adapt's reranker (GPL's MarginMSE)")):
            e = n[key]
            lines += [f"| dense / BM25 / hybrid, embedder from `ragline adapt`'s questions, {how} | "
                      f"{e['dense']:.3f} / {e['lexical']:.3f} / {e['hybrid']:.3f} |",
                      f"| hybrid + adapt's reranker, that embedder | {n[key + '_rerank']:.3f} |"]
    elif "adapt_embedder" in n:
        e = n["adapt_embedder"]
        lines += [f"| dense / BM25 / hybrid, embedder from `ragline adapt`'s synthetic questions | {e['dense']:.3f} "
                  f"/ {e['lexical']:.3f} / {e['hybrid']:.3f} |",
                  f"| hybrid + reranker, both from `ragline adapt` | {n['adapt_embedder_rerank']:.3f} |"]
    lines += [
        f"| hybrid + reranker from the train qrels (labels; its top 50 reranked; {r['qrels_source']}) | "
        f"{n['qrels_rerank']:.3f} |",
        "",
        f"adapt against pseudo-queries: {r['ratios']['adapt_over_self_pairs']:.3f}x; against hybrid alone: "
        f"{r['ratios']['adapt_over_hybrid']:.3f}x. Questions: {counts['sampled']} chunks asked, "
        f"{sum(counts['rejected'].values())} replies held none, {counts['dropped']} failed the round trip, "
        f"{counts['train']} trained on, {counts['heldout']} held out. {_gate('reranker', reranker)}",
    ]
    if "contrastive_embedder" in r:
        lines[-1] += " " + _gate("taught embedder", r["adapt_embedder"]["roles"][0]) + " " + \
            _gate("contrastive embedder", r["contrastive_embedder"]["roles"][0])
    elif "adapt_embedder" in r:
        lines[-1] += " " + _gate("embedder", r["adapt_embedder"]["roles"][0])
    lines[-1] += " Seconds: " + (f"training the writer {sec['qgen_train']:.0f}, " if "qgen_train" in sec else "")
    lines[-1] += (f"writing {sec['write_questions']:.0f} (the engine's load included), round trip "
                  f"{sec['round_trip']:.0f}, reranker training {sec['train']:.0f}, judging {sec['judge']:.0f}")
    if "embedder_train" in sec:
        lines[-1] += f", embedder training {sec['embedder_train']:.0f}, re-embedding and judging " \
                     f"{sec['embedder_judge']:.0f}"
    if "contrastive_train" in sec:
        lines[-1] += f" (contrastive: {sec['contrastive_train']:.0f} and {sec['contrastive_judge']:.0f})"
    lines[-1] += f"; adapt with the reranker alone {sec['adapt']:.0f}."
    return "\n".join(lines)


def adapt_answers_table(r: dict[str, Any], source: str) -> str:
    q, runs, sec = r["questions"]["counts"], r["runs"], r["seconds"]
    first = runs["default"]
    rows = [("untuned default generator", runs["default"]),
            ("fine-tuned on `ragline adapt`'s synthetic questions (no labels)", runs["adapted"])]
    if r.get("supervised"):
        rows.append((f"fine-tuned on the train articles' gold questions (labels; {r['supervised_source']})",
                     r["supervised"]))
    lines = [
        f"SQuAD `{r['dataset']}` {r['split']} split, {first['questions']} questions asked at `/v1/query` (every "
        f"paragraph of the file indexed, top {first['top_k']}, no reranker; `{r['command']}`, {r['date']}, "
        f"{source}):",
        "",
        "| generator | F1 | exact match | citation accuracy | gold passage in prompt | \"I don't know\" |",
        "|---|---|---|---|---|---|",
        *(f"| {label} | {x['f1']:.1f} | {x['exact_match']:.1f} | {x['citation_accuracy']:.2f} | "
          f"{x['gold_in_context']:.2f} | {x['idk_rate']:.2f} |" for label, x in rows),
        "",
        f"F1 adapted / default: {r['ratios']['f1_adapted_over_default']:.1f}x. Questions, about the dev articles' "
        f"paragraphs only: {q['sampled']} asked ({r.get('questions_per_chunk', 1)} a chunk), "
        f"{sum(q['rejected'].values())} replies held no new one, "
        f"{q['dropped']} failed the round trip, {q['train']} kept for training ({r['sft_counts']['kept']} with an "
        f"answer span became examples, {r['epochs']} epochs), {q['heldout']} held out. Seconds: "
        + ", ".join(f"{k.replace('_', ' ')} {v:.0f}" for k, v in sec.items()) + ".",
    ]
    return "\n".join(lines)


def _gate(role: str, judged: dict[str, Any]) -> str:
    c = judged["comparison"]
    return (f"The {role}'s gate ({c['n']} held-out questions): nDCG@10 {c['candidate']:.3f} against "
            f"{c['served']:.3f} served, interval [{c['low']:+.3f}, {c['high']:+.3f}]: {judged['decision']}.")


def generate_table(r: dict[str, Any], source: str) -> str:
    lines = [
        f"{r['model']}, {r['max_tokens']}-token answers, {r['cpus']} CPU cores; median of {r['repeats']} runs per "
        f"point (`{r['command']}`, {r['date']}, {source}). Tokens/s counts completion tokens over each run's wall "
        "time; TTFT is the time to the first answer token.",
        "",
        "| path | clients | vLLM tokens/s | transformers tokens/s | ratio | vLLM TTFT p50 / p95 | "
        "transformers TTFT p50 / p95 |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, label in (("query", "`/v1/query` (streamed, RAG)"), ("raw", "raw generation")):
        for c in r["clients"]:
            v, t = r["vllm"][kind][f"x{c}"], r["transformers"][kind][f"x{c}"]
            lines.append(f"| {label} | {c} | {v['tokens_per_s']:.1f} | {t['tokens_per_s']:.1f} | "
                         f"{r['ratios'][f'{kind}_tokens_per_s_x{c}']:.1f}x | "
                         f"{v['ttft_p50_ms'] / 1e3:.2f} / {v['ttft_p95_ms'] / 1e3:.2f} s | "
                         f"{t['ttft_p50_ms'] / 1e3:.2f} / {t['ttft_p95_ms'] / 1e3:.2f} s |")
    lines += ["", f"Resident memory of the processes holding the model: vLLM {r['vllm']['rss_mb']:,.0f} MB (the LLM "
              f"replica and its engine process, KV cache included), transformers {r['transformers']['rss_mb']:,.0f} "
              "MB (the Generator replica)."]
    return "\n".join(lines)


def answers_table(r: dict[str, Any], source: str) -> str:
    first = next(iter(r["runs"].values()))
    lines = [
        f"SQuAD `{r['dataset']}` {r['split']} split, {first['questions']} questions spread over its articles, asked at "
        f"`/v1/query` by `ragline eval answers` (index v{first['index_version']} of all the file's paragraphs, top "
        f"{first['top_k']} retrieved; `{r['command']}`, {r['date']}, {source}):",
        "",
        "| generator and prompt | reranker | F1 | exact match | citation accuracy | gold passage in prompt | "
        "\"I don't know\" | answer tokens | latency p50 / p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, x in r["runs"].items():
        label = {"plain": "plain RAG prompt (4 passages, 160 tokens)", "default": "Ragline default (tuned prompt)"}.get(
            name, f"fine-tuned `{x['generator']}`")
        reranker = x.get("reranker", "none")  # older results did not record it (none was served)
        reranker = reranker if reranker == "none" else f"`{reranker}`"
        lines.append(f"| {label} | {reranker} | {x['f1']:.1f} | {x['exact_match']:.1f} | "
                     f"{x['citation_accuracy']:.2f} | {x['gold_in_context']:.2f} | {x['idk_rate']:.2f} | "
                     f"{x['answer_tokens']:.1f} | {x['latency_p50_s']:.2f} / {x['latency_p95_s']:.2f} s |")
    ratios = ", ".join(f"{k.removeprefix('f1_').replace('_over_', ' / ')} {v:.1f}x" for k, v in r["ratios"].items())
    return "\n".join([*lines, "", f"F1 ratios: {ratios}."])


def sft_cpu_table(r: dict[str, Any], source: str) -> str:
    labels = {"plain": "plain PyTorch step (fp32, logits everywhere, all layers)", "bf16": "bf16 autocast",
              "bf16_answer_logits": "bf16, logits at the answer tokens only",
              "rag_qa": f"`rag_qa` recipe: that, lowest {r['freeze']} blocks frozen"}
    lines = [
        f"{r['model']}, one process, {r['threads']} threads, {r['batch']} serving-format examples per step "
        f"({r['mean_tokens']} tokens on average), {r['steps']} steps; median of {r['repeats']} runs "
        f"(`{r['command']}`, {r['date']}, {source}):",
        "",
        "| training step | tokens/s | vs plain | loss at the last step |",
        "|---|---|---|---|",
    ]
    for name, label in labels.items():
        s = r["summary"][name]
        ratio = "1.0x" if name == "plain" else f"{r['ratios'][f'{name}_over_plain']:.1f}x"
        lines.append(f"| {label} | {s['tokens_per_s']:.0f} | {ratio} | {s['loss']:.3f} |")
    return "\n".join(lines)


def hostile_table(r: dict[str, Any], source: str) -> str:
    statuses: dict[str, int] = {}
    for run in r["runs"]["hostile"]:
        for status, n in run["hostile_statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    # the settings that keep the clients apart, as far as the file records them (older files have fewer)
    keys = [f"fair share `api.key_fair_share` = {r['key_fair_share']}"] if "key_fair_share" in r else []
    if "key_refusal_hold_s" in r:
        keys.append(f"a refused request's slot held `api.key_refusal_hold_s` = {r['key_refusal_hold_s']:g} s")
    lines = [
        f"An ordinary client's `/v1/retrieve` ({r['requests']} sequential requests, top 5) alone and beside "
        f"{r['hostile_clients']} hostile clients sending bodies at and over every limit"
        + (" (the other clients share one API key and the ordinary client has its own; " + ", ".join(keys) + ")"
           if keys else "")
        + f"; median of {r['repeats']} runs (`{r['command']}`, {r['date']}, {source}):",
        "",
        "| ordinary /v1/retrieve | p50 ms | p95 ms |",
        "|---|---|---|",
    ]
    for name, label in (("idle", "alone"), ("busy", f"beside {r['hostile_clients']} clients of ordinary retrievals"),
                        ("hostile", f"beside {r['hostile_clients']} hostile clients")):
        s = r["summary"][name]
        lines.append(f"| {label} | {s['p50_ms']:.1f} | {s['p95_ms']:.1f} |")
    lines += ["", f"p50 beside hostile clients: {r['ratio_p50']:.2f}x alone (goal ≤ 2x), {r['ratio_p50_vs_busy']:.2f}x "
              "beside as many ordinary clients. What the hostile requests got: "
              + ", ".join(f"{n} × {status}" for status, n in sorted(statuses.items())) + "."]
    return "\n".join(lines)


def ingest_table(r: dict[str, Any], source: str) -> str:
    b, p, s = r["baseline"], r["pipeline"], r["stages"]["embed"]
    lines = [
        f"The first {r['documents']} SciFact documents, {r['cpus']} CPU cores; median of {r['repeats']} runs, each "
        f"side with its model loading (`{r['command']}`, {r['date']}, {source}):",
        "",
        "| | seconds | documents/s | chunks/s |",
        "|---|---|---|---|",
        f"| plain script (fp32, one process, all torch threads) | {b['median_s']:.1f} | {b['docs_per_s']:.1f} | "
        f"{b['chunks_per_s']:.1f} |",
        f"| Ragline pipeline ({r.get('runtime', 'torch')} {r['precision']} embedder, "
        f"{r['config']['embed']['concurrency'] or r['cpus']} "
        f"actors, near-dedup) | {p['median_s']:.1f} | {p['docs_per_s']:.1f} | {p['chunks_per_s']:.1f} |",
        "",
        f"Pipeline / plain: **{r['speedup']:.2f}x** (goal ≥ 1.8x); its embed stage ran {s['wall_s']:.1f} s of its "
        f"{p['median_s']:.1f} s.",
    ]
    if "variant_check" in r:
        c = r["variant_check"]
        lines += ["", f"What the embedder's runtime and precision cost: dense nDCG@10 on SciFact dev ({c['queries']} "
                  f"queries, each of the {c['documents']} documents embedded whole), and the corpus's encode speed "
                  "(goal: nDCG@10 no more than 0.005 below PyTorch fp32):", "",
                  "| embedder | nDCG@10 | vs PyTorch fp32 | documents/s | speed vs PyTorch fp32 |",
                  "|---|---|---|---|---|"]
        lines += [f"| {name} | {v['ndcg@10']:.4f} | {v['ndcg_delta']:+.4f} | {v['docs_per_s']:.1f} | "
                  f"{v['encode_speedup']:.2f}x |" for name, v in c["variants"].items()]
    return "\n".join(lines)


def serve_table(r: dict[str, Any], source: str) -> str:
    p, s, ratios = r["in_process"], r["serve"], r["ratios"]
    py = r.get("serve_python_proxy", {})  # measured since HAProxy became Ragline's HTTP proxy
    # results before Ray Serve's settings were recorded ran with Ray's defaults
    env = " ".join(f"{k}={v}" for k, v in r.get("ray_serve_env", {}).items())
    env = f"`{env}`" if env else "Ray's defaults"
    lines = [
        f"`/v1/retrieve` (top 5) on the demo corpus, median of {r['repeats']} runs per row (each run measures every "
        f"column once, in turn); the Retriever's batches wait {r['retriever']['batch_wait_timeout_s'] * 1e3:g}"
        f" ms; Ray Serve runs with {env} (`{r['command']}`, {r['date']}, {source}):",
        "",
        "| clients | in process p50 ms | req/s | Serve over HTTP p50 ms | req/s |"
        + (" Serve's Python proxy p50 ms | req/s |" if py else ""),
        "|---|---|---|---|---|" + ("---|---|" if py else ""),
    ]
    for name in s:
        row = (f"| {name.split()[-1].replace('seq', '1 (sequential)').lstrip('x')} | {p[name]['p50_ms']:.1f} | "
               f"{p[name]['rps']:.1f} | {s[name]['p50_ms']:.1f} | {s[name]['rps']:.1f} |")
        if py:
            row += f" {py[name]['p50_ms']:.1f} | {py[name]['rps']:.1f} |" if name in py else " – | – |"
        lines.append(row)
    seq = s["retrieve seq"]["rps"]
    lines += ["", f"Serve overhead at p50: **{ratios['serve_overhead_retrieve_p50_ms']:.1f} ms** (goal ≤ 5 ms)"
              + (f"; {ratios['python_proxy_overhead_retrieve_p50_ms']:.1f} ms through Serve's Python proxy"
                 if "python_proxy_overhead_retrieve_p50_ms" in ratios else "")
              + "; throughput through Serve at 32 clients over sequential: "
              f"**{s['retrieve x32']['rps'] / seq:.2f}x** (goal ≥ 3x); batching's gain at 32 clients "
              f"{ratios['batch_gain_retrieve_x32']:.2f}x."]
    return "\n".join(lines)


def scale_table(r: dict[str, Any], source: str) -> str:
    """The "Ragline builds" column is what the code's defaults build at each size today (`dense_kind`)."""
    from app.config import IndexConfig
    from app.index.build import dense_kind

    defaults = IndexConfig()
    lines = [
        f"SciFact's MiniLM vectors grown to each size by noisy copies, {r['queries']} SciFact queries, top 10, one "
        f"query at a time on 2 cores (`{r['command']}`, {r['date']}, {source}); memory is the peak a build and its "
        "searches added:",
        "",
        "| vectors | Ragline builds | exact: build s / p50 ms / MB | HNSW: build s / p50 ms / recall@10 / MB | "
        "IVF: build s / p50 ms / recall@10 / MB | chunk table: Arrow / Python dicts MB |",
        "|---|---|---|---|---|---|",
    ]
    for z in r["sizes"]:
        f, h, i, c = z["flat"], z["hnsw"], z["ivf"], z["chunks"]
        builds = dense_kind(z["vectors"], defaults)
        lines.append(f"| {z['vectors']:,} | {builds} | {f['build_s']:g} / {f['search_p50_ms']:.2f} / "
                     f"{f['peak_mb']:.0f} | {h['build_s']:g} / {h['search_p50_ms']:.2f} / {h['recall@10']:.3f} / "
                     f"{h['peak_mb']:.0f} | {i['build_s']:g} / {i['search_p50_ms']:.2f} / {i['recall@10']:.3f} / "
                     f"{i['peak_mb']:.0f} | {c['arrow_mb']:.0f} / {c['python_dicts_mb']:.0f} |")
    return "\n".join(lines)


def serve_profile_table(r: dict[str, Any], source: str) -> str:
    layers = r["p50_ms"]
    base = layers["in-process flow"]
    lines = [f"Sequential `/v1/retrieve` (top 5, the demo corpus), p50 of {r['requests']} requests per layer "
             f"(`{r['command']}`, {r['date']}, {source}):", "",
             "| path | p50 ms | added over in-process |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.1f} | {'– (no retrieval)' if 'healthz' in name else f'{ms - base:+.1f}'} |"
              for name, ms in layers.items()]
    if cpu := r.get("cpu_ms_per_request"):  # measured since 2026-11-26
        lines += ["", "CPU time each process spends on one sequential `/v1/retrieve` (ms, user + system; processes "
                  "under 0.5 ms left out):", "",
                  "| " + " | ".join(cpu) + " | total |", "|---" * (len(cpu) + 1) + "|",
                  "| " + " | ".join(f"{ms:.1f}" for ms in cpu.values()) + f" | {sum(cpu.values()):.1f} |"]
    if r["profile_share_pct"]:
        # the labels of benchmarks/serve_profile.py, in the order they first appear
        whose = list(dict.fromkeys(k for shares in r["profile_share_pct"].values() for k in shares))
        lines += ["", "Where each Serve process spends its CPU while one client sends `/v1/retrieve` (py-spy, share of "
                  "samples):", "", "| process | " + " | ".join(whose) + " |", "|---|" + "---|" * len(whose)]
        lines += [f"| {name} | " + " | ".join(f"{shares.get(k, 0.0):.0f}%" for k in whose) + " |"
                  for name, shares in r["profile_share_pct"].items()]
    return "\n".join(lines)



def ingest_scale_table(r: dict[str, Any], source: str) -> str:
    lines = [
        f"The first {r['base']} SciFact documents and word-shuffled copies with new ids (nothing deduplicated away), "
        f"ingested and indexed into a fresh storage root, {r['cpus']} CPU cores; median of {r['repeats']} runs "
        f"(`{r['command'].strip()}`, {r['date']}, {source}). Memory is the peak summed RSS of the driver and the Ray "
        "session's processes:",
        "",
        "| corpus | documents | chunks | ingest s | index s | total s | ms / document | vs 1x (1.00 = linear) | "
        "peak memory MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for z in r["sizes"]:
        lines.append(f"| {z['scale']}x | {z['documents']:,} | {z['chunks']:,} | {z['ingest_s']:.1f} | "
                     f"{z['index_s']:.1f} | {z['seconds']:.1f} | {z['ms_per_document']:.1f} | "
                     f"{z['per_document_vs_first']:.2f} | {z['peak_mb']:,.0f} |")
    return "\n".join(lines)


def sync_table(r: dict[str, Any], source: str) -> str:
    lines = [
        f"A folder of {r['documents']:,} documents (a text file each) changes by {r['change']:.0%} per repeat "
        "(half edited, a quarter deleted, a quarter added); `ragline ingest --sync` brings its index up to date "
        "against the plain alternative, a full ingest and index build of the folder into a fresh store; both "
        f"indexes hold the same chunks. Median of {r['repeats']} repeats (`{r['command'].strip()}`, {r['date']}, "
        f"{source}):",
        "",
        "| sync s | full rebuild s | sync / rebuild | chunks embedded by the sync | vectors reused |",
        "|---|---|---|---|---|",
    ]
    emb = statistics.median(x["embeddings"] for x in r["runs"])
    reused = statistics.median(x["embeddings_reused"] for x in r["runs"])
    lines.append(f"| {r['sync_s']:.1f} | {r['full_s']:.1f} | {r['ratio']:.3f} ({1 / r['ratio']:.1f}x faster) | "
                 f"{emb - reused:,.0f} of {statistics.median(x['full_chunks'] for x in r['runs']):,.0f} | "
                 f"{reused:,.0f} |")
    lines += ["", "Goal: a sync that touches 1% of the documents costs ≤ 0.10 of the full rebuild."]
    return "\n".join(lines)


def filter_table(r: dict[str, Any], source: str) -> str:
    names = [n for n in r["modes"]["dense"] if n != "unfiltered"]
    lines = [
        f"{r['chunks']:,} chunks (dense index: {r['dense_index']['type']}), {r['queries']} queries, top {r['k']}, "
        f"each mode unfiltered and filtered in turns; median of {r['repeats']} repeats of the mean ms per query "
        f"(`{r['command'].strip()}`, {r['date']}, {source}). Recall: of the top {r['k']} against an exact search "
        "with the same filter:",
        "",
        "| mode | unfiltered ms | " + " | ".join(f"{n} ms | ratio | recall" for n in names) + " | recall unfiltered |",
        "|---|---|" + "---|---|---|" * len(names) + "---|",
    ]
    for mode, label in MODE_NAMES.items():
        m = r["modes"][mode]
        cells = " | ".join(f"{m[n]['ms']:.2f} | {m[n]['ratio']:.2f} | {m[n]['recall@10']:.3f}" for n in names)
        label = label.replace(" (MiniLM)", "")  # synthetic vectors here
        lines.append(f"| {label} | {m['unfiltered']['ms']:.2f} | {cells} | {m['unfiltered']['recall@10']:.3f} |")
    first = ", ".join(f"{n} {ms:.1f} ms" for n, ms in r["first_search_ms"].items() if n != "unfiltered")
    lines += ["", f"The metadata of the {r['documents']:,} documents is parsed on the first filtered search "
              f"({r['metadata_s']:.2f} s); a filter's first dense search, which computes its rows (and copies its "
              f"vectors when it is searched exactly), took {first}. Goal: filtered ≤ 2.0x unfiltered per mode, "
              "recall as unfiltered."]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text (an error message) inside a table cell: one line, no column separators."""
    return " ".join(text.split()).replace("|", "\\|")


def documents_table(r: dict[str, Any], source: str) -> str:
    corpus, c, ratios = r["corpus"], r["contenders"], r["ratios"]
    packages = [p for p in corpus["packages"] if p != "(given)"]
    origin = f"the manuals of {len(packages)} Debian packages" if packages else f"`{corpus['dir']}`"
    lines = [
        f"{corpus['files']} PDFs, {corpus['pages']:,} pages ({corpus['text_pages']:,} with text), "
        f"{corpus['bytes'] / 2**20:.0f} MiB: {origin}; median of {r['repeats']} runs of each parser, in turn. "
        "Fidelity: word-level similarity (normalized Indel) to Poppler's `pdftotext` of the same file, the median "
        "over the documents and the mean weighted by their words "
        f"(`{r['command'].strip()}`, {r['date']}, {source}):",
        "",
        "| parser | seconds | pages/s | fidelity: median over documents | by words |",
        "|---|---|---|---|---|",
    ]
    for name, x in c.items():
        if not x["ok"]:
            lines.append(f"| {x['label']} | failed: `{_cell(x['error'])}` | – | – | – |")
            continue
        fid = (("the reference", "–") if name == "pdftotext" else
               (f"{x['fidelity']['median']:.3f}", f"{x['fidelity']['word_weighted']:.3f}"))
        lines.append(f"| {x['label']} | {x['median_s']:.1f} | {x['pages_per_s']:.1f} | {fid[0]} | {fid[1]} |")
        if name == "ragline":
            lines.append(f"| Ragline's parse stage (wall; {x['parse_busy_s']:.1f} s busy) | {x['parse_wall_s']:.1f} | "
                         f"{x['parse_pages_per_wall_s']:.1f} | – | – |")
    lines.append("")
    if "ragline_over_fastest" in ratios:
        lines.append(f"Ragline's pages/s over {ratios['fastest_baseline']}'s, the faster plain parser: "
                     f"**{ratios['ragline_over_fastest']:.2f}x** end to end (embedding included), "
                     f"{ratios.get('ragline_parse_over_fastest', 0):.2f}x its parse stage.")
    elif ratios:
        lines.append(f"No Ragline figure yet (its run failed); the faster plain parser is {ratios['fastest_baseline']}"
                     f", {ratios['fastest_baseline_pages_per_s']:.1f} pages/s.")
    model = r.get("versions", {}).get("spacy_model", {})
    if "stand-in" in (model.get("description") or ""):
        lines.append("")
        lines.append("unstructured classified its elements with a stand-in for spaCy's en_core_web_sm (not "
                     "downloadable here: a tokenizer and sentencizer, no tagger): the same text, at an upper bound of "
                     "its speed (with the real model's weights it took 2.3-2.4x as long on a 560-page sample).")
    return "\n".join(lines)


def documents_quality_table(r: dict[str, Any], source: str) -> str:
    layout, corpora = r["layout"], r["corpora"]
    forms = ["a JSONL corpus (a record per paragraph)"]
    if pdf := layout.get("pdf"):
        forms.append(f"PDFs ({pdf['pages']:,} A5 pages; {pdf['paragraphs_across_pages']} of {pdf['paragraphs']} "
                     "paragraphs cross a page break)")
    if "docx" in layout:
        forms.append("DOCX files")
    mode = next((c["mode"] for c in corpora.values() if c["ok"]), "hybrid")
    lines = [
        f"SQuAD `{r['dataset']}`'s {r['articles']} articles as {', '.join(forms[:-1])} and {forms[-1]}"
        if len(forms) > 1 else f"SQuAD `{r['dataset']}`'s {r['articles']} articles as {forms[0]}",
    ]
    lines[0] += (f", each ingested by `ragline ingest` (Ragline {r['ragline']['commit']}); {r['questions']:,} "
                 f"{r['split']} questions, top {r['k']} {mode} hits each. Found: a hit holds a gold answer and "
                 f"{r['min_shared_words']} words in a row of its paragraph (`{r['command'].strip()}`, {r['date']}, "
                 f"{source}):")
    lines += ["", f"| corpus | documents kept | chunks | found in the top {r['k']} | vs JSONL | "
              "answer's page in the hit's pages |", "|---|---|---|---|---|---|"]
    names = {"jsonl": "JSONL", "pdf": "PDF", "docx": "DOCX"}
    for name, c in corpora.items():
        if not c["ok"]:
            lines.append(f"| {names[name]} | failed: `{_cell(c['error'])}` | – | – | – | – |")
            continue
        ratio = "1.00x" if name == "jsonl" else (f"{r['ratios'][f'{name}_over_jsonl']:.3f}x"
                                                 if f"{name}_over_jsonl" in r["ratios"] else "–")
        page = c.get("answer_page", {}).get("share")
        lines.append(f"| {names[name]} | {c['documents']['kept']:,} | {c['chunks']:,} | {c['found_rate']:.3f} "
                     f"({c['found']:,}) | {ratio} | {'–' if page is None else f'{page:.1%}'} |")
    lines += ["", "Goals: PDF and DOCX ≥ 0.98x JSONL's found rate; the answer's page among the PDF hit's pages for ≥ "
              "95% of the found questions."]
    return "\n".join(lines)


def peers_table(r: dict[str, Any], source: str) -> str:
    """benchmarks/peers_bench.py: ingest against LlamaIndex and Haystack, then retrieval quality per millisecond."""
    c, st, sides, ratios = r["corpus"], r["settings"], r["sides"], r["ratios"]
    whole = c["limit"] is None
    docs = (f"SciFact's {c['documents']:,} documents" if whole else
            f"{c['documents']:,} SciFact documents (every one a {r['split']} query judges relevant, then others)")
    runs = "one run" if r["repeats"] == 1 else f"median of {r['repeats']} runs"
    lines = [
        f"{docs}, each side in turn, {runs}; seconds from the side's process start to a "
        "searchable store (imports, model loading and, for Ragline, its Ray's start-up counted), memory the peak "
        "PSS of its process tree; dense nDCG@10 on SciFact "
        f"{r['split']} ({r['queries']} queries) from the side's own retrieval over what it ingested "
        f"(`{r['command'].strip()}`, {r['date']}, {source}):",
        "",
        "| ingest | seconds | documents/s | of which start-up s | chunks | peak memory MB | dense nDCG@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for x in sides.values():
        if not x["ok"]:
            lines.append(f"| {x['label']} | failed: `{_cell(x['error'])}` | – | – | – | – | – |")
            continue
        dense = x["retrieval"].get("dense", {}).get("ndcg@10")
        lines.append(f"| {x['label']} | {x['median_s']:.1f} | {x['docs_per_s']:.1f} | {x['startup_s']:.1f} | "
                     f"{x['chunks']:,} | {x['peak_pss_mb']:,.0f} | {'–' if dense is None else f'{dense:.3f}'} |")
    lines.append("")
    if "ragline_over_faster_peer" in ratios:
        lines.append(f"Ragline's documents/s over {ratios['faster_peer']}'s, the faster peer: "
                     f"**{ratios['ragline_over_faster_peer']:.2f}x** (goal ≥ 2x at equal or better nDCG), dense "
                     f"nDCG@10 {ratios['ragline_dense_ndcg@10']:.3f} against {ratios['faster_peer_dense_ndcg@10']:.3f} "
                     f"({ratios['dense_ndcg_delta']:+.3f}).")
    elif ratios:
        lines.append(f"No Ragline figure (its run failed); the faster peer is {ratios['faster_peer']}, "
                     f"{ratios['faster_peer_docs_per_s']:.1f} documents/s.")
    names = {"llamaindex": "LlamaIndex", "haystack": "Haystack", "ragline": "Ragline"}
    lines += ["", f"Retrieval quality per millisecond: each retriever's top {st['chunks_per_query']} chunks collapsed "
              f"to documents, SciFact {r['split']} nDCG@10, and the latency of one query at a time in the side's own "
              "process, embedding the query included:", "",
              "| retriever | nDCG@10 | p50 ms | p95 ms |", "|---|---|---|---|"]
    for name, x in sides.items():
        for mode, m in x.get("retrieval", {}).items():
            what = {"dense": "dense", "bm25": "BM25", "lexical": "BM25", "hybrid": "hybrid (RRF)"}.get(mode, mode)
            lines.append(f"| {names.get(name, name)} {what} | {m['ndcg@10']:.3f} | {m['p50_ms']:.1f} | "
                         f"{m['p95_ms']:.1f} |")
    v = r["versions"]["peers"]
    li = sides.get("llamaindex", {}).get("settings", {})
    lines += ["", f"llama-index-core {v['llama-index-core']} (`SentenceSplitter(chunk_size={st['chunk_tokens']}, "
              f"chunk_overlap={st['overlap_tokens']})` in MiniLM tokens, `num_workers={li.get('num_workers', '?')}`), "
              f"haystack-ai {v['haystack-ai']} with sentence-transformers-haystack "
              f"{v['sentence-transformers-haystack']} (`DocumentSplitter(split_by=\"word\", "
              f"split_length={st['split_words']}, split_overlap={st['split_overlap_words']})`), sentence-transformers "
              f"{v['sentence-transformers']} and torch {v['torch']} on both; Ragline's chunks are "
              f"{st['chunk_tokens']} tokens with {st['overlap_tokens']} shared; every side embeds the same packaged "
              "all-MiniLM-L6-v2"]
    emb = sides.get("ragline", {}).get("embedder")
    lines[-1] += (f", the peers in PyTorch fp32 (their default), Ragline in {emb['runtime']} {emb['precision']} (its "
                  "default on this CPU)." if emb else ".")
    return "\n".join(lines)


def _load_cells(m: dict[str, Any]) -> str:
    """The serving benchmarks' columns for one load point: tokens/s | TTFT p50 / p95 | latency p50 / p95 (ms)."""
    return (f"{m['tokens_per_s']:.1f} | {m['ttft_p50_ms']:.0f} / {m['ttft_p95_ms']:.0f} | "
            f"{m['latency_p50_ms']:.0f} / {m['latency_p95_ms']:.0f}")


def peers_answer_table(r: dict[str, Any], source: str) -> str:
    """benchmarks/peers_answer_bench.py: Ragline's graph against Haystack's and LlamaIndex's apps, answering."""
    labels = {"ragline": "Ragline `/v1/query` (vLLM)", "haystack": "Haystack pipeline in FastAPI (transformers)",
              "llamaindex": "LlamaIndex query engine in FastAPI (transformers)"}
    lines = [
        f"The demo corpus, {r['model']}, answers of at most {r['max_tokens']} tokens streamed, each side's top "
        f"{r['settings']['top_k']} chunks in its own default prompt, {r['cpus']} CPU cores; each side started afresh "
        f"in every repeat, in turns, median of {r['repeats']} (`{r['command']}`, {r['date']}, {source}). Tokens "
        "are the streamed answers re-tokenised with the generator's tokenizer, on every side:",
        "",
        "| side | clients | tokens/s | TTFT p50 / p95 ms | latency p50 / p95 ms | answer tokens | memory MB | "
        "cold start s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, x in r["sides"].items():
        for c in r["clients"]:
            m = x[f"x{c}"]
            lines.append(f"| {labels.get(name, name)} | {c} | {_load_cells(m)} | {m['answer_tokens']:.0f} | "
                         f"{x['rss_mb']:,.0f} | {x['cold_start_s']:.0f} |")
    ratios = r["ratios"]
    if ratios:
        top = r["clients"][-1]
        lines += ["", f"Ragline's tokens/s over {ratios['faster_peer']}'s, the faster peer: "
                  + ", ".join(f"{ratios[f'tokens_per_s_x{c}']:.1f}x at {c}" for c in r["clients"])
                  + f" client(s) (goal ≥ 10x at {top})."]
    v = r["versions"]
    if v:
        lines += ["", f"haystack-ai {v['haystack-ai']} with transformers-haystack {v['transformers-haystack']}, "
                  f"llama-index-core {v['llama-index-core']} with llama-index-llms-huggingface "
                  f"{v['llama-index-llms-huggingface']}, transformers {v['transformers']}, torch {v['torch']}, "
                  f"FastAPI {v['fastapi']} under uvicorn {v['uvicorn']}. Memory: the resident set of the side's "
                  "processes (Ragline: its Serve replicas and the vLLM engine)."]
    return "\n".join(lines)


BARE_VLLM = ("vllm", "vllm-uni")  # ceiling_bench's sides that run `vllm serve`


def faster_bare_vllm(ratios: dict[str, float], clients: int) -> str | None:
    """The bare vLLM side that generated the most tokens/s at `clients` (the goal is against it), if any ran."""
    ran = [s for s in BARE_VLLM if f"tokens_per_s_vs_{s}_x{clients}" in ratios]
    return min(ran, key=lambda s: ratios[f"tokens_per_s_vs_{s}_x{clients}"]) if ran else None


def ceiling_table(r: dict[str, Any], source: str) -> str:
    """benchmarks/ceiling_bench.py: Ragline's RAG endpoint against Ray Serve LLM's OpenAI app and bare vLLM."""
    e, sides = r["engine"], r["sides"]
    labels = {"ragline": "Ragline `/v1/chat/completions` (RAG)", "serve-llm": "Ray Serve LLM OpenAI app",
              "vllm": "`vllm serve`", "vllm-uni": "`vllm serve`, one process as Ragline's engine",
              "serve-llm-uni": "Ray Serve LLM OpenAI app, Ragline's one-process engine",
              "ragline-mp": "Ragline `/v1/chat/completions` (RAG), vLLM's multiprocess executor"}
    lines = [
        f"{r['model']} ({r['dtype']}, max_model_len {e['max_model_len']}, max_num_seqs {e['max_num_seqs']}, "
        f"{e['VLLM_CPU_KVCACHE_SPACE']} GiB KV cache"
        + (f", vLLM's threads bound `{bind}`" if (bind := e.get("VLLM_CPU_OMP_THREADS_BIND")) else "")
        + (f", {n} OpenMP thread{'' if n == '1' else 's'}" if (n := e.get("OMP_NUM_THREADS")) else "")
        + f"), {r['max_tokens']}-token greedy answers, {r['cpus']} CPU "
        f"cores; each side started afresh in every repeat, in turns, median of {r['repeats']} "
        f"(`{r['command']}`, {r['date']}, {source}; vLLM {r['versions']['vllm']}, Ray {r['versions']['ray']}). "
        "Ragline is asked the question; the others the prompt Ragline builds for it (same prompt tokens):",
        "",
        "| side | clients | tokens/s | TTFT p50 / p95 ms | latency p50 / p95 ms | prompt tokens | cold start s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, x in sides.items():
        for c in r["clients"]:
            m = x[f"x{c}"]
            lines.append(f"| {labels.get(name, name)} | {c} | {_load_cells(m)} | {m['prompt_tokens']:.0f} | "
                         f"{x['cold_start_s']:.0f} |")
    ratios = r["ratios"]
    top, one = r["clients"][-1], r["clients"][0]
    if best := faster_bare_vllm(ratios, top):
        ran = sum(f"tokens_per_s_vs_{s}_x{top}" in ratios for s in BARE_VLLM)
        which = labels[best] + (", the faster" if ran > 1 else "")
        lines += ["", f"Ragline over bare vLLM ({which}) at {top} clients: "
                  f"**{ratios[f'tokens_per_s_vs_{best}_x{top}']:.2f}x** tokens/s (goal ≥ 0.9x); TTFT at {one} client "
                  f"{ratios[f'ttft_p50_ms_minus_{best}_x{one}']:+.0f} ms (goal within 50 ms)."]
        if (app := ratios.get(f"tokens_per_s_vs_serve-llm_x{top}")) is not None:
            lines[-1] += f" Over Ray Serve LLM's OpenAI app: **{app:.2f}x**."
        if (mp := ratios.get(f"ragline-mp_tokens_per_s_vs_{best}_x{top}")) is not None:
            lines[-1] += (f" With vLLM's multiprocess executor (`ragline-mp`): **{mp:.2f}x**, TTFT "
                          f"{ratios[f'ragline-mp_ttft_p50_ms_minus_{best}_x{one}']:+.0f} ms.")
    at_top = {n: x[f"x{top}"] for n, x in sides.items()}
    if all("cpu_s" in m for m in at_top.values()):
        roles = sorted({k for m in at_top.values() for k in m["cpu_s"]},
                       key=lambda k: (-max(m["cpu_s"].get(k, 0.0) for m in at_top.values()), k))

        def cpu(m: dict[str, Any], k: str) -> float:
            """A role's CPU seconds; "all" of them; "idle": the cores' time over the wall time that nothing used."""
            used = sum(m["cpu_s"].values())
            return used if k == "all" else r["cpus"] * m["wall_s"] - used if k == "idle" else m["cpu_s"].get(k, 0.0)

        lines += ["", f"CPU seconds per 1,000 answer tokens at {top} clients, by process (median of the repeats):", "",
                  "| process | " + " | ".join(labels.get(n, n) for n in sides) + " |",
                  "|---|" + "---|" * len(sides)]
        for k in [*roles, "all", "idle"]:
            lines.append(f"| {k} | " + " | ".join(f"{cpu(m, k) * 1000 / (m['tokens_per_s'] * m['wall_s']):.1f}"
                                                  for m in at_top.values()) + " |")
    stages = sides.get("ragline", {}).get(f"x{r['clients'][0]}", {}).get("stages_p50_ms")
    if stages:
        lines += ["", f"Where Ragline's time goes at {r['clients'][0]} client (p50 of its own stage timings, ms): "
                  + ", ".join(f"{k} {v:.0f}" for k, v in stages.items()) + "."]
    return "\n".join(lines)


def train_table(r: dict[str, Any], source: str) -> str:
    labels = {"plain": "plain PyTorch loop, one process, all cores", "ddp": "Ragline DDP",
              "fsdp": "Ragline FSDP2", "deepspeed-zero2": "Ragline DeepSpeed ZeRO-2"}
    lines = [
        f"SFT of {r['model']}: {r['workers']} Ray Train workers of one core, micro-batch {r['micro_batch']} each, "
        f"against one process with micro-batch {r['workers'] * r['micro_batch']}; {r['grad_accum']} micro-batches "
        f"an optimizer step, the same step on both sides (padding to the job's `pad_to_multiple_of` included); "
        f"wall-clock tokens/s of steps 2 .. {r['steps'] - 1}; median of {r['repeats']} runs (`{r['command']}`, "
        f"{r['date']}, {source}):",
        "",
        "| training | tokens/s | efficiency (vs plain) | checkpoint save s |",
        "|---|---|---|---|",
    ]
    for name, label in labels.items():
        s = r["summary"][name]
        save = f"{s['checkpoint_save_s']:.2f}" if "checkpoint_save_s" in s else "–"
        lines.append(f"| {label} | {s['tokens_per_s']:.0f} | {s['vs_plain']:.2f} | {save} |")
    lines += ["", f"DDP scaling efficiency: **{r['summary']['ddp']['vs_plain']:.2f}** (goal ≥ 0.95)."]
    return "\n".join(lines)


def flops_table(r: dict[str, Any], source: str) -> str:
    """benchmarks/flops_bench.py: each way of embedding against the CPU's one-thread float32 peak."""
    p, shape = r["peak_gflop_per_s"], "x".join(map(str, r["peak_shape"]))
    lines = [f"{r['chunks']} SciFact chunks ({r['gflop']:,.0f} GFLOP of matrix products), all-MiniLM-L6-v2, median of "
             f"{r['repeats']} runs; one thread's float32 peak on a {shape} product: PyTorch {p['torch']:.0f} GFLOP/s, "
             f"OpenVINO {p['openvino']:.0f}, the rows' share is of {r['peak_used']:.0f} (`{r['command']}`, "
             f"{r['date']}, {source}):", "",
             "| embedding | threads | texts/s | GFLOP/s | of the fp32 peak per thread | cosine to fp32 (min) | "
             "OpenVINO's FullyConnected kernels |", "|---|---|---|---|---|---|---|"]
    for name, s in r["sides"].items():
        kernels = ", ".join(f"{k} x{n}" for k, n in (s["fc_kernels"] or {}).items())
        lines.append(f"| {name} | {s['threads']} | {s['texts_per_s']:.1f} | {s['gflop_per_s']:.1f} | "
                     f"{s['of_peak']:.0%} | {s['cosine_min']:.4f} | {kernels} |")
    lines += ["", f"The most a float32 pipeline on {r['hardware']['cores']} cores could gain over the plain script, "
                  f"each core at the peak: **{r['fp32_ceiling_over_plain']:.2f}x** (ingest's goal 1.8x)."]
    return "\n".join(lines)


def ci_table(r: dict[str, Any], source: str) -> str:
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(r["counts"].items()))
    # one CPU model's machines differ in speed; files from before the peak was recorded lack it
    speed = (f"; one thread's float32 peak here {r['peak_gflop_per_s']:.0f} GFLOP/s (flops_bench.py's product)"
             if "peak_gflop_per_s" in r else "")
    lines = [f"A fresh clone's `.ci/run`: **{r['clone_wall_s'] / 60:.1f} min** (budget {r['budget_s'] / 60:.0f}), "
             f"pytest {r['pytest_wall_s'] / 60:.1f} min; {counts}{speed} ({source}). The 10 slowest tests:", "",
             "| test | s |", "|---|---:|"]
    lines += [f"| `{t['test']}` | {t['seconds']:.0f} |" for t in r["slowest"][:10]]
    return "\n".join(lines)


TABLES: dict[str, Callable[[dict[str, Any], str], str]] = {"quality": quality_table, "generate": generate_table,
                                                           "answers": answers_table, "sft_cpu": sft_cpu_table,
                                                           "hostile": hostile_table, "ingest": ingest_table,
                                                           "serve": serve_table, "scale": scale_table,
                                                           "train": train_table,
                                                           "ingest_scale": ingest_scale_table,
                                                           "serve_profile": serve_profile_table, "ci": ci_table,
                                                           "documents": documents_table,
                                                           "documents_quality": documents_quality_table,
                                                           "sync": sync_table, "filter": filter_table,
                                                           "adapt": adapt_table,
                                                           "adapt_answers": adapt_answers_table, "peers": peers_table,
                                                           "ceiling": ceiling_table,
                                                           "peers_answer": peers_answer_table, "flops": flops_table}
SCRIPTS = {"quality": "quality.py", "generate": "generate_bench.py", "answers": "answers_bench.py",
           "sft_cpu": "sft_cpu_bench.py", "hostile": "hostile_bench.py", "ingest": "ingest_bench.py",
           "serve": "serve_bench.py", "scale": "scale_bench.py", "train": "train_bench.py",
           "ingest_scale": "ingest_scale_bench.py", "serve_profile": "serve_profile.py",
           "ci": "ci_durations.py", "documents": "documents_bench.py", "documents_quality": "documents_quality.py",
           "sync": "sync_bench.py", "filter": "filter_bench.py", "adapt": "adapt_bench.py",
           "adapt_answers": "adapt_answers_bench.py",
           "peers": "peers_bench.py", "ceiling": "ceiling_bench.py",
           "peers_answer": "peers_answer_bench.py", "flops": "flops_bench.py"}
# Tables whose benchmark has no committed results file yet: their block says so instead of failing the render.
PENDING = {"adapt_answers": "python benchmarks/adapt_answers_bench.py",
           "peers": "python benchmarks/peers_bench.py", "ceiling": "python benchmarks/ceiling_bench.py",
           "peers_answer": "python benchmarks/peers_answer_bench.py"}


def _filled(body: str) -> Callable[[re.Match[str]], str]:
    """A block's replacement: its markers around `body`, taken literally (a function, not a template, so that a
    backslash in the body stays one)."""
    return lambda mt: f"{mt.group(1)}{body}\n{mt.group(2)}"


def render(readme: str, results: Path = RESULTS, names: tuple[str, ...] = tuple(TABLES)) -> str:
    for name in names:
        table = TABLES[name]
        parts = []
        if name in PENDING and not any(results.glob(f"{name}-*.json")):
            parts.append(f"Not measured yet: run `{PENDING[name]}`.")
        else:
            for path in latest_per_cpu(name, results):
                r = json.loads(path.read_text())
                parts.append(f"{machine(r)}\n\n{table(r, f'`benchmarks/results/{path.name}`')}")
        body = "\n\n".join(parts)
        pattern = re.compile(rf"(<!-- table:{name} -->\n).*?(<!-- /table:{name} -->)", re.S)
        if not pattern.search(readme):
            raise ValueError(f"the page has no <!-- table:{name} --> … <!-- /table:{name} --> block")
        readme = pattern.sub(_filled(body), readme)
    return readme


def headline(results: Path = RESULTS) -> str:
    """The README's few numbers, each from the newest results file of the fastest CPU level measured, each linking
    to its full table in docs/benchmarks.md."""
    def newest(name: str) -> dict[str, Any]:
        return json.loads(latest_per_cpu(name, results)[0].read_text())

    rows = []
    r = newest("ingest")
    rows.append(("Ingest (Ray Data pipeline against a plain script, first 1,000 SciFact documents)",
                 f"{r['speedup']:.2f}x as fast", cpu_level(r), "ingest"))
    r = newest("sync")
    rows.append((f"`ragline ingest --sync` of a {r['change']:.0%} change to {r['documents']:,} documents, against a "
                 "full rebuild", f"{1 / r['ratio']:.1f}x as fast", cpu_level(r), "sync"))
    r = newest("serve")
    rows.append(("Ray Serve's overhead on `/v1/retrieve` (p50, sequential)",
                 f"{r['ratios']['serve_overhead_retrieve_p50_ms']:.1f} ms", cpu_level(r), "serving"))
    r = newest("generate")
    rows.append(("vLLM against transformers, streamed `/v1/query` at 32 clients",
                 f"{r['ratios']['query_tokens_per_s_x32']:.1f}x the tokens/s", cpu_level(r), "generation"))
    r = newest("answers")
    best = max(r["runs"].values(), key=lambda x: x["f1"])
    rows.append((f"SQuAD answers F1, fine-tuned `{best['generator']}` against the plain RAG prompt",
                 f"{best['f1']:.1f} against {r['runs']['plain']['f1']:.1f}", cpu_level(r), "answers"))
    r = newest("quality")
    h = r["median"]
    rows.append(("SciFact nDCG@10, hybrid search reranked as served (hybrid alone)",
                 f"{h['hybrid+rerank']['ndcg@10']:.3f} ({h['hybrid']['ndcg@10']:.3f})", cpu_level(r),
                 "retrieval-quality"))
    r = newest("adapt")
    n = r["ndcg"]
    # adapt's embedder as adapt.teacher auto makes it: taught only by a reranker the gate promoted
    promoted = r["adapt"]["roles"][0]["decision"] == "promoted"
    both = n["adapt_embedder_rerank"] if promoted or "contrastive_embedder" not in n else \
        n["contrastive_embedder_rerank"]
    rows.append(("SciFact nDCG@10 with no labels: hybrid search and reranker, both from `ragline adapt` "
                 "(untrained hybrid)", f"{both:.3f} ({n['untrained']['hybrid']:.3f})", cpu_level(r),
                 "adapting-without-labels"))
    r = newest("documents_quality")
    rows.append(("Questions answered from PDFs against the same text as JSONL (top 5 found)",
                 f"{r['ratios']['pdf_over_jsonl']:.3f}x", cpu_level(r), "documents"))
    if any(results.glob("peers-*.json")):  # measured once benchmarks/peers_bench.py has run
        r = newest("peers")
        x = r["ratios"]
        if "ragline_over_faster_peer" in x:
            rows.append((f"Ingest of {r['corpus']['documents']:,} SciFact documents against the faster of LlamaIndex "
                         "and Haystack (dense nDCG@10 of each)",
                         f"{x['ragline_over_faster_peer']:.2f}x the documents/s ({x['ragline_dense_ndcg@10']:.3f} "
                         f"against {x['faster_peer_dense_ndcg@10']:.3f})", cpu_level(r),
                         "against-llamaindex-and-haystack"))
    if any(results.glob("peers_answer-*.json")):
        r = newest("peers_answer")
        x, top = r["ratios"], r["clients"][-1]
        rows.append((f"Answering against the faster of a Haystack and a LlamaIndex FastAPI app, streamed at {top} "
                     "clients", f"{x[f'tokens_per_s_x{top}']:.1f}x the tokens/s", cpu_level(r),
                     "against-llamaindex-and-haystack"))
    if any(results.glob("ceiling-*.json")):
        r = newest("ceiling")
        x, top, one = r["ratios"], r["clients"][-1], r["clients"][0]
        best = faster_bare_vllm(x, top)
        rows.append((f"Ragline's RAG `/v1/chat/completions` against the faster bare `vllm serve`, tokens/s at {top} "
                     f"clients (TTFT at {one})", f"{x[f'tokens_per_s_vs_{best}_x{top}']:.2f}x "
                     f"({x[f'ttft_p50_ms_minus_{best}_x{one}']:+.0f} ms)", cpu_level(r),
                     "against-bare-vllm-and-ray-serve-llm"))
    lines = ["| measured | result | CPU level |", "|---|---|---|"]
    lines += [f"| [{what}](docs/benchmarks.md#{anchor}) | {value} | {level} |" for what, value, level, anchor in rows]
    return "\n".join(lines)


def render_headline(readme: str, results: Path = RESULTS) -> str:
    pattern = re.compile(r"(<!-- table:headline -->\n).*?(<!-- /table:headline -->)", re.S)
    if not pattern.search(readme):
        raise ValueError("README.md has no <!-- table:headline --> … <!-- /table:headline --> block")
    return pattern.sub(_filled(headline(results)), readme)


def with_hardware(result: dict[str, Any]) -> dict[str, Any]:
    """`result` with the machine it was measured on (CPU model, level, flags, cores, memory, GPUs): machines here
    differ, and a number means little without them."""
    from app import hardware

    return {**result, "hardware": hardware.detect().record()}


def results_path(name: str, result: dict[str, Any], results: Path = RESULTS) -> Path:
    """NAME-<date>-<level>-<cpu>.json; a second run of the same day on the same CPU goes beside the first as
    NAME-<date>.2-<level>-<cpu>.json (and so on), which sorts after it, so the newest is the one read and none is
    overwritten."""
    hw = result["hardware"]
    tail = f"-{hw['level']}-{cpu_slug(hw['cpu'])}.json"
    path, n = results / f"{name}-{result['date']}{tail}", 1
    while path.exists():
        n += 1
        path = results / f"{name}-{result['date']}.{n}{tail}"
    return path


def publish(name: str, result: dict[str, Any]) -> Path:
    """Writes a benchmark's `result` (its "date" an ISO date) as benchmarks/results/NAME-<date>-<level>-<cpu>.json
    and rewrites table NAME of docs/benchmarks.md and the README's headline from it; returns the file."""
    result = with_hardware(result)
    path = results_path(name, result)
    path.write_text(json.dumps(result, indent=2) + "\n")
    PAGE.write_text(render(PAGE.read_text(), names=(name,)))
    README.write_text(render_headline(README.read_text()))
    print(f"written to {path}; table {name} of docs/benchmarks.md and the README's headline rewritten")
    return path


def save(name: str, result: dict[str, Any], out: Path | None) -> Path:
    """`publish` (the default), or, for a results file a benchmark was told to write elsewhere, that file alone."""
    if out is None:
        return publish(name, result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(with_hardware(result), indent=2) + "\n")
    print(f"wrote {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 where a page is stale")
    args = ap.parse_args(argv)
    pages = {PAGE: render(PAGE.read_text()), README: render_headline(README.read_text())}
    stale = [path.relative_to(ROOT) for path, new in pages.items() if new != path.read_text()]
    if args.check:
        if stale:
            print(f"{', '.join(map(str, stale))}: tables differ from benchmarks/results: run "
                  "benchmarks/readme_tables.py", file=sys.stderr)
            return 1
        return 0
    for path, new in pages.items():
        path.write_text(new)
    print(f"docs/benchmarks.md and the README's headline rewritten from "
          f"{', '.join(latest(n).name for n in TABLES if n not in PENDING or any(RESULTS.glob(f'{n}-*.json')))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
