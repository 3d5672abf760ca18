"""Reranker deployment: a sentence-transformers CrossEncoder scoring (question, passage) pairs, batched across
concurrent requests.

The model is `catalog:NAME` (default `catalog:reranker`: the promoted version of Ragline's own trained reranker,
followed as promotions change, swapped in without restarting anything), `catalog:NAME:VERSION`, a directory or a
hub id. Retrieved candidates come back in the cross-encoder's order fused with the retriever's by RRF (on
SciFact the fusion beats either order alone; `retriever_weight: 0` turns it off). With no model (none configured,
or none promoted yet) the retriever's order passes through and the stage says `reranker: none`; it never invents
scores.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from ray import serve

from app.index.fusion import rerank_order
from app.models import embedder, trained
from app.train.reranker_data import passage
from deployments.settings import Settings

NONE = "none"
log = logging.getLogger("ray.serve")


@serve.deployment(name="Reranker")
class Reranker:
    def __init__(self, settings: Settings):
        self.cfg = settings.app.serve.reranker
        self.storage = settings.open_storage()
        self.current: tuple[Any, str] = (None, NONE)  # (CrossEncoder, its label), swapped as one reference
        self._score.set_max_batch_size(self.cfg.max_batch_size)  # type: ignore[attr-defined]
        self._score.set_batch_wait_timeout_s(self.cfg.batch_wait_timeout_s)  # type: ignore[attr-defined]
        self._refresh()
        self._stopped = threading.Event()
        if trained.is_catalog(self.cfg.model):
            threading.Thread(target=self._watch, name="reranker-watch", daemon=True).start()

    def _refresh(self) -> None:
        """Load the configured model, or the newly promoted version, if it is not the one serving."""
        from sentence_transformers import CrossEncoder

        spec = self.cfg.model
        if not spec:
            return
        if trained.is_catalog(spec):
            manifest = trained.lookup(spec, self.storage)
            if manifest is None or trained.label(manifest) == self.current[1]:
                return
            path, label = trained.local_dir(manifest, self.storage), trained.label(manifest)
        elif self.current[0] is None:
            path, label = embedder.resolve(spec), spec  # the same local-directory-or-hub-id rules
        else:
            return
        self.current = (CrossEncoder(path, max_length=self.cfg.max_length, device="cpu"), label)
        log.info("reranking with %s", label)

    def _watch(self) -> None:
        while not self._stopped.wait(self.cfg.poll_interval_s):
            try:
                self._refresh()
            except Exception:  # a damaged or half-copied version: keep the current model, retry later
                log.exception("could not load the promoted reranker; still serving %s", self.current[1])

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def _score(self, requests: list[tuple[str, list[str]]]) -> list[tuple[str, list[float]]]:
        """All pairs of all waiting requests in one `predict` call; (model label, scores) back per request."""
        model, label = self.current
        pairs = [(q, text) for q, texts in requests for text in texts]
        scores = await asyncio.to_thread(model.predict, pairs, batch_size=64, show_progress_bar=False)
        out, start = [], 0
        for _, texts in requests:
            out.append((label, [float(s) for s in scores[start : start + len(texts)]]))
            start += len(texts)
        return out

    async def rerank(self, query: str, passages: list[dict[str, Any]], top_n: int,
                     retrieved: bool = False) -> dict[str, Any]:
        """`passages` carry at least "text" (and "title" when they come from the index); returned best first with
        "rerank_score", the cross-encoder's (absent without a model). `retrieved`: the passages are in the
        retriever's order, which is fused with the cross-encoder's (`retriever_weight`); otherwise the
        cross-encoder's order alone."""
        if self.current[0] is None or not passages:
            return {"reranker": self.current[1], "passages": passages[:top_n]}
        label, scores = await self._score((query, [passage(p) for p in passages]))
        order = rerank_order(scores, self.cfg.retriever_weight if retrieved else 0.0, self.cfg.rrf_k)[:top_n]
        return {"reranker": label, "passages": [{**passages[i], "rerank_score": scores[i]} for i in order]}

    def ready(self) -> dict[str, Any]:
        return {"ready": True, "reranker": self.current[1]}

    def __del__(self) -> None:
        if hasattr(self, "_stopped"):
            self._stopped.set()
