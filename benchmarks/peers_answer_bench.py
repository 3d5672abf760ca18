"""Answering against what users would pick instead: Ragline's RAG graph against a Haystack pipeline and a LlamaIndex
query engine, each in a FastAPI app the way their docs show it, on the same corpus, embedder and generator model, at
1, 8 and 32 concurrent streamed clients, in one run.

    python benchmarks/peers_answer_bench.py [--repeats 3] [--max-tokens 32] [--only ragline haystack llamaindex]

Corpus: Ragline's embedded demo corpus (the Python language reference topics, one markdown file each); questions:
the serving benchmark's (benchmarks/serve_bench.py). Every side embeds with the packaged all-MiniLM-L6-v2, chunks at
Ragline's chunk sizes, puts its top `serve.generator.passages` chunks in its own default prompt and answers greedily
with the packaged SmolLM2, up to `--max-tokens` tokens, streamed:
  ragline:    `/v1/query` with `stream: true` (its graph: retriever, prompt, vLLM through Ray Serve LLM).
  haystack:   a Pipeline (SentenceTransformersTextEmbedder -> InMemoryEmbeddingRetriever -> ChatPromptBuilder ->
              TransformersChatGenerator) behind FastAPI, streamed through the generator's streaming callback.
  llamaindex: `VectorStoreIndex.as_query_engine(llm=HuggingFaceLLM, streaming=True)` behind FastAPI, its
              `response_gen` streamed.
(benchmarks/peers_apps.py, run by the peers' own environment, benchmarks/.venv-peers; never Ragline's dependencies.)

Each side is started afresh in every repeat, in turns; the medians are reported. Tokens are counted the same way on
every side: the streamed answer's text re-tokenised with SmolLM2's tokenizer. Tokens/s is over each run's wall time;
TTFT is the time to the first non-empty piece of answer. Writes benchmarks/results/peers_answer-<date>-<cpu
level>.json and rewrites its table in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
from ray import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys, envs  # noqa: E402
from app.config import AppConfig, GeneratorConfig  # noqa: E402
from app.demo_corpus import write_demo_corpus  # noqa: E402
from app.models import embedder  # noqa: E402
from app.models import generator as generator_model  # noqa: E402
from benchmarks import readme_tables  # noqa: E402
from benchmarks.load import closed_loop, pct  # noqa: E402
from benchmarks.peers_bench import PEER_ENV, bench_env, peer_versions  # noqa: E402
from benchmarks.serve_bench import QUESTIONS, demo_storage, deploy  # noqa: E402
from benchmarks.server_process import ServerProcess  # noqa: E402

APPS = ROOT / "benchmarks" / "peers_apps.py"
CLIENTS = (1, 8, 32)
SIDES = ("ragline", "haystack", "llamaindex")
READY = "PEERS-READY"

Call = Callable[[int], Awaitable[tuple[float, float, str]]]  # request i -> (ttft_s, latency_s, answer text)


async def run_clients(call: Call, clients: int, requests: int, count: Callable[[str], int]) -> dict[str, float]:
    done, wall = await closed_loop(call, clients, requests)
    tokens = [count(text) for _, _, text in done]
    ttft, latency = [d[0] * 1e3 for d in done], [d[1] * 1e3 for d in done]
    return {"tokens_per_s": sum(tokens) / wall, "ttft_p50_ms": pct(ttft, 50), "ttft_p95_ms": pct(ttft, 95),
            "latency_p50_ms": pct(latency, 50), "latency_p95_ms": pct(latency, 95), "wall_s": wall,
            "answer_tokens": statistics.mean(tokens)}


async def cold_then_measure(call: Call, count: Callable[[str], int], t0: float) -> tuple[float, dict[str, Any]]:
    """Seconds from `t0` (the side's start) to its first answer, then a warm-up and the measurements; one event loop
    for all, as the client's connections belong to the loop that opened them."""
    await call(0)
    cold = time.perf_counter() - t0
    await run_clients(call, 2, 2, count)  # warm-up
    return cold, {f"x{c}": await run_clients(call, c, max(c, 3), count) for c in CLIENTS}


def ragline_call(url: str, key: str) -> Call:
    """/v1/query streamed (server-sent events: `token` events, then `done`)."""
    client = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=3600,
                               limits=httpx.Limits(max_connections=64))

    async def call(i: int) -> tuple[float, float, str]:
        t0, ttft, text = time.perf_counter(), None, []
        async with client.stream("POST", "/v1/query", json={"question": QUESTIONS[i % len(QUESTIONS)],
                                                           "stream": True}) as r:
            assert r.status_code == 200, await r.aread()
            event = None
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "token":
                    piece = json.loads(line[6:])["text"]
                    if piece and ttft is None:
                        ttft = time.perf_counter() - t0
                    text.append(piece)
                elif line.startswith("data: ") and event == "error":
                    raise RuntimeError(line)
        latency = time.perf_counter() - t0
        return (ttft if ttft is not None else latency), latency, "".join(text)

    return call


