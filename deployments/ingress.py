"""The Serve ingress: the HTTP API (`deployments/api/`) over a `RagFlow` whose backends are the three
deployments' handles."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray import serve
from ray.serve.handle import DeploymentHandle
from ray.util.metrics import Counter

from app import apikeys
from app.catalog import Catalog
from app.config import ApiConfig
from app.errors import RaglineError
from app.models import embedder
from app.rag.engines import Prompted, llm_handle, stream_llm
from app.rag.flow import RagFlow
from app.rag.protocol import (
    Document,
    Embedded,
    Finished,
    Fitted,
    Generation,
    Passage,
    Piece,
    Ranking,
    Retrieved,
    Search,
    Source,
    StageReady,
)
from app.serving import SEARCH_DEPLOYMENTS
from app.storage import Storage
from deployments.api import build_api, stage_latency
from deployments.api.access import Access
from deployments.batching import Batcher
from deployments.guard import Guard
from deployments.readiness import Unanswered
from deployments.watch import Watcher

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger("ray.serve")
RETRIEVE_CALLS = 2  # calls to the Retriever in flight per Ingress replica
READY_TIMEOUT_S = 3.0  # under the 5 s an HTTP client or a Kubernetes probe usually allows the whole /readyz


class HandleBackends:
    """The flow's backends over Serve DeploymentHandles (the composed graph)."""

    def __init__(self, retriever: DeploymentHandle, reranker: DeploymentHandle, generator: DeploymentHandle,
                 retrieve_batch: int, generator_engine: str):
        self.retriever, self.reranker, self.generator = retriever, reranker, generator
        self.direct = generator_engine == "vllm"  # answers streamed from the LLM application, not relayed
        self._llms: dict[str, DeploymentHandle] = {}  # LLM application → its LLM deployment's handle
        self.tokens = Counter("ragline_tokens_generated_total", description="Tokens generated.", tag_keys=("model",))
        # Concurrent requests' searches go to the Retriever in one call: a Serve call costs the Ingress and the
        # Retriever about half a millisecond of CPU each, whatever it carries (32 clients: 3.8-4.1 against 5.0-5.6 ms
        # per request in all). Two calls in flight: one computing while the next crosses, or two Retriever replicas.
        self._retrieve = Batcher(self._retrieve_many, retrieve_batch, max_concurrent=RETRIEVE_CALLS)

    async def _retrieve_many(self, searches: list[Search]) -> list[Retrieved | RaglineError]:
        return await self.retriever.retrieve_many.remote(searches)

    async def retrieve(self, search: Search) -> Retrieved:
        found = await self._retrieve(search)
        if isinstance(found, RaglineError):  # this request's own failure, sent back beside the others' results
            raise found
        return found

    async def rerank(self, query: str, documents: list[Document], top_n: int, retrieved: bool) -> Ranking:
        return await self.reranker.rerank.remote(query, documents, top_n, retrieved)

    async def stream(self, question: str, passages: list[Passage], generation: Generation) -> AsyncIterator[Piece]:
        if self.direct:
            prompted: Prompted = await self.generator.prompt.remote(question, passages, generation)
            yield Fitted(prompted.passages)
            app = prompted.llm_app
            if app not in self._llms:
                self._llms[app] = llm_handle(app)
            pieces: AsyncGenerator[Piece] = stream_llm(self._llms[app], prompted.messages, prompted.sampling,
                                                       prompted.model)
        else:
            pieces = self._relayed(question, passages, generation)
        async with aclosing(pieces):  # closed early (a client gone, a deadline), its generator is cancelled
            async for piece in pieces:
                if isinstance(piece, Finished):
                    self.tokens.inc(piece.completion_tokens, tags={"model": piece.model})
                yield piece

    async def _relayed(self, question: str, passages: list[Passage],
                       generation: Generation) -> AsyncGenerator[Piece]:
        """The answer from the Generator replica's own engine (transformers, or an OpenAI server it calls)."""
        pieces: Any = self.generator.options(stream=True).stream.remote(question, passages, generation)
        finished = False
        try:
            async for piece in pieces:
                yield piece
            finished = True
        finally:
            # Closed early (a client gone, a deadline): Starlette ends a streaming response whose client left by
            # cancelling its own task, not the Serve request, so Serve's propagation of a cancelled request to
            # the calls it made never fires. Cancel the generator replica's stream here: that aborts the sequence.
            # A finished stream needs no cancel (it would cost a ray.cancel round trip on every request).
            if not finished:
                pieces.cancel()

    async def embed(self, texts: list[str], collection: str) -> Embedded:
        return await self.retriever.embed.remote(texts, collection)

    async def source(self, chunk_id: str, collection: str) -> Source:
        return await self.retriever.source.remote(chunk_id, collection)

    async def ready(self) -> dict[str, StageReady]:
        async def part(handle: DeploymentHandle) -> StageReady:
            # A probe answers within READY_TIMEOUT_S: a replica that is restarting (or a handle still finding its
            # new controller) reports itself not ready instead of holding the probe.
            try:
                return await asyncio.wait_for(handle.ready.remote(), READY_TIMEOUT_S)
            except TimeoutError:
                return Unanswered(ready=False, error=f"no answer within {READY_TIMEOUT_S:g} s")

        parts = await asyncio.gather(part(self.retriever), part(self.reranker), part(self.generator))
        return dict(zip(("retriever", "reranker", "generator"), parts, strict=True))


