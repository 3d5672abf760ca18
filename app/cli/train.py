"""`ragline train sft|reranker|embedder` and `ragline train status`: fine-tuning runs on Ray Train."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from app.cli.context import Context, connect
from app.cli.render import err, fail, out, print_json, print_training
from app.errors import NotFound

if TYPE_CHECKING:
    from app.train.run import TrainRunRecord

JobConfigOpt = Annotated[Path | None, typer.Option("--config", help="Job config YAML (see deployments/jobs/). "
                                                   "[default: the task's defaults]")]
JobSetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a job field, e.g. --set "
                                                     "max_steps=20 (repeatable).")]


def _train(ctx: typer.Context, task: str, config: Path | None, overrides: list[str] | None, detach: bool,
           in_process: bool, as_json: bool) -> None:
    import ray

    from app.services.training import get_or_start
    from app.train.config import load_job_config, with_serving
    from app.train.run import run_training, validate

    c: Context = ctx.obj
    cfg = with_serving(load_job_config(config, task, overrides or []), c.cfg)
    model_path = validate(cfg)  # a missing model path fails here, before connecting
    connect(c)
    if in_process:
        record = run_training(cfg, c.storage, model_path=model_path)
    else:
        service = get_or_start(c.storage)
        name = ray.get(service.submit.remote(cfg.model_dump()))
        if detach:
            print_json({"name": name}) if as_json else out.print(f"queued training run {name}")
            return
        record = wait_for_training(service, name, quiet=as_json)
        if record["state"] != "succeeded":
            raise typer.Exit(fail(f"training run {name} {record['state']}: {record.get('error')}"))
    if as_json:
        return print_json({k: v for k, v in record.items() if k != "config"})
    print_training(record)


def wait_for_training(service: Any, name: str, quiet: bool) -> TrainRunRecord:
    """Polls the run until it ends; shows its state (and its size, once known) on stderr."""
    import ray

    last = ""
    while True:
        st: TrainRunRecord = ray.get(service.status.remote(name))  # TrainingService.status
        if st["state"] in ("succeeded", "failed", "stopped"):
            return st.copy()
        line = st["state"]
        if st.get("counts"):
            line += f" ({st['total_steps']} steps over {st['counts'].get('kept')} examples)"
        if not quiet and line != last:
            err.print(f"[dim]{name}[/] {line}")
            last = line
        time.sleep(1.0)


def train_command(task: str, doc: str) -> Callable[..., None]:
    """`ragline train <task>`: the same options for every task."""

    def command(
        ctx: typer.Context, config: JobConfigOpt = None, set_: JobSetOpt = None,
        detach: Annotated[bool, typer.Option(help="Queue the run and print its name without waiting.")] = False,
        in_process: Annotated[bool, typer.Option(help="Drive the TorchTrainer from this process instead of the "
                                                 "TrainingService (for `ray job submit` entrypoints).")] = False,
        as_json: Annotated[bool, typer.Option("--json")] = False,
    ) -> None:
        _train(ctx, task, config, set_, detach, in_process, as_json)

    command.__doc__ = doc
    return command


def train_status(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="One run (all its details). [default: list all runs]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Training runs of this storage root: state, steps, loss, throughput, the model version they made."""
    from app.train.run import training_runs

    c: Context = ctx.obj
    records = training_runs(c.storage).all()
    if name is not None:
        match = [r for r in records if r["name"] == name]
        if not match:
            raise NotFound(f"training run {name!r} does not exist (runs: {[r['name'] for r in records]})")
        return print_json(match[0]) if as_json else print_training(match[0])
    if as_json:
        return print_json([{k: v for k, v in r.items() if k != "config"} for r in records])
    t = Table("run", "task", "state", "started", "steps", "loss", "tokens/s", "model", title="training runs")
    for r in records:
        m: Mapping[str, object] = r.get("metrics") or {}
        t.add_row(r["name"], r["task"], r["state"], r.get("started_at", r.get("submitted_at", "")),
                  str(m.get("step", "-")), f"{m['loss']:.4f}" if "loss" in m else "-",
                  f"{m['tokens_per_s']:.0f}" if "tokens_per_s" in m else "-",
                  f"{r['model']['name']} v{r['model']['version']}" if r.get("model") else "-")
    out.print(t)
