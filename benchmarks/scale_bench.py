"""How retrieval cost grows with the index: exact FAISS search against the approximate index Ragline builds past
`index.exact_max_vectors` (HNSW by default), at growing numbers of vectors, in one run.

    .venv/bin/python benchmarks/scale_bench.py [--sizes 10000 100000 1000000] [--queries 300]

The vectors are real: SciFact's corpus embedded by the packaged MiniLM (bf16, each document whole), grown to each
size by copies of those vectors with Gaussian noise (renormalised; cosine ≈ 0.9 to their source), so the index has
the clustered shape of real embeddings rather than the uniform spread of random vectors, which no ANN index
searches well. The queries are SciFact's own, embedded the same way. Per size, in a
fresh process, each of exact (flat), HNSW and IVF (Ragline's defaults) is built and reports its build time, the p50
latency of one-query searches (top 10), recall@10 against exact search, and the peak resident memory its build and
searches added. Beside them, what the chunk table costs at that many rows: Arrow columns (what `Index` keeps)
against the list of Python dicts it held before. Writes `benchmarks/results/scale-<date>.json`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
NOISE = 0.018  # per-dimension σ: the noise vector's norm ≈ 0.018·√384 ≈ 0.35, a copy's cosine to its source ≈ 0.94


def embed_scifact(cache: Path, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents, queries) as unit float32 rows, cached in `cache` (the corpus takes ~2 min on 2 cores)."""
    if not (cache / "docs.npy").exists():
        from app import hardware
        from app.models import embedder

        enc = embedder.Encoder("all-MiniLM-L6-v2", hardware.choose_precision("auto", "cpu"))
        texts = [embedder.embed_text(r.get("title") or "", r.get("text") or "", True)
                 for r in map(json.loads, (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()) if r]
        queries = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").read_text().splitlines() if line]
        cache.mkdir(parents=True, exist_ok=True)
        np.save(cache / "docs.npy", enc.encode(texts))
        np.save(cache / "queries.npy", enc.encode(queries))
    return np.load(cache / "docs.npy"), np.load(cache / "queries.npy")[:n_queries]


def grow(docs: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = docs[rng.integers(0, len(docs), n)] + rng.normal(0, NOISE, (n, docs.shape[1])).astype(np.float32)
    out[: min(n, len(docs))] = docs[:n]  # the real vectors themselves first
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def one_size(n: int, cache: Path, n_queries: int) -> dict[str, Any]:
    """Runs in its own process, so that what one size allocates does not hide in the next one's numbers."""
    from app.config import IndexConfig
    from app.index.build import dense_index

    docs, queries = embed_scifact(cache, n_queries)
    vectors = grow(docs, n)
    out: dict[str, Any] = {"vectors": n}
    ranked: dict[str, np.ndarray] = {}
    for kind in ("flat", "hnsw", "ivf"):
        cfg = IndexConfig(exact_max_vectors=n) if kind == "flat" else IndexConfig(exact_max_vectors=1, ann=kind)
        base = _reset_peak()
        t0 = time.perf_counter()
        index, params = dense_index(vectors, cfg)
        build_s = time.perf_counter() - t0
        if params.type == "hnsw":
            index.hnsw.efSearch = params.ef_search  # type: ignore[attr-defined]
        elif params.type == "ivf":
            index.nprobe = params.nprobe  # type: ignore[attr-defined]
        times, ids = [], []
        for q in queries:
            t0 = time.perf_counter()
            _, found = index.search(q.reshape(1, -1), 10)
            times.append((time.perf_counter() - t0) * 1e3)
            ids.append(found[0])
        ranked[kind] = np.stack(ids)
        out[kind] = {"build_s": round(build_s, 2), "search_p50_ms": round(statistics.median(times), 3),
                     "peak_mb": round(_peak_mb() - base, 1),
                     "recall@10": round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in
                                                       zip(ids, ranked["flat"], strict=True)])), 4)}
        del index
    return out


def chunk_table_memory(n: int) -> dict[str, float]:
    """MB of n chunk rows (about SciFact's chunk text) as Arrow columns and as a list of Python dicts."""
    import tracemalloc

    import pyarrow as pa

    text = "word " * 200  # about a 256-token chunk
    table = pa.table({"chunk_id": [f"{i:032x}" for i in range(n)], "doc_id": [str(i // 2) for i in range(n)],
                      "chunk_index": pa.array([i % 2 for i in range(n)], pa.int32()),
                      "source": ["/data/scifact/corpus.jsonl"] * n, "title": ["A title of some words"] * n,
                      "text": [text + str(i) for i in range(n)], "start_char": pa.array([0] * n, pa.int32()),
                      "end_char": pa.array([len(text)] * n, pa.int32()), "metadata": ["{}"] * n})
    tracemalloc.start()
    rows = table.to_pylist()
    dicts_mb = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    assert len(rows) == n
    return {"arrow_mb": round(table.nbytes / 2**20, 1), "python_dicts_mb": round(dicts_mb, 1)}


def _reset_peak() -> float:
    """Resets the process's peak resident set (Linux: clear_refs 5) and returns the current one, in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mb("VmRSS")


def _peak_mb() -> float:
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ragline-scale-bench")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size in this process
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps({**one_size(args.one, args.cache, args.queries), "chunks": chunk_table_memory(args.one)}))
        return 0
    embed_scifact(args.cache, args.queries)  # once, before the per-size processes
    sizes = []
    for n in args.sizes:
        proc = subprocess.run([sys.executable, __file__, "--one", str(n), "--queries", str(args.queries),
                               "--cache", str(args.cache)], check=True, capture_output=True, text=True)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        sizes.append(r)
        print(f"{n:>9} vectors: " + " | ".join(
            f"{k} build {r[k]['build_s']} s, p50 {r[k]['search_p50_ms']} ms, recall@10 {r[k]['recall@10']}, "
            f"+{r[k]['peak_mb']} MB" for k in ("flat", "hnsw", "ivf"))
            + f" | chunk table: Arrow {r['chunks']['arrow_mb']} MB, dicts {r['chunks']['python_dicts_mb']} MB",
            flush=True)
    date = datetime.date.today().isoformat()
    result = {"date": date, "command": "python benchmarks/scale_bench.py " + " ".join(argv or sys.argv[1:]),
              "queries": args.queries, "noise_sigma": NOISE, "sizes": sizes}
    readme_tables.publish("scale", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
