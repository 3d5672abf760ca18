"""The Serve ingress: the HTTP API (`deployments/api/`) over a `RagFlow` whose backends are the three
deployments' handles."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from app import apikeys
from app.config import ApiConfig
from app.models import embedder
from app.rag.flow import RagFlow
from app.rag.protocol import Document, Embedded, Generation, Passage, Piece, Ranking, Retrieved, StageReady
from app.storage import Storage
from deployments.api import build_api, stage_latency
from deployments.guard import Guard

log = logging.getLogger("ray.serve")
READY_TIMEOUT_S = 3.0  # under the 5 s an HTTP client or a Kubernetes probe usually allows the whole /readyz


class Unanswered(StageReady):
    """A stage that did not answer the probe in time (in place of its own readiness)."""

    error: str


class HandleBackends:
    """The flow's backends over Serve DeploymentHandles (the composed graph)."""

    def __init__(self, retriever: DeploymentHandle, reranker: DeploymentHandle, generator: DeploymentHandle):
        self.retriever, self.reranker, self.generator = retriever, reranker, generator

    async def retrieve(self, query: str, mode: str | None, k: int, sources: list[str] | None) -> Retrieved:
        return await self.retriever.retrieve.remote(query, mode, k, sources)

    async def rerank(self, query: str, documents: list[Document], top_n: int, retrieved: bool) -> Ranking:
        return await self.reranker.rerank.remote(query, documents, top_n, retrieved)

    async def stream(self, question: str, passages: list[Passage], generation: Generation) -> AsyncIterator[Piece]:
        # closing this generator (client gone, timeout) cancels the generator replica's stream
        pieces: Any = self.generator.options(stream=True).stream.remote(question, passages, generation)
        async for piece in pieces:
            yield piece

    async def embed(self, texts: list[str]) -> Embedded:
        return await self.retriever.embed.remote(texts)

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


@dataclass(frozen=True)
class IngressArgs:
    api: ApiConfig
    generator: str  # serve.generator.model: the name /v1/models lists
    embedder: str  # the embedding model ingest uses: questions are measured in its tokens
    candidates: int  # passages retrieved for the reranker to choose from (0: no reranker)
    api_keys_file: str | None = None


@serve.deployment(name="Ingress")
@serve.ingress()
class Ingress:
    def __init__(self, retriever: DeploymentHandle, reranker: DeploymentHandle, generator: DeploymentHandle,
                 storage: str, args: IngressArgs):
        keys, where = apikeys.ring(Storage(storage), args.api_keys_file)
        log.info("API keys from %s", where)
        tokenizer = embedder.load_tokenizer(args.embedder)
        flow = RagFlow(HandleBackends(retriever, reranker, generator), candidates=args.candidates,
                       observe=stage_latency())
        self.api = build_api(flow, args.api, keys, lambda text: len(tokenizer(text, add_special_tokens=False)
                                                                    ["input_ids"]),
                             generator=args.generator, embedder=args.embedder)

    def __serve_build_asgi_app__(self) -> Guard:
        return self.api
