"""Run the Locust scenarios headless against a URL, bounded in users and time, and write the report:
p50/p95/p99 latency, requests/s and errors by status per endpoint, as JSON and a markdown table.

    python -m load_tests.run --url http://127.0.0.1:8000 --key KEY --users 8 --duration 60s --out load_tests/report
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def summarize(prefix: Path) -> dict:
    rows = list(csv.DictReader(prefix.with_name(prefix.name + "_stats.csv").open()))
    failures = list(csv.DictReader(prefix.with_name(prefix.name + "_failures.csv").open()))
    endpoints = {}
    for row in rows:
        errors: dict[str, int] = {}
        for f in failures:
            if f["Name"] == row["Name"] or row["Name"] == "Aggregated":
                status = m.group(1) if (m := re.search(r"status (\d+)", f["Error"])) else f["Error"][:80]
                errors[status] = errors.get(status, 0) + int(f["Occurrences"])
        endpoints[row["Name"]] = {
            "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
            "p50_ms": float(row["50%"]), "p95_ms": float(row["95%"]), "p99_ms": float(row["99%"]),
            "requests_per_s": round(float(row["Requests/s"]), 3), "errors_by_status": errors,
        }
    return endpoints


def markdown(report: dict) -> str:
    lines = [f"Load test: {report['users']} users, {report['duration']}, tasks {' '.join(report['tags'])}, against "
             f"{report['url']}", "",
             "| endpoint | requests | failures | p50 ms | p95 ms | p99 ms | req/s | errors by status |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, e in report["endpoints"].items():
        errs = ", ".join(f"{k}: {v}" for k, v in e["errors_by_status"].items()) or "-"
        lines.append(f"| {name} | {e['requests']} | {e['failures']} | {e['p50_ms']:.0f} | {e['p95_ms']:.0f} | "
                     f"{e['p99_ms']:.0f} | {e['requests_per_s']:.2f} | {errs} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="Base URL of the endpoint, e.g. http://127.0.0.1:8000")
    ap.add_argument("--key", required=True, help="API key")
    ap.add_argument("--users", type=int, default=8, help="Concurrent simulated users")
    ap.add_argument("--duration", default="60s", help="Run time (locust syntax: 30s, 2m)")
    ap.add_argument("--max-tokens", type=int, default=32, help="Answer length of generating requests")
    ap.add_argument("--tags", nargs="+", choices=["retrieve", "generate"], help="Only these tasks (default: all)")
    ap.add_argument("--out", type=Path, default=Path("load_tests/report"), help="Output prefix (.json, .md)")
    args = ap.parse_args(argv)
    if args.users < 1:
        ap.error("--users must be at least 1")
    if not re.fullmatch(r"\d+[smh]", args.duration):
        ap.error("--duration must look like 30s, 2m or 1h")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prefix = args.out.with_name(args.out.name + "-locust")
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", args.url,
           "-u", str(args.users), "-r", str(args.users), "-t", args.duration, "--csv", str(prefix),
           "--api-key", args.key, "--max-tokens", str(args.max_tokens), "--only-summary", "--stop-timeout", "30"]
    if args.tags:
        cmd += ["--tags", *args.tags]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if not prefix.with_name(prefix.name + "_stats.csv").exists():
        sys.exit(f"locust produced no stats (exit {done.returncode}):\n{done.stderr[-2000:]}")
    report = {"url": args.url, "users": args.users, "duration": args.duration, "tags": args.tags or ["all"],
              "endpoints": summarize(prefix)}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
