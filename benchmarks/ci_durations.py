"""Files a CI run's time: the wall time from a fresh clone to the end of `.ci/run`, and the run's slowest tests
(test-artifacts/durations.json, written by tests/conftest.py), as benchmarks/results/ci-<date>-<level>.json, and
rewrites the README's CI table from it. CI's budget is 35 minutes on 2 cores. Machines of one CPU model differ in
speed (shared hosts), so the file also holds this machine's one-thread float32 peak, measured when it is filed.

    git clone . /tmp/ci && cd /tmp/ci && /usr/bin/time -f %e .ci/run      # note the seconds it prints
    .venv/bin/python benchmarks/ci_durations.py --clone-wall-s SECONDS --durations /tmp/ci/test-artifacts/durations.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.flops_bench import peak  # noqa: E402
from benchmarks.readme_tables import save  # noqa: E402

BUDGET_S = 35 * 60


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clone-wall-s", type=float, required=True, help="seconds from the clone to the end of .ci/run")
    ap.add_argument("--durations", type=Path, default=ROOT / "test-artifacts" / "durations.json",
                    help="the run's durations.json")
    ap.add_argument("--out", type=Path, help="write here instead of benchmarks/results (and leave the README)")
    args = ap.parse_args(argv)
    run = json.loads(args.durations.read_text())
    save("ci", {"date": datetime.date.today().isoformat(), "clone_wall_s": args.clone_wall_s,
                "budget_s": BUDGET_S, "peak_gflop_per_s": peak()["torch"], **run}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
