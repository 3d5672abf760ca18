"""How the flow's results read over HTTP: the response bodies of the routes, and the citations and answer metadata
that /v1/query and /v1/chat/completions share (`Citation`, `Meta`: `app/rag/protocol.py`).

The bodies are TypedDicts: plain dicts at runtime, so they serialize exactly as the dicts they describe. Routes that
FastAPI would otherwise validate against their return annotation say `response_model=dict[str, object]` (pydantic
takes `object` values as it takes `Any`, unchecked): the body goes out as built, neither coerced to these types
(an int where a float is declared) nor stripped of keys they do not name, and /openapi.json stays as it was."""

from __future__ import annotations

from typing import Literal, TypedDict

from app.rag.flow import Context

# the /v1/query body and its parts are the protocol's: app.serving.query, the client, reads them too
from app.rag.protocol import Citation, Finished, Meta, Models, Passage, Usage

SNIPPET_CHARS = 240


class Hit(TypedDict):
    """A retrieved chunk in /v1/retrieve: `Passage` without the reranker's score."""

    chunk_id: str
    doc_id: str
    source: str
    title: str
    text: str
    score: float
    rank: int
    chunk_index: int
    start_char: int
    end_char: int


class RetrieveResponse(TypedDict):
    index_version: int
    mode: str
    hits: list[Hit]
    timings_ms: dict[str, float]  # the retriever's "embed", "search", and the request's "total"


class RerankResult(TypedDict):
    index: int  # into the request's documents
    relevance_score: float | None  # None: no reranker model, the given order
    document: str


class RerankResponse(TypedDict):
    reranker: str
    results: list[RerankResult]


class EmbeddingsUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class Embedding(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingsResponse(TypedDict):
    """OpenAI's embeddings list."""

    object: Literal["list"]
    model: str
    usage: EmbeddingsUsage
    data: list[Embedding]


class ModelCard(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(TypedDict):
    """OpenAI's /v1/models."""

    object: Literal["list"]
    data: list[ModelCard]


class ChatUsage(Usage):
    total_tokens: int


class ChatHead(TypedDict):
    """What every chat completion body and chunk of one request starts with."""

    id: str
    created: int
    model: str


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str


class ChatChoice(TypedDict):
    index: int
    message: AssistantMessage
    finish_reason: str


class ChatCompletion(ChatHead):
    """OpenAI's chat completion, with the answer's citations and Ragline's metadata as extra fields."""

    object: Literal["chat.completion"]
    choices: list[ChatChoice]
    usage: ChatUsage
    citations: list[Citation]
    ragline: Meta


class ChunkDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str


class ChunkChoice(TypedDict):
    index: int
    delta: ChunkDelta
    finish_reason: str | None


class ChunkExtra(TypedDict, total=False):
    """The last chunk's citations and metadata; usage in a chunk of its own (`stream_options.include_usage`)."""

    citations: list[Citation]
    ragline: Meta
    usage: ChatUsage


class ChatCompletionChunk(ChatHead, ChunkExtra):
    object: Literal["chat.completion.chunk"]
    choices: list[ChunkChoice]


def hit(p: Passage) -> Hit:
    """In `Passage`'s field order, as `dataclasses.asdict` gave it."""
    return Hit(chunk_id=p.chunk_id, doc_id=p.doc_id, source=p.source, title=p.title, text=p.text, score=p.score,
               rank=p.rank, chunk_index=p.chunk_index, start_char=p.start_char, end_char=p.end_char)


def citations(passages: list[Passage], answer: str) -> list[Citation]:
    """One entry per passage in the prompt ([n] is entry n)."""
    return [Citation(n=i, chunk_id=p.chunk_id, doc_id=p.doc_id, source=p.source, title=p.title,
                     snippet=p.text[:SNIPPET_CHARS], score=p.score if p.rerank_score is None else p.rerank_score,
                     cited=f"[{i}]" in answer)
            for i, p in enumerate(passages, start=1)]


def meta(context: Context, timings: dict[str, float], finished: Finished) -> Meta:
    """`finished.model` names the version that answered (catalog:NAME → NAME:vN)."""
    found = context.retrieved
    return Meta(index_version=found.index_version, mode=found.mode,
                models=Models(generator=finished.model, embedder=found.embedder, reranker=context.reranker),
                timings_ms={k: round(v, 2) for k, v in timings.items()})
