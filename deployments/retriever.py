"""Retriever deployment: the collections' serving index versions, query embeddings batched across requests,
dense / lexical / hybrid search, filtered by sources and metadata inside the search.

A collection's index is loaded on its first request and kept while it fits `memory_budget_mb`, the least recently
used unloaded first. Each loaded collection follows its catalog: a newer index version is loaded in a background
thread and swapped in with one assignment, so a request sees either the old index or the new one, never a
half-loaded one; collections swap independently.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import cast

import numpy as np
from ray import serve
from ray.util.metrics import Gauge

from app import collections, hardware
from app.catalog import Catalog
from app.config import RetrieverConfig, SearchConfig
from app.errors import NotFound, NotReady, RaglineError, Unavailable
from app.filters import Filter
from app.index.search import Index, Mode
from app.models import embedder
from app.rag.protocol import Embedded, Retrieved, Search, Source
from app.storage import Storage
from deployments import autoscale
from deployments.batching import Batcher
from deployments.readiness import LoadedCollection, RetrieverReady
from deployments.watch import Watcher

log = logging.getLogger("ray.serve")
MIB = 1 << 20


@dataclass(frozen=True)
class Query:
    """One request's search, as the Retriever batches them."""

    index: Index
    collection: str
    text: str
    mode: Mode
    k: int
    sources: list[str] | None
    where: Filter | None


def index_bytes(index: Index) -> int:
    """What a loaded index holds in memory: its vectors and BM25 arrays (their files' sizes) and its chunk table
    (Arrow's own count; the parquet file is compressed)."""
    files = sum(f.bytes for f in index.manifest.files if not f.path.endswith("chunks.parquet"))
    return files + int(index.chunks.table.nbytes)


def evictions(loaded: list[tuple[str, int]], budget: int, keep: str) -> list[str]:
    """The collections to unload, least recently used first, so that what stays fits `budget` (bytes): `loaded`
    is (collection, bytes), least recently used first. `keep` (the one just asked for) always stays, even alone
    over the budget: a collection too big for it is still served, with nothing beside it."""
    total = sum(size for _, size in loaded)
    out = []
    for name, size in loaded:
        if total <= budget:
            break
        if name != keep:
            out.append(name)
            total -= size
    return out


