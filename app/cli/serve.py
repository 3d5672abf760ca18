"""`ragline serve`, `query` and `status`: the Serve graph, asking it, and what runs and is published."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.table import Table

from app import envs, hardware
from app.cli.context import Collection, Context, connect, json_object
from app.cli.render import err, out, print_cluster, print_json
from app.errors import NotFound, UserError
from app.passage import where
from app.remote import ClusterStatus

ENDPOINT_FILE = "serve/endpoint.json"  # where `ragline serve` records the URL for `ragline query`


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
        raise UserError("serving on a cluster needs the storage root its nodes share: give --storage "
                        "(s3://…, gs://… or an absolute path on a shared filesystem) or set RAGLINE_STORAGE")
    keys_file = str(api_keys_file) if api_keys_file else None
    entries, where, new_key = apikeys.load_entries(c.storage, keys_file)
    schema = serving.load_serve_config(serve_config, c.storage, c.config_file, c.overrides,
                                       None if on_cluster else keys_file, remote=on_cluster)
    if port is not None:
        schema.http_options.port = port
    # replicas may run on other machines: keys that are not under the shared storage root travel with the app,
    # as digests with their scopes (the dashboard shows a runtime_env)
    if where == "RAGLINE_API_KEYS" or (on_cluster and keys_file):
        for application in schema.applications:
            env = (application.runtime_env or {}).get("env_vars", {})
            application.runtime_env = {**(application.runtime_env or {}), "env_vars": {
                **env, "RAGLINE_API_KEY_HASHES": apikeys.hashes_env(entries)}}
    if not as_json:
        err.print(f"deploying {[a.name for a in schema.applications]} (the first start converts and loads models)")
    if on_cluster:
        assert c.address is not None
        remote.deploy(c.address, schema)
        url = serving.url_of(schema, c.address)
    else:
        connect(c)
        serving.deploy(schema)
        url = serving.url_of(schema)
    c.storage.write_json(ENDPOINT_FILE, {"url": url})
    if as_json:
        return print_json({"url": url, "console": f"{url}/", "api_keys": where,
                           **({"new_api_key": new_key} if new_key else {})})
    out.print(f"Ragline is serving at [bold]{url}[/]  (OpenAI base URL: {url}/v1)")
    out.print(f"Web console: [bold]{url}/[/]  (ask with cited, streamed answers; see runs, versions and models: "
              "it asks for an API key)", soft_wrap=True)
    if new_key:
        out.print(f"API key (generated now, shown once; kept in {where}):\n  {new_key}")
    else:
        out.print(f"API keys: {where}")


def endpoint(c: Context, url: str | None, key: str | None) -> tuple[str, str]:
    """The endpoint to ask and its API key: as given, else the ones `ragline serve` recorded and resolves."""
    from app import apikeys

    if not url:
        if not c.storage.exists(ENDPOINT_FILE):
            raise UserError("no endpoint known: give --url, or run `ragline serve` with this --storage first")
        url = str(c.storage.read_json(ENDPOINT_FILE)["url"])
    if not key:
        key = apikeys.load(c.storage, create=False)[0][0]
    return url, key


def query(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question.")],
    url: Annotated[str | None, typer.Option(help="Endpoint. [default: the one `ragline serve` started]")] = None,
    key: Annotated[str | None, typer.Option(help="API key. [default: as `ragline serve` resolves it]")] = None,
    k: Annotated[int, typer.Option("-k", help="Passages retrieved as context.")] = 5,
    collection: Collection = "default",
    filter_: Annotated[str | None, typer.Option("--where", help="Only documents whose metadata match this JSON "
                                                "filter, e.g. '{\"year\": {\"$gte\": 2020}}'.")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Ask the running endpoint; prints the answer with its numbered sources."""
    from app import serving

    c: Context = ctx.obj
    url, key = endpoint(c, url, key)
    body = serving.query(url, key, question, top_k=k, collection=collection,
                         filter=json_object(filter_, "--where") if filter_ else None)
    if as_json:
        return print_json(body.model_dump())
    out.print(f"[bold]Q:[/] {question}\n[bold]A:[/] {body.answer}\n", soft_wrap=True)
    for cite in body.citations:
        mark = "*" if cite.cited else " "
        out.print(f" {mark}[{cite.n}] {cite.title or cite.doc_id}  ({where(cite.source, cite.location)})",
                  soft_wrap=True, markup=False)
    t = body.timings_ms
    out.print(f"\nindex v{body.index_version} · reranker {body.models.reranker} · "
              f"{body.models.generator} · retrieve {t['retrieve']:.0f} ms, generate {t['generate']:.0f} ms")


class ModelSummary(BaseModel):
    versions: list[int]
    promoted: int | None


class Computes(BaseModel):
    """What this machine is, and what each component's `auto` settings choose on it (an explicit setting wins)."""

    hardware: dict[str, object]  # app.hardware.Hardware.record()
    embedder: str  # runtime and precision of a new dataset (an existing one keeps its own)
    reranker: str
    generator: str  # vLLM's dtype, and its threads on CPU


def computes(c: Context) -> Computes:
    from app.models import embedder

    hw, ec = hardware.detect(), c.cfg.ingest.embed
    device = "cuda" if ec.num_gpus > 0 else "cpu"
    vllm = c.cfg.serve.generator.vllm
    dtype = hardware.generator_dtype(vllm.dtype, vllm.device)
    return Computes(hardware=hw.record(),
                    embedder=f"{embedder.choose_runtime(ec.runtime, ec.model, device)} "
                             f"{hardware.choose_precision(ec.precision, device)}",
                    reranker=hardware.choose_precision(c.cfg.serve.reranker.precision, "cpu"),
                    generator=dtype + hardware.generator_placement(vllm.device, vllm.cpu_bind, vllm.threads, dtype))


