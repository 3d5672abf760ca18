"""`ragline submit ingest|train|eval`: the same commands as Ray jobs on a running cluster (Ray Jobs API)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from app.cli.context import Context
from app.cli.render import err, fail, out
from app.errors import UserError

# the commands that can be sent, with their help
COMMANDS = {"ingest": "`ragline ingest ARGS` as a Ray job (the driver runs the pipeline itself).",
            "train": "`ragline train sft|reranker|embedder ARGS` as a Ray job (the driver runs the TorchTrainer).",
            "eval": "`ragline eval retrieval ARGS` as a Ray job.",
            "adapt": "`ragline adapt ARGS` as a Ray job (question writing and training spread over the cluster)."}


def _submit(ctx: typer.Context, command: str, args: list[str], working_dir: Path | None, wait: bool,
            submission_id: str | None) -> None:
    from app import remote

    c: Context = ctx.obj
    url = remote.dashboard_url(c.address)
    wd = (working_dir or remote.PROJECT_ROOT).resolve()
    global_args = []
    if c.storage_given:  # else the cluster's own RAGLINE_STORAGE applies
        global_args += ["--storage", c.storage.uri]
    if c.config_file:
        cfg_path = Path(c.config_file).resolve()
        if not cfg_path.is_relative_to(wd):
            raise UserError(f"config file {cfg_path} is outside the working directory {wd}: the job only sees "
                            "what is uploaded")
        global_args += ["--config", str(cfg_path.relative_to(wd))]
    for override in c.overrides:
        global_args += ["--set", override]
    entrypoint = remote.job_command(command, args, global_args)
    job_id = remote.submit(url, entrypoint, wd, submission_id)
    err.print(f"submitted job [bold]{job_id}[/] to {url}: {entrypoint}\n(dashboard: {url}/#/jobs/{job_id})",
              highlight=False)
    if not wait:
        out.print(job_id)
        return
    try:
        final = remote.follow(url, job_id)
    except KeyboardInterrupt:
        raise typer.Exit(fail(f"stopped following; job {job_id} keeps running (`ray job stop {job_id} "
                              f"--address {url}` ends it)", 130)) from None
    err.print(f"job {job_id} {final}")
    if final != "SUCCEEDED":
        raise typer.Exit(1)


def submit_command(command: str, doc: str) -> Callable[..., None]:
    """`ragline submit <command> ARGS...`: ARGS are the local command's own (relative paths resolve in the
    uploaded working directory)."""

    def run(
        ctx: typer.Context,
        args: Annotated[list[str], typer.Argument(help="The local command's own arguments and options.",
                                                  metavar="ARGS")],
        working_dir: Annotated[Path | None, typer.Option(help="Uploaded as the job's working directory (its "
                                                         ".gitignore honoured). [default: this Ragline checkout]")
                               ] = None,
        wait: Annotated[bool, typer.Option(help="Stream the job's logs and exit with its status.")] = True,
        submission_id: Annotated[str | None, typer.Option(help="Job id. [default: generated]")] = None,
    ) -> None:
        _submit(ctx, command, args, working_dir, wait, submission_id)

    run.__doc__ = doc
    return run
