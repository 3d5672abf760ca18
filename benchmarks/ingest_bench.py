"""Ingest throughput: the Ragline Ray Data pipeline against a plain single-process script doing the same work.

    .venv/bin/python benchmarks/ingest_bench.py --limit 1000 --repeats 3 [--variant-check] [--eval]

(a) pipeline: `run_ingest(..., build_index=False)` into a fresh temporary storage root per repeat, on a
    local Ray started once by this script (start-up not timed); overall and per-stage throughput from the
    run report.
(b) baseline: what a user would write: read the jsonl, sha256 exact dedup of the text, chunk with the same
    tokenizer and windows (cfg.ingest.chunk), `SentenceTransformer.encode(batch_size=32,
    normalize_embeddings=True)` on "title\\ntext" with all torch threads, one parquet file. Model loading is
    timed on both sides.

The two run alternately `--repeats` times; medians are reported. The pipeline also does near-dedup (MinHash)
and text normalisation, which the baseline skips: it carries that extra work. The pipeline embeds at
`ingest.embed.runtime` and `ingest.embed.precision` (default `auto`: OpenVINO in bf16 on a CPU with native bf16),
the baseline in PyTorch fp32 as a plain script does.

`--variant-check` measures what the embedder's runtime and precision cost in quality, beside the speed: dense
nDCG@10 on the SciFact dev queries with every corpus document embedded whole ("title\ntext", the model's 256-token
truncation) by PyTorch and OpenVINO, each in fp32 and bf16, and the encoding time of each. The results go to
`benchmarks/results/ingest-<date>-<cpu level>-<cpu>.json` with the machine they ran on, and README's table for that CPU
level is rewritten. `RAGLINE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`
in front measures an AVX2 machine's choices and kernels on a faster CPU (docs/guides/configuration.md, "Measuring
another CPU"; OpenVINO's MLAS products keep this CPU's kernels).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def subset(corpus: Path, limit: int | None, tmp: Path) -> tuple[Path, int]:
    """The corpus itself, or its first `limit` lines in a temp jsonl; with the number of documents."""
    if limit is None:
        with corpus.open(encoding="utf-8") as fh:
            return corpus, sum(1 for line in fh if line.strip())
    out = tmp / corpus.name
    n = 0
    with corpus.open(encoding="utf-8") as src, out.open("w", encoding="utf-8") as dst:
        for line in src:
            if n >= limit:
                break
            if line.strip():
                dst.write(line)
                n += 1
    return out, n


def run_baseline(corpus: Path, cfg: Any, out_dir: Path) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from app.ingest.chunk import chunk_text
    from app.models import embedder

    t0 = time.perf_counter()
    model = embedder.load(cfg.ingest.embed.model)
    tokenizer = embedder.load_tokenizer(cfg.ingest.embed.model)
    t_load = time.perf_counter()
    seen: set[str] = set()
    docs = []
    with corpus.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            rec = json.loads(line)
            text = rec.get("text") or ""
            h = hashlib.sha256(text.encode("utf-8")).hexdigest()
            if not text.strip() or h in seen:
                continue
            seen.add(h)
            docs.append((str(rec["_id"]), rec.get("title") or "", text))
    t_read = time.perf_counter()
    ck = cfg.ingest.chunk
    doc_ids, idx, titles, texts, inputs = [], [], [], [], []
    for doc_id, title, text in docs:
        for i, span in enumerate(chunk_text(text, tokenizer, ck.chunk_tokens, ck.overlap_tokens)):
            piece = text[span.start_char:span.end_char]
            doc_ids.append(doc_id)
            idx.append(i)
            titles.append(title)
            texts.append(piece)
            inputs.append(f"{title}\n{piece}" if title else piece)
    t_chunk = time.perf_counter()
    vecs = model.encode(inputs, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                        show_progress_bar=False).astype(np.float32)
    t_embed = time.perf_counter()
    dim = vecs.shape[1]
    table = pa.table({"doc_id": doc_ids, "chunk_index": pa.array(idx, pa.int32()), "title": titles,
                      "text": texts,
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.reshape(-1)), dim)})
    pq.write_table(table, out_dir / "chunks.parquet")
    t_end = time.perf_counter()
    return {"seconds": t_end - t0, "documents": len(docs), "chunks": len(inputs), "torch_threads":
            torch.get_num_threads(),
            "phases_s": {"load_model": t_load - t0, "read_dedup": t_read - t_load, "chunk": t_chunk - t_read,
                         "embed": t_embed - t_chunk, "write": t_end - t_embed}}


def run_pipeline(corpus: Path, cfg: Any, out_dir: Path) -> dict[str, Any]:
    from app.indexing import run_ingest
    from app.storage import Storage

    t0 = time.perf_counter()
    report = run_ingest([str(corpus)], cfg, Storage(str(out_dir)), build_index=False)
    seconds = time.perf_counter() - t0
    from app.catalog import Catalog

    manifest = Catalog(Storage(str(out_dir))).latest("datasets")
    assert manifest is not None
    return {"seconds": seconds, "report_wall_s": report["wall_s"], "precision": manifest.embedder.precision,
            "runtime": manifest.embedder.runtime,
            "documents": report["documents"]["kept"],
            "documents_read": report["documents"]["read"], "dropped": report["documents"]["dropped"],
            "chunks": report["chunks"], "stages": report["stages"]}


VARIANTS = (("torch", "fp32"), ("torch", "bf16"), ("openvino", "fp32"), ("openvino", "bf16"))


def variant_check(dataset_dir: Path, split: str) -> dict[str, Any]:
    """Dense nDCG@10 over the whole corpus (one vector per document) and encode time, for each embedder runtime
    and precision; PyTorch fp32 (what a plain script runs) is the reference."""
    import numpy as np

    from app.eval.metrics import mean, ndcg_at_k
    from app.models import embedder
    from app.qa.beir import load_beir

    queries, qrels = load_beir(dataset_dir, split)
    ids, texts = [], []
    with (dataset_dir / "corpus.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                ids.append(str(rec["_id"]))
                texts.append(embedder.embed_text(rec.get("title") or "", rec.get("text") or "", True))
    # longest first: each encode batch pads to a near-equal length, as the pipeline's embedder does
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out: dict[str, Any] = {"documents": len(texts), "queries": len(queries), "variants": {}}
    for runtime, precision in VARIANTS:
        enc = embedder.Encoder("all-MiniLM-L6-v2", precision, runtime=runtime)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        docs = np.empty((len(texts), enc.dim), np.float32)
        docs[order] = enc.encode([texts[i] for i in order])
        seconds = time.perf_counter() - t0
        qids = list(queries)
        scores = enc.encode([queries[q] for q in qids]) @ docs.T
        ndcg = mean(ndcg_at_k([ids[j] for j in np.argsort(-row)[:10]], qrels[q], 10)
                    for q, row in zip(qids, scores, strict=True))
        out["variants"][f"{runtime} {precision}"] = {"ndcg@10": round(ndcg, 4), "encode_s": round(seconds, 1),
                                                     "docs_per_s": round(len(texts) / seconds, 1)}
        print(f"{runtime} {precision}: dense nDCG@10 {ndcg:.4f}, corpus encoded in {seconds:.1f} s", flush=True)
    ref = out["variants"]["torch fp32"]
    for v in out["variants"].values():
        v["ndcg_delta"] = round(v["ndcg@10"] - ref["ndcg@10"], 4)
        v["encode_speedup"] = round(ref["encode_s"] / v["encode_s"], 2)
    return out


def _rate(n: float, s: float) -> float | None:
    return round(n / s, 2) if s > 0 else None


def summarise(runs: list[dict[str, Any]], n_docs: int) -> dict[str, Any]:
    med = statistics.median(r["seconds"] for r in runs)
    chunks = runs[-1]["chunks"]
    return {"median_s": round(med, 3), "runs_s": [round(r["seconds"], 3) for r in runs],
            "docs_per_s": _rate(n_docs, med), "chunks_per_s": _rate(chunks, med), "chunks": chunks,
            "documents_kept": runs[-1]["documents"]}


def stage_table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage, medians over repeats: rows_in per second of stage wall time and of busy (summed task)
    time."""
    out: dict[str, Any] = {}
    for name in runs[-1]["stages"]:
        rows = [r["stages"][name] for r in runs if name in r["stages"]]
        wall = statistics.median(s["wall_s"] for s in rows)
        busy = statistics.median(s["busy_s"] for s in rows)
        n_in = rows[-1]["rows_in"]
        out[name] = {"rows_in": n_in, "rows_out": rows[-1]["rows_out"], "wall_s": round(wall, 3),
                     "busy_s": round(busy, 3), "rows_per_wall_s": _rate(n_in, wall),
                     "rows_per_busy_s": _rate(n_in, busy)}
    return out


