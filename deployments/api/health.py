"""Liveness, readiness and the served models (OpenAI's /v1/models)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from deployments.api.access import COLLECTION_MODEL
from deployments.api.edge import Edge
from deployments.api.errors import responses
from deployments.api.views import Health, ModelCard, ModelList, Readiness
from deployments.guard import caller_of
from deployments.readiness import RetrieverReady


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.get("/healthz", response_model=Health)  # open: the guard answers it before any key is asked for
    async def healthz() -> Health:
        return Health()

    @r.get("/readyz", response_model=Readiness, responses={
        503: {"model": Readiness, "description": "A stage is not ready (the body says which, and why)."},
        **responses(401, 500)})
    async def readyz(request: Request) -> JSONResponse:
        parts = await edge.flow.ready()
        retriever = parts["retriever"]
        if isinstance(retriever, RetrieverReady):  # a caller sees only the collections its key may read
            parts["retriever"] = scoped(retriever, caller_of(request).scope.may_read)
        body = Readiness.model_validate({"ready": all(p.ready for p in parts.values()), **parts,
                                         "admission": edge.admission.state()})
        # a response of its own for the 503; a stage's fields it did not report are left out, as they were
        return JSONResponse(body.model_dump(mode="json", exclude_unset=True), 200 if body.ready else 503)

    @r.get("/v1/models", response_model=ModelList, responses=responses(401, 500))
    async def list_models(request: Request) -> ModelList:
        """The generator, the default collection's embedder, and `ragline/<collection>` for each collection the
        key may read (the name a chat completion asks to answer from it)."""
        readable = [f"{COLLECTION_MODEL}{c}" for c in edge.access.readable(caller_of(request))]
        return ModelList(data=[ModelCard(id=m, created=0, owned_by="ragline")
                               for m in (edge.generator, edge.embedder.name, *readable)])

    return r


def scoped(ready: RetrieverReady, may_read: Callable[[str], bool]) -> RetrieverReady:
    """The retriever's readiness without the collections `may_read` refuses: their names, versions and sizes."""
    hidden = {"collection", "index_version", "dataset_version", "chunks"}
    fields = {k: getattr(ready, k) for k in ready.model_fields_set}
    if ready.collection is not None and not may_read(ready.collection):
        fields = {k: v for k, v in fields.items() if k not in hidden}
    if ready.collections is not None:
        fields["collections"] = {c: v for c, v in ready.collections.items() if may_read(c)}
    return RetrieverReady(**fields)
