"""What every route shares: the flow it runs, the checks made at the edge before any stage sees a request, the
request deadline, and SSE framing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from fastapi import Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from app.config import ApiConfig
from app.errors import RaglineError, UserError
from app.filters import Filter, parse_filter
from app.rag.admission import Admission, Ticket
from app.rag.flow import RagFlow
from app.rag.protocol import Generation, Search
from deployments import limits
from deployments.api.access import Access
from deployments.api.errors import STAGE_FAILURES, body, translate

T = TypeVar("T")


class ServedEmbedder(Protocol):
    """The embedder of the index being served: its name (/v1/models, /v1/embeddings' `model`) and its tokens in a
    text (the question-length limit). It changes when a new index version built with another embedder swaps in."""

    @property
    def name(self) -> str: ...

    def count_tokens(self, text: str) -> int: ...


@dataclass(frozen=True)
class Edge:
    flow: RagFlow
    api: ApiConfig
    generator: str  # the name /v1/models lists and requests may ask for
    embedder: ServedEmbedder
    max_new_tokens: int  # serve.generator.max_new_tokens: the most tokens an answer may take
    admission: Admission
    access: Access

    def search(self, request: Request, query: str, *, top_k: int, mode: str | None, sources: list[str] | None,
               collection: str, where: dict[str, object] | None) -> Search:
        """The request's search, in a collection its key may read (`Access.open`: 404 otherwise). The key's scope
        is the collection; the caller's filter narrows within it, so the two are joined with AND here, once."""
        name = self.access.open(request, collection)
        parsed: Filter | None = parse_filter(where) if where is not None else None
        return Search(query, mode, top_k, sources, name, parsed)

    def admit(self, generation: Generation) -> Ticket:
        """A generation's ticket, or Overloaded (503 + Retry-After) now, before any stage runs."""
        return self.admission.admit(min(generation.max_tokens or self.max_new_tokens, self.max_new_tokens))

    def within_limits(self, req: BaseModel) -> None:
        """Sizes first, before a tokenizer or a stage sees the request."""
        if problems := limits.violations(req, self.api):
            raise UserError("; ".join(problems))

    def check_question(self, text: str, field: str, top_k: int) -> None:
        if (n := self.embedder.count_tokens(text)) > self.api.max_question_tokens:
            raise UserError(f"{field}: {n} tokens; the limit is {self.api.max_question_tokens}")
        if top_k > self.api.max_top_k:
            raise UserError(f"top_k: {top_k} is over the limit of {self.api.max_top_k}")

    async def deadline(self, call: Awaitable[T]) -> T:
        """The request's result, or TimeoutError (a 504) after `request_timeout_s`, which cancels the stages."""
        return await asyncio.wait_for(call, self.api.request_timeout_s)

    async def answering(self, ticket: Ticket, call: Awaitable[T]) -> T:
        """`call`'s result within the deadline; the ticket is given back however it ends."""
        try:
            return await self.deadline(call)
        finally:
            ticket.release()  # a no-op once the answer finished it

    def streaming(self, events: AsyncIterator[bytes], ticket: Ticket) -> StreamingResponse:
        return StreamingResponse(self._within_deadline(events, ticket), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def _within_deadline(self, events: AsyncIterator[bytes], ticket: Ticket) -> AsyncIterator[bytes]:
        """Errors after the response started cannot change its status: they become an `error` event."""
        try:
            async with asyncio.timeout(self.api.request_timeout_s):
                async for chunk in events:
                    yield chunk
        except (RaglineError, *STAGE_FAILURES) as e:
            err = translate(e, self.api.request_timeout_s)
            if not isinstance(err, RaglineError):
                raise err from e
            yield sse("error", body(err))
        finally:
            ticket.release()  # a no-op once the answer finished it


def sse(event: str | None, data: object) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()
