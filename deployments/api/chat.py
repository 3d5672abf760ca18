"""/v1/chat/completions, OpenAI's shape: the last user message is the question, earlier turns are the history the
prompt keeps while it fits; the answer's citations and Ragline's metadata ride along as extra fields."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Unpack

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from app.rag.flow import Answer
from app.rag.protocol import Finished, Generation
from deployments.api.edge import Edge, sse
from deployments.api.errors import ModelNotFound
from deployments.api.views import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatHead,
    ChatUsage,
    ChunkChoice,
    ChunkExtra,
    citations,
    meta,
)
from deployments.schemas import ChatCompletionRequest


def usage(f: Finished) -> ChatUsage:
    return {"prompt_tokens": f.prompt_tokens, "completion_tokens": f.completion_tokens,
            "total_tokens": f.prompt_tokens + f.completion_tokens}


def router(edge: Edge) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/chat/completions", response_model=None)
    async def chat(req: ChatCompletionRequest) -> ChatCompletion | StreamingResponse:
        edge.within_limits(req)
        if req.model and req.model not in (edge.generator, "ragline"):
            raise ModelNotFound(f"model {req.model!r} is not served; use {edge.generator!r} (see /v1/models)")
        question = req.messages[-1].text().strip()
        edge.check_question(question, "messages[-1].content", req.top_k)
        history = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                   for m in req.messages[:-1] if m.role in ("user", "assistant", "system", "developer")]
        generation = Generation(max_tokens=req.max_completion_tokens or req.max_tokens, temperature=req.temperature,
                                top_p=req.top_p, stop=[req.stop] if isinstance(req.stop, str) else req.stop,
                                history=history)
        flow, timings = edge.flow, dict[str, float]()
        head: ChatHead = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": edge.generator}
        ticket = edge.admit(generation)

        if not req.stream:
            async def run() -> ChatCompletion:
                context = await flow.context(question, req.top_k, req.mode, req.sources, timings)
                out = await flow.answer(question, context, generation, timings)
                ticket.finish(out.finished.completion_tokens)
                return {**head, "object": "chat.completion",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text.strip()},
                                     "finish_reason": out.finished.finish_reason}],
                        "usage": usage(out.finished), "citations": citations(out.passages, out.text),
                        "ragline": meta(context, timings, out.finished)}

            return await edge.answering(ticket, run())

        def chunk(choices: list[ChunkChoice], **extra: Unpack[ChunkExtra]) -> bytes:
            body: ChatCompletionChunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            return sse(None, body)

        async def events() -> AsyncIterator[bytes]:
            context = await flow.context(question, req.top_k, req.mode, req.sources, timings)
            yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            async for piece in flow.stream(question, context, generation, timings):
                if not isinstance(piece, Answer):
                    yield chunk([{"index": 0, "delta": {"content": piece.text}, "finish_reason": None}])
                    continue
                f = piece.finished
                ticket.finish(f.completion_tokens)
                yield chunk([{"index": 0, "delta": {}, "finish_reason": f.finish_reason}],
                            citations=citations(piece.passages, piece.text), ragline=meta(context, timings, f))
                if req.stream_options and req.stream_options.include_usage:
                    yield chunk([], usage=usage(f))
            yield sse(None, "[DONE]")

        return edge.streaming(events(), ticket)

    return r
