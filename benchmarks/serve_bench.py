"""Serving benchmark: the Serve graph over HTTP against the same components called in-process (no Serve, no HTTP),
in one run, on the embedded demo corpus (Python reference topics).

Measures p50/p99 latency of retrieve and query (sequential), throughput at 8 and 32 concurrent clients, the
Serve overhead, what batching buys the retriever and reranker under concurrency (the graph redeployed with
max_batch_size=1), and what HAProxy, Ragline's HTTP proxy, buys over Serve's own Python proxy (a Ray started with
RAY_SERVE_ENABLE_HA_PROXY=0 RAY_SERVE_ENABLE_DIRECT_INGRESS=0). Each repeat runs every side once, in turn, and each
number is the median over the repeats. The reranker is a CrossEncoder with MiniLM's architecture (its head
untrained: the timing is what matters here). Prints a table and the ratios; writes
benchmarks/results/serve-<date>.json and rewrites the README table.

    python benchmarks/serve_bench.py [--repeats 3] [--storage DIR] [--only "retrieve seq" "retrieve x32" ...]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shlex
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import ray
from ray import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys, envs, hardware, serving  # noqa: E402
from app.config import AppConfig, load_config  # noqa: E402
from app.demo_corpus import write_demo_corpus  # noqa: E402
from app.indexing import run_ingest  # noqa: E402
from app.models import cross_encoder, embedder  # noqa: E402
from app.rag.flow import RagFlow  # noqa: E402
from app.rag.protocol import (  # noqa: E402
    Document,
    Embedded,
    Generation,
    Passage,
    Piece,
    Ranking,
    Retrieved,
    Search,
    Source,
)
from app.raycluster import init_local  # noqa: E402
from app.storage import Storage  # noqa: E402
from benchmarks.readme_tables import publish  # noqa: E402
from deployments.generator import Generator  # noqa: E402

QUESTIONS = [
    "How do I make sure clean-up code runs even when an exception is raised?",
    "What does the with statement do?", "How are default argument values evaluated?",
    "What is a generator expression?", "How does the global statement work?", "What is a lambda expression?",
    "How are exceptions chained?", "What does the yield statement do?", "How does operator precedence work?",
    "What is the difference between is and ==?", "How are class attributes looked up?", "What is a coroutine?",
]
MAX_TOKENS = 16
# Serve's own HTTP proxy (an actor) instead of HAProxy, as Ragline ran it before (without direct ingress, which
# throughput-optimised Serve turns on: the proxy would then run on the head node only, each Ingress on its own port)
PYTHON_PROXY = {"RAY_SERVE_ENABLE_HA_PROXY": "0", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"}
PASSAGES = 20  # reranked per /v1/rerank call


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


async def run_clients(call, n_clients: int, n_requests: int) -> dict[str, float]:
    """`n_clients` loops share `n_requests` calls; returns latency percentiles (ms) and throughput (req/s)."""
    latencies: list[float] = []
    todo = iter(range(n_requests))

    async def client() -> None:
        for i in todo:
            t0 = time.perf_counter()
            await call(QUESTIONS[i % len(QUESTIONS)])
            latencies.append((time.perf_counter() - t0) * 1e3)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(n_clients)))
    wall = time.perf_counter() - t0
    return {"p50_ms": pct(latencies, 50), "p99_ms": pct(latencies, 99), "rps": n_requests / wall}


class LocalBackends:
    """What a user writes without Serve: the same components as plain objects in one process, called from
    threads (the index + embedder, a CrossEncoder, the generator's engine and prompt)."""

    def __init__(self, storage: str, cfg: AppConfig, reranker_path: str):
        from app.index.search import Index, Searcher

        self.index = Index.load(Storage(storage))
        self.searcher = Searcher(self.index, cfg.search)
        self.cross_encoder = cross_encoder.load(reranker_path, cfg.serve.reranker.max_length)
        # the deployment's class, usable as a plain object
        self.generator = Generator.func_or_class(storage, cfg.serve.generator, cfg.serve.poll_interval_s)
        self.rerank_cfg = cfg.serve.reranker
        self.rerank_precision = hardware.choose_precision(self.rerank_cfg.precision, "cpu")

    async def retrieve(self, search: Search) -> Retrieved:
        hits = await asyncio.to_thread(self.searcher.search, search.query, None, search.k)
        return Retrieved(collection=search.collection, index_version=self.index.version, mode=search.mode or "hybrid",
                         embedder=self.index.manifest.embedder.name, hits=hits,
                         timings_ms={})

    def _rank(self, query: str, documents: list[Document], top_n: int, retrieved: bool) -> Ranking:
        """As the Reranker deployment orders them: retrieved passages fused with their retrieval order."""
        pairs = [(query, cross_encoder.passage_text(title, text)) for title, text in documents]
        scores = cross_encoder.score(self.cross_encoder, pairs, self.rerank_precision)
        weight = self.rerank_cfg.retriever_weight if retrieved else 0.0
        order = cross_encoder.rerank_order(scores, weight, self.rerank_cfg.rrf_k)[:top_n]
        return Ranking("bench-cross-encoder", order, [scores[i] for i in order])

    async def rerank(self, query: str, documents: list[Document], top_n: int, retrieved: bool) -> Ranking:
        return await asyncio.to_thread(self._rank, query, documents, top_n, retrieved)

    def stream(self, question: str, passages: list[Passage], generation: Generation) -> AsyncIterator[Piece]:
        return self.generator.stream(question, passages, generation)

    async def embed(self, texts: list[str], collection: str) -> Embedded:
        raise NotImplementedError("not measured")

    async def source(self, chunk_id: str, collection: str) -> Source:
        raise NotImplementedError("not measured")

    async def ready(self) -> dict[str, dict[str, Any]]:
        return {}


class InProcess:
    """The same RagFlow the Ingress runs, over LocalBackends."""

    def __init__(self, storage: str, cfg: AppConfig, reranker_path: str):
        self.flow = RagFlow(LocalBackends(storage, cfg, reranker_path), candidates=cfg.serve.reranker.candidates)
        self.generation = Generation(max_tokens=MAX_TOKENS)

    async def retrieve(self, q: str, k: int = 5) -> Retrieved:
        return await self.flow.retrieve(Search(q, k=k), {})

    async def rerank(self, q: str) -> Any:
        return await self.flow.rank(q, [("", d) for d in self.docs], PASSAGES)

    async def query(self, q: str) -> Any:
        timings: dict[str, float] = {}
        context = await self.flow.context(Search(q, k=5), timings)
        return await self.flow.answer(q, context, self.generation, timings)


class OverHttp:
    """The endpoint through aiohttp: the client shares this machine's two cores with the server, and httpx cost
    1.4 ms of CPU per request against aiohttp's 0.5 (and ~2 ms of sequential p50), measured side by side."""

    def __init__(self, session: aiohttp.ClientSession):
        self.session = session

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        async with self.session.post(path, json=body) as r:
            assert r.status == 200, await r.text()
            return await r.json()

    async def retrieve(self, q: str) -> Any:
        return await self._post("/v1/retrieve", {"query": q, "top_k": 5})

    async def rerank(self, q: str) -> Any:
        return await self._post("/v1/rerank", {"query": q, "documents": self.docs, "top_n": PASSAGES})

    async def query(self, q: str) -> Any:
        return await self._post("/v1/query", {"question": q, "max_tokens": MAX_TOKENS})


PLAN = {  # name → (method, clients, requests)
    "retrieve seq": ("retrieve", 1, 30), "retrieve x8": ("retrieve", 8, 80), "retrieve x32": ("retrieve", 32, 160),
    "rerank x32": ("rerank", 32, 64),
    "query seq": ("query", 1, 3), "query x8": ("query", 8, 8), "query x32": ("query", 32, 32),
}


async def measure(target: Any, names: list[str]) -> dict[str, dict[str, float]]:
    """One run of each of `names` against `target` (after a warm-up)."""
    await run_clients(target.retrieve, 4, 8)  # warm-up
    await run_clients(target.rerank, 1, 1)
    out: dict[str, dict[str, float]] = {}
    for name in names:
        method, clients, n = PLAN[name]
        out[name] = await run_clients(getattr(target, method), clients, n)
        print(f"  {name:14s} p50 {out[name]['p50_ms']:8.1f} ms  p99 {out[name]['p99_ms']:8.1f} ms  "
              f"{out[name]['rps']:7.2f} req/s", flush=True)
    return out


def median_runs(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """name → metric → the median over the runs."""
    return {name: {k: statistics.median(r[name][k] for r in runs) for k in runs[0][name]} for name in runs[0]}


def make_reranker(cache: Path) -> str:
    """A CrossEncoder directory with MiniLM's architecture (what `ragline train reranker` fine-tunes)."""
    from sentence_transformers import CrossEncoder

    path = cache / "bench-cross-encoder"
    if not (path / "config.json").exists():
        CrossEncoder(embedder.resolve("all-MiniLM-L6-v2"), num_labels=1).save(str(path))
    return str(path)


def deploy(storage: Storage, overrides: list[str], port: int, generator: dict[str, Any] | None = None,
           api_keys_file: str | None = None) -> None:
    """`generator`: more options for the Generator deployment; `api_keys_file`: None for the storage's key."""
    # the benchmark measures throughput, not load shedding: a long generator queue
    # …and no request deadline: at 32 clients a query waits minutes for the CPU generator
    schema = serving.load_serve_config(None, storage, None, [*overrides, "serve.api.request_timeout_s=3600"],
                                       api_keys_file=api_keys_file,
                                       deployment_options={"Generator": {"max_queued_requests": 1024,
                                                                         **(generator or {})}})
    schema.http_options.port = port
    schema.http_options.request_timeout_s = 3600
    serving.deploy(schema)


def demo_storage(root: str, serve_env: dict[str, str] | None = None) -> Storage:
    """A local Ray (Ragline's Serve settings, `serve_env` over them), and the storage root with the demo corpus
    indexed (ingested on first use)."""
    storage = Storage(str(Path(root).resolve()))
    init_local(serve_env, namespace="ragline", include_dashboard=False, log_to_driver=False)
    if not storage.exists("indexes"):
        corpus = write_demo_corpus(storage.local_path("demo-corpus"))
        run_ingest([str(corpus)], load_config(None, ["ingest.embed.concurrency=1"]), storage)
    return storage


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default=str(ROOT / ".ragline-bench"), help="Storage root (demo corpus indexed)")
    ap.add_argument("--repeats", type=int, default=3, help="Repeats per measurement; the median is reported")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--only", nargs="+", choices=list(PLAN), default=list(PLAN), metavar="NAME",
                    help=f"measure only these ({', '.join(PLAN)}); the ratios that need others are left out")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for both sides, repeatable (e.g. serve.retriever.batch_wait_timeout_s=0)")
    args = ap.parse_args()
    storage = demo_storage(args.storage)
    reranker = make_reranker(storage.local_path())
    # the transformers engine on both sides: the in-process side has no Serve to reach the vLLM application
    # through (benchmarks/generate_bench.py compares the engines)
    overrides = [f"serve.reranker.model={reranker}", f"serve.reranker.candidates={PASSAGES}",
                 "serve.generator.engine=transformers", *args.overrides]
    cfg = load_config(None, overrides)
    key = apikeys.load(storage)[0][0]
    local = InProcess(storage.uri, cfg, reranker)
    docs = [h.text for h in asyncio.run(local.retrieve(QUESTIONS[0])).hits] * 4

    results: dict[str, Any] = {"date": datetime.date.today().isoformat(),
                               "command": "python benchmarks/serve_bench.py " + shlex.join(sys.argv[1:]),
                               "max_tokens": MAX_TOKENS, "repeats": args.repeats,
                               "retriever": cfg.serve.retriever.model_dump(), "ray_serve_env": envs.RAY_SERVE_ENV,
                               "python_proxy_env": PYTHON_PROXY}
    local.docs = docs[:PASSAGES]  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{args.port}"
    retrievals = [n for n in ("retrieve seq", "retrieve x32") if n in args.only]
    # name → (the Serve settings over Ragline's, config overrides, what it measures); None: in process
    phases: dict[str, tuple[dict[str, str], list[str], list[str]] | None] = {
        "in_process": None,
        "serve": ({}, [], args.only),
        "serve_unbatched": ({}, ["serve.retriever.max_batch_size=1", "serve.reranker.max_batch_size=1"],
                            [n for n in ("retrieve x32", "rerank x32") if n in args.only]),
        "serve_python_proxy": (PYTHON_PROXY, [], retrievals)}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in phases}
    running_env: dict[str, str] = {}
    # Each repeat runs every phase once, in turn, so a slow minute of this machine falls on all of them alike.
    for repeat in range(args.repeats):
        for name, phase in phases.items():
            if phase is None:
                print(f"[{repeat + 1}/{args.repeats}] in-process (no Serve, no HTTP):", flush=True)
                runs[name].append(asyncio.run(measure(local, args.only)))
                continue
            env, extra, names = phase
            if not names:
                continue
            if env != running_env:  # Serve's proxy is chosen when Ray starts: a Ray of its own
                serve.shutdown()
                ray.shutdown()
                for setting in running_env:  # init_local set them in this process's environment: not for the next
                    os.environ.pop(setting, None)
                demo_storage(args.storage, env)
                running_env = env
            deploy(storage, overrides + extra, args.port)
            print(f"[{repeat + 1}/{args.repeats}] {name} (HTTP → Ingress → deployments):", flush=True)

            async def over_http(names: list[str]) -> dict[str, dict[str, float]]:
                async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {key}"},
                                                 connector=aiohttp.TCPConnector(limit=64),
                                                 timeout=aiohttp.ClientTimeout(total=3600)) as session:
                    http = OverHttp(session)
                    http.docs = docs[:PASSAGES]  # type: ignore[attr-defined]
                    return await measure(http, names)

            runs[name].append(asyncio.run(over_http(names)))
            serve.delete("ragline")
    del local
    results.update({name: median_runs(r) for name, r in runs.items() if r})

    s, p, u = results["serve"], results["in_process"], results.get("serve_unbatched", {})
    py = results.get("serve_python_proxy", {})
    ratios = {
        **{f"serve_overhead_{k.split()[0]}_p50_ms": s[k]["p50_ms"] - p[k]["p50_ms"]
           for k in ("retrieve seq", "query seq") if k in s},
        **{f"serve_vs_in_process_rps_{k.replace(' ', '_')}": s[k]["rps"] / p[k]["rps"]
           for k in ("retrieve x8", "retrieve x32", "query x8", "query x32") if k in s},
        **{f"batch_gain_{k.replace(' ', '_')}": s[k]["rps"] / u[k]["rps"] for k in ("retrieve x32", "rerank x32")
           if k in u},
        **({"serve_x32_vs_sequential_rps_retrieve": s["retrieve x32"]["rps"] / s["retrieve seq"]["rps"]}
           if {"retrieve seq", "retrieve x32"} <= s.keys() else {}),
        **({"python_proxy_overhead_retrieve_p50_ms": py["retrieve seq"]["p50_ms"] - p["retrieve seq"]["p50_ms"]}
           if "retrieve seq" in py else {}),
        **({"haproxy_vs_python_proxy_rps_retrieve_x32": s["retrieve x32"]["rps"] / py["retrieve x32"]["rps"]}
           if "retrieve x32" in py else {}),
    }
    results["ratios"] = ratios
    print("\nratios:")
    for k, v in ratios.items():
        print(f"  {k:45s} {v:8.2f}")
    publish("serve", results)


if __name__ == "__main__":
    main()
