"""How the flow's results read over HTTP: the response bodies of the routes, as pydantic models, and the citations
and answer metadata that /v1/query and /v1/chat/completions share (`Citation`, `Meta`: `app/rag/protocol.py`).

Each route declares its body as its `response_model`, so /openapi.json describes what it returns, and returns an
instance: FastAPI serializes it once (a model instance of the declared class is not validated again)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from app.passage import Passage
from app.rag.admission import AdmissionState
from app.rag.flow import Context

# the /v1/query body and its parts are the protocol's: app.serving.query, the client, parses them too
from app.rag.protocol import Citation, Finished, Meta, Models, Usage
from deployments.readiness import GeneratorReady, RerankerReady, RetrieverReady, Unanswered

SNIPPET_CHARS = 240


class RetrieveResponse(BaseModel):
    collection: str
    index_version: int
    mode: str
    hits: list[Passage]  # the passages as the retriever found them (rerank_score: null)
    timings_ms: dict[str, float]  # the retriever's "embed", "search", and the request's "total"


class RerankResult(BaseModel):
    index: int  # into the request's documents
    relevance_score: float | None  # None: no reranker model, the given order
    document: str


class RerankResponse(BaseModel):
    reranker: str
    results: list[RerankResult]


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # str: base64 of little-endian float32


class EmbeddingsResponse(BaseModel):
    """OpenAI's embeddings list."""

    object: Literal["list"] = "list"
    model: str
    usage: EmbeddingsUsage
    data: list[Embedding]


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    """OpenAI's /v1/models."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


class CollectionInfo(BaseModel):
    name: str
    index_version: int | None  # None: nothing ingested yet
    documents: int
    chunks: int


class CollectionList(BaseModel):
    """/v1/collections: the collections the API key may read."""

    data: list[CollectionInfo]


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    """/readyz: 200 when every stage is ready, else 503 with the same body. A stage that did not answer the probe
    in time says so in place of its own readiness."""

    ready: bool
    retriever: RetrieverReady | Unanswered
    reranker: RerankerReady | Unanswered
    generator: GeneratorReady | Unanswered
    admission: AdmissionState


class ChatUsage(Usage):
    total_tokens: int


class ChatHead(BaseModel):
    """What every chat completion body and chunk of one request starts with."""

    id: str
    created: int
    model: str


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str


class ChatCompletion(ChatHead):
    """OpenAI's chat completion, with the answer's citations and Ragline's metadata as extra fields."""

    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatChoice]
    usage: ChatUsage
    citations: list[Citation]
    ragline: Meta


class ChunkDelta(BaseModel):
    """Sent without the fields it does not set (`exclude_unset`): the first chunk's role, then content only."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: str | None


class ChatCompletionChunk(ChatHead):
    """One SSE event of a streamed chat completion. The last chunk's citations and metadata, and usage in a chunk
    of its own (`stream_options.include_usage`), are sent only in the chunks that carry them."""

    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChunkChoice]
    citations: list[Citation] | None = None
    ragline: Meta | None = None
    usage: ChatUsage | None = None


def citations(passages: list[Passage], answer: str) -> list[Citation]:
    """One entry per passage in the prompt ([n] is entry n)."""
    return [Citation.of(i, p, answer, SNIPPET_CHARS) for i, p in enumerate(passages, start=1)]


def meta(context: Context, timings: dict[str, float], finished: Finished) -> Meta:
    """`finished.model` names the version that answered (catalog:NAME → NAME:vN)."""
    found = context.retrieved
    return Meta(collection=found.collection, index_version=found.index_version, mode=found.mode,
                models=Models(generator=finished.model, embedder=found.embedder, reranker=context.reranker),
                timings_ms={k: round(v, 2) for k, v in timings.items()})
