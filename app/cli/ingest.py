"""`ragline ingest`: an ingest run through the IngestService (or in this process, for `ray job submit`)."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.context import Collection, Context, connect
from app.cli.render import err, fail, out, print_delete_report, print_ingest_report, print_json
from app.errors import UserError

if TYPE_CHECKING:
    from app.services.runs import IngestRunStatus


def wait_for_run(service: Any, run_id: str, quiet: bool) -> IngestRunStatus:
    """Polls the run until it ends; shows its queue position, then its stages' progress, on stderr."""
    import ray

    last = ""
    while True:
        st = ray.get(service.status.remote(run_id))
        if st["state"] in ("succeeded", "failed"):
            return st
        if not quiet:
            if st["state"] == "queued":
                line = f"queued (position {st.get('queue_position')})"
            else:
                p = st.get("progress") or {}
                stages = " | ".join(f"{k} {int(v['rows_out'])}" for k, v in (p.get("stages") or {}).items())
                line = f"running {p.get('elapsed_s', 0):.0f}s: {stages or 'starting'}"
            if line != last:
                err.print(f"[dim]{run_id}[/] {line}")
                last = line
        time.sleep(1.0)


def ingest(
    ctx: typer.Context,
    paths: Annotated[list[str], typer.Argument(help="Files, directories or globs (local or s3:// / gs://).")],
    detach: Annotated[bool, typer.Option(help="Queue the run and print its id without waiting.")] = False,
    in_process: Annotated[bool, typer.Option(help="Run the pipeline from this process instead of the "
                                             "IngestService (for `ray job submit` entrypoints).")] = False,
    index: Annotated[bool, typer.Option(help="Build an index version from the new dataset version.")] = True,
    sync: Annotated[bool, typer.Option(help="Also delete the documents of files that are gone from under PATHS "
                                       "(files ingested from elsewhere are never touched).")] = False,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Ingest documents through the IngestService and print the run's report.

    Reads PDF (OCR for scanned pages), DOCX, PPTX, XLSX, ODT, ODS, ODP, EPUB, RTF, CSV, EML and MSG (attachments
    too), images (OCR), JSONL, Parquet, text, Markdown and HTML, each file's type known by its content. A file that
    cannot be read is quarantined with its reason; an unsupported one is reported as skipped, with its type. A
    directory holding _delta_log is a Delta Lake table: its rows are the documents (ingest.delta names the
    columns).

    Run it again on the same paths to bring the corpus up to date: unchanged files are not read (unless the
    chunking, normalisation, OCR or ingest.metadata settings changed: then they are read again), a changed file's
    documents replace its old ones (a file that no longer parses keeps them), and with --sync deleted files take
    their documents with them, in a new dataset and index version. A Delta table is read from the table version it
    was last synced at: only its inserted, updated and deleted rows. With --collection the documents go into that
    collection (made by its first run), which has versions and a run queue of its own."""
    import ray

    from app.indexing import run_ingest
    from app.ingest.inputs import expand
    from app.services.ingest import get_or_start

    c: Context = ctx.obj
    local = [p if "://" in p else os.path.abspath(os.path.expanduser(p)) for p in paths]
    read = c.cfg.ingest.read
    expand(local, read.max_file_bytes, read.follow_symlinks)  # a missing path: say so before queueing
    storage = c.collection(collection)
    connect(c)
    if in_process:
        report = run_ingest(local, c.cfg, storage, build_index=index, sync=sync)
    else:
        service = get_or_start(storage)
        run_id = ray.get(service.submit.remote(local, c.cfg.model_dump(), index, sync))
        if detach:
            print_json({"run_id": run_id}) if as_json else out.print(f"queued ingest run {run_id}")
            return
        st = wait_for_run(service, run_id, quiet=as_json)
        if st["state"] == "failed":
            raise typer.Exit(fail(f"ingest run {run_id} failed: {st['error']}"))
        report = st["report"]
    print_json(report) if as_json else print_ingest_report(report)


def delete(
    ctx: typer.Context,
    doc_ids: Annotated[list[str] | None, typer.Argument(help="Ids of the documents to remove.",
                                                        show_default=False)] = None,
    source: Annotated[list[str] | None, typer.Option(help="Remove every document of this file, or of the files "
                                                     "under this directory or matching this glob (local or "
                                                     "s3:// / gs://; repeatable).", show_default=False)] = None,
    in_process: Annotated[bool, typer.Option(help="Remove in this process instead of through the IngestService "
                                             "(for `ray job submit` entrypoints).")] = False,
    index: Annotated[bool, typer.Option(help="Build an index version from the new dataset version.")] = True,
    collection: Collection = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Remove documents from the corpus by id or by source, in a new dataset and index version.

    The served graph stops returning them once it swaps to the new index version; earlier versions still hold
    them (serve one with --set serve.retriever.index_version=N to roll back). Files removed by --source are
    forgotten: ingesting them again reads them again."""
    import ray

    from app.indexing import delete as run_delete
    from app.services.ingest import get_or_start

    c: Context = ctx.obj
    ids, prefixes = list(doc_ids or []), list(source or [])
    if not ids and not prefixes:
        raise UserError("name the documents to delete: document ids, or --source with a path, directory or glob")
    storage = c.collection(collection)
    if in_process:
        report = run_delete(ids, prefixes, c.cfg, storage, build_index=index).to_dict()
    else:
        connect(c)
        service = get_or_start(storage)
        run_id = ray.get(service.submit_delete.remote(ids, prefixes, c.cfg.model_dump()))
        st = wait_for_run(service, run_id, quiet=as_json)
        if st["state"] == "failed":
            raise typer.Exit(fail(f"delete run {run_id} failed: {st['error']}"))
        report = st["deleted"]
    print_json(report) if as_json else print_delete_report(report)
