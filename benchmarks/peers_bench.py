"""Ragline against what users would pick instead, LlamaIndex and Haystack: ingest speed, peak memory and the
retrieval quality each gets from what it ingested, and retrieval quality per millisecond, on SciFact in one run.

    .venv/bin/python benchmarks/peers_bench.py [--repeats 3] [--limit N] [--only llamaindex haystack ragline]
        [--llamaindex-workers N] [--chunks-per-query 30] [--ragline-set KEY=VALUE ...] [--work DIR] [--out FILE]

Corpus: SciFact's corpus.jsonl (5,183 abstracts; `--limit N`: every document a dev query judges relevant, then the
others in file order up to N, in file order), queries: its dev split (210 queries with judgements).

Sides, each run `--repeats` times in turn (LlamaIndex, Haystack, Ragline, LlamaIndex, ...), medians reported:
  LlamaIndex: `IngestionPipeline([SentenceSplitter(chunk_size, chunk_overlap), HuggingFaceEmbedding])`, run with
      `num_workers` = the CPU count (its parallel ingestion; `--llamaindex-workers 1`: sequential) and its cache
      off (as its parallel-ingestion example does to measure speed), into a `VectorStoreIndex`. The splitter counts
      the embedder's own tokens (its default tokenizer, tiktoken's cl100k, belongs to another model), with Ragline's
      chunk sizes; LlamaIndex counts the title (its metadata, embedded as "title: ...") inside the chunk size.
  Haystack: an indexing Pipeline, `DocumentSplitter(split_by="word")` -> `SentenceTransformersDocumentEmbedder
      (meta_fields_to_embed=["title"])` -> `DocumentWriter` into an `InMemoryDocumentStore`. Its splitter counts
      words, so its split_length and split_overlap are Ragline's token counts divided by the corpus's MiniLM tokens
      per word (about 1.55 on SciFact).
  Ragline: `ragline --address local ingest --in-process --json corpus.jsonl` (its defaults: chunking by the
      embedder's tokens, near-dedup, the embedder's runtime and precision for this CPU, FAISS and BM25 indexes
      built), into a fresh storage root each repeat.
Every side embeds "title + chunk" with the same packaged all-MiniLM-L6-v2 directory (Ragline's `embedder.resolve`),
offline (HF_HUB_OFFLINE=1).

Ingest is timed from the moment the side's process is spawned to the moment its store is searchable (a peer prints
a line then; Ragline's is the moment its report is printed, before Ray shuts down): interpreter start-up, imports,
model loading, and for Ragline its private Ray's start-up, are all counted on every side. Each side's own count of
the time after start-up is recorded too (peers: after their imports; Ragline: its run report's wall_s). Peak
memory: the largest sum over the side's process tree (its workers, Ray's processes) of PSS (shared pages split
between the processes sharing them) and of RSS, sampled every 0.5 s.

Retrieval, after each ingest, from each side's own store, one query at a time, in process (each side's first 5
queries asked once beforehand, untimed): LlamaIndex's index retriever (dense) and BM25Retriever
(llama-index-retrievers-bm25), Haystack's query Pipeline (SentenceTransformersTextEmbedder ->
InMemoryEmbeddingRetriever) and InMemoryBM25Retriever, Ragline's Searcher (what its Retriever deployment runs) in
dense, BM25 and hybrid mode. Every retriever returns `--chunks-per-query` chunks (30), collapsed to documents (a
document ranks at its best chunk), scored by nDCG@10 against the dev qrels; the latency is per query, embedding the
query included. The ratio printed: Ragline's documents/s over the faster peer's, beside the dense nDCG@10 of both
(the goal: at least 2x at equal or better nDCG).

LlamaIndex and Haystack run from an environment of the benchmark's own, benchmarks/.venv-peers (git-ignored, made
on first use with `python3.11 -m venv`; torch, sentence-transformers and transformers at Ragline's versions, so
that the embedding code is the same), never Ragline's dependencies. Writes
benchmarks/results/peers-<date>-<cpu level>-<cpu>.json and rewrites the docs' table and README headline (or `--out FILE`
alone).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables, venvs  # noqa: E402
from benchmarks.documents_bench import git_commit  # noqa: E402

WORKER = ROOT / "benchmarks" / "peers_worker.py"
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "scifact"
BENCH_ENV = ROOT / "benchmarks" / ".venv-peers"
# The peers, pinned; torch, sentence-transformers and transformers follow Ragline's installed versions.
PEERS = ["llama-index-core==0.14.25", "llama-index-embeddings-huggingface==0.8.0",
         "llama-index-retrievers-bm25==0.8.0", "llama-index-llms-huggingface==0.8.0", "haystack-ai==3.4.1",
         "sentence-transformers-haystack==2.0.0", "transformers-haystack==2.0.0"]
SIDES = ("llamaindex", "haystack", "ragline")
PEER_SIDES = ("llamaindex", "haystack")
LABELS = {"llamaindex": "LlamaIndex `IngestionPipeline` → `VectorStoreIndex`",
          "haystack": "Haystack indexing `Pipeline` → `InMemoryDocumentStore`",
          "ragline": "Ragline `ragline ingest --in-process`"}
MODE_LABELS = {"dense": "dense", "bm25": "BM25", "lexical": "BM25", "hybrid": "hybrid (RRF)"}
PEER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HAYSTACK_TELEMETRY_ENABLED": "False",
            "DO_NOT_TRACK": "1"}
MARKER = "PEERS-INGESTED"
K = 10  # nDCG@K
SAMPLE_S = 0.5


# -- the corpus and the queries ---------------------------------------------------------------------------------


def slice_ids(ids: list[str], relevant: set[str], limit: int | None) -> list[str]:
    """The documents to ingest, in corpus order: all of them, or every relevant one and then the others in corpus
    order up to `limit`."""
    if limit is None:
        return list(ids)
    have = relevant & set(ids)
    if limit < len(have):
        raise ValueError(f"--limit {limit} is below the {len(have)} documents the queries judge relevant")
    fill = limit - len(have)
    keep = set(have)
    for d in ids:
        if fill <= 0:
            break
        if d not in keep:
            keep.add(d)
            fill -= 1
    return [d for d in ids if d in keep]


def write_corpus(source: Path, dest: Path, limit: int | None, relevant: set[str]) -> int:
    """The corpus (or its slice) as dest/corpus.jsonl; the number of documents."""
    with source.open(encoding="utf-8") as fh:
        lines = [line for line in fh if line.strip()]
    ids = [str(json.loads(line)["_id"]) for line in lines]
    keep = set(slice_ids(ids, relevant, limit))
    dest.mkdir(parents=True, exist_ok=True)
    chosen = [line if line.endswith("\n") else line + "\n" for line, d in zip(lines, ids, strict=True) if d in keep]
    (dest / "corpus.jsonl").write_text("".join(chosen), encoding="utf-8")
    return len(chosen)


def tokens_per_word(corpus: Path, model: str) -> float:
    """MiniLM tokens per whitespace-separated word over the corpus's texts: converts Ragline's chunk sizes (tokens)
    into Haystack's (words)."""
    from app.models import embedder

    tok = embedder.load_tokenizer(model)
    texts = [json.loads(line).get("text") or "" for line in corpus.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    tokens = sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))
    return tokens / max(sum(len(t.split()) for t in texts), 1)


