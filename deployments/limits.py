"""Size limits on request bodies (`ApiConfig`), checked at the edge before any stage runs: every list has a length
limit and every text a character limit, so no request can make a replica scan, embed or rerank without bound.
(Token limits come after: a single 100 kB "word" is one [UNK] token to the embedder, but 100 kB to everything
else.)"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pydantic import BaseModel

from app.config import ApiConfig
from deployments.schemas import (
    ChatCompletionRequest,
    EmbeddingsRequest,
    QueryRequest,
    RerankRequest,
    RetrieveRequest,
)


def _text(field: str, value: str, limit: int, setting: str) -> Iterator[str]:
    if len(value) > limit:
        yield f"{field}: {len(value)} characters; the limit is {limit} (api.{setting})"


def _texts(field: str, values: Sequence[str] | None, limit: int, setting: str, chars: int,
           chars_setting: str) -> Iterator[str]:
    if values is None:
        return
    if len(values) > limit:
        yield f"{field}: {len(values)} items; the limit is {limit} (api.{setting})"
        return
    for i, v in enumerate(values):
        yield from _text(f"{field}[{i}]", v, chars, chars_setting)


def violations(req: BaseModel, api: ApiConfig) -> list[str]:
    """What in `req` is over `api`'s limits, each naming the field, its size, the limit and its setting."""
    out: list[str] = []
    sources = getattr(req, "sources", None)
    out += _texts("sources", sources, api.max_sources, "max_sources", api.max_source_chars, "max_source_chars")
    if isinstance(req, RetrieveRequest | RerankRequest):
        out += _text("query", req.query, api.max_question_chars, "max_question_chars")
    if isinstance(req, QueryRequest):
        out += _text("question", req.question, api.max_question_chars, "max_question_chars")
    if isinstance(req, RerankRequest):
        out += _texts("documents", req.documents, api.max_rerank_documents, "max_rerank_documents",
                      api.max_document_chars, "max_document_chars")
    if isinstance(req, EmbeddingsRequest):
        texts = [req.input] if isinstance(req.input, str) else req.input
        out += _texts("input", texts, api.max_embed_inputs, "max_embed_inputs", api.max_document_chars,
                      "max_document_chars")
    if isinstance(req, ChatCompletionRequest):
        if len(req.messages) > api.max_messages:
            out.append(f"messages: {len(req.messages)} items; the limit is {api.max_messages} (api.max_messages)")
        else:
            for i, m in enumerate(req.messages[:-1]):
                out += _text(f"messages[{i}].content", m.text(), api.max_message_chars, "max_message_chars")
            out += _text(f"messages[{len(req.messages) - 1}].content", req.messages[-1].text(),
                         api.max_question_chars, "max_question_chars")
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        out += _texts("stop", stop, api.max_stop, "max_stop", api.max_stop_chars, "max_stop_chars")
    return out
