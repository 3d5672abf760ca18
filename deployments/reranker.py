"""Reranker deployment: a sentence-transformers CrossEncoder scoring (question, passage) pairs, batched across
concurrent requests. With no model configured it passes the retriever's order through and says so."""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve

from deployments.settings import Settings

NONE = "none"


@serve.deployment(name="Reranker")
class Reranker:
    def __init__(self, settings: Settings):
        self.cfg = settings.app.serve.reranker
        self.model: Any = None
        self.name = NONE
        if self.cfg.model:
            from sentence_transformers import CrossEncoder

            from app.models import embedder

            # the same resolution rules as the embedder: local directory (checked) or hub id
            self.model = CrossEncoder(embedder.resolve(self.cfg.model), max_length=self.cfg.max_length,
                                      device="cpu")
            self.name = self.cfg.model
        self._score.set_max_batch_size(self.cfg.max_batch_size)  # type: ignore[attr-defined]
        self._score.set_batch_wait_timeout_s(self.cfg.batch_wait_timeout_s)  # type: ignore[attr-defined]

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _score(self, requests: list[tuple[str, list[str]]]) -> list[list[float]]:
        """All pairs of all waiting requests in one `predict` call; scores split back per request."""
        pairs = [(q, text) for q, texts in requests for text in texts]
        scores = await asyncio.to_thread(self.model.predict, pairs, batch_size=64, show_progress_bar=False)
        out, start = [], 0
        for _, texts in requests:
            out.append([float(s) for s in scores[start : start + len(texts)]])
            start += len(texts)
        return out

    async def rerank(self, query: str, passages: list[dict[str, Any]], top_n: int) -> dict[str, Any]:
        """`passages` carry at least "text"; returned best first with "rerank_score" (absent without a model)."""
        if self.model is None or not passages:
            return {"reranker": self.name, "passages": passages[:top_n]}
        scores = await self._score((query, [p["text"] for p in passages]))
        order = sorted(range(len(passages)), key=lambda i: -scores[i])[:top_n]
        return {"reranker": self.name, "passages": [{**passages[i], "rerank_score": scores[i]} for i in order]}

    def ready(self) -> dict[str, Any]:
        return {"ready": True, "reranker": self.name}
