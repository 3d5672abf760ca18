"""The HTTP API: thin routers per endpoint over a `RagFlow` (`app/rag/flow.py`), errors mapped in one place
(`errors.py`), behind the key and body-size guard.

`build_api` is plain FastAPI, so the same routes run in the Serve `Ingress` (the flow over DeploymentHandles),
in-process and against fakes (unit tests).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from ray.util.metrics import Histogram

from app import apikeys
from app.audit import AuditLog, audit_dir
from app.config import ApiConfig
from app.rag.admission import Admission
from app.rag.flow import RagFlow
from app.storage import Storage
from deployments.api import chat, console, errors, health, query, retrieval
from deployments.api.access import Access
from deployments.api.edge import Edge, ServedEmbedder
from deployments.fairshare import FairShare
from deployments.guard import Guard

LATENCY_BOUNDARIES_MS = [1.0, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000]


def stage_latency() -> Callable[[str, float], None]:
    """A `RagFlow` observer: each stage's latency into Ray's metrics (and Grafana)."""
    latency = Histogram("ragline_stage_latency_ms", description="Latency of each stage of a request (ms).",
                        boundaries=LATENCY_BOUNDARIES_MS, tag_keys=("stage",))
    return lambda stage, ms: latency.observe(ms, tags={"stage": stage})


def build_api(flow: RagFlow, api: ApiConfig, keys: apikeys.KeyRing, *, generator: str, max_new_tokens: int,
              embedder: ServedEmbedder, storage: Storage, access: Access | None = None) -> Guard:
    """The guarded ASGI app. `generator`: the served generator's name (/v1/models); `max_new_tokens`: the most
    tokens an answer may take (what admission counts a request at); `storage`: the root whose runs and versions the
    console shows, and under which a local audit log goes by default (`api.audit_dir`); `access`: which
    collections exist (the Ingress refreshes it; made here if not given)."""
    app = FastAPI(title="Ragline", summary="Grounded answers over your documents", version="1")
    errors.install(app, retry_after_s=api.retry_after_s, timeout_s=api.request_timeout_s)
    admission = Admission(budget_s=api.generation_budget_s or api.request_timeout_s / 2,
                          floor=api.generation_floor, max_running=api.max_generating,
                          lifetime_s=api.request_timeout_s + 5)
    edge = Edge(flow, api, generator, embedder, max_new_tokens, admission, access or Access(storage))
    for module in (health, retrieval, query, chat):
        app.include_router(module.router(edge))
    app.include_router(console.router(edge, storage))
    share = FairShare(api.key_fair_share, api.key_max_waiting)
    audit = AuditLog(audit_dir(api.audit_dir, storage), api.audit_max_bytes, api.audit_backups)
    return Guard(app, keys, api.max_body_bytes, share, api.retry_after_s, refusal_hold_s=api.key_refusal_hold_s,
                 open_paths=console.OPEN_PATHS, audit=audit)
