"""The request path's contract: what each stage takes and returns, however it is reached (Serve handles in the
graph, plain objects in a benchmark or a test).

Plain frozen dataclasses: they pickle across DeploymentHandles cheaply and say their shape in one place. What also
goes out over HTTP is a pydantic model, its own schema in /openapi.json: the passage (`app/passage.py`), a cited
chunk's `Source`, and the /v1/query body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel

from app import collections
from app.filters import Filter
from app.passage import ChunkRef, Passage

Message = dict[str, str]  # a chat turn: {"role", "content"}


@dataclass(frozen=True, slots=True)
class Search:
    """One request's retrieval, as the Ingress sends its concurrent requests' to the Retriever together. The
    collection is one the caller may read (the Ingress asked `Scope.may_read` before building it)."""

    query: str
    mode: str | None = None  # None: the retriever's configured mode
    k: int | None = None  # None: its configured top_k
    sources: list[str] | None = None  # glob patterns over the chunks' sources; None: all
    collection: str = collections.DEFAULT
    where: Filter | None = None  # over the documents' metadata, applied inside the search


@dataclass(frozen=True, slots=True)
class Retrieved:
    collection: str
    index_version: int
    mode: str
    embedder: str  # the model of the index being served (its manifest's), which embedded the query
    hits: list[Passage]
    timings_ms: dict[str, float]  # "embed", "search"


Document = tuple[str, str]  # (title, text) of what the reranker scores; the title may be ""


@dataclass(frozen=True, slots=True)
class Ranking:
    """The reranker's answer for n documents: `order` holds indices into them, best first (at most top_n);
    `scores[i]` is the cross-encoder's score of document `order[i]`. No model: the given order, no scores."""

    reranker: str  # the model's label, or "none"
    order: list[int]
    scores: list[float] | None = None


class Source(ChunkRef):
    """A cited chunk in its document, for a reader to open: `document` is the document's text as the served index
    holds it, and `document[start_char:end_char]` is the chunk. /v1/chunks/{chunk_id} returns it."""

    collection: str
    index_version: int
    document: str
    original: str = ""  # the storage path of the document's original file, when kept (PDFs): its pages render


@dataclass(frozen=True, slots=True)
class Embedded:
    model: str
    vectors: list[list[float]]


@dataclass(frozen=True, slots=True)
class Generation:
    """What the caller asked of the generator; None takes the configured default."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    history: list[Message] = field(default_factory=list)


# The generator's stream: one Fitted first (how many passages fit the prompt), Deltas, one Finished last.
@dataclass(frozen=True, slots=True)
class Fitted:
    passages: int


@dataclass(frozen=True, slots=True)
class Delta:
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str  # the name of the model (version) that answered


Piece = Fitted | Delta | Finished


class StageReady(BaseModel):
    """A stage's readiness, one per stage in /readyz: `ready`, and what the stage serves (or why it is not ready).
    Each deployment extends it with its own fields (`deployments/retriever.py`, …); /readyz declares the union."""

    ready: bool


class Backends(Protocol):
    """The stages of the RAG graph, however they are reached. Failures are `app.errors` types."""

    async def retrieve(self, search: Search) -> Retrieved: ...

    async def rerank(self, query: str, documents: list[Document], top_n: int, retrieved: bool) -> Ranking: ...

    def stream(self, question: str, passages: list[Passage], generation: Generation) -> AsyncIterator[Piece]: ...

    async def embed(self, texts: list[str], collection: str) -> Embedded: ...  # by the collection's embedder

    async def source(self, chunk_id: str, collection: str) -> Source: ...  # NotFound: no such chunk in it

    async def ready(self) -> dict[str, StageReady]: ...  # per stage ("retriever", "reranker", "generator")


# What /v1/query answers: deployments/api/views.py builds it and app.serving.query (the client) parses it, so it is
# described here, below both.
class Citation(BaseModel):
    n: int  # [n] in the answer
    chunk_id: str
    doc_id: str
    source: str
    title: str
    location: str  # where in its source ("p. 7", "slide 3"; `Passage.location`); "" when unknown
    pages: list[int]  # the PDF pages or slides it spans
    snippet: str
    score: float  # the reranker's, else the retriever's
    cited: bool  # whether the answer refers to it

    @classmethod
    def of(cls, n: int, p: Passage, answer: str, snippet_chars: int) -> Citation:
        """The passage numbered `n` in the prompt, as the answer `answer` cites it (or not)."""
        return cls(n=n, chunk_id=p.chunk_id, doc_id=p.doc_id, source=p.source, title=p.title,
                   location=p.location, pages=p.pages, snippet=p.text[:snippet_chars],
                   score=p.score if p.rerank_score is None else p.rerank_score, cited=f"[{n}]" in answer)


class Models(BaseModel):
    generator: str
    embedder: str
    reranker: str


class Meta(BaseModel):
    collection: str
    index_version: int
    mode: str
    models: Models
    timings_ms: dict[str, float]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class QueryResponse(Meta):
    """/v1/query (not streamed): the answer, then its metadata's fields."""

    answer: str
    finish_reason: str
    citations: list[Citation]
    usage: Usage