# -- scoring ------------------------------------------------------------------------------------------------------


def doc_ndcg(rankings: Mapping[str, list[str]], qrels: Mapping[str, Mapping[str, int]], k: int = K) -> float:
    """Mean nDCG@k over the judged queries of chunk rankings (each chunk named by its document id), each collapsed
    to documents first (a document ranks at its best chunk); a judged query without a ranking scores 0."""
    from app.eval.metrics import collapse_to_docs, mean, ndcg_at_k

    return mean(ndcg_at_k(collapse_to_docs(list(rankings.get(q, []))), rel, k) for q, rel in qrels.items())


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


# -- the peers' environment ---------------------------------------------------------------------------------------


def requirements() -> list[str]:
    """torch first (pip takes the CPU wheel this machine has), then the embedding stack and the HTTP server (the
    answering benchmark's apps) at Ragline's versions."""
    same = [f"{p}=={importlib.metadata.version(p).split('+')[0]}"
            for p in ("torch", "sentence-transformers", "transformers", "fastapi", "uvicorn")]
    return [*same, *PEERS]


PROBE = ("import llama_index.core, llama_index.embeddings.huggingface, llama_index.retrievers.bm25, "
         "llama_index.llms.huggingface, haystack, haystack_integrations.components.embedders.sentence_transformers, "
         "haystack_integrations.components.generators.transformers, sentence_transformers, torch, fastapi, uvicorn")


