"""How the flow's results read over HTTP: citations and the answer's metadata, shared by /v1/query and
/v1/chat/completions."""

from __future__ import annotations

from typing import TypedDict

from app.rag.flow import Context
from app.rag.protocol import Finished, Passage

SNIPPET_CHARS = 240


class Citation(TypedDict):
    n: int  # [n] in the answer
    chunk_id: str
    doc_id: str
    source: str
    title: str
    snippet: str
    score: float  # the reranker's, else the retriever's
    cited: bool  # whether the answer refers to it


class Models(TypedDict):
    generator: str
    embedder: str
    reranker: str


class Meta(TypedDict):
    index_version: int
    mode: str
    models: Models
    timings_ms: dict[str, float]


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
