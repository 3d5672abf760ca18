"""/v1/chat/completions, OpenAI's shape: the last user message is the question, earlier turns are the history the
prompt keeps while it fits; the answer's citations and Ragline's metadata ride along as extra fields."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.rag.flow import Answer
from app.rag.protocol import Finished, Generation
from deployments.api.access import collection_of_model
from deployments.api.edge import Edge, sse
from deployments.api.errors import STAGE_ERRORS, responses, streamed
from deployments.api.views import (
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatUsage,
    ChunkChoice,
    ChunkDelta,
    Citation,
    Meta,
    citations,
    meta,
)
from deployments.guard import record_read
from deployments.schemas import ChatCompletionRequest


def usage(f: Finished) -> ChatUsage:
    return ChatUsage(prompt_tokens=f.prompt_tokens, completion_tokens=f.completion_tokens,
                     total_tokens=f.prompt_tokens + f.completion_tokens)


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/chat/completions", response_model=ChatCompletion,
            responses={**streamed("`chat.completion.chunk` objects, then `[DONE]`"),
                       **responses(404, *STAGE_ERRORS)})
    async def chat(req: ChatCompletionRequest, request: Request) -> ChatCompletion | StreamingResponse:
        edge.within_limits(req)
        collection = collection_of_model(req.model, (edge.generator, "ragline"))
        question = req.messages[-1].text().strip()
        edge.check_question(question, "messages[-1].content", req.top_k)
        search = edge.search(request, question, top_k=req.top_k, mode=req.mode, sources=req.sources,
                             collection=collection, where=req.filter)
        history = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                   for m in req.messages[:-1] if m.role in ("user", "assistant", "system", "developer")]
        generation = Generation(max_tokens=req.max_completion_tokens or req.max_tokens, temperature=req.temperature,
                                top_p=req.top_p, stop=[req.stop] if isinstance(req.stop, str) else req.stop,
                                history=history)
        flow, timings = edge.flow, dict[str, float]()
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        ticket = edge.admit(generation)

        if not req.stream:
            async def run() -> ChatCompletion:
                context = await flow.context(search, timings)
                out = await flow.answer(question, context, generation, timings)
                ticket.finish(out.finished.completion_tokens)
                record_read(request, search.collection, [p.chunk_id for p in out.passages])
                choice = ChatChoice(index=0, message=AssistantMessage(content=out.text.strip()),
                                    finish_reason=out.finished.finish_reason)
                return ChatCompletion(id=cid, created=created, model=edge.generator, choices=[choice],
                                      usage=usage(out.finished), citations=citations(out.passages, out.text),
                                      ragline=meta(context, timings, out.finished))

            return await edge.answering(ticket, run())

        def chunk(choices: list[ChunkChoice], *, citations: list[Citation] | None = None, ragline: Meta | None = None,
                  usage: ChatUsage | None = None) -> bytes:
            # sent without what a chunk does not carry (exclude_unset): only the last has citations, only the usage
            # chunk has usage, and a delta says only what it sets
            body = ChatCompletionChunk(id=cid, created=created, model=edge.generator, object="chat.completion.chunk",
                                       choices=choices, citations=citations, ragline=ragline, usage=usage)
            absent = {k for k, v in (("citations", citations), ("ragline", ragline), ("usage", usage)) if v is None}
            return sse(None, body.model_dump_json(exclude_unset=True, exclude=absent))

        async def events() -> AsyncIterator[bytes]:
            context = await flow.context(search, timings)
            record_read(request, search.collection, [p.chunk_id for p in context.passages])
            yield chunk([ChunkChoice(index=0, delta=ChunkDelta(role="assistant", content=""), finish_reason=None)])
            async for piece in flow.stream(question, context, generation, timings):
                if not isinstance(piece, Answer):
                    yield chunk([ChunkChoice(index=0, delta=ChunkDelta(content=piece.text), finish_reason=None)])
                    continue
                f = piece.finished
                ticket.finish(f.completion_tokens)
                yield chunk([ChunkChoice(index=0, delta=ChunkDelta(), finish_reason=f.finish_reason)],
                            citations=citations(piece.passages, piece.text), ragline=meta(context, timings, f))
                if req.stream_options and req.stream_options.include_usage:
                    yield chunk([], usage=usage(f))
            yield sse(None, "[DONE]")

        return edge.streaming(events(), ticket)

    return r