def peer_call(url: str) -> Call:
    """A peer app's POST /query: the answer as a plain-text stream."""
    client = httpx.AsyncClient(base_url=url, timeout=3600, limits=httpx.Limits(max_connections=64))

    async def call(i: int) -> tuple[float, float, str]:
        t0, ttft, text = time.perf_counter(), None, []
        async with client.stream("POST", "/query", json={"question": QUESTIONS[i % len(QUESTIONS)]}) as r:
            assert r.status_code == 200, await r.aread()
            async for piece in r.aiter_text():
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(piece)
        latency = time.perf_counter() - t0
        return (ttft if ttft is not None else latency), latency, "".join(text)

    return call


def tree_rss_mb(pid: int) -> float:
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


class Bench:
    def __init__(self, args: argparse.Namespace, peers: bool):
        self.args = args
        self.storage = demo_storage(args.storage)
        self.key = apikeys.load(self.storage)[0][0]
        self.url = f"http://127.0.0.1:{args.port}"
        cfg = AppConfig()
        self.gen = GeneratorConfig(max_new_tokens=args.max_tokens, stop=[])
        self.generator_dir = generator_model.resolve(self.gen.model, envs.cache_dir())
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.generator_dir)
        self.count: Callable[[str], int] = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
        self.corpus = write_demo_corpus(self.storage.local_path("demo-corpus"))
        ck, embedder_dir = cfg.ingest.chunk, str(embedder.resolve(cfg.ingest.embed.model))
        # Haystack's splitter counts words: Ragline's token counts at this corpus's MiniLM tokens per word
        words = " ".join(p.read_text(encoding="utf-8") for p in sorted(self.corpus.glob("*.md"))).split()
        tpw = len(AutoTokenizer.from_pretrained(embedder_dir)(" ".join(words), add_special_tokens=False,
                                                               verbose=False)["input_ids"]) / len(words)
        self.settings = {"embedder_dir": embedder_dir, "generator_dir": self.generator_dir,
                         "chunk_tokens": ck.chunk_tokens, "overlap_tokens": ck.overlap_tokens,
                         "split_words": round(ck.chunk_tokens / tpw), "split_overlap_words": round(
                             ck.overlap_tokens / tpw), "top_k": self.gen.passages, "max_new_tokens": args.max_tokens}
        self.python = bench_env() if peers else None
        Path(args.work).mkdir(parents=True, exist_ok=True)
        (Path(args.work) / "settings.json").write_text(json.dumps(self.settings))

    def ragline(self) -> tuple[Call, Callable[[], float]]:
        deploy(self.storage, [f"serve.generator.max_new_tokens={self.args.max_tokens}", "serve.generator.stop=[]"],
               self.args.port)

        def stop() -> float:
            rss = sum(tree_rss_mb(p.pid) for p in psutil.process_iter(["cmdline"])
                      if any("ServeReplica:ragline" in a for a in p.info["cmdline"] or []))
            serve.delete("ragline")
            serve.delete(self.gen.vllm.llm_app)
            return rss
        return ragline_call(self.url, self.key), stop

    def peer(self, side: str) -> tuple[Call, Callable[[], float]]:
        assert self.python is not None
        port = self.args.port + 1
        url = f"http://127.0.0.1:{port}"
        server = ServerProcess(f"{side}'s app", [str(self.python), str(APPS), side, str(self.corpus),
                                                 str(Path(self.args.work) / "settings.json"), str(port)],
                               {**os.environ, **PEER_ENV}, Path(self.args.work) / f"{side}.log", f"{url}/health",
                               timeout_s=900)

        def stop() -> float:
            rss = tree_rss_mb(server.proc.pid)
            server.stop()
            return rss
        return peer_call(url), stop

    def run_side(self, side: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        call, stop = self.ragline() if side == "ragline" else self.peer(side)
        try:
            cold, r = asyncio.run(cold_then_measure(call, self.count, t0))
        finally:
            rss = stop()
        for c in CLIENTS:
            m = r[f"x{c}"]
            print(f"  {side:10s} x{c:<3d} {m['tokens_per_s']:7.1f} tokens/s  TTFT p50 {m['ttft_p50_ms']:7.0f} ms  "
                  f"latency p50/p95 {m['latency_p50_ms']:7.0f}/{m['latency_p95_ms']:7.0f} ms", flush=True)
        return {**r, "cold_start_s": cold, "rss_mb": rss}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in ("cold_start_s", "rss_mb")}
    for c in CLIENTS:
        points = [r[f"x{c}"] for r in runs]
        out[f"x{c}"] = {k: statistics.median(p[k] for p in points) for k in points[0]}
    return out