class IndexEmbedder:
    """The embedder of the index version the Retriever serves (the pinned one, else the latest), followed in the
    catalog as the Retriever follows it; until an index is published, the one ingest is configured with. Questions
    are measured in its tokens; /v1/models lists its name."""

    def __init__(self, storage: Storage, index_version: int | None, configured: str, poll_interval_s: float):
        self.storage, self.index_version = storage, index_version
        self.tokenizers: dict[str, Tokenizer] = {}  # name → tokenizer (tokenizers only: no weights)
        self._name = configured
        self._refresh()
        self.watcher = Watcher("the served index's embedder", self._refresh, poll_interval_s, lambda: self._name)

    def _refresh(self) -> None:
        catalog = Catalog(self.storage)
        served = catalog.get("indexes", self.index_version) if self.index_version else catalog.latest("indexes")
        name = served.embedder.name if served else self._name
        if name not in self.tokenizers:  # a trained embedder's name is catalog:NAME:VERSION, its files elsewhere
            self.tokenizers[name] = embedder.load_tokenizer(embedder.weights(served.embedder) if served else name)
        self._name = name  # after its tokenizer is loaded: count_tokens never sees a name without one

    @property
    def name(self) -> str:
        return self._name

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizers[self._name].encode(text, add_special_tokens=False).ids)


@dataclass(frozen=True)
class IngressArgs:
    api: ApiConfig
    generator: str  # serve.generator.model: the name /v1/models lists
    max_new_tokens: int  # serve.generator.max_new_tokens: the most tokens an answer may take
    embedder: str  # ingest.embed.model: the embedder named until an index version is published
    index_version: int | None  # serve.retriever.index_version: the index the Retriever is pinned to (None: latest)
    candidates: int  # passages retrieved for the reranker to choose from (0: no reranker)
    retrieve_batch: int  # serve.retriever.max_batch_size: most searches sent to the Retriever in one call
    generator_engine: str  # serve.generator.engine: with vllm, answers are streamed from the LLM application
    poll_interval_s: float  # serve.poll_interval_s
    api_keys_file: str | None = None
    search_from: str | None = None  # the application whose Retriever and Reranker to ask (None: the bound ones)


@serve.deployment(name="Ingress")
@serve.ingress()
class Ingress:
    def __init__(self, retriever: DeploymentHandle | None, reranker: DeploymentHandle | None,
                 generator: DeploymentHandle, storage: str, args: IngressArgs):
        if args.search_from:
            retriever, reranker = (serve.get_deployment_handle(name, args.search_from) for name in SEARCH_DEPLOYMENTS)
        assert retriever is not None and reranker is not None, "bound unless asked from another application"
        root = Storage(storage)
        keys, where = apikeys.ring(root, args.api_keys_file)
        log.info("API keys from %s", where)
        self.embedder = IndexEmbedder(root, args.index_version, args.embedder, args.poll_interval_s)
        backends = HandleBackends(retriever, reranker, generator, args.retrieve_batch, args.generator_engine)
        flow = RagFlow(backends, candidates=args.candidates, observe=stage_latency())
        self.access = Access(root)
        self.api = build_api(flow, args.api, keys, generator=args.generator, max_new_tokens=args.max_new_tokens,
                             embedder=self.embedder, storage=root, access=self.access)
        self.watcher = Watcher("the collections", self.access.refresh, args.poll_interval_s,
                               lambda: sorted(self.access.known))

    def __serve_build_asgi_app__(self) -> Guard:
        return self.api

    def __del__(self) -> None:
        if hasattr(self, "embedder"):
            self.embedder.watcher.stop()
        if hasattr(self, "watcher"):
            self.watcher.stop()