def bench_env() -> Path:
    """The peers' environment's python, made (or remade, when its requirements changed) first."""

    def finish(python: Path) -> None:  # imports once, so that no timed run pays for compiling bytecode
        venvs.step([str(python), "-c", PROBE], env={**os.environ, **PEER_ENV})

    return venvs.own_env(BENCH_ENV, "peers-bench.json", requirements(), finish)


def peer_versions(python: Path) -> dict[str, str]:
    names = ("llama-index-core", "llama-index-embeddings-huggingface", "llama-index-retrievers-bm25",
             "llama-index-llms-huggingface", "haystack-ai", "sentence-transformers-haystack", "transformers-haystack",
             "sentence-transformers", "transformers", "torch", "bm25s", "fastapi", "uvicorn")
    code = f"import importlib.metadata as m, json; print(json.dumps({{p: m.version(p) for p in {names!r}}}))"
    out: dict[str, str] = json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                                    check=True).stdout)
    return out


# -- running a side -----------------------------------------------------------------------------------------------


class TreeMemory(threading.Thread):
    """The peak, over samples every SAMPLE_S seconds, of the summed PSS and RSS of a process and its descendants."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_pss, self.peak_rss, self.samples = pid, 0, 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self.done.is_set():
            pss = rss = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    info = p.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
            self.samples += 1
            self.done.wait(SAMPLE_S)

    def snapshot(self) -> dict[str, float]:
        return {"peak_pss_mb": round(self.peak_pss / 2**20, 1), "peak_rss_mb": round(self.peak_rss / 2**20, 1),
                "samples": self.samples}


TIMEOUT_S = 3 * 3600  # one side's process; a hung side is killed (its process group) and recorded as failed


def run_process(argv: list[str], env: dict[str, str], cwd: Path, log: Path,
                ready: str | None) -> dict[str, Any]:
    """Runs argv, sampling its tree's memory; `ready`: the prefix of the stdout line at which the side's ingest
    is over (its time and its memory peak so far are taken there). Stdout is kept, stderr goes to `log`."""
    with log.open("w") as err:
        t0 = time.perf_counter()
        spawned = time.time()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)
        timer = threading.Timer(TIMEOUT_S, lambda: _kill_group(proc.pid, err))
        timer.daemon = True
        timer.start()
        mem = TreeMemory(proc.pid)
        mem.start()
        out_lines: list[str] = []
        at: float | None = None
        memory: dict[str, float] | None = None
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                if at is None and ready is not None and line.startswith(ready):
                    at = time.perf_counter() - t0
                    memory = mem.snapshot()
                out_lines.append(line)
            rc = proc.wait()
        except BaseException:  # Ctrl-C: its own session does not get the signal, so take it down with us
            _kill_group(proc.pid, err)
            raise
        wall = time.perf_counter() - t0
        timer.cancel()
        mem.done.set()
        mem.join()
    return {"rc": rc, "wall_s": wall, "ready_s": at, "spawned_at": spawned, "memory": memory or mem.snapshot(),
            "stdout": "".join(out_lines)}


def _kill_group(pid: int, log: Any) -> None:
    log.write(f"\npeers_bench: timed out after {TIMEOUT_S} s or interrupted; killing its process group\n")
    log.flush()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, 9)


def failure(res: dict[str, Any], log: Path) -> dict[str, Any]:
    tail = log.read_text(errors="replace")[-3000:]
    lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
    return {"ok": False, "error": (lines[-1] if lines else f"exit {res['rc']}")[:500], "stderr_tail": tail}


def run_peer(python: Path, side: str, corpus: Path, settings: Path, queries: Path, work: Path) -> dict[str, Any]:
    out, log = work / f"{side}.json", work / f"{side}.log"
    out.unlink(missing_ok=True)
    res = run_process([str(python), str(WORKER), side, str(corpus), str(settings), str(queries), str(out)],
                      {**os.environ, **PEER_ENV}, work, log, MARKER)
    if res["rc"] != 0 or res["ready_s"] is None or not out.is_file():
        return failure(res, log)
    r = json.loads(out.read_text())
    ph = r["phases"]
    return {"ok": True, "seconds": res["ready_s"], "process_wall_s": res["wall_s"], **res["memory"],
            "startup_s": ph["imported_at"] - res["spawned_at"], "ingest_s": ph["ingested_at"] - ph["imported_at"],
            "model_load_s": ph["model_loaded_at"] - ph["imported_at"], "documents": r["documents"],
            "chunks": r["chunks"], "retrieval": r["retrieval"], "settings": r.get("settings", {}),
            "threads": r.get("threads"), **{k: r[k] for k in ("bm25_build_s", "bm25_error") if k in r}}


def ragline_command(corpus: Path, storage: Path, overrides: list[str]) -> tuple[list[str], dict[str, str]]:
    """The Ragline side, as a user runs it: (argv, environment). `--address local`: a private Ray, started and
    stopped by the command, never another one this machine may run. PYTHONPATH: this checkout's `app` (the venv's
    editable install may point at another worktree)."""
    sets = [a for o in overrides for a in ("--set", o)]
    argv = [str(ROOT / ".venv" / "bin" / "ragline"), "--storage", str(storage), "--address", "local", *sets,
            "ingest", "--in-process", "--json", str(corpus)]
    return argv, {**os.environ, "PYTHONPATH": str(ROOT), "RAGLINE_STORAGE": str(storage)}


def run_ragline(corpus: Path, storage: Path, overrides: list[str], settings: Path, queries: Path,
                work: Path) -> dict[str, Any]:
    shutil.rmtree(storage, ignore_errors=True)
    argv, env = ragline_command(corpus, storage, overrides)
    log = work / "ragline.log"
    res = run_process(argv, env, ROOT, log, "{")  # --json: the report is its only stdout
    if res["rc"] != 0 or res["ready_s"] is None:
        return failure(res, log)
    report = json.loads(res["stdout"][res["stdout"].index("{"):])
    out, slog = work / "ragline-search.json", work / "ragline-search.log"
    out.unlink(missing_ok=True)
    searched = run_process([sys.executable, str(WORKER), "ragline-search", str(storage), str(settings),
                            str(queries), str(out)], env, ROOT, slog, None)
    if searched["rc"] != 0 or not out.is_file():
        return failure(searched, slog)
    s = json.loads(out.read_text())
    return {"ok": True, "seconds": res["ready_s"], "process_wall_s": res["wall_s"], **res["memory"],
            "startup_s": res["ready_s"] - report["wall_s"], "ingest_s": report["wall_s"],
            "documents": report["documents"]["kept"], "documents_read": report["documents"]["read"],
            "chunks": report["chunks"], "index_version": report.get("index_version"),
            "embed_stage_s": report.get("stages", {}).get("embed", {}).get("wall_s"),
            "retrieval": s["retrieval"], "search_load_s": s["load_s"], "embedder": s["embedder"],
            "threads": s.get("threads")}


# -- the summary --------------------------------------------------------------------------------------------------


def summarise(name: str, runs: list[dict[str, Any]], n_docs: int, qrels: Mapping[str, Mapping[str, int]]
              ) -> dict[str, Any]:
    ok = [r for r in runs if r["ok"]]
    if not ok:
        return {"label": LABELS[name], "ok": False, "error": runs[-1]["error"],
                "stderr_tail": runs[-1].get("stderr_tail", "")}
    med = median(r["seconds"] for r in ok)
    last = ok[-1]
    out: dict[str, Any] = {
        "label": LABELS[name], "ok": True, "runs_s": [round(r["seconds"], 2) for r in ok], "median_s": round(med, 2),
        "docs_per_s": round(n_docs / med, 2), "chunks": last["chunks"], "documents": last["documents"],
        "startup_s": round(median(r["startup_s"] for r in ok), 2),
        "ingest_s": round(median(r["ingest_s"] for r in ok), 2),
        "peak_pss_mb": round(median(r["peak_pss_mb"] for r in ok), 1),
        "peak_rss_mb": round(median(r["peak_rss_mb"] for r in ok), 1),
        "process_wall_s": [round(r["process_wall_s"], 2) for r in ok],
    }
    if len(ok) < len(runs):
        out["failed_runs"] = [r["error"] for r in runs if not r["ok"]]
    for key in ("model_load_s", "embed_stage_s", "search_load_s", "bm25_build_s"):
        if last.get(key) is not None:
            out[key] = round(median(r[key] for r in ok), 2)
    for key in ("settings", "threads", "embedder", "bm25_error", "documents_read", "index_version"):
        if key in last:
            out[key] = last[key]
    retrieval: dict[str, Any] = {}
    for mode in last["retrieval"]:
        per_run = [doc_ndcg(r["retrieval"][mode]["rankings"], qrels) for r in ok if mode in r["retrieval"]]
        retrieval[mode] = {"ndcg@10": round(median(per_run), 4), "ndcg@10_runs": [round(x, 4) for x in per_run],
                           "p50_ms": round(median(r["retrieval"][mode]["p50_ms"] for r in ok), 2),
                           "p95_ms": round(median(_p95(r["retrieval"][mode]["latency_ms"]) for r in ok), 2)}
    out["retrieval"] = retrieval
    return out


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def ratios(sides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Ragline's documents/s over the faster peer's, and the dense nDCG@10 of both."""
    peers = {n: s for n, s in sides.items() if n in PEER_SIDES and s.get("ok")}
    if not peers:
        return {}
    faster = max(peers, key=lambda n: peers[n]["docs_per_s"])
    out: dict[str, Any] = {"faster_peer": faster, "faster_peer_docs_per_s": peers[faster]["docs_per_s"],
                           "faster_peer_dense_ndcg@10": peers[faster]["retrieval"]["dense"]["ndcg@10"]}
    r = sides.get("ragline", {})
    if r.get("ok"):
        out["ragline_over_faster_peer"] = round(r["docs_per_s"] / peers[faster]["docs_per_s"], 3)
        dense = r["retrieval"]["dense"]["ndcg@10"]
        out["ragline_dense_ndcg@10"] = dense
        out["dense_ndcg_delta"] = round(dense - out["faster_peer_dense_ndcg@10"], 4)
        best = max(p["retrieval"]["dense"]["ndcg@10"] for p in peers.values())
        out["dense_ndcg_delta_vs_best_peer"] = round(dense - best, 4)
        out["goal_met"] = out["ragline_over_faster_peer"] >= 2.0 and out["dense_ndcg_delta"] >= 0
    return out


