"""Retriever deployment: the serving index version, query embeddings batched across requests, dense / lexical /
hybrid search.

It follows the catalog: a newer index version is loaded in a background thread and swapped in with one
assignment, so a request sees either the old index or the new one, never a half-loaded one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import cast

import numpy as np
from ray import serve
from ray.util.metrics import Gauge

from app import hardware
from app.catalog import Catalog
from app.config import RetrieverConfig, SearchConfig
from app.errors import NotFound, NotReady, Unavailable
from app.index.search import Index, Mode
from app.models import embedder
from app.rag.protocol import Embedded, Retrieved, Search, Source
from app.storage import Storage
from deployments import autoscale
from deployments.batching import Batcher
from deployments.readiness import RetrieverReady
from deployments.watch import Watcher

log = logging.getLogger("ray.serve")


@dataclass(frozen=True)
class Query:
    """One request's search, as the Retriever batches them."""

    index: Index
    text: str
    mode: Mode
    k: int
    sources: list[str] | None


@serve.deployment(name="Retriever")
class Retriever:
    def __init__(self, storage: str, search: SearchConfig, cfg: RetrieverConfig, poll_interval_s: float):
        self.cfg, self.rcfg = search, cfg
        self.storage = Storage(storage)
        self.index: Index | None = None
        self.encoders: dict[str, embedder.Encoder] = {}  # _key(index's embedder) → its loaded encoder
        self.version_gauge = Gauge("ragline_index_version", description="Index version this replica serves.")
        # Two stages, each batching concurrent requests in a thread of its own, so one batch's questions are
        # searched while the next batch is embedded: embedding (questions and /v1/embeddings texts together), then
        # search.
        self._embed = Batcher(self._encode, cfg.max_batch_size, cfg.batch_wait_timeout_s)
        self._search = Batcher(self._search_batch, cfg.max_batch_size)
        self.questions = 0  # in retrieve_many calls now: the autoscaling metric
        self._refresh()  # the first load happens here, so a replica with an index is ready when it starts
        self.watcher = Watcher("the index catalog", self._refresh, poll_interval_s,
                               lambda: self.index.version if self.index else None)

    def _refresh(self) -> None:
        """Loads the pinned or latest index version if it is not the one served."""
        catalog = Catalog(self.storage)
        want = self.rcfg.index_version
        latest = catalog.get("indexes", want) if want else catalog.latest("indexes")
        if latest is None or (self.index is not None and latest.version == self.index.version):
            return
        index = Index.load(self.storage, latest.version)
        key = _key(index)
        if key not in self.encoders:
            self.encoders[key] = embedder.for_index(index.manifest.embedder)
        self.index = index  # the swap: one reference assignment, atomic for the requests that follow
        self.version_gauge.set(index.version)
        log.info("serving index version %s", index.version)

    def _serving(self) -> Index:
        if self.index is None:
            raise NotReady("no index version is published yet: run `ragline ingest` first")
        return self.index

    def _encode(self, items: list[tuple[str, str]]) -> list[tuple[np.ndarray, float]]:
        """(encoder key, text) pairs from concurrent requests → (vector, the batch's encode ms) each, one encode call
        per encoder."""
        t0 = time.perf_counter()
        out: list[np.ndarray | None] = [None] * len(items)
        for key in {k for k, _ in items}:
            rows = [i for i, (k, _) in enumerate(items) if k == key]
            for i, v in zip(rows, self.encoders[key].encode([items[i][1] for i in rows]), strict=True):
                out[i] = v
        ms = (time.perf_counter() - t0) * 1e3
        assert all(v is not None for v in out)
        return [(v, ms) for v in out if v is not None]

    def _search_batch(self, items: list[tuple[Query, np.ndarray | None, float]]) -> list[Retrieved]:
        """(query, its embedding (None: lexical), embed ms) of concurrent requests, searched one by one.
        `Index.search` raises for nothing one request can bring (the API refuses empty questions before), so no
        request fails the others."""
        out = []
        for q, vector, embed_ms in items:
            t0 = time.perf_counter()
            hits = q.index.search(q.text, vector, q.mode, q.k, self.cfg, q.sources)
            out.append(Retrieved(index_version=q.index.version, mode=q.mode, embedder=q.index.manifest.embedder.name,
                                 hits=hits,
                                 timings_ms={"embed": embed_ms, "search": (time.perf_counter() - t0) * 1e3}))
        return out

    async def _retrieve(self, q: Query) -> Retrieved:
        vector, embed_ms = (None, 0.0) if q.mode == "lexical" else await self._embed((_key(q.index), q.text))
        return await self._search((q, vector, embed_ms))

    async def retrieve(self, query: str, mode: Mode | None = None, k: int | None = None,
                       sources: list[str] | None = None) -> Retrieved:
        return (await self.retrieve_many([Search(query, mode, k, sources)]))[0]

    async def retrieve_many(self, searches: list[Search]) -> list[Retrieved]:
        """Several requests' searches in one call (the Ingress sends its concurrent requests' together: one Serve
        call for them all); they join the questions of other calls in the embedding batches."""
        index = self._serving()  # these requests keep the index served now even if a swap happens meanwhile
        self.questions += len(searches)
        try:
            return await asyncio.gather(*(
                self._retrieve(Query(index, s.query, cast(Mode, s.mode or self.cfg.mode), s.k or self.cfg.top_k,
                                     s.sources))
                for s in searches))
        finally:
            self.questions -= len(searches)

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metric (deployments/autoscale.py): the questions in this replica now. A
        call from the Ingress carries many, so Serve's own count of ongoing calls would understate the load."""
        return {autoscale.METRIC: self.questions}

    async def embed(self, texts: list[str]) -> Embedded:
        index = self._serving()
        key = _key(index)
        embedded = await asyncio.gather(*(self._embed((key, t)) for t in texts))
        return Embedded(model=index.manifest.embedder.name, vectors=[v.tolist() for v, _ in embedded])

    async def source(self, chunk_id: str) -> Source:
        index = self._serving()
        found = await asyncio.to_thread(index.in_document, chunk_id)
        if found is None:
            raise NotFound(f"chunk {chunk_id!r} is not in index version {index.version}")
        c, document = found
        return Source.model_validate({**c, "index_version": index.version, "document": document})

    def check_health(self) -> None:
        """Serve's probe, every `health_check_period_s`; raising has the replica replaced. Fails if the served index
        has lost its encoder or its dense and chunk tables disagree, or a thread a request or a swap needs has
        stopped (a request would wait forever, or the replica would serve one version forever)."""
        self._embed.check()
        self._search.check()
        self.watcher.check()
        index = self.index  # none published yet is not a fault: /readyz says not ready
        if index is not None and (_key(index) not in self.encoders or index.dense.ntotal != len(index.chunks)):
            raise Unavailable(f"index version {index.version} is served without its encoder or with tables that "
                              "disagree")

    def ready(self) -> RetrieverReady:
        if self.index is None:
            return RetrieverReady(ready=False, reason="no index version is published yet")
        m = self.index.manifest
        return RetrieverReady(ready=True, index_version=m.version, dataset_version=m.parent,
                              embedder=m.embedder.name, chunks=len(self.index.chunks),
                              computes=f"{m.embedder.runtime} {m.embedder.precision} on "
                                       f"{hardware.detect().summary()}")

    def __del__(self) -> None:
        if hasattr(self, "watcher"):
            self.watcher.stop()


def _key(index: Index) -> str:
    info = index.manifest.embedder
    return f"{info.name}@{info.revision}/{info.runtime}/{info.precision}"
