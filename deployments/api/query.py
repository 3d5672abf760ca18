"""/v1/query: a question in, a grounded answer out, with its citations, the versions that made it and per-stage
timings; `stream: true` sends `token` events, then `citations`, then `done` (SSE)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.rag.flow import Answer
from app.rag.protocol import Generation, QueryResponse, Usage
from deployments.api.edge import Edge, sse
from deployments.api.errors import STAGE_ERRORS, responses, streamed
from deployments.api.views import citations, meta
from deployments.guard import record_read
from deployments.schemas import QueryRequest


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/query", response_model=QueryResponse,
            responses={**streamed("`token` events, then `citations`, then `done`"), **responses(404, *STAGE_ERRORS)})
    async def query(req: QueryRequest, request: Request) -> QueryResponse | StreamingResponse:
        edge.within_limits(req)
        edge.check_question(req.question, "question", req.top_k)
        search = edge.search(request, req.question, top_k=req.top_k, mode=req.mode, sources=req.sources,
                             collection=req.collection, where=req.filter)
        flow, timings = edge.flow, dict[str, float]()
        generation = Generation(max_tokens=req.max_tokens, temperature=req.temperature)
        t0 = time.perf_counter()
        ticket = edge.admit(generation)

        async def run() -> QueryResponse:
            context = await flow.context(search, timings)
            out = await flow.answer(req.question, context, generation, timings)
            ticket.finish(out.finished.completion_tokens)
            record_read(request, search.collection, [p.chunk_id for p in out.passages])
            timings["total"] = (time.perf_counter() - t0) * 1e3
            f = out.finished
            return QueryResponse(answer=out.text.strip(), finish_reason=f.finish_reason,
                                 citations=citations(out.passages, out.text),
                                 usage=Usage(prompt_tokens=f.prompt_tokens, completion_tokens=f.completion_tokens),
                                 **dict(meta(context, timings, f)))

        if not req.stream:
            return await edge.answering(ticket, run())

        async def events() -> AsyncIterator[bytes]:
            context = await flow.context(search, timings)
            record_read(request, search.collection, [p.chunk_id for p in context.passages])
            async for piece in flow.stream(req.question, context, generation, timings):
                if not isinstance(piece, Answer):
                    yield sse("token", {"text": piece.text})
                    continue
                timings["total"] = (time.perf_counter() - t0) * 1e3
                f = piece.finished
                ticket.finish(f.completion_tokens)
                yield sse("citations", {"citations": [c.model_dump() for c in citations(piece.passages, piece.text)],
                                        **meta(context, timings, f).model_dump()})
                yield sse("done", {"finish_reason": f.finish_reason,
                                   "usage": Usage(prompt_tokens=f.prompt_tokens,
                                                  completion_tokens=f.completion_tokens).model_dump()})

        return edge.streaming(events(), ticket)

    return r
