"""Where the Serve overhead of /v1/retrieve goes: sequential p50 latency of each layer of the path, in one run,
the CPU time each process spends per request, then a py-spy profile of every Serve process while one client sends
/v1/retrieve.

Layers (the demo corpus, top 5, the same questions): the flow in-process (no Serve: the in-process side of
serve_bench.py); the Retriever deployment called through a DeploymentHandle from this driver (one Serve hop, its
its batcher and its threads); GET /healthz over HTTP (the HTTP proxy → Ingress, no stage); POST /v1/retrieve over
HTTP (proxy → Ingress → Retriever). The differences are what each layer adds. The HTTP proxy is HAProxy (Ragline's
setting), or Serve's Python proxy where RAY_SERVE_ENABLE_HA_PROXY=0 RAY_SERVE_ENABLE_DIRECT_INGRESS=0 are set.

The profile (py-spy at 100 Hz, CPU samples only) sorts each sample by the innermost frame that says whose work it
is: Ragline's code (`app/`, `deployments/`), the model and the index (OpenVINO, tokenizers, FAISS, bm25s), the web
stack (uvicorn, Starlette, FastAPI, pydantic), Ray (Serve's proxy, router and replica, Ray core), else Python
itself (asyncio, threads, and the native loops under them). Writes benchmarks/results/serve_profile-<date>.json
and rewrites the README table.

    python benchmarks/serve_profile.py [--requests 60] [--profile-s 20] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import psutil
from ray import serve

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import apikeys, envs  # noqa: E402
from app.config import load_config  # noqa: E402
from benchmarks.readme_tables import publish  # noqa: E402
from benchmarks.serve_bench import PASSAGES, QUESTIONS, InProcess, demo_storage, deploy, make_reranker  # noqa: E402

WHOSE = (  # (label, how a frame's file starts: py-spy names them from sys.path), innermost match wins
    ("ragline", ("(app/", "(deployments/")),
    ("model and index", ("(openvino", "(tokenizers", "(transformers/", "(faiss", "(bm25s", "(numpy")),
    ("web stack", ("(uvicorn", "(starlette", "(fastapi", "(pydantic", "(httptools", "(h11")),
    ("ray", ("(ray/",)),
)


async def p50(call: Callable[[str], Awaitable[Any]], n: int) -> float:
    for q in QUESTIONS[:4]:  # warm
        await call(q)
    ms = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(QUESTIONS[i % len(QUESTIONS)])
        ms.append((time.perf_counter() - t0) * 1e3)
    return round(statistics.median(ms), 2)


def whose(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        for label, fragments in WHOSE:
            if any(f in frame for f in fragments):
                return label
    return "python"


def summarise(raw: Path) -> dict[str, float]:
    """Share (%) of a py-spy raw profile's samples by whose work they are."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        counts[whose(stack)] += int(n)
    total = sum(counts.values()) or 1
    return {k: round(v / total * 100, 1) for k, v in counts.most_common()}


def serve_processes() -> dict[int, str]:
    """pid → name of the HTTP proxy (HAProxy, or Serve's ProxyActor) and of every replica on this machine."""
    procs = {}
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith(("ray::ServeReplica", "ray::ProxyActor")):
            procs[p.pid] = cmd.removeprefix("ray::").split()[0].split(":")[-1]
        elif p.info["name"] == "haproxy":
            procs[p.pid] = "HAProxy"
    return procs


