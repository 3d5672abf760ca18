"""`ragline`: the command line. Loads config once, connects to Ray where a command needs it, prints results
(tables for people, `--json` for machines). User mistakes exit 2 with a one-line reason, never a traceback."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from app import envs
from app.config import AppConfig, load_config
from app.storage import Storage

app = typer.Typer(help="Ragline: documents to grounded answers on Ray.", no_args_is_help=True,
                  pretty_exceptions_enable=False, rich_markup_mode=None)
index_app = typer.Typer(help="Index versions.", no_args_is_help=True)
eval_app = typer.Typer(help="Evaluation.", no_args_is_help=True)
train_app = typer.Typer(help="Fine-tuning runs on Ray Train.", no_args_is_help=True)
models_app = typer.Typer(help="Trained model versions in the catalog.", no_args_is_help=True)
submit_app = typer.Typer(help="Run ingest, train or eval as a Ray job on a running cluster (Ray Jobs API): the "
                         "working directory is uploaded, the job's logs stream here and the exit status is the "
                         "job's.", no_args_is_help=True)
app.add_typer(index_app, name="index")
app.add_typer(eval_app, name="eval")
app.add_typer(train_app, name="train")
app.add_typer(models_app, name="models")
app.add_typer(submit_app, name="submit")
out = Console(file=sys.stdout)  # bound now: _connect later points sys.stdout at stderr
err = Console(stderr=True, soft_wrap=True)  # messages stay one line, whatever the terminal width

DEMO_QUESTION = "How do I make sure clean-up code runs even when an exception is raised?"


@dataclass
class Context:
    cfg: AppConfig
    storage: Storage
    address: str | None
    config_file: str | None  # as given, for deployments that load the config themselves (Serve args)
    overrides: list[str]
    storage_given: bool  # named by --storage, RAGLINE_STORAGE or the config, not the ./.ragline default


def open_storage(root: str) -> Storage:
    """Local roots become absolute: actors and workers do not share the caller's working directory."""
    return Storage(root if "://" in root else os.path.abspath(os.path.expanduser(root)))


@app.callback()
def main_options(
    ctx: typer.Context,
    storage: Annotated[str | None, typer.Option(help="Storage root: local path or s3:// / gs:// URI. "
                                                     "[default: RAGLINE_STORAGE or ./.ragline]")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML config file. [default: RAGLINE_CONFIG]")] = None,
    address: Annotated[str | None, typer.Option(help="Ray address. [default: RAY_ADDRESS or a local Ray]")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config field, e.g. "
                                                   "--set ingest.chunk.chunk_tokens=128 (repeatable).")] = None,
) -> None:
    config_file = str(config) if config else envs.RAGLINE_CONFIG or None
    cfg = load_config(config_file, set_ or [])
    given = storage or cfg.storage or envs.RAGLINE_STORAGE
    ctx.obj = Context(cfg=cfg, storage=open_storage(given or envs.storage_root()),
                      address=address or cfg.ray_address or envs.ray_address(), config_file=config_file,
                      overrides=set_ or [], storage_given=bool(given))


def _connect(c: Context) -> None:
    from app.raycluster import connect
    from app.remote import is_dashboard_url

    if is_dashboard_url(c.address):
        raise ValueError(f"{c.address} is a dashboard address: this command needs the cluster itself (ray://HEAD:"
                         "10001 or HEAD:6379); send it as a job with `ragline submit`")
    connect(c.address)
    # Ray prints raylet/worker notices to sys.stdout from background threads; send them to stderr so stdout
    # carries only our output (tables, or --json that parses).
    sys.stdout = sys.stderr


def _print_json(obj: Any) -> None:
    out.print_json(json.dumps(obj, default=str))


