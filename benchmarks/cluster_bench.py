"""Cluster benchmark: what sending work to a cluster costs. The same ingest (the ~80 Python reference topics of the
demo) into a fresh storage root, on the same Ray (a head started here with its dashboard), two ways:

- direct: `ragline --address GCS ingest DIR --in-process`: the driver runs on this machine and joins the cluster
  (what a user does with a notebook or `python script.py` next to the cluster);
- submit: `ragline --address http://DASHBOARD submit ingest DIR`: a Ray job through the Jobs API (working directory
  zipped and uploaded, runtime environment set up, driver started on the head, logs streamed back).

Each is wall time of the whole command, repeated; prints medians and the ratio; writes benchmarks/results/cluster.json.

    python benchmarks/cluster_bench.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from app.demo_corpus import write_demo_corpus  # noqa: E402
from benchmarks import readme_tables  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# token authentication on, as on a cluster (Ray turns it on by itself only for a local Ray it finds, not for an
# explicit --address)
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "RAY_AUTH_MODE": "token"}


def start_head(tmp: Path, gcs_port: int, dashboard_port: int) -> None:
    """`ray start --head` as on a cluster's head, in a Ray temp dir of its own (so stopping it stops nothing else);
    jobs run `python -m app.cli` from the PATH it starts with: this virtualenv's."""
    cmd = [str(BIN / "ray"), "start", "--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
           "--dashboard-host=127.0.0.1", f"--dashboard-agent-listen-port={free_port()}", f"--temp-dir={tmp}",
           "--disable-usage-stats"]  # the agent's own port too: the default (52365) may be another Ray's here
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def stop_head(tmp: Path) -> None:
    # every process of this head names its temp dir on its command line; `ray stop` would stop every Ray here
    subprocess.run(["pkill", "-f", str(tmp)], check=False)


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=1800)
    elapsed = time.perf_counter() - t0
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rl-cluster-bench-"))
    corpus = write_demo_corpus(work / "corpus")
    gcs_port, dashboard_port = free_port(), free_port()
    start_head(work / "ray", gcs_port, dashboard_port)
    dashboard = f"http://127.0.0.1:{dashboard_port}"
    ragline = [str(BIN / "ragline")]
    times: dict[str, list[float]] = {"direct": [], "submit": []}
    try:
        for i in range(args.repeats):
            # alternate the order so neither way always runs on a warmer machine
            for way in (("direct", "submit") if i % 2 == 0 else ("submit", "direct")):
                store = str(work / f"{way}-{i}")
                if way == "direct":
                    cmd = [*ragline, "--storage", store, "--address", f"127.0.0.1:{gcs_port}", "ingest", str(corpus),
                           "--in-process", "--json"]
                else:
                    cmd = [*ragline, "--storage", store, "--address", dashboard, "submit", "ingest", str(corpus),
                           "--json"]
                times[way].append(timed(cmd))
                print(f"repeat {i + 1} {way}: {times[way][-1]:.1f} s", flush=True)
    finally:
        stop_head(work / "ray")
    med = {way: statistics.median(t) for way, t in times.items()}
    result = {"corpus_files": len(list(corpus.glob("*.md"))), "repeats": args.repeats, "seconds": times,
              "median_s": med, "submit_over_direct": med["submit"] / med["direct"]}
    print(f"\ningest of {result['corpus_files']} files, median of {args.repeats}: direct {med['direct']:.1f} s, "
          f"submit {med['submit']:.1f} s, ratio submit/direct {result['submit_over_direct']:.2f}×")
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(readme_tables.with_hardware(result), indent=2))


if __name__ == "__main__":
    main()