def cpu_ms(pids: dict[int, str]) -> collections.Counter[str]:
    """CPU time (user + system, ms) each named process has used so far (a name's processes summed)."""
    used: collections.Counter[str] = collections.Counter()
    for pid, name in pids.items():
        t = psutil.Process(pid).cpu_times()
        used[name] += (t.user + t.system) * 1e3
    return used


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--storage", default=str(ROOT / ".ragline-bench"), help="Storage root (demo corpus indexed)")
    ap.add_argument("--requests", type=int, default=60, help="Sequential requests per layer")
    ap.add_argument("--profile-s", type=int, default=20, help="Seconds of py-spy sampling (0: no profile)")
    ap.add_argument("--port", type=int, default=8766)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    storage = demo_storage(args.storage)
    reranker = make_reranker(storage.local_path())
    overrides = [f"serve.reranker.model={reranker}", f"serve.reranker.candidates={PASSAGES}",
                 "serve.generator.engine=transformers", *args.overrides]
    key = apikeys.load(storage)[0][0]
    local = InProcess(storage.uri, load_config(None, overrides), reranker)
    layers = {"in-process flow": asyncio.run(p50(local.retrieve, args.requests))}
    del local
    deploy(storage, overrides, args.port)
    retriever = serve.get_deployment_handle("Retriever", "ragline")
    profile: dict[str, dict[str, float]] = {}
    cpu: dict[str, float] = {}  # process → CPU ms per sequential /v1/retrieve
    proxy = "HAProxy" if envs.RAY_SERVE_ENV["RAY_SERVE_ENABLE_HA_PROXY"] == "1" else "Serve's proxy"

    async def over_serve() -> None:
        async def handle(q: str) -> Any:
            return await retriever.retrieve.remote(q, None, 5)

        # aiohttp, as serve_bench.py: the lighter client on the server's two cores
        async with aiohttp.ClientSession(f"http://127.0.0.1:{args.port}",
                                         headers={"Authorization": f"Bearer {key}"}) as http:
            async def healthz(q: str) -> None:
                async with http.get("/healthz") as r:
                    assert r.status == 200, await r.text()

            async def retrieve(q: str) -> None:
                async with http.post("/v1/retrieve", json={"query": q, "top_k": 5}) as r:
                    assert r.status == 200, await r.text()
                    await r.json()

            layers["Retriever through a DeploymentHandle"] = await p50(handle, args.requests)
            layers[f"HTTP /healthz ({proxy}, Ingress)"] = await p50(healthz, args.requests)
            procs = {**serve_processes(), os.getpid(): "client (aiohttp, this script)"}
            before = cpu_ms(procs)
            layers[f"HTTP /v1/retrieve ({proxy}, Ingress, Retriever)"] = await p50(retrieve, args.requests)
            used = cpu_ms(procs) - before
            n = args.requests + 4  # p50's warm-up requests too
            # a process's CPU time moves in clock ticks (10 ms): under 0.5 ms a request is a tick or two in the run
            cpu.update({name: round(ms / n, 2) for name, ms in used.most_common() if ms / n >= 0.5})
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            if not args.profile_s or not Path(spy).exists():
                return
            with tempfile.TemporaryDirectory() as tmp:
                # the Python processes that do the requests' work (HAProxy is C; Serve keeps an idle proxy beside it)
                procs = {pid: name for pid, name in serve_processes().items() if name in cpu and name != "HAProxy"}
                spies = [subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(args.profile_s), "-r", "100",
                                           "-f", "raw", "-o", f"{tmp}/{pid}.txt", "--nonblocking"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in procs]
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < args.profile_s - 2:
                    await retrieve(QUESTIONS[n % len(QUESTIONS)])
                    n += 1
                for s in spies:
                    s.wait()
                for pid, name in procs.items():
                    if Path(f"{tmp}/{pid}.txt").exists():
                        profile[name] = summarise(Path(f"{tmp}/{pid}.txt"))

    asyncio.run(over_serve())
    serve.delete("ragline")
    base = layers["in-process flow"]
    print("sequential /v1/retrieve path, p50 ms:")
    for name, ms in layers.items():
        print(f"  {name:48s} {ms:7.2f}  (+{ms - base:.2f} over in-process)")
    for name, ms in cpu.items():
        print(f"  CPU per request {name:32s} {ms:7.2f} ms")
    for name, shares in profile.items():
        print(f"  py-spy {name}: " + ", ".join(f"{k} {v}%" for k, v in shares.items()))
    date = datetime.date.today().isoformat()
    result = {"date": date, "command": " ".join(["python benchmarks/serve_profile.py", *sys.argv[1:]]),
              "requests": args.requests, "ray_serve_env": envs.RAY_SERVE_ENV, "p50_ms": layers,
              "cpu_ms_per_request": cpu, "profile_share_pct": profile}
    publish("serve_profile", result)


if __name__ == "__main__":
    main()