@serve.deployment(name="Retriever")
class Retriever:
    def __init__(self, storage: str, search: SearchConfig, cfg: RetrieverConfig, poll_interval_s: float):
        self.cfg, self.rcfg = search, cfg
        self.root = Storage(storage)
        # collection → its served index. Keys are added and removed only under `lock` (loads, evictions); requests
        # only read it and stamp `used`, so they never wait for a load of another collection.
        self.indexes: dict[str, Index] = {}
        self.used: dict[str, float] = {}  # collection → when a request last used it (time.monotonic)
        self.sizes: dict[str, int] = {}  # collection → index_bytes of its served index
        self.lock = threading.Lock()  # loads: one at a time, so two requests for a cold collection load it once
        self.encoders: dict[str, embedder.Encoder] = {}  # _key(index's embedder) → its loaded encoder
        self.version_gauge = Gauge("ragline_index_version", description="Index version this replica serves.",
                                   tag_keys=("collection",))
        # Two stages, each batching concurrent requests in a thread of its own, so one batch's questions are
        # searched while the next batch is embedded: embedding (questions and /v1/embeddings texts together), then
        # search.
        self._embed = Batcher(self._encode, cfg.max_batch_size, cfg.batch_wait_timeout_s)
        self._search = Batcher(self._search_batch, cfg.max_batch_size)
        self.questions = 0  # in retrieve_many calls now: the autoscaling metric
        self._load(collections.DEFAULT)  # here, so a replica with a default index is ready when it starts
        self.watcher = Watcher("the index catalog", self._refresh, poll_interval_s,
                               lambda: {c: i.version for c, i in self.indexes.items()})

    def _wanted(self, collection: str) -> int | None:
        """The index version to serve for `collection` (the pinned one for the default), None if none exists."""
        catalog = Catalog(collections.storage_of(self.root, collection))
        if collection == collections.DEFAULT and self.rcfg.index_version:
            return catalog.get("indexes", self.rcfg.index_version).version
        latest = catalog.latest("indexes")
        return latest.version if latest else None

    def _load(self, collection: str) -> Index | None:
        """Loads `collection`'s wanted index version unless it is the one served; returns what is served (None:
        nothing published). Evicts the least recently used others past the memory budget."""
        with self.lock:
            want = self._wanted(collection)
            served = self.indexes.get(collection)
            if want is None or (served is not None and served.version == want):
                return served
            index = Index.load(collections.storage_of(self.root, collection), want)
            key = _key(index)
            if key not in self.encoders:
                self.encoders[key] = embedder.for_index(index.manifest.embedder)
            self.indexes[collection] = index  # the swap: one reference assignment, atomic for the requests after
            self.used[collection] = time.monotonic()
            self.sizes[collection] = index_bytes(index)
            self._evict(keep=collection)
            self.version_gauge.set(index.version, tags={"collection": collection})
            log.info("serving index version %s of collection %s", index.version, collection)
            return index

    def _evict(self, keep: str) -> None:
        """Unloads what `evictions` names. Requests searching an unloaded index keep their reference and finish
        on it."""
        by_use = sorted(self.indexes, key=lambda c: self.used.get(c, 0.0))
        for victim in evictions([(c, self.sizes[c]) for c in by_use], self.rcfg.memory_budget_mb * MIB, keep):
            del self.indexes[victim], self.sizes[victim]
            log.info("unloaded collection %s (memory budget %d MiB)", victim, self.rcfg.memory_budget_mb)

    def _refresh(self) -> None:
        """Each loaded collection follows its catalog (with none loaded, the default is looked for: a graph
        started before the first ingest becomes ready when it is published)."""
        for collection in list(self.indexes) or [collections.DEFAULT]:
            self._load(collection)

    async def _serving(self, collection: str) -> Index:
        """The collection's served index, loaded now if it is not (in a thread: a load takes seconds). The Ingress
        has checked that the collection exists and that the caller may read it."""
        index = self.indexes.get(collection)
        if index is None:
            index = await asyncio.to_thread(self._load, collection)
        if index is None:
            raise NotReady(f"collection {collection!r} has no index version yet: run `ragline ingest --collection "
                           f"{collection} PATH` first")
        self.used[collection] = time.monotonic()
        return index

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
        `Index.search` raises for nothing one request can bring (the API refuses empty questions, and `_retrieve`
        bad filters, before), so no request fails the others."""
        out = []
        for q, vector, embed_ms in items:
            t0 = time.perf_counter()
            hits = q.index.search(q.text, vector, q.mode, q.k, self.cfg, q.sources, q.where)
            out.append(Retrieved(collection=q.collection, index_version=q.index.version, mode=q.mode,
                                 embedder=q.index.manifest.embedder.name, hits=hits,
                                 timings_ms={"embed": embed_ms, "search": (time.perf_counter() - t0) * 1e3}))
        return out

    async def _retrieve(self, s: Search) -> Retrieved:
        index = await self._serving(s.collection)  # kept by this request even if a swap happens meanwhile
        if s.where is not None:  # a field no document has: this request's 422, before it joins a batch
            await asyncio.to_thread(index.allowed, s.sources, s.where)  # cached: the search reuses the rows
        q = Query(index, s.collection, s.query, cast(Mode, s.mode or self.cfg.mode), s.k or self.cfg.top_k,
                  s.sources, s.where)
        vector, embed_ms = (None, 0.0) if q.mode == "lexical" else await self._embed((_key(index), q.text))
        return await self._search((q, vector, embed_ms))

    async def retrieve(self, search: Search) -> Retrieved:
        out = (await self.retrieve_many([search]))[0]
        if isinstance(out, RaglineError):
            raise out
        return out

    async def retrieve_many(self, searches: list[Search]) -> list[Retrieved | RaglineError]:
        """Several requests' searches in one call (the Ingress sends its concurrent requests' together: one Serve
        call for them all); they join the questions of other calls in the embedding batches. A request's own
        failure (its collection has no index, its filter names an unknown field) is its result, not the call's."""
        self.questions += len(searches)
        try:
            found = await asyncio.gather(*(self._retrieve(s) for s in searches), return_exceptions=True)
        finally:
            self.questions -= len(searches)
        for f in found:  # anything else is this replica's fault: the whole call fails
            if isinstance(f, BaseException) and not isinstance(f, RaglineError):
                raise f
        return cast(list[Retrieved | RaglineError], found)

    def record_autoscaling_stats(self) -> dict[str, float]:
        """Serve's custom autoscaling metric (deployments/autoscale.py): the questions in this replica now. A
        call from the Ingress carries many, so Serve's own count of ongoing calls would understate the load."""
        return {autoscale.METRIC: self.questions}

    async def embed(self, texts: list[str], collection: str) -> Embedded:
        index = await self._serving(collection)
        key = _key(index)
        embedded = await asyncio.gather(*(self._embed((key, t)) for t in texts))
        return Embedded(model=index.manifest.embedder.name, vectors=[v.tolist() for v, _ in embedded])

    async def source(self, chunk_id: str, collection: str) -> Source:
        index = await self._serving(collection)
        found = await asyncio.to_thread(index.in_document, chunk_id)
        if found is None:  # the same words whether the id is in another collection or nowhere
            raise NotFound(f"chunk {chunk_id!r} is not in collection {collection!r}")
        c, document = found
        return Source.model_validate({**c, "collection": collection, "index_version": index.version,
                                      "document": document})

    def check_health(self) -> None:
        """Serve's probe, every `health_check_period_s`; raising has the replica replaced. Fails if a served index
        has lost its encoder or its dense and chunk tables disagree, or a thread a request or a swap needs has
        stopped (a request would wait forever, or the replica would serve one version forever)."""
        self._embed.check()
        self._search.check()
        self.watcher.check()
        for collection, index in list(self.indexes.items()):
            if _key(index) not in self.encoders or index.dense.ntotal != len(index.chunks):
                raise Unavailable(f"index version {index.version} of collection {collection} is served without its "
                                  "encoder or with tables that disagree")

    def ready(self) -> RetrieverReady:
        """Ready once the default collection is served, or any other is (a graph may serve only named ones)."""
        loaded = list(self.indexes.items())
        if not loaded:
            return RetrieverReady(ready=False, reason="no index version is published yet")
        name, index = next(((c, i) for c, i in loaded if c == collections.DEFAULT), loaded[0])
        m = index.manifest
        return RetrieverReady(ready=True, collection=name, index_version=m.version, dataset_version=m.parent,
                              embedder=m.embedder.name, chunks=len(index.chunks),
                              computes=f"{m.embedder.runtime} {self.encoders[_key(index)].precision} on "
                                       f"{hardware.detect().summary()}",
                              collections={c: LoadedCollection(index_version=i.version, chunks=len(i.chunks),
                                                               mib=round(self.sizes.get(c, 0) / MIB, 1))
                                           for c, i in loaded},
                              memory_budget_mib=self.rcfg.memory_budget_mb)

    def __del__(self) -> None:
        if hasattr(self, "watcher"):
            self.watcher.stop()


def _key(index: Index) -> str:
    info = index.manifest.embedder
    return f"{info.name}@{info.revision}/{info.runtime}/{info.precision}"
