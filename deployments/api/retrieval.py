"""The stages on their own: /v1/retrieve (search the served index), /v1/rerank (Cohere-style, the caller's
documents) and /v1/embeddings (OpenAI's, the served index's embedder)."""

from __future__ import annotations

import base64

import numpy as np
from fastapi import APIRouter, Request

from app.errors import UserError
from deployments.api.access import collection_of_model
from deployments.api.edge import Edge
from deployments.api.errors import STAGE_ERRORS, responses
from deployments.api.views import (
    Embedding,
    EmbeddingsResponse,
    EmbeddingsUsage,
    RerankResponse,
    RerankResult,
    RetrieveResponse,
)
from deployments.guard import record_read
from deployments.schemas import EmbeddingsRequest, RerankRequest, RetrieveRequest


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/retrieve", response_model=RetrieveResponse, responses=responses(404, *STAGE_ERRORS))
    async def retrieve(req: RetrieveRequest, request: Request) -> RetrieveResponse:
        edge.within_limits(req)
        edge.check_question(req.query, "query", req.top_k)
        search = edge.search(request, req.query, top_k=req.top_k, mode=req.mode, sources=req.sources,
                             collection=req.collection, where=req.filter)
        timings: dict[str, float] = {}
        found = await edge.deadline(edge.flow.retrieve(search, timings))
        record_read(request, found.collection, [h.chunk_id for h in found.hits])
        return RetrieveResponse(collection=found.collection, index_version=found.index_version, mode=found.mode,
                                hits=found.hits,
                                timings_ms={**found.timings_ms, "total": round(timings["retrieve"], 2)})

    @r.post("/v1/rerank", response_model=RerankResponse, responses=responses(*STAGE_ERRORS))
    async def rerank(req: RerankRequest) -> RerankResponse:
        edge.within_limits(req)
        edge.check_question(req.query, "query", 1)
        docs = [("", t) for t in req.documents]
        ranking = await edge.deadline(edge.flow.rank(req.query, docs, req.top_n or len(docs)))
        scores: list[float | None] = [*ranking.scores] if ranking.scores else [None] * len(ranking.order)
        return RerankResponse(reranker=ranking.reranker,
                              results=[RerankResult(index=i, relevance_score=s, document=req.documents[i])
                                       for i, s in zip(ranking.order, scores, strict=True)])

    @r.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=responses(404, *STAGE_ERRORS))
    async def embeddings(req: EmbeddingsRequest, request: Request) -> EmbeddingsResponse:
        edge.within_limits(req)
        collection = edge.access.open(request, collection_of_model(req.model, (edge.embedder.name,)))
        texts = [req.input] if isinstance(req.input, str) else req.input
        for i, t in enumerate(texts):
            edge.check_question(t, f"input[{i}]", 1)
        out = await edge.deadline(edge.flow.embed(texts, collection))
        dim = len(out.vectors[0])
        if req.dimensions is not None and req.dimensions != dim:
            raise UserError(f"dimensions: the model gives {dim}-dimensional vectors")

        def encode(v: list[float]) -> list[float] | str:
            if req.encoding_format == "base64":  # little-endian float32, as OpenAI sends it
                return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
            return v

        n_tokens = sum(edge.embedder.count_tokens(t) for t in texts)
        return EmbeddingsResponse(model=out.model, usage=EmbeddingsUsage(prompt_tokens=n_tokens, total_tokens=n_tokens),
                                  data=[Embedding(index=i, embedding=encode(v)) for i, v in enumerate(out.vectors)])

    return r
