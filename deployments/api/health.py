"""Liveness, readiness and the served models (OpenAI's /v1/models)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from deployments.api.edge import Edge
from deployments.api.errors import responses
from deployments.api.views import Health, ModelCard, ModelList, Readiness


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.get("/healthz", response_model=Health)  # open: the guard answers it before any key is asked for
    async def healthz() -> Health:
        return Health()

    @r.get("/readyz", response_model=Readiness, responses={
        503: {"model": Readiness, "description": "A stage is not ready (the body says which, and why)."},
        **responses(401, 500)})
    async def readyz() -> JSONResponse:
        parts = await edge.flow.ready()
        body = Readiness.model_validate({"ready": all(p.ready for p in parts.values()), **parts,
                                         "admission": edge.admission.state()})
        # a response of its own for the 503; a stage's fields it did not report are left out, as they were
        return JSONResponse(body.model_dump(mode="json", exclude_unset=True), 200 if body.ready else 503)

    @r.get("/v1/models", response_model=ModelList, responses=responses(401, 500))
    async def list_models() -> ModelList:
        return ModelList(data=[ModelCard(id=m, created=0, owned_by="ragline")
                               for m in (edge.generator, edge.embedder.name)])

    return r
