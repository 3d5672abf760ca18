"""The RAG request path, top to bottom: retrieve candidates → rerank them to the passages → answer from them
(streamed, or collected). The HTTP routes (`deployments/api/`) and the serving benchmark's in-process baseline run
this same flow; only the `Backends` differ (Serve handles, or plain objects).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from app.rag.protocol import (
    Backends,
    Delta,
    Document,
    Embedded,
    Finished,
    Fitted,
    Generation,
    Passage,
    Ranking,
    Retrieved,
    Search,
    Source,
    StageReady,
)

T = TypeVar("T")
Observe = Callable[[str, float], None]  # (stage, milliseconds): a latency histogram's observe


@dataclass(frozen=True, slots=True)
class Context:
    """What the answer is grounded in: the retrieval and the reranked passages, best first."""

    retrieved: Retrieved
    passages: list[Passage]
    reranker: str


@dataclass(frozen=True, slots=True)
class Answer:
    text: str
    passages: list[Passage]  # those that fit the prompt, in citation order ([1] is passages[0])
    finished: Finished


class RagFlow:
    def __init__(self, backends: Backends, *, candidates: int, observe: Observe | None = None):
        """`candidates`: how many passages to retrieve for the reranker to choose from (0: no reranker, retrieve
        only top_k)."""
        self.backends, self.candidates = backends, candidates
        self.observe = observe or (lambda stage, ms: None)

    async def stage(self, name: str, timings: dict[str, float], call: Awaitable[T]) -> T:
        t0 = time.perf_counter()
        try:
            return await call
        finally:
            timings[name] = (time.perf_counter() - t0) * 1e3
            self.observe(name, timings[name])

    async def retrieve(self, search: Search, timings: dict[str, float]) -> Retrieved:
        return await self.stage("retrieve", timings, self.backends.retrieve(search))

    async def rerank(self, query: str, passages: list[Passage], top_n: int, timings: dict[str, float],
                     retrieved: bool = True) -> tuple[str, list[Passage]]:
        """(reranker label, the passages best first with their rerank scores). `retrieved`: the passages are in the
        retriever's order, which the reranker may fuse with its own."""
        docs = [(p.title, p.text) for p in passages]
        ranking = await self.stage("rerank", timings, self.backends.rerank(query, docs, top_n, retrieved))
        if ranking.scores is None:
            return ranking.reranker, [passages[i] for i in ranking.order]
        return ranking.reranker, [passages[i].model_copy(update={"rerank_score": s})
                                  for i, s in zip(ranking.order, ranking.scores, strict=True)]

    async def rank(self, query: str, documents: list[Document], top_n: int) -> Ranking:
        """The caller's own documents in the reranker's order (they have no retrieval order to fuse)."""
        return await self.stage("rerank", {}, self.backends.rerank(query, documents, top_n, False))

    async def embed(self, texts: list[str], collection: str) -> Embedded:
        return await self.stage("embed", {}, self.backends.embed(texts, collection))

    async def source(self, chunk_id: str, collection: str) -> Source:
        return await self.backends.source(chunk_id, collection)

    async def ready(self) -> dict[str, StageReady]:
        return await self.backends.ready()

    async def context(self, search: Search, timings: dict[str, float]) -> Context:
        """`search.k` passages for the prompt, reranked from max(k, candidates) retrieved."""
        assert search.k is not None, "the route sets top_k"
        found = await self.retrieve(dataclasses.replace(search, k=max(search.k, self.candidates)), timings)
        reranker, passages = await self.rerank(search.query, found.hits, search.k, timings)
        return Context(found, passages, reranker)

    async def stream(self, question: str, context: Context, generation: Generation,
                     timings: dict[str, float]) -> AsyncIterator[Delta | Answer]:
        """The answer's text as it is generated, then the whole Answer."""
        t0 = time.perf_counter()
        used: list[Passage] = []
        text = ""
        finished: Finished | None = None
        async for piece in self.backends.stream(question, context.passages, generation):
            if isinstance(piece, Fitted):
                used = context.passages[: piece.passages]
            elif isinstance(piece, Delta):
                text += piece.text
                yield piece
            else:
                finished = piece
        assert finished is not None, "a generator's stream ends with Finished"
        timings["generate"] = (time.perf_counter() - t0) * 1e3
        self.observe("generate", timings["generate"])
        yield Answer(text, used, finished)

    async def answer(self, question: str, context: Context, generation: Generation,
                     timings: dict[str, float]) -> Answer:
        async for piece in self.stream(question, context, generation, timings):
            if isinstance(piece, Answer):
                return piece
        raise AssertionError("a flow's stream ends with its Answer")