def ratios(sides: dict[str, Any]) -> dict[str, Any]:
    """Ragline's tokens/s over the faster peer's at each client count (faster: at the most clients)."""
    peers = [s for s in sides if s != "ragline"]
    if "ragline" not in sides or not peers:
        return {}
    top = f"x{CLIENTS[-1]}"
    faster = max(peers, key=lambda s: sides[s][top]["tokens_per_s"])
    return {"faster_peer": faster, **{f"tokens_per_s_x{c}": sides["ragline"][f"x{c}"]["tokens_per_s"] /
                                      sides[faster][f"x{c}"]["tokens_per_s"] for c in CLIENTS}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default=str(ROOT / ".ragline-bench"), help="Storage root (demo corpus indexed)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, in turn (the median is reported)")
    ap.add_argument("--max-tokens", type=int, default=32, help="answer tokens per request, at most")
    ap.add_argument("--only", nargs="+", choices=SIDES, default=list(SIDES), metavar="NAME",
                    help=f"measure only these sides ({', '.join(SIDES)})")
    ap.add_argument("--port", type=int, default=8768, help="Serve's HTTP port (a peer's app listens on the next)")
    ap.add_argument("--work", default="/tmp/peers-answer-bench", help="the apps' settings and logs")
    ap.add_argument("--out", type=Path, default=None, help="results file (default: benchmarks/results/, and the "
                    "docs table is rewritten)")
    args = ap.parse_args(argv)
    bench = Bench(args, peers=any(s != "ragline" for s in args.only))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.only}
    for rep in range(args.repeats):
        print(f"repeat {rep + 1}/{args.repeats}", flush=True)
        for side in args.only:
            runs[side].append(bench.run_side(side))
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(), "command": "python benchmarks/peers_answer_bench.py",
        "model": bench.gen.model, "max_tokens": args.max_tokens, "repeats": args.repeats, "clients": list(CLIENTS),
        "cpus": psutil.cpu_count(), "settings": bench.settings,
        "versions": peer_versions(bench.python) if bench.python else {},
        "sides": {s: summarise(r) for s, r in runs.items()}, "runs": runs}
    result["ratios"] = ratios(result["sides"])
    print(json.dumps(result["ratios"], indent=1))
    readme_tables.save("peers_answer", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