# ---- ingest ---------------------------------------------------------------------------------------------------
def _print_report(report: dict[str, Any]) -> None:
    d = report["documents"]
    t = Table(title=f"ingest run {report['run_id']}", show_header=False)
    t.add_row("input files", f"{report['inputs']['files']} ({report['inputs']['unreadable_files']} unreadable, "
              f"{len(report['inputs']['skipped_files'])} skipped: unsupported type)")
    t.add_row("documents read", str(d["read"]))
    t.add_row("kept", str(d["kept"]))
    for reason, n in d["dropped"].items():
        t.add_row(f"dropped: {reason}", str(n))
    t.add_row("counts reconcile", "yes" if report["reconciled"] else "NO")
    t.add_row("chunks / embeddings", f"{report['chunks']} / {report['embeddings']}")
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
    if report.get("note"):
        out.print(report["note"])


def _wait_for_run(service: Any, run_id: str, quiet: bool) -> dict[str, Any]:
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


@app.command()
def ingest(
    ctx: typer.Context,
    paths: Annotated[list[str], typer.Argument(help="Files, directories or globs (local or s3:// / gs://).")],
    detach: Annotated[bool, typer.Option(help="Queue the run and print its id without waiting.")] = False,
    in_process: Annotated[bool, typer.Option(help="Run the pipeline from this process instead of the "
                                             "IngestService (for `ray job submit` entrypoints).")] = False,
    index: Annotated[bool, typer.Option(help="Build an index version from the new dataset version.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Ingest documents through the IngestService and print the run's report."""
    import ray

    from app.ingest.inputs import expand
    from app.ingest.pipeline import run_ingest
    from app.services.ingest import get_or_start

    c: Context = ctx.obj
    local = [p if "://" in p else os.path.abspath(os.path.expanduser(p)) for p in paths]
    read = c.cfg.ingest.read
    expand(local, read.max_file_bytes, read.follow_symlinks)  # a missing path: say so before queueing
    _connect(c)
    if in_process:
        report = run_ingest(local, c.cfg, c.storage, build_index=index)
    else:
        service = get_or_start(c.storage)
        run_id = ray.get(service.submit.remote(local, c.cfg.model_dump(), index))
        if detach:
            _print_json({"run_id": run_id}) if as_json else out.print(f"queued ingest run {run_id}")
            return
        st = _wait_for_run(service, run_id, quiet=as_json)
        if st["state"] == "failed":
            raise typer.Exit(_fail(f"ingest run {run_id} failed: {st['error']}"))
        report = st["report"]
    _print_json(report) if as_json else _print_report(report)


def _fail(message: str, code: int = 1) -> int:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return code


# ---- index / search ------------------------------------------------------------------------------------------
@index_app.command("build")
def index_build(
    ctx: typer.Context,
    dataset: Annotated[int | None, typer.Option(help="Dataset version. [default: latest]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Build an index version (FAISS + BM25) from a dataset version."""
    from app.index.build import build_index

    c: Context = ctx.obj
    m = build_index(c.storage, c.cfg, dataset)
    info = {"index_version": m.version, "dataset_version": m.parent, "chunks": m.counts["chunks"],
            "dense": m.extra["dense"]}
    _print_json(info) if as_json else out.print(f"index version {m.version} from dataset version {m.parent}: "
                                                f"{m.counts['chunks']} chunks, dense index {m.extra['dense']}")


@app.command()
def search(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="What to look for.")],
    mode: Annotated[str | None, typer.Option(help="dense | lexical | hybrid. [default: search.mode]")] = None,
    k: Annotated[int | None, typer.Option("-k", help="Results. [default: search.top_k]")] = None,
    source: Annotated[list[str] | None, typer.Option(help="Only sources matching this glob (repeatable).")] = None,
    index: Annotated[int | None, typer.Option(help="Index version. [default: latest]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Search the latest index version and print ranked chunks with their sources."""
    from app.index.search import Index, Searcher

    c: Context = ctx.obj
    if mode not in (None, "dense", "lexical", "hybrid"):
        raise ValueError(f"--mode must be dense, lexical or hybrid, not {mode!r}")
    if k is not None and not 1 <= k <= 1000:
        raise ValueError(f"-k must be between 1 and 1000, not {k}")
    searcher = Searcher(Index.load(c.storage, index), c.cfg.search)
    hits = searcher.search(question, mode, k, source)  # type: ignore[arg-type]
    if as_json:
        _print_json({"index_version": searcher.index.version, "hits": [h.to_dict() for h in hits]})
        return
    _print_hits(question, hits, searcher.index.version)


def _print_hits(question: str, hits: list[Any], version: int) -> None:
    out.print(f"[bold]{question}[/]  (index version {version})")
    if not hits:
        out.print("no results")
    for h in hits:
        snippet = " ".join(h.text.split())[:240]
        out.print(f"[bold][{h.rank}][/] {h.title or h.doc_id}  [dim]score {h.score:.4f}[/]\n"
                  f"    source: {h.source} (chars {h.start_char}-{h.end_char})\n    {snippet}…", highlight=False)


# ---- status ----------------------------------------------------------------------------------------------------
def _cluster_status(c: Context) -> dict[str, Any]:
    """Jobs and Serve applications from the dashboard's REST API: the one --address names, or a local one."""
    from app import remote

    named = remote.is_dashboard_url(c.address)
    url = remote.dashboard_url(c.address) if named else envs.LOCAL_DASHBOARD
    try:
        return {"dashboard": url, "jobs": remote.jobs(url), "serve": remote.serve_applications(url)}
    except remote.Unreachable:
        if named:
            raise
        return {"dashboard": None, "note": f"no Ray dashboard at {url} (give --address http://HEAD:8265)"}


@app.command()
def status(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Ingest and training runs, the catalog's dataset, index and model versions, and the cluster's jobs and
    Serve applications (from the dashboard --address names, or a local one)."""
    from app.catalog import Catalog
    from app.train.run import load_records

    c: Context = ctx.obj
    catalog = Catalog(c.storage)
    runs = catalog.runs()
    versions = {kind: [m.model_dump(include={"version", "created_at", "parent", "counts"})
                       for m in catalog.versions(kind)] for kind in ("datasets", "indexes")}
    training = [{k: r.get(k) for k in ("name", "task", "state", "started_at", "finished_at", "model", "error")}
                for r in load_records(c.storage)]
    models: dict[str, dict[str, Any]] = {name: {"versions": [m.version for m in catalog.model_versions(name)],
                                                "promoted": (p.version if (p := catalog.promoted(name)) else None)}
                                         for name in catalog.model_names()}
    cluster = _cluster_status(c)
    if as_json:
        _print_json({"storage": c.storage.uri, "runs": [{k: r.get(k) for k in (
            "run_id", "state", "submitted_at", "finished_at", "error")} for r in runs], **versions,
            "training_runs": training, "models": models, "cluster": cluster})
        return
    _print_cluster(cluster)
    out.print(f"storage: {c.storage.uri}")
    t = Table("run", "state", "submitted", "dataset", "index", "documents kept", title="ingest runs")
    for r in runs:
        rep = r.get("report") or {}
        t.add_row(r["run_id"], r["state"], r.get("submitted_at", ""), str(rep.get("dataset_version", "-")),
                  str(rep.get("index_version", "-")), str((rep.get("documents") or {}).get("kept", "-")))
    out.print(t)
    for kind, items in versions.items():
        v = Table("version", "created", "from", "documents", "chunks", title=kind)
        for m in items:
            v.add_row(str(m["version"]), m["created_at"], str(m["parent"] or "-"),
                      str(m["counts"].get("documents", "")), str(m["counts"].get("chunks", "")))
        out.print(v)
    tr = Table("run", "task", "state", "started", "model", title="training runs")
    for r in training:
        model = r["model"] or {}
        tr.add_row(r["name"], r["task"], r["state"], r.get("started_at") or "",
                   f"{model['name']} v{model['version']}" if model else "-")
    out.print(tr)
    mt = Table("model", "versions", "promoted", title="models")
    for name, m in models.items():
        mt.add_row(name, ", ".join(map(str, m["versions"])), str(m["promoted"] or "-"))
    out.print(mt)


def _print_cluster(cluster: dict[str, Any]) -> None:
    if not cluster["dashboard"]:
        out.print(cluster["note"])
        return
    out.print(f"cluster: {cluster['dashboard']}")
    j = Table("job", "status", "started", "entrypoint", title="jobs")
    for job in cluster["jobs"][:10]:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job["start_time"] / 1000)) \
            if job["start_time"] else ""
        j.add_row(job["submission_id"] or "-", job["status"], started, job["entrypoint"][:80])
    out.print(j)
    a = Table("application", "status", "deployments", title="Serve applications")
    for name, application in cluster["serve"].items():
        a.add_row(name, application["status"], ", ".join(f"{d} {dd['status']} ×{dd['replicas']}" for d, dd in
                                                         application["deployments"].items()))
    out.print(a)


# ---- serve / query --------------------------------------------------------------------------------------------
ENDPOINT_FILE = "serve/endpoint.json"  # where `ragline serve` records the URL for `ragline query`


@app.command()
def serve(
    ctx: typer.Context,
    serve_config: Annotated[Path | None, typer.Option(help="Serve config YAML. [default: deployments/serve_cpu.yaml]")
                            ] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port. [default: the Serve config's]")] = None,
    api_keys_file: Annotated[Path | None, typer.Option(help="File of API keys, one per line. [default: "
                                                       "RAGLINE_API_KEYS(_FILE) or the key under the storage root]")
                             ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Deploy the RAG graph (retriever → reranker → generator behind the HTTP API) on the current Ray, or on the
    cluster whose dashboard --address names (http://HEAD:8265, as `serve deploy` does)."""
    from app import apikeys, remote, serving

    c: Context = ctx.obj
    on_cluster = remote.is_dashboard_url(c.address)
    if on_cluster and not c.storage_given:
        raise ValueError("serving on a cluster needs the storage root its nodes share: give --storage "
                         "(s3://…, gs://… or an absolute path on a shared filesystem) or set RAGLINE_STORAGE")
    keys_file = str(api_keys_file) if api_keys_file else None
    keys, where, new_key = apikeys.load(c.storage, keys_file)
    schema = serving.load_serve_config(serve_config, c.storage, c.config_file, c.overrides,
                                       None if on_cluster else keys_file, remote=on_cluster)
    if port is not None:
        schema.http_options.port = port
    # replicas may run on other machines: keys that are not under the shared storage root travel with the app,
    # as digests (the dashboard shows a runtime_env)
    if where == "RAGLINE_API_KEYS" or (on_cluster and keys_file):
        for application in schema.applications:
            env = (application.runtime_env or {}).get("env_vars", {})
            application.runtime_env = {**(application.runtime_env or {}), "env_vars": {
                **env, "RAGLINE_API_KEY_HASHES": ",".join(apikeys.digest(k) for k in keys)}}
    if not as_json:
        err.print(f"deploying {[a.name for a in schema.applications]} (the first start converts and loads models)")
    if on_cluster:
        assert c.address is not None
        remote.deploy(c.address, schema.model_dump(mode="json", exclude_unset=True))
        url = serving.url_of(schema, c.address)
    else:
        _connect(c)
        serving.deploy(schema)
        url = serving.url_of(schema)
    c.storage.write_json(ENDPOINT_FILE, {"url": url})
    if as_json:
        return _print_json({"url": url, "api_keys": where, **({"new_api_key": new_key} if new_key else {})})
    out.print(f"Ragline is serving at [bold]{url}[/]  (OpenAI base URL: {url}/v1)")
    if new_key:
        out.print(f"API key (generated now, shown once; kept in {where}):\n  {new_key}")
    else:
        out.print(f"API keys: {where}")


def _endpoint(c: Context, url: str | None, key: str | None) -> tuple[str, str]:
    from app import apikeys

    if not url:
        if not c.storage.exists(ENDPOINT_FILE):
            raise ValueError("no endpoint known: give --url, or run `ragline serve` with this --storage first")
        url = str(c.storage.read_json(ENDPOINT_FILE)["url"])
    if not key:
        key = apikeys.load(c.storage, create=False)[0][0]
    return url, key


@app.command()
def query(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question.")],
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    k: Annotated[int, typer.Option("-k", help="Passages retrieved as context.")] = 5,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Ask the running endpoint; prints the answer with its numbered sources."""
    from app import serving

    c: Context = ctx.obj
    url, key = _endpoint(c, url, key)
    body = serving.query(url, key, question, top_k=k)
    if as_json:
        return _print_json(body)
    out.print(f"[bold]Q:[/] {question}\n[bold]A:[/] {body['answer']}\n", soft_wrap=True)
    for cite in body["citations"]:
        mark = "*" if cite.get("cited") else " "
        out.print(f" {mark}[{cite['n']}] {cite['title'] or cite['doc_id']}  ({cite['source']})", soft_wrap=True,
                  markup=False)
    t = body["timings_ms"]
    out.print(f"\nindex v{body['index_version']} · reranker {body['models']['reranker']} · "
              f"{body['models']['generator']} · retrieve {t['retrieve']:.0f} ms, generate {t['generate']:.0f} ms")


# ---- train / models --------------------------------------------------------------------------------------------
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
    validate(cfg)  # a missing model path fails here, before connecting
    _connect(c)
    if in_process:
        record = run_training(cfg, c.storage)
    else:
        service = get_or_start(c.storage)
        name = ray.get(service.submit.remote(cfg.model_dump()))
        if detach:
            _print_json({"name": name}) if as_json else out.print(f"queued training run {name}")
            return
        record = _wait_for_training(service, name, quiet=as_json)
        if record["state"] != "succeeded":
            raise typer.Exit(_fail(f"training run {name} {record['state']}: {record.get('error')}"))
    if as_json:
        return _print_json({k: v for k, v in record.items() if k != "config"})
    _print_training(record)


def _wait_for_training(service: Any, name: str, quiet: bool) -> dict[str, Any]:
    import ray

    last = ""
    while True:
        st = ray.get(service.status.remote(name))
        if st["state"] in ("succeeded", "failed", "stopped"):
            return dict(st)
        line = st["state"]
        if st.get("counts"):
            line += f" ({st['total_steps']} steps over {st['counts'].get('kept')} examples)"
        if not quiet and line != last:
            err.print(f"[dim]{name}[/] {line}")
            last = line
        time.sleep(1.0)


def _print_training(r: dict[str, Any]) -> None:
    m = r.get("metrics") or {}
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


def _train_command(task: str, doc: str) -> Any:
    """`ragline train <task>`: the same options for both tasks."""

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


train_app.command("sft")(_train_command(
    "sft", "Supervised fine-tuning of a causal LM (chat template applied, loss on the responses only)."))
train_app.command("reranker")(_train_command(
    "reranker", "A cross-encoder reranker fine-tuned from MiniLM on (query, positive) pairs with hard negatives."))


@train_app.command("status")
def train_status(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="One run (all its details). [default: list all runs]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Training runs of this storage root: state, steps, loss, throughput, the model version they made."""
    from app.train.run import load_records

    c: Context = ctx.obj
    records = load_records(c.storage)
    if name is not None:
        match = [r for r in records if r["name"] == name]
        if not match:
            raise ValueError(f"training run {name!r} does not exist (runs: {[r['name'] for r in records]})")
        return _print_json(match[0]) if as_json else _print_training(match[0])
    if as_json:
        return _print_json([{k: v for k, v in r.items() if k != "config"} for r in records])
    t = Table("run", "task", "state", "started", "steps", "loss", "tokens/s", "model", title="training runs")
    for r in records:
        m = r.get("metrics") or {}
        t.add_row(r["name"], r["task"], r["state"], r.get("started_at", r.get("submitted_at", "")),
                  str(m.get("step", "-")), f"{m['loss']:.4f}" if "loss" in m else "-",
                  f"{m['tokens_per_s']:.0f}" if "tokens_per_s" in m else "-",
                  f"{r['model']['name']} v{r['model']['version']}" if r.get("model") else "-")
    out.print(t)


@models_app.command("list")
def models_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Model versions per name, with their metrics and which one is promoted."""
    from app.catalog import Catalog

    c: Context = ctx.obj
    catalog = Catalog(c.storage)
    rows: list[dict[str, Any]] = []
    for name in catalog.model_names():
        promoted = catalog.promoted(name)
        for m in catalog.model_versions(name):
            rows.append({"name": name, "version": m.version, "task": m.task, "run": m.run, "created_at": m.created_at,
                         "base_model": m.base_model, "promoted": promoted is not None and promoted.version == m.version,
                         "metrics": m.metrics})
    if as_json:
        return _print_json(rows)
    t = Table("name", "version", "task", "run", "created", "loss", "promoted", title="models")
    for r in rows:
        t.add_row(r["name"], str(r["version"]), r["task"], r["run"], r["created_at"],
                  f"{r['metrics']['loss']:.4f}" if "loss" in r["metrics"] else "-", "yes" if r["promoted"] else "")
    out.print(t)


@models_app.command("promote")
def models_promote(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Model name (reranker, sft, or a job's register_as).")],
    version: Annotated[int, typer.Argument(help="Version to serve.")],
    force: Annotated[bool, typer.Option(help="Promote without judging it against the served graph.")] = False,
    dataset: Annotated[Path | None, typer.Option(help="A generator is judged on this question set (as in `eval "
                                                 "answers`). [default: the one it was fine-tuned from]")] = None,
    split: Annotated[str, typer.Option(help="Split of the question set: dev is never trained on.")] = "dev",
    limit: Annotated[int, typer.Option(min=1, help="Questions asked of each generator.")] = 200,
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Mark a model version as the one to serve; a running graph that serves `catalog:NAME` swaps to it.

    A generator (an sft model) must earn it: the served graph and a copy of it serving this version answer the
    same questions, and the version is promoted only if its F1 is higher (both scores are shown either way)."""
    from app.catalog import Catalog
    from app.eval.answers import Endpoint
    from app.promotion import PromotionResult, promote_generator

    c: Context = ctx.obj
    catalog = Catalog(c.storage)
    if force or catalog.get_model(name, version).task != "sft":
        catalog.promote(name, version)
        result = PromotionResult(name=name, version=version, forced=force)
    else:
        endpoint = Endpoint(*_endpoint(c, url, key))
        _connect(c)
        result = promote_generator(c.storage, name, version, endpoint, idk=c.cfg.serve.generator.idk_answer,
                                   dataset=dataset, split=split, limit=limit)
    if as_json:
        return _print_json(result.model_dump())
    if result.served and result.candidate:
        out.print(f"F1 {result.candidate.f1:.1f} against {result.served.f1:.1f} for {result.served.generator} "
                  f"({result.candidate.questions} {split} questions of {result.candidate.dataset})")
    out.print(f"promoted {name} version {version}: a graph serving serve.generator.model=catalog:{name} swaps to it "
              "within seconds")


# ---- eval ------------------------------------------------------------------------------------------------------
@eval_app.command("retrieval")
def eval_retrieval(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Option(help="BEIR-style directory: corpus.jsonl, queries.jsonl, qrels/.")],
    split: Annotated[str, typer.Option(help="qrels split.")] = "dev",
    rerank: Annotated[bool, typer.Option(help="Also rerank each mode's top chunks: <mode>+rerank as the serving "
                                         "graph does (the cross-encoder fused with the retriever's order, "
                                         "serve.reranker.retriever_weight), <mode>+ce by the cross-encoder "
                                         "alone.")] = False,
    reranker: Annotated[str, typer.Option(help="CrossEncoder for --rerank: catalog:NAME[:VERSION], a directory "
                                          "or a hub id.")] = "catalog:reranker",
    rerank_top: Annotated[int, typer.Option(help="Chunks reranked per query.")] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """nDCG@10 and recall@100 of dense, BM25 and hybrid search on a BEIR-style dataset (and reranked)."""
    from app.eval.retrieval import evaluate_retrieval

    c: Context = ctx.obj
    if not 1 <= rerank_top <= 1000:
        raise ValueError(f"--rerank-top must be between 1 and 1000, not {rerank_top}")
    _connect(c)
    result = evaluate_retrieval(dataset, split, c.storage.uri, c.cfg, reranker=reranker if rerank else None,
                                rerank_top=rerank_top)
    if as_json:
        _print_json(result)
        return
    t = Table("mode", "nDCG@10", "recall@100",
              title=f"{result['dataset']} {result['split']} ({result['queries']} queries)")
    for mode, m in result["modes"].items():
        t.add_row(mode, f"{m['ndcg@10']:.4f}", f"{m['recall@100']:.4f}" if "recall@100" in m else "-")
    out.print(t)


@eval_app.command("answers")
def eval_answers(
    ctx: typer.Context,
    dataset: Annotated[Path, typer.Option(help="SQuAD v1.1 JSON, or JSONL lines {question, answers, doc_id} about "
                                          "documents already ingested.")],
    split: Annotated[str, typer.Option(help="train, dev or all. SQuAD is split by article: dev is a quarter of "
                                       "the articles, never trained on.")] = "dev",
    limit: Annotated[int | None, typer.Option(min=1, help="Ask this many questions, spread evenly over the "
                                              "split. [default: all]")] = None,
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    k: Annotated[int, typer.Option("-k", min=1, help="Passages retrieved per question (top_k).")] = 5,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Cap answers below the server's own budget.")] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=256, help="Requests in flight.")] = 8,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Ask a question set at the serving endpoint as users do; score exact match, F1, citations, latency."""
    from app.eval.answers import Endpoint, evaluate_answers

    c: Context = ctx.obj
    endpoint = Endpoint(*_endpoint(c, url, key))
    _connect(c)
    report = evaluate_answers(dataset, split, endpoint, c.storage, idk=c.cfg.serve.generator.idk_answer,
                              limit=limit, top_k=k, max_tokens=max_tokens, concurrency=concurrency)
    if as_json:
        return _print_json(report.model_dump())
    t = Table(show_header=False, title=f"{report.dataset} {report.split}: {report.questions} questions, "
              f"{report.generator}, index v{report.index_version} (run {report.run_id})")
    for label, value in (("exact match", f"{report.exact_match:.1f}"), ("F1", f"{report.f1:.1f}"),
                         ("citation accuracy", f"{report.citation_accuracy:.3f}"),
                         ("gold passage in the prompt", f"{report.gold_in_context:.3f}"),
                         ("\"I don't know\"", f"{report.idk_rate:.3f}"),
                         ("answer tokens (mean)", f"{report.answer_tokens:.1f}"),
                         ("latency p50 / p95", f"{report.latency_p50_s:.2f} / {report.latency_p95_s:.2f} s"),
                         ("tokens/s", f"{report.tokens_per_s:.1f}"), ("failed requests", str(report.errors)),
                         ("wall time", f"{report.wall_s:.1f} s")):
        t.add_row(label, value)
    out.print(t)


@eval_app.command("corpus")
def eval_corpus(
    dataset: Annotated[Path, typer.Argument(help="SQuAD v1.1 JSON file.")],
    output: Annotated[Path, typer.Argument(help="JSONL corpus to write: one {id, title, text} per paragraph.")],
) -> None:
    """Write a SQuAD file's paragraphs as a corpus for `ragline ingest` (ids <article>#<paragraph>)."""
    from app.qa.questions import write_corpus

    n = write_corpus(dataset, output)
    out.print(f"wrote {n} paragraphs to {output}")


# ---- submit ----------------------------------------------------------------------------------------------------
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
            raise ValueError(f"config file {cfg_path} is outside the working directory {wd}: the job only sees "
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
        raise typer.Exit(_fail(f"stopped following; job {job_id} keeps running (`ray job stop {job_id} "
                               f"--address {url}` ends it)", 130)) from None
    err.print(f"job {job_id} {final}")
    if final != "SUCCEEDED":
        raise typer.Exit(1)


def _submit_command(command: str, doc: str) -> Any:
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


for _name, _doc in (("ingest", "`ragline ingest ARGS` as a Ray job (the driver runs the pipeline itself)."),
                    ("train", "`ragline train sft|reranker ARGS` as a Ray job (the driver runs the TorchTrainer)."),
                    ("eval", "`ragline eval retrieval ARGS` as a Ray job.")):
    submit_app.command(_name, context_settings={"ignore_unknown_options": True}, no_args_is_help=True)(
        _submit_command(_name, _doc))


# ---- demo ------------------------------------------------------------------------------------------------------
def write_demo_corpus(directory: Path) -> Path:
    """The Python language reference topics that ship with CPython (pydoc_data), one markdown file each."""
    from pydoc_data.topics import topics

    directory.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(topics.items()):
        target = directory / f"{name}.md"
        body = f"# {name}\n\n{text}"
        if not target.exists() or target.read_text(encoding="utf-8") != body:
            target.write_text(body, encoding="utf-8")
    return directory


@app.command()
def demo(
    ctx: typer.Context,
    question: Annotated[str, typer.Option(help="The question to answer at the end.")] = DEMO_QUESTION,
    port: Annotated[int | None, typer.Option(help="HTTP port of the endpoint. [default: the Serve config's]")
                    ] = None,
) -> None:
    """The main job on the embedded default: local Ray, ingest the Python reference topics, index, search,
    serve the RAG graph and ask it."""
    c: Context = ctx.obj
    if not c.storage.is_local:
        raise ValueError("the demo writes its corpus under the storage root: use a local --storage")
    corpus = write_demo_corpus(c.storage.local_path("demo-corpus"))
    out.print(f"[bold]1/4[/] demo corpus: {len(list(corpus.glob('*.md')))} Python reference topics in {corpus}")
    out.print("[bold]2/4[/] ingesting through the IngestService (Ray Data pipeline → dataset + index version)")
    ingest(ctx, [str(corpus)], detach=False, in_process=False, index=True, as_json=False)
    out.print("[bold]3/4[/] searching (hybrid: FAISS + BM25, reciprocal rank fusion)")
    search(ctx, question, mode=None, k=5, source=None, index=None, as_json=False)
    out.print("[bold]4/4[/] serving the RAG graph on Ray Serve and asking it over HTTP")
    serve(ctx, serve_config=None, port=port, api_keys_file=None, as_json=False)
    query(ctx, question, url=None, key=None, k=5, as_json=False)


def main() -> None:
    from ray.exceptions import RayError

    try:
        app()
    except RayError as e:  # a task, actor or node of the run failed on the cluster (a node lost, say)
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        sys.exit(_fail(f"the run failed on the cluster: {first}. Nothing half-done is published (a version "
                       "appears only when its run completes; training resumes from its latest checkpoint): run the "
                       "command again", 1))
    except ValueError as e:
        sys.exit(_fail(str(e), 2))
    except RuntimeError as e:  # IngestError and Ray start-up failures: the message says what to do
        sys.exit(_fail(str(e), 1))
    except KeyboardInterrupt:
        sys.exit(_fail("interrupted (a training run resumes from its latest checkpoint when started again with "
                       "the same name)", 130))


if __name__ == "__main__":
    main()
