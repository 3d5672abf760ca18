"""Liveness, readiness and the served models (OpenAI's /v1/models)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from deployments.api.edge import Edge
from deployments.api.views import ModelList


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @r.get("/readyz")
    async def readyz() -> JSONResponse:
        parts = await edge.flow.ready()
        ok = all(p["ready"] for p in parts.values())
        return JSONResponse({"ready": ok, **parts, "admission": edge.admission.state()}, 200 if ok else 503)

    @r.get("/v1/models", response_model=dict[str, object])  # the body as built (deployments/api/views.py)
    async def list_models() -> ModelList:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "ragline"}
                                           for m in (edge.generator, edge.embedder.name)]}

    return r