def print_result(result: dict[str, Any]) -> None:
    c = result["corpus"]
    print(f"\n{c['documents']} SciFact documents, {result['queries']} dev queries; median of {result['repeats']} "
          f"run(s), sides in turn")
    print(f"{'':11} {'seconds':>8} {'docs/s':>8} {'start-up':>9} {'chunks':>7} {'PSS MB':>8} {'RSS MB':>8}")
    for name, s in result["sides"].items():
        if not s["ok"]:
            print(f"{name:11} failed: {s['error']}")
            continue
        print(f"{name:11} {s['median_s']:>8.1f} {s['docs_per_s']:>8.2f} {s['startup_s']:>9.1f} {s['chunks']:>7} "
              f"{s['peak_pss_mb']:>8.0f} {s['peak_rss_mb']:>8.0f}")
    print(f"\n{'retrieval':20} {'nDCG@10':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for name, s in result["sides"].items():
        for mode, m in s.get("retrieval", {}).items():
            print(f"{name + ' ' + MODE_LABELS[mode]:20} {m['ndcg@10']:>8.4f} {m['p50_ms']:>8.2f} {m['p95_ms']:>8.2f}")
    r = result["ratios"]
    if "ragline_over_faster_peer" in r:
        print(f"\nRagline documents/s / {r['faster_peer']}'s: {r['ragline_over_faster_peer']:.2f}x (goal >= 2x); "
              f"dense nDCG@10 {r['ragline_dense_ndcg@10']:.4f} against {r['faster_peer_dense_ndcg@10']:.4f} "
              f"({r['dense_ndcg_delta']:+.4f})")


# -- the run ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="BEIR SciFact directory")
    ap.add_argument("--split", default="dev")
    ap.add_argument("--limit", type=int, default=None,
                    help="N documents: every one a query judges relevant, then others (default: the whole corpus)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, in turn (median reported)")
    ap.add_argument("--only", nargs="+", choices=SIDES, default=list(SIDES), metavar="NAME",
                    help=f"run only these sides ({', '.join(SIDES)})")
    ap.add_argument("--llamaindex-workers", type=int, default=os.cpu_count() or 1,
                    help="IngestionPipeline.run(num_workers=...) (default: the CPU count; 1: sequential)")
    ap.add_argument("--chunks-per-query", type=int, default=30,
                    help="chunks each retriever returns, collapsed to documents before nDCG@10")
    ap.add_argument("--warmup", type=int, default=5, help="queries asked once, untimed, before the timed pass")
    ap.add_argument("--ragline-set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for Ragline (repeatable)")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the corpus, logs and storage roots here (default: a temporary directory)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default: benchmarks/results/peers-<date>-<cpu level>-<cpu>.json, and the docs' "
                    "table and README headline are rewritten)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or (args.limit is not None and args.limit < 1) or args.chunks_per_query < K:
        ap.error(f"--repeats and --limit must be at least 1, --chunks-per-query at least {K}")

    from app.config import load_config
    from app.models import embedder
    from app.qa.beir import load_beir

    dataset = args.dataset.resolve()
    queries, qrels = load_beir(dataset, args.split)
    relevant = {d for rel in qrels.values() for d in rel}
    cfg = load_config(None, args.ragline_set)
    ck = cfg.ingest.chunk
    model_dir = str(Path(embedder.resolve(cfg.ingest.embed.model)).resolve())
    python = bench_env()
    load_before = os.getloadavg()  # the machine may be shared: what else ran is part of the numbers
    with tempfile.TemporaryDirectory(prefix="ragline-peers-") as tmp_s:
        work = args.work.resolve() if args.work else Path(tmp_s)
        work.mkdir(parents=True, exist_ok=True)
        try:
            n_docs = write_corpus(dataset / "corpus.jsonl", work / "corpus", args.limit, relevant)
        except ValueError as e:
            ap.error(str(e))
        corpus = work / "corpus" / "corpus.jsonl"
        tpw = tokens_per_word(corpus, cfg.ingest.embed.model)
        settings = {"model_dir": model_dir, "chunk_tokens": ck.chunk_tokens, "overlap_tokens": ck.overlap_tokens,
                    "split_words": round(ck.chunk_tokens / tpw), "split_overlap_words": round(ck.overlap_tokens / tpw),
                    "llamaindex_workers": args.llamaindex_workers, "chunks_per_query": args.chunks_per_query,
                    "warmup": args.warmup, "overrides": args.ragline_set}
        (work / "settings.json").write_text(json.dumps(settings))
        (work / "queries.json").write_text(json.dumps(queries))
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in SIDES if n in args.only}
        for r in range(args.repeats):
            for name in runs:
                if name == "ragline":
                    res = run_ragline(corpus, work / "ragline-storage", args.ragline_set, work / "settings.json",
                                      work / "queries.json", work)
                else:
                    res = run_peer(python, name, corpus, work / "settings.json", work / "queries.json", work)
                runs[name].append(res)
                state = (f"{res['seconds']:.1f} s, {res['chunks']} chunks, peak {res['peak_pss_mb']:.0f} MB PSS"
                         if res["ok"] else f"failed: {res['error']}")
                print(f"[{r + 1}/{args.repeats}] {name}: {state}", flush=True)
        sides = {name: summarise(name, rs, n_docs, qrels) for name, rs in runs.items()}
    facts = peer_versions(python)
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/peers_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "repeats": args.repeats, "queries": len(queries), "split": args.split,
        "load_avg_1m": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "corpus": {"dataset": dataset.name, "documents": n_docs, "limit": args.limit,
                   "relevant_documents": len(relevant)},
        "settings": {**{k: v for k, v in settings.items() if k != "model_dir"},
                     "model": cfg.ingest.embed.model, "tokens_per_word": round(tpw, 3), "k": K},
        "versions": {"peers": facts, "ragline": {"commit": git_commit(ROOT), "python": platform.python_version(),
                                                 **{p: importlib.metadata.version(p) for p in
                                                    ("ray", "torch", "sentence-transformers", "transformers",
                                                     "openvino", "faiss-cpu", "bm25s")}}},
        "ragline": {"command": shlex.join(["ragline", "--address", "local",
                                           *ragline_command(Path("corpus.jsonl"), Path("S"), args.ragline_set)[0][5:]]),
                    "overrides": args.ragline_set},
        "sides": sides, "ratios": ratios(sides),
    }
    print_result(result)
    readme_tables.save("peers", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
