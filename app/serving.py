"""Deploying the Serve graph from a Serve config YAML (what `ragline serve` does) and calling the endpoint.

The YAML is the same one `serve run` / `serve deploy` take; Ragline only fills in the application's `args`
(storage root, config file, overrides) and deploys it through Serve's controller exactly as `serve run` does.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Required, TypedDict, cast
from urllib.parse import urlparse

import httpx
import yaml

from app import envs
from app.config import load_config
from app.config_files import read_yaml_mapping
from app.errors import Conflict, NotFound, RaglineError, TimedOut, Unavailable, UserError
from app.rag.protocol import QueryResponse
from app.storage import Storage

if TYPE_CHECKING:
    from ray.serve.schema import ServeInstanceDetails

DEFAULT_SERVE_CONFIG = Path(__file__).resolve().parent.parent / "deployments" / "serve_cpu.yaml"
APP_NAME = "ragline"
GRAPH = "deployments.graph:build_app"
LLM = "deployments.llm:build_llm_app"
# a copy of the graph whose generator serves a model being judged for promotion (app.promotion)
CANDIDATE, CANDIDATE_LLM, CANDIDATE_PREFIX = "ragline-candidate", "ragline-candidate-llm", "/candidate"
SEARCH_DEPLOYMENTS = ("Retriever", "Reranker")  # what a candidate's copy asks of the served graph
CANDIDATES = {CANDIDATE, CANDIDATE_LLM}


class AppArgs(TypedDict, total=False):
    """`args:` of Ragline's applications (GRAPH, LLM): `deployments.settings.GraphArgs` and `deployments.llm.
    LLMArgs` validate them on the cluster."""

    storage: str
    config_file: str
    config: dict[str, object]  # a Ragline config, inline
    overrides: list[str]
    api_keys_file: str
    generator_version: int
    search_from: str  # GRAPH only


class DeploymentConfig(TypedDict, total=False):
    """A deployment of a Serve application config (`ray.serve.schema.DeploymentSchema`): the keys Ragline edits."""

    name: Required[str]
    ray_actor_options: dict[str, object]


class ApplicationConfig(TypedDict, total=False):
    """An application of a running Serve config as `ServeApplicationSchema.model_dump(exclude_unset=True)` gives
    it: the keys Ragline reads or edits (the others pass through as they are). `args` are AppArgs for Ragline's
    applications, the only ones whose args are read."""

    name: str
    import_path: Required[str]
    route_prefix: str | None
    args: AppArgs
    deployments: list[DeploymentConfig]


def load_serve_config(path: str | Path | None, storage: Storage, config_file: str | None, overrides: list[str],
                      api_keys_file: str | None = None,
                      deployment_options: Mapping[str, Mapping[str, object]] | None = None,
                      remote: bool = False) -> Any:
    """The validated `ServeDeploySchema` with Ragline's application args filled in; `deployment_options`
    (deployment name → `DeploymentSchema` fields: {"Generator": {"max_queued_requests": 8}, ...}) are merged over
    the YAML's per-deployment settings.
    `remote`: for another machine's cluster, so the Ragline config travels inline rather than as a local path."""
    from ray.serve.schema import ServeDeploySchema

    p = Path(path) if path else DEFAULT_SERVE_CONFIG
    if not p.is_file():
        raise NotFound(f"Serve config {p} does not exist")
    raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not raw.get("applications"):
        raise UserError(f"Serve config {p} has no applications")
    for app in raw["applications"]:
        if app.get("import_path") not in (GRAPH, LLM):
            continue
        args = copy.deepcopy(app.get("args") or {})  # a YAML anchor shares one mapping between applications
        args["storage"] = str(storage.local_path()) if storage.is_local else storage.uri
        if config_file and remote:
            args["config"] = read_yaml_mapping(config_file, "config file")
        elif config_file:
            args["config_file"] = str(Path(config_file).resolve())
        args["overrides"] = [*(args.get("overrides") or []), *overrides]
        if api_keys_file and app["import_path"] == GRAPH:
            args["api_keys_file"] = str(Path(api_keys_file).resolve())
        app["args"] = args
        for d in app.get("deployments") or []:
            for key, value in (deployment_options or {}).get(d["name"], {}).items():
                d[key] = {**d.get(key, {}), **value} if isinstance(value, dict) else value
    # the LLM application serves the vllm engine only: with another engine it is left out
    raw["applications"] = [a for a in raw["applications"]
                           if a.get("import_path") != LLM or _generator_engine(a["args"]) == "vllm"]
    try:
        return ServeDeploySchema.model_validate(raw)
    except Exception as e:  # pydantic's message names the field
        raise UserError(f"Serve config {p} is invalid: {e}") from e


def _generator_engine(args: AppArgs) -> str:
    return load_config(args.get("config_file") or envs.RAGLINE_CONFIG or None, args["overrides"],
                       inline=args.get("config")).serve.generator.engine


def url_of(schema: Any, dashboard: str | None = None) -> str:
    """The endpoint: on the cluster whose dashboard is given, that head's host; else the config's own host."""
    host = urlparse(dashboard).hostname if dashboard else schema.http_options.host
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{schema.http_options.port}"


def deploy(schema: Any, timeout_s: float = 600) -> None:
    """Starts Serve with the config's HTTP options and deploys its applications; waits until RUNNING."""
    submit(schema)
    wait_running([a.name for a in schema.applications], timeout_s)


def submit(schema: Any) -> None:
    """`deploy` without the wait: the applications start while the caller does other work, then `wait_running`."""
    from ray.exceptions import RayError
    from ray.serve._private.api import serve_start  # what `serve run CONFIG` calls

    try:
        client = serve_start(http_options=schema.http_options.model_dump(), proxy_location=schema.proxy_location)
    except RayError as e:  # Serve's proxy (HAProxy) failed to start: say so if a port it needs is taken
        if taken := ports_taken(str(e)):
            raise Conflict(f"Serve's HTTP proxy (HAProxy) could not listen on {taken}: another process holds it; "
                           "stop that process, or serve on another port (--port, or http_options.port in the Serve "
                           "config); 8404 and 9101 are HAProxy's own stats and metrics ports") from e
        raise
    client.deploy_apps(schema, _blocking=False)


def ports_taken(haproxy_error: str) -> str:
    """The addresses HAProxy could not bind, as its startup error names them ("" if none): "127.0.0.1:8000
    (Address already in use), ..."."""
    taken = re.findall(r"cannot bind socket \(([^)]*)\) for \[([^\]]+)\]", haproxy_error)
    return ", ".join(f"{address} ({why})" for why, address in dict.fromkeys(taken))


def wait_running(names: list[str], timeout_s: float) -> None:
    """Waits until the named Serve applications are RUNNING; raises naming the ones that failed."""
    from ray import serve

    deadline = time.time() + timeout_s
    while True:
        apps = serve.status().applications
        states = {n: apps[n].status if n in apps else "NOT_STARTED" for n in names}
        if all(s == "RUNNING" for s in states.values()):
            return
        failed = {n: apps[n].message for n, s in states.items() if s in ("DEPLOY_FAILED", "UNHEALTHY")}
        if failed:
            raise RaglineError(f"Serve application failed to deploy: {failed}")
        if time.time() > deadline:
            raise RaglineError(f"Serve applications not RUNNING after {timeout_s}s: {states}")
        time.sleep(1)


def pin_generator(app_name: str, version: int) -> bool:
    """Re-applies the running Serve config with the LLM application `app_name` pinned to generator `version`
    (its `args.generator_version`); Serve then rolls that application's replicas over, and only those. Called
    from inside the cluster (a replica that saw a new promotion). Idempotent: False when the running config
    already pins that version, or when the applications were not deployed from a config (`serve.run`), which
    Ragline cannot re-apply."""
    running = _running_config()
    if running is None or (running[1][app_name].get("args") or {}).get("generator_version") == version:
        return False
    details, apps = running
    apps[app_name]["args"] = {**(apps[app_name].get("args") or {}), "generator_version": version}
    _apply(details, list(apps.values()))
    return True


def deploy_candidate(model: str) -> tuple[str, list[str]]:
    """Adds to the running Serve config a copy of the RAG application at route CANDIDATE_PREFIX (and of its LLM
    application) whose generator serves `model` and which asks the served graph's Retriever and Reranker; the
    served applications are left exactly as they run. Returns the route prefix and the new applications' names,
    without waiting for them (`wait_running`).

    The copies reserve almost no CPU (0.01 per deployment, 0.05 for the LLM's bundle): on a small machine the
    served graph holds most of it, and a candidate is only asked a question set."""
    running = _running_config()
    if running is None:
        raise Conflict("the running Serve applications were not deployed from a Serve config (`ragline "
                       "serve` deploys one): a candidate cannot be added beside them")
    details, apps = running
    graph = next((a for n, a in apps.items() if a["import_path"] == GRAPH and n not in CANDIDATES), None)
    if graph is None:
        raise Conflict("no Ragline graph is being served: start one with `ragline serve`")
    llm = next((a for n, a in apps.items() if a["import_path"] == LLM and n not in CANDIDATES), None)
    overrides = [f"serve.generator.model={model}", f"serve.generator.vllm.llm_app={CANDIDATE_LLM}",
                 "serve.generator.vllm.cpus=0.05"]
    # the LLM's replica holds no CPU already (its engine's bundle is serve.generator.vllm.cpus), and its
    # ray_actor_options come from its builder (the engine's environment): a config value would replace them
    # the copy asks the served graph's Retriever and Reranker: the same passages, and no second index in memory
    copies: list[ApplicationConfig] = [{**graph, "name": CANDIDATE, "route_prefix": CANDIDATE_PREFIX, "deployments": [
        _reserving_little(d) for d in graph.get("deployments") or [] if d["name"] not in SEARCH_DEPLOYMENTS]}]
    if llm is not None:
        copies.append({**llm, "name": CANDIDATE_LLM, "route_prefix": None})
    for app in copies:
        args = (app.get("args") or AppArgs()).copy()  # a copy: the served application's args stay as they are
        args.pop("generator_version", None)
        app["args"] = {**args, "overrides": [*(args.get("overrides") or []), *overrides]}
    copies[0]["args"]["search_from"] = graph["name"]
    _apply(details, [a for n, a in apps.items() if n not in CANDIDATES] + copies)
    return CANDIDATE_PREFIX, [a["name"] for a in copies]