def cluster_status(c: Context) -> ClusterStatus:
    """Jobs and Serve applications from the dashboard's REST API: the one --address names, or a local one."""
    from app import remote

    named = remote.is_dashboard_url(c.address)
    url = remote.dashboard_url(c.address) if named else envs.LOCAL_DASHBOARD
    try:
        return ClusterStatus(dashboard=url, jobs=remote.jobs(url), serve=remote.serve_applications(url))
    except remote.Unreachable:
        if named:
            raise
        return ClusterStatus(dashboard=None, note=f"no Ray dashboard at {url} (give --address http://HEAD:8265)")


def status(ctx: typer.Context, collection: Collection = "default",
           as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The collections; one collection's ingest runs, dataset and index versions and adapt runs; training runs and
    model versions; and the cluster's jobs and Serve applications (from the dashboard --address names, or a local
    one)."""
    from app import collections
    from app.adapt.run import adapt_runs
    from app.catalog import Catalog
    from app.services.runs import ingest_run_store
    from app.train.run import training_runs

    c: Context = ctx.obj
    corpus = c.collection(collection)
    if collection not in collections.names(c.storage):
        raise NotFound(f"collection {collection!r} does not exist in {c.storage.uri}")
    runs = ingest_run_store(corpus).all()
    adapted = adapt_runs(corpus)
    versions = {kind: [m.model_dump(include={"version", "created_at", "parent", "counts"}) | {
        "embedder": m.embedder.name} for m in Catalog(corpus).versions(kind)] for kind in ("datasets", "indexes")}
    latest = {name: Catalog(c.collection(name)).latest("indexes") for name in collections.names(c.storage)}
    named = {name: (m.version, m.counts.get("chunks", 0)) if m else (None, 0) for name, m in latest.items()}
    catalog = Catalog(c.storage)
    training = training_runs(c.storage).all()
    models = {name: ModelSummary(versions=[m.version for m in catalog.model_versions(name)],
                                 promoted=(p.version if (p := catalog.promoted(name)) else None))
              for name in catalog.model_names()}
    cluster = cluster_status(c)
    chosen = computes(c)
    if as_json:
        print_json({
            "storage": c.storage.uri, "collection": collection,
            "collections": {n: {"index_version": v, "chunks": k} for n, (v, k) in named.items()},
            "runs": [{k: r.get(k) for k in ("run_id", "state", "submitted_at", "finished_at", "error")} for r in runs],
            **versions, "adapt_runs": [a.model_dump() for a in adapted],
            "training_runs": [{k: r.get(k) for k in ("name", "task", "state", "started_at", "finished_at", "model",
                                                      "error")} for r in training],
            "models": {name: m.model_dump() for name, m in models.items()},
            "cluster": cluster.model_dump(exclude_unset=True), "computes": chosen.model_dump()})
        return
    print_cluster(cluster)
    out.print(f"storage: {c.storage.uri}")
    out.print(f"this machine: {hardware.detect().summary()}; auto chooses: embedder {chosen.embedder}, reranker "
              f"{chosen.reranker}, generator {chosen.generator}")
    ct = Table("collection", "index", "chunks", title="collections")
    for name, (version, chunks) in named.items():
        ct.add_row(name, str(version or "-"), str(chunks))
    out.print(ct)
    t = Table("run", "state", "submitted", "dataset", "index", "documents", title=f"ingest runs ({collection})")
    for r in runs:
        made = ("-", "-", "-")  # dataset, index, what the run did to the corpus: a succeeded run's report says
        if rep := r.get("report"):
            ch = rep.get("changes")  # runs before sync existed report only what they kept
            made = (str(rep.get("dataset_version", "-")), str(rep.get("index_version", "-")),
                    f"+{ch['added']} ~{ch['updated']} -{ch['removed']}" if ch else f"+{rep['documents']['kept']}")
        elif gone := r.get("deleted"):
            made = (str(gone["dataset_version"]), str(gone.get("index_version") or "-"), f"-{gone['documents']}")
        t.add_row(r["run_id"], r["state"], r.get("submitted_at", ""), *made)
    out.print(t)
    for kind, items in versions.items():
        v = Table("version", "created", "from", "documents", "chunks", "embedder", title=f"{kind} ({collection})")
        for m in items:
            v.add_row(str(m["version"]), m["created_at"], str(m["parent"] or "-"),
                      str(m["counts"].get("documents", "")), str(m["counts"].get("chunks", "")), str(m["embedder"]))
        out.print(v)
    at = Table("run", "questions (train / held out)", "candidate", "served", "held-out nDCG (generator: F1)",
               "decision", title=f"adapt runs ({collection})")
    for a in adapted:
        n = a.questions.counts
        if a.report is None:
            at.add_row(a.questions.run_id, f"{n.train} / {n.heldout}", "-", "-", "-", "questions only")
        for role in a.report.roles if a.report else []:
            at.add_row(a.questions.run_id, f"{n.train} / {n.heldout}", role.candidate, role.served,
                       f"{role.comparison.candidate:.3f} vs {role.comparison.served:.3f}", role.decision)
    out.print(at)
    tr = Table("run", "task", "state", "started", "model", title="training runs")
    for run in training:
        model = run.get("model")
        tr.add_row(run["name"], run["task"], run["state"], run.get("started_at") or "",
                   f"{model['name']} v{model['version']}" if model else "-")
    out.print(tr)
    mt = Table("model", "versions", "promoted", title="models")
    for name, s in models.items():
        mt.add_row(name, ", ".join(map(str, s.versions)), str(s.promoted or "-"))
    out.print(mt)
