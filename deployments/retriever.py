"""Retriever deployment: the serving index version, query embeddings batched across requests, dense / lexical /
hybrid search.

It follows the catalog: a newer index version is loaded in a background thread and swapped in with one
assignment, so a request sees either the old index or the new one, never a half-loaded one.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np
from ray import serve
from ray.util.metrics import Gauge

from app.catalog import Catalog
from app.config import RetrieverConfig, SearchConfig
from app.errors import NotFound, NotReady
from app.index.search import Index, Mode
from app.models import embedder
from app.rag.protocol import Embedded, Passage, Retrieved, Source, StageReady
from app.storage import Storage
from deployments.watch import Watcher

log = logging.getLogger("ray.serve")


class RetrieverReady(StageReady, total=False):
    reason: str  # not ready: why
    index_version: int  # ready: the index version served, the dataset version it was built from, …
    dataset_version: int | None
    embedder: str
    chunks: int


@serve.deployment(name="Retriever")
class Retriever:
    def __init__(self, storage: str, search: SearchConfig, cfg: RetrieverConfig, poll_interval_s: float):
        self.cfg, self.rcfg = search, cfg
        self.storage = Storage(storage)
        self.index: Index | None = None
        self.encoders: dict[str, embedder.Encoder] = {}  # _key(index's embedder) → its loaded encoder
        self.version_gauge = Gauge("ragline_index_version", description="Index version this replica serves.")
        self._embed.set_max_batch_size(self.rcfg.max_batch_size)  # type: ignore[attr-defined]
        self._embed.set_batch_wait_timeout_s(self.rcfg.batch_wait_timeout_s)  # type: ignore[attr-defined]
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

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)  # both set from the config in __init__
    async def _embed(self, items: list[tuple[str, str]]) -> list[np.ndarray]:
        """(encoder key, text) pairs from concurrent requests → one encode call per encoder."""
        out: list[np.ndarray | None] = [None] * len(items)
        for key in {k for k, _ in items}:
            rows = [i for i, (k, _) in enumerate(items) if k == key]
            vecs = await asyncio.to_thread(self.encoders[key].encode, [items[i][1] for i in rows])
            for i, v in zip(rows, vecs, strict=True):
                out[i] = v
        assert all(v is not None for v in out)
        return out  # type: ignore[return-value]

    async def retrieve(self, query: str, mode: Mode | None = None, k: int | None = None,
                       sources: list[str] | None = None) -> Retrieved:
        index = self._serving()  # this request keeps this index even if a swap happens meanwhile
        mode = mode or self.cfg.mode
        t0 = time.perf_counter()
        vector = None if mode == "lexical" else await self._embed((_key(index), query))
        t1 = time.perf_counter()
        hits = await asyncio.to_thread(index.search, query, vector, mode, k or self.cfg.top_k, self.cfg, sources)
        return Retrieved(index_version=index.version, mode=mode, embedder=index.manifest.embedder.name,
                         hits=[Passage(**h.to_dict()) for h in hits],
                         timings_ms={"embed": (t1 - t0) * 1e3, "search": (time.perf_counter() - t1) * 1e3})

    async def embed(self, texts: list[str]) -> Embedded:
        index = self._serving()
        key = _key(index)
        vectors = await asyncio.gather(*(self._embed((key, t)) for t in texts))
        return Embedded(model=index.manifest.embedder.name, vectors=[v.tolist() for v in vectors])

    async def source(self, chunk_id: str) -> Source:
        index = self._serving()
        found = await asyncio.to_thread(index.in_document, chunk_id)
        if found is None:
            raise NotFound(f"chunk {chunk_id!r} is not in index version {index.version}")
        c, document = found
        return Source(index_version=index.version, chunk_id=c["chunk_id"], doc_id=c["doc_id"], source=c["source"],
                      title=c["title"], chunk_index=c["chunk_index"], start_char=c["start_char"],
                      end_char=c["end_char"], document=document)

    def ready(self) -> RetrieverReady:
        if self.index is None:
            return {"ready": False, "reason": "no index version is published yet"}
        m = self.index.manifest
        return {"ready": True, "index_version": m.version, "dataset_version": m.parent,
                "embedder": m.embedder.name, "chunks": len(self.index.chunks)}

    def __del__(self) -> None:
        if hasattr(self, "watcher"):
            self.watcher.stop()


def _key(index: Index) -> str:
    info = index.manifest.embedder
    return f"{info.name}@{info.revision}/{info.runtime}/{info.precision}"