def _reserving_little(d: DeploymentConfig) -> DeploymentConfig:
    """The deployment reserving 0.01 CPU at most (an Ingress that reserves none, to fit a head node with none to
    give, keeps none)."""
    options = d.get("ray_actor_options") or {}
    cpus = options.get("num_cpus", 0.01)
    assert isinstance(cpus, int | float), cpus
    return {**d, "ray_actor_options": {**options, "num_cpus": min(0.01, cpus)}}


def remove_candidate() -> None:
    """Re-applies the running Serve config without the candidate applications (Serve deletes them)."""
    running = _running_config()
    if running is not None and CANDIDATES & running[1].keys():
        _apply(running[0], [a for n, a in running[1].items() if n not in CANDIDATES])


def _running_config() -> tuple[ServeInstanceDetails, dict[str, ApplicationConfig]] | None:
    """The running Serve instance's details and each application's config as it was deployed (name -> config),
    or None when an application was deployed by `serve.run` rather than from a config."""
    from ray.serve.schema import ServeInstanceDetails

    details = ServeInstanceDetails(**_client().get_serve_details())
    apps = {}
    for name, app in details.applications.items():
        if app.deployed_app_config is None:
            return None
        # pydantic's dump of a ServeApplicationSchema, which ApplicationConfig describes
        apps[name] = cast(ApplicationConfig, app.deployed_app_config.model_dump(exclude_unset=True))
    return details, apps


