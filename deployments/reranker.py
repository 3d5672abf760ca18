"""Reranker deployment: a sentence-transformers CrossEncoder scoring (question, passage) pairs, batched across
concurrent requests.

The model is `catalog:NAME` (default `catalog:reranker`: the promoted version of Ragline's own trained reranker,
followed as promotions change, swapped in without restarting anything), `catalog:NAME:VERSION`, a directory or a
hub id; `app.models.cross_encoder` resolves and loads it and says what text it reads. Retrieved candidates come
back in the cross-encoder's order fused with the retriever's by RRF (on SciFact the fusion beats either order
alone; `retriever_weight: 0` turns it off). With no model (none configured, or none promoted yet) the given order
passes through and the stage says `reranker: none`; it never invents scores.
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve

from app import hardware
from app.config import RerankerConfig
from app.errors import Unavailable
from app.models import cross_encoder, trained
from app.rag.protocol import Document, Ranking
from app.storage import Storage
from deployments.batching import Batcher
from deployments.readiness import RerankerReady
from deployments.watch import Watcher

NONE = "none"
log = logging.getLogger("ray.serve")


@serve.deployment(name="Reranker")
class Reranker:
    def __init__(self, storage: str, cfg: RerankerConfig, poll_interval_s: float):
        self.cfg = cfg
        self.precision = hardware.choose_precision(cfg.precision, "cpu")
        self.storage = Storage(storage)
        self.current: tuple[Any, str] = (None, NONE)  # (CrossEncoder, its label), swapped as one reference
        self._score = Batcher(self._score_pairs, cfg.max_batch_size, cfg.batch_wait_timeout_s)
        self._refresh()
        if trained.is_catalog(self.cfg.model):
            self.watcher = Watcher(f"promotions of {self.cfg.model}", self._refresh, poll_interval_s,
                                   lambda: self.current[1])

    def _refresh(self) -> None:
        """Load the configured model, or the newly promoted version, if it is not the one serving."""
        spec = self.cfg.model
        if not spec or (self.current[0] is not None and not trained.is_catalog(spec)):
            return  # none configured, or a fixed model already loaded
        located = cross_encoder.locate(spec, self.storage)
        if located is None or located[1] == self.current[1]:
            return  # none promoted yet, or the promoted version is the one serving
        path, label = located
        self.current = (cross_encoder.load(path, max_length=self.cfg.max_length), label)
        log.info("reranking with %s", label)

    def _score_pairs(self, requests: list[tuple[str, list[str]]]) -> list[tuple[str, list[float]]]:
        """All pairs of all waiting requests in one `predict` call; (model label, scores) back per request."""
        model, label = self.current
        pairs = [(q, text) for q, texts in requests for text in texts]
        scores = cross_encoder.score(model, pairs, self.precision)
        out, start = [], 0
        for _, texts in requests:
            out.append((label, scores[start : start + len(texts)]))
            start += len(texts)
        return out

    async def rerank(self, query: str, documents: list[Document], top_n: int, retrieved: bool = False) -> Ranking:
        """`documents` are (title, text) pairs (the title may be ""); the order comes back best first, with the
        cross-encoder's scores (none without a model). `retrieved`: the documents are in the retriever's order,
        which is fused with the cross-encoder's (`retriever_weight`); otherwise the cross-encoder's order alone."""
        if self.current[0] is None or not documents:
            return Ranking(self.current[1], list(range(min(top_n, len(documents)))))
        label, scores = await self._score((query, [cross_encoder.passage_text(t, x) for t, x in documents]))
        weight = self.cfg.retriever_weight if retrieved else 0.0
        order = cross_encoder.rerank_order(scores, weight, self.cfg.rrf_k)[:top_n]
        return Ranking(label, order, [scores[i] for i in order])

    def check_health(self) -> None:
        """Serve's probe: the scoring batch loop and the promotion watcher run, and a configured fixed model is
        loaded (a `catalog:` one may have none promoted yet: the given order passes through, by design)."""
        self._score.check()
        if hasattr(self, "watcher"):
            self.watcher.check()
        elif self.cfg.model and self.current[0] is None:
            raise Unavailable(f"reranker.model {self.cfg.model} is not loaded")

    def ready(self) -> RerankerReady:
        return RerankerReady(ready=True, reranker=self.current[1], precision=self.precision,
                             computes=f"{self.precision} on {hardware.detect().summary()}")

    def __del__(self) -> None:
        if hasattr(self, "watcher"):
            self.watcher.stop()
