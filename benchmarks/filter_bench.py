"""What a metadata filter costs a search: each mode (dense, BM25, hybrid) unfiltered against filtered to 10% of the
chunks (`{"department": "d3"}`) and to a 30% year range, on an index of 100,000 chunks, with the recall of the
filtered top 10 against an exact filtered search (so speed is not bought by losing results).

    .venv/bin/python benchmarks/filter_bench.py [--chunks 100000] [--queries 200] [--repeats 3]

The index is built by `app.index.build.write_index_files`, so its dense index is the product's choice at that size
(HNSW past `index.exact_max_vectors`). Its chunks are 3 sentences drawn (seeded) from SciFact's abstracts, 4 chunks
a document; a document's metadata a department d0-d9 and a year 2000-2019, uniform, and its position (distinct, as
a record's is). The vectors are synthetic, since the search is measured, not the embedder: 2,000 random unit
centres and each vector one of them plus Gaussian noise (cosine ≈ 0.8 to its centre), renormalised, so that the
dense index has the clustered shape of real embeddings (uniform random vectors, which no ANN index searches well,
would measure HNSW's failure instead). A query is a
SciFact question's text and a noisy copy of a chunk's vector. Each repeat times the queries of each variant of a
mode in turns (one process; the metadata, and each filter's rows and vectors, are made in a warm-up first, whose
time is reported). Writes `benchmarks/results/filter-<date>-<cpu>.json` and rewrites the README table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.readme_tables import publish  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
DIM, CENTRES, NOISE, K = 384, 2000, 0.035, 10  # NOISE per dimension: its norm ≈ 0.035·√384 ≈ 0.69
FILTERS: dict[str, object] = {"department (10%)": {"department": "d3"},
                              "year range (30%)": {"year": {"$gte": 2005, "$lt": 2011}}}


def chunk_table(n: int, seed: int = 0) -> tuple[Any, np.ndarray]:
    """(the chunk rows with embeddings, as `write_index_files` takes them; the (n, DIM) vectors)."""
    import pyarrow as pa

    from app.dataset import CHUNK_SCHEMA

    abstracts = [json.loads(line)["text"] for line in (SCIFACT / "corpus.jsonl").read_text().splitlines() if line]
    sentences = [s for a in abstracts for s in re.split(r"(?<=[.!?])\s+", a) if len(s.split()) >= 5]
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    centres = rng.normal(size=(CENTRES, DIM)).astype(np.float32)
    vectors = centres[rng.integers(0, CENTRES, n)] + rng.normal(0, NOISE, (n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # each document's metadata distinct, as a record's is (ingest adds its position in its file)
    docs = [json.dumps({"department": f"d{rnd.randrange(10)}", "year": 2000 + rnd.randrange(20),
                        "position": f"line {d + 1}"}) for d in range((n + 3) // 4)]
    rows = {"chunk_id": [f"c{i:07d}" for i in range(n)], "doc_id": [f"doc{i // 4}" for i in range(n)],
            "chunk_index": [i % 4 for i in range(n)], "source": [f"/corpus/doc{i // 4}.txt" for i in range(n)],
            "title": [""] * n, "text": [" ".join(rnd.sample(sentences, 3)) for _ in range(n)],
            "start_char": [0] * n, "end_char": [0] * n, "n_tokens": [0] * n, "pages": [[] for _ in range(n)],
            "section": [""] * n, "location": [""] * n, "original": [""] * n,
            "metadata": [docs[i // 4] for i in range(n)]}
    table = pa.Table.from_pydict(rows, schema=CHUNK_SCHEMA)
    embedding = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)
    return table.append_column("embedding", embedding), vectors


def exact(index: Any, query: str, vector: np.ndarray, mode: str, allowed: np.ndarray, cfg: Any,
          vectors: np.ndarray) -> set[int]:
    """The filtered top K by brute force: every allowed vector scored, every allowed chunk's BM25 score."""
    import bm25s

    from app.fusion import rrf

    n = max(K, cfg.candidates) if mode == "hybrid" else K
    dense_scores = vectors[allowed] @ vector
    dense = [int(allowed[i]) for i in np.argsort(-dense_scores, kind="stable")[:n]]
    tokens = bm25s.tokenize([query], stopwords=index.stopwords, return_ids=False, show_progress=False)[0]
    lex_scores = index.bm25.get_scores(tokens)[allowed]
    lexical = [int(allowed[i]) for i in np.argsort(-lex_scores, kind="stable")[:n] if lex_scores[i] > 0]
    if mode == "dense":
        return set(dense)
    if mode == "lexical":
        return set(lexical)
    return {i for i, _ in rrf([dense, lexical], [cfg.dense_weight, cfg.lexical_weight], cfg.rrf_k)[:K]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from app.catalog import EmbedderInfo, Manifest
    from app.config import IndexConfig, SearchConfig
    from app.filters import parse_filter
    from app.index.build import write_index_files
    from app.index.search import Index

    t0 = time.perf_counter()
    table, vectors = chunk_table(args.chunks)
    rng = np.random.default_rng(1)
    picks = rng.integers(0, args.chunks, args.queries)
    qvecs = vectors[picks] + rng.normal(0, NOISE, (args.queries, DIM)).astype(np.float32)
    qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)
    questions = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").read_text().splitlines() if line]
    qtexts = [questions[i % len(questions)] for i in range(args.queries)]
    cfg, search_cfg = IndexConfig(), SearchConfig()
    with tempfile.TemporaryDirectory(prefix="ragline-filter-") as tmp:
        params = write_index_files(table, cfg, True, Path(tmp))
        build_s = time.perf_counter() - t0
        print(f"{args.chunks:,} chunks indexed ({params.type}) in {build_s:.0f} s", flush=True)
        manifest = Manifest(kind="indexes", version=1, created_at="", embedder=EmbedderInfo(
            name="synthetic", revision="-", dim=DIM), config=cfg.model_dump(),
            extra={"dense": params.model_dump(exclude_none=True)})
        index = Index(manifest, Path(tmp))
        filters = {"unfiltered": None, **{name: parse_filter(f) for name, f in FILTERS.items()}}
        t1 = time.perf_counter()
        index.metadata  # noqa: B018  # built here, once, as the first filtered search would
        metadata_s = time.perf_counter() - t1
        warm: dict[str, float] = {}
        for name, f in filters.items():  # each filter's rows, and vectors where exact: what a first search pays
            t1 = time.perf_counter()
            index.search(qtexts[0], qvecs[0], "dense", K, search_cfg, where=f)
            warm[name] = round((time.perf_counter() - t1) * 1e3, 2)
        shares = {name: 1.0 if f is None else len(index.metadata.rows(f)) / args.chunks
                  for name, f in filters.items()}
        out: dict[str, Any] = {}
        for mode in ("dense", "lexical", "hybrid"):
            times: dict[str, list[float]] = {name: [] for name in filters}
            for _ in range(args.repeats):
                for name, f in filters.items():  # in turns
                    t1 = time.perf_counter()
                    for text, vec in zip(qtexts, qvecs, strict=True):
                        index.search(text, vec, mode, K, search_cfg, where=f)  # type: ignore[arg-type]
                    times[name].append((time.perf_counter() - t1) / args.queries * 1e3)
            row: dict[str, Any] = {}
            for name, f in filters.items():
                allowed = np.arange(args.chunks) if f is None else index.metadata.rows(f)
                recalls = []
                for text, vec in zip(qtexts, qvecs, strict=True):
                    hits = index.search(text, vec, mode, K, search_cfg, where=f)  # type: ignore[arg-type]
                    got = {int(h.chunk_id[1:]) for h in hits}  # chunk c0000042 is row 42
                    assert np.isin(list(got), allowed).all(), "a filtered search returned a chunk outside the filter"
                    truth = exact(index, text, vec, mode, allowed, search_cfg, vectors)
                    recalls.append(len(got & truth) / max(len(truth), 1))
                ms = statistics.median(times[name])
                row[name] = {"ms": round(ms, 3), "runs_ms": [round(t, 3) for t in times[name]],
                             "recall@10": round(float(np.mean(recalls)), 4)}
            base = row["unfiltered"]["ms"]
            for name in FILTERS:
                row[name]["ratio"] = round(row[name]["ms"] / base, 3)
            out[mode] = row
            print(f"{mode}: " + ", ".join(f"{n} {r['ms']:.2f} ms (x{r.get('ratio', 1):.2f}, "
                                          f"recall {r['recall@10']:.3f})" for n, r in row.items()), flush=True)
    date = datetime.date.today().isoformat()
    command = " ".join(["python benchmarks/filter_bench.py", *(argv if argv is not None else sys.argv[1:])])
    publish("filter", {"date": date, "command": command, "chunks": args.chunks, "queries": args.queries,
                       "repeats": args.repeats, "k": K, "dense_index": params.model_dump(exclude_none=True),
                       "build_s": round(build_s, 1), "documents": index.metadata.n_docs,
                       "metadata_s": round(metadata_s, 3), "first_search_ms": warm,
                       "shares": {n: round(s, 4) for n, s in shares.items()}, "filters": FILTERS, "modes": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