def _apply(details: ServeInstanceDetails, apps: list[ApplicationConfig]) -> None:
    """Deploys `apps` as the whole Serve config: unchanged applications keep their replicas, absent ones go."""
    from ray.serve.schema import ServeDeploySchema

    assert details.http_options is not None, "a running Serve has HTTP options"
    _client().deploy_apps(ServeDeploySchema.model_validate({
        "proxy_location": details.proxy_location, "applications": apps,
        "http_options": details.http_options.model_dump(exclude_unset=True)}))


def _client() -> Any:
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    assert client is not None, "raises rather than returning None when no Serve runs"
    return client


def query(url: str, key: str, question: str, timeout_s: float = 300, **params: Any) -> QueryResponse:
    """/v1/query's answer, parsed into the model the endpoint serialized."""
    r = httpx.post(f"{url.rstrip('/')}/v1/query", json={"question": question, **params},
                   headers={"Authorization": f"Bearer {key}"}, timeout=timeout_s)
    body = r.json()
    if r.status_code != 200:
        err = body.get("error", {}) if isinstance(body, dict) else {}
        raise _error_of(r.status_code)(f"{url} answered {r.status_code}: {err.get('message', body)}")
    return QueryResponse.model_validate(body)


def _error_of(status: int) -> type[RaglineError]:
    """The error an HTTP status reports: the caller's mistake (4xx), not now (503, 504) or the server's (5xx)."""
    if status == 404:
        return NotFound
    if status == 409:
        return Conflict
    if status < 500:
        return UserError
    return {503: Unavailable, 504: TimedOut}.get(status, RaglineError)