def print_tables(result: dict[str, Any]) -> None:
    b, p = result["baseline"], result["pipeline"]
    print(f"\n{result['documents']} documents, {result['repeats']} repeat(s), {result['cpus']} CPUs")
    print(f"{'':10} {'median s':>9} {'docs/s':>9} {'chunks/s':>9} {'chunks':>7} {'kept':>6}")
    for name, s in (("baseline", b), ("pipeline", p)):
        print(f"{name:10} {s['median_s']:>9.2f} {s['docs_per_s']:>9.1f} {s['chunks_per_s']:>9.1f} "
              f"{s['chunks']:>7} {s['documents_kept']:>6}")
    print(f"pipeline / baseline speed: {result['speedup']:.2f}x")
    print(f"\n{'stage':12} {'rows_in':>8} {'rows_out':>8} {'wall s':>8} {'busy s':>8} {'rows/wall s':>12} "
          f"{'rows/busy s':>12}")
    for name, s in result["stages"].items():
        print(f"{name:12} {s['rows_in']:>8} {s['rows_out']:>8} {s['wall_s']:>8.2f} {s['busy_s']:>8.2f} "
              f"{s['rows_per_wall_s'] or 0:>12.1f} {s['rows_per_busy_s'] or 0:>12.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="jsonl corpus (BEIR corpus.jsonl)")
    ap.add_argument("--limit", type=int, default=None, help="first N documents only (default: all)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="alternating baseline/pipeline runs (median reported)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default: benchmarks/results/ingest-<date>-<cpu level>-<cpu>.json, and the "
                    "README table is rewritten)")
    ap.add_argument("--config", type=Path, default=None,
                    help="Ragline config YAML (default: built-in defaults)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override, repeatable (e.g. ingest.embed.concurrency=2)")
    ap.add_argument("--eval", action="store_true",
                    help="also evaluate retrieval (nDCG@10, recall@100) on the BEIR dataset directory "
                    "holding --corpus, "
                    "split dev (ingests the whole corpus once)")
    ap.add_argument("--variant-check", action="store_true",
                    help="also compare dense nDCG@10 and encode speed of the embedder's runtimes and precisions "
                    "on the whole corpus")
    ap.add_argument("--ray-address", default="local",
                    help="Ray to run the pipeline on (default: a private local one for the benchmark)")
    ap.add_argument("--eval-split", default="dev")
    ap.add_argument("--eval-storage", default=None,
                    help="storage root for --eval (its eval/<dataset> subfolder is used; "
                    "default: the config's)")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be at least 1")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    if not args.corpus.is_file():
        ap.error(f"corpus {args.corpus} does not exist")

    import ray

    from app.config import load_config

    cfg = load_config(args.config, args.overrides)
    # A private local Ray by default: `ray.init()` alone would join a persistent `ray start` cluster on this
    # machine (the services' one), whose restarts or load would then end up in the measurement.
    ray.init(address=args.ray_address, include_dashboard=False)
    cpus = int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))
    baseline_runs: list[dict[str, Any]] = []
    pipeline_runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ragline-bench-") as tmp_s:
        tmp = Path(tmp_s)
        corpus, n_docs = subset(args.corpus, args.limit, tmp)
        for r in range(args.repeats):
            for name, fn, runs in (("baseline", run_baseline, baseline_runs),
                                   ("pipeline", run_pipeline, pipeline_runs)):
                out_dir = tmp / f"{name}-{r}"
                out_dir.mkdir()
                res = fn(corpus, cfg, out_dir)
                runs.append(res)
                print(f"[{r + 1}/{args.repeats}] {name}: {res['seconds']:.2f} s, {res['chunks']} chunks",
                      flush=True)
    b, p = summarise(baseline_runs, n_docs), summarise(pipeline_runs, n_docs)
    b["torch_threads"] = baseline_runs[-1]["torch_threads"]
    b["phases_s"] = {k: round(statistics.median(r["phases_s"][k] for r in baseline_runs), 3)
                     for k in baseline_runs[-1]["phases_s"]}
    p["report_wall_s"] = [r["report_wall_s"] for r in pipeline_runs]
    p["dropped"] = pipeline_runs[-1]["dropped"]
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/ingest_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "precision": pipeline_runs[-1]["precision"], "runtime": pipeline_runs[-1]["runtime"],
        "corpus": str(args.corpus), "documents": n_docs, "limit": args.limit, "repeats": args.repeats,
        "cpus": cpus, "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "config": {"chunk": cfg.ingest.chunk.model_dump(), "embed": cfg.ingest.embed.model_dump(),
                   "dedup": cfg.ingest.dedup.model_dump()},
        "baseline": b, "pipeline": p, "speedup": round(b["median_s"] / p["median_s"], 3),
        "stages": stage_table(pipeline_runs),
    }
    print_tables(result)

    if args.variant_check:
        result["variant_check"] = variant_check(args.corpus.parent, args.eval_split)

    if args.eval:
        from app import envs
        from app.eval.retrieval import evaluate_retrieval

        root = args.eval_storage or cfg.storage or envs.storage_root()
        ev = evaluate_retrieval(args.corpus.parent, args.eval_split, root, cfg)
        result["eval"] = ev
        print(f"\nretrieval on {ev['dataset']}/{ev['split']} ({ev['queries']} queries, "
              f"index v{ev['index_version']})")
        print(f"{'mode':8} {'nDCG@10':>8} {'R@100':>8}")
        for mode, m in ev["modes"].items():
            print(f"{mode:8} {m['ndcg@10']:>8.4f} {m['recall@100']:>8.4f}")

    readme_tables.save("ingest", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
