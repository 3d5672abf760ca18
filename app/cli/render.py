"""What the commands print: results on stdout (tables for people, `--json` for machines), progress and errors on
stderr, one line each."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from app.passage import where

if TYPE_CHECKING:
    from app.ingest.pipeline import DeleteReportDict, IngestReportDict
    from app.passage import Passage
    from app.remote import ClusterStatus
    from app.train.run import TrainRunRecord

out = Console(file=sys.stdout)  # bound now: connecting to Ray later points sys.stdout at stderr
err = Console(stderr=True, soft_wrap=True)  # messages stay one line, whatever the terminal width


def fail(message: str, code: int = 1) -> int:
    """Print `message` as the command's error; returns `code`, the exit status to leave with."""
    err.print(f"[red]error:[/] {message}", highlight=False)
    return code


def print_json(obj: Any) -> None:
    out.print_json(json.dumps(obj, default=str))


def print_ingest_report(report: IngestReportDict) -> None:
    d = report["documents"]
    t = Table(title=f"ingest run {report['run_id']}", show_header=False)
    t.add_row("input files", f"{report['inputs']['files']} ({report['inputs']['unreadable_files']} unreadable, "
              f"{len(report['inputs']['skipped_files'])} skipped: unsupported type)")
    f = report["files"]
    t.add_row("files", f"{f['new']} new, {f['changed']} changed, {f['unchanged']} unchanged (not read), "
              f"{f['deleted']} deleted" + (f", {f['readmitted']} read again for removed originals"
                                           if f["readmitted"] else "")
              + (f", {f['reread']} read again under a new chunking config" if f.get("reread") else ""))
    t.add_row("documents read", str(d["read"]))
    t.add_row("kept", str(d["kept"]))
    for reason, n in d["dropped"].items():
        t.add_row(f"dropped: {reason}", str(n))
    c = report["changes"]
    t.add_row("corpus", f"{c['added']} added, {c['updated']} updated, {c['unchanged']} unchanged, {c['removed']} "
              f"removed: {c['live_before']} → {c['live_after']} documents")
    t.add_row("counts reconcile", "yes" if report["reconciled"] else "NO")
    t.add_row("chunks / embeddings", f"{report['chunks']} / {report['embeddings']} "
              f"({report['embeddings_reused']} reused from replaced documents)")
    t.add_row("bytes replaced in decoding", str(report["decode_replacements"]["bytes"]))
    t.add_row("dataset / index version", f"{report.get('dataset_version')} / {report.get('index_version', '-')}")
    t.add_row("wall time", f"{report['wall_s']:.1f} s")
    out.print(t)
    s = Table("stage", "rows in", "rows out", "busy s", "wall s", "rows/s", title="stages")
    for name, st in report["stages"].items():
        rate = st["rows_in"] / st["wall_s"] if st["wall_s"] else 0
        s.add_row(name, str(st["rows_in"]), str(st["rows_out"]), f"{st['busy_s']:.2f}", f"{st['wall_s']:.2f}",
                  f"{rate:.1f}")
    out.print(s)
    for q in report["quarantined"]:
        out.print(f"[yellow]quarantined[/] {q['source']}: {q['reason']} → {q['path']}")
    for r in report["inputs"].get("refused_files", []):
        out.print(f"[yellow]{r['reason']}[/] {r['source']}: {r['detail']}")
    skipped = report["inputs"]["skipped_files"]
    for k in skipped[:20]:
        out.print(f"[dim]skipped[/] {k['source']}: {k['type']}")
    if len(skipped) > 20:
        out.print(f"[dim]skipped[/] {len(skipped) - 20} more (--json lists them all)")
    if report.get("note"):
        out.print(report["note"])


def print_delete_report(report: DeleteReportDict) -> None:
    out.print(f"removed {report['documents']} documents ({report['chunks']} chunks) in dataset version "
              f"{report['dataset_version']}, index version {report.get('index_version') or '-'}; earlier versions "
              "still hold them")
    for s in report["sources"]:
        out.print(f"[dim]forgotten[/] {s} (a later ingest reads it again)")
    for n in report["not_found"]:
        out.print(f"[yellow]not found[/] {n}")


def print_hits(question: str, hits: list[Passage], version: int) -> None:
    out.print(f"[bold]{question}[/]  (index version {version})")
    if not hits:
        out.print("no results")
    for h in hits:
        snippet = " ".join(h.text.split())[:240]
        out.print(f"[bold][{h.rank}][/] {h.title or h.doc_id}  [dim]score {h.score:.4f}[/]\n"
                  f"    source: {where(h.source, h.location)} (chars {h.start_char}-{h.end_char})\n    {snippet}…",
                  highlight=False)


def print_cluster(cluster: ClusterStatus) -> None:
    if not cluster.dashboard:
        out.print(cluster.note)
        return
    out.print(f"cluster: {cluster.dashboard}")
    j = Table("job", "status", "started", "entrypoint", title="jobs")
    for job in (cluster.jobs or [])[:10]:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.start_time / 1000)) \
            if job.start_time else ""
        j.add_row(job.submission_id or "-", job.status, started, job.entrypoint[:80])
    out.print(j)
    a = Table("application", "status", "deployments", title="Serve applications")
    for name, application in (cluster.serve or {}).items():
        a.add_row(name, application.status, ", ".join(f"{d} {dd.status} ×{dd.replicas}" for d, dd in
                                                       application.deployments.items()))
    out.print(a)


def print_training(r: TrainRunRecord) -> None:
    m: Mapping[str, object] = r.get("metrics") or {}
    t = Table(title=f"training run {r['name']} ({r['task']})", show_header=False)
    t.add_row("state", r["state"])
    t.add_row("data", ", ".join(f"{k} {v}" for k, v in (r.get("counts") or {}).items()))
    t.add_row("steps", f"{m.get('step', '-')} of {r.get('total_steps', '-')}")
    for key, label in (("loss", "final loss"), ("tokens_per_s", "tokens/s"), ("samples_per_s", "samples/s"),
                       ("mfu", "MFU"), ("peak_memory_mb", "peak memory (MiB)"),
                       ("checkpoint_save_s", "checkpoint save (s)")):
        if key in m:
            t.add_row(label, f"{m[key]:.4g}")
    t.add_row("train time", f"{r.get('train_s', '-')} s")
    t.add_row("model version", f"{r['model']['name']} v{r['model']['version']}" if r.get("model") else "-")
    out.print(t)
