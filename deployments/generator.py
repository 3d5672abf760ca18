"""Generator deployment: builds the cited prompt and streams the answer from the configured engine: vLLM in the
LLM Serve application (`deployments/llm.py`, by handle), transformers in this replica, or an OpenAI-compatible server.
With vLLM the Ingress asks for the prompt (`prompt`) and streams the answer from the LLM application itself, so the
answer's tokens take one hop, not two.

`model: catalog:NAME` serves the promoted version of a model Ragline fine-tuned (`ragline train sft`). This replica
follows promotions for its tokenizer and name (and, with transformers, the weights) in the background: requests in
flight finish on the engine they started with. With vllm the LLM application rolls its own replicas over.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from ray import serve

from app import envs
from app.config import GeneratorConfig
from app.errors import NotFound
from app.models import generator as generator_model
from app.models import trained
from app.rag.engines import Engine, Prompted, Sampling, ServeLLMEngine, make_engine
from app.rag.prompt import Prompt, rag_prompt
from app.rag.protocol import Fitted, Generation, Passage, Piece
from app.storage import Storage
from deployments.readiness import GeneratorReady
from deployments.watch import Watcher

log = logging.getLogger("ray.serve")
READY_TIMEOUT_S = 2.0  # inside the ingress's 3 s for the whole part


@serve.deployment(name="Generator")
class Generator:
    def __init__(self, storage: str, cfg: GeneratorConfig, poll_interval_s: float):
        self.cfg = cfg
        self.storage = Storage(storage)
        self.engine: Engine = self._load(None)  # type: ignore[assignment]
        if trained.is_catalog(self.cfg.model):
            self.watcher = Watcher(f"promotions of {self.cfg.model}", self._refresh, poll_interval_s,
                                   lambda: self.engine.model)

    def _load(self, serving: str | None) -> Engine | None:
        """The engine for the configured model; for catalog:NAME, None while the promoted version is `serving`."""
        if self.cfg.engine == "openai":
            return make_engine(self.cfg)
        found = generator_model.locate(self.cfg.model, self.storage, self.cfg.cache_dir or envs.cache_dir())
        if found is None:
            raise NotFound(f"generator.model {self.cfg.model}: no version is promoted yet "
                             "(`ragline models promote NAME VERSION`)")
        path, label = found
        if label == serving:
            return None
        engine = make_engine(self.cfg.model_copy(update={"model": path}))
        engine.model = label
        return engine

    def _refresh(self) -> None:
        if (engine := self._load(self.engine.model)) is not None:
            self.engine = engine  # the swap: requests already streaming keep the engine they started with
            log.info("generating with %s", engine.model)

    def sampling(self, g: Generation) -> Sampling:
        """The caller's sampling within the configured bounds, the configured defaults where it said nothing."""
        return Sampling(max_new_tokens=min(g.max_tokens or self.cfg.max_new_tokens, self.cfg.max_new_tokens),
                        temperature=self.cfg.temperature if g.temperature is None else g.temperature,
                        top_p=self.cfg.top_p if g.top_p is None else g.top_p,
                        stop=tuple(self.cfg.stop if g.stop is None else g.stop))

    def _fit(self, engine: Engine, question: str, passages: list[Passage],
             generation: Generation) -> tuple[Prompt, Sampling]:
        sampling = self.sampling(generation)
        return rag_prompt(question, passages, self.cfg, engine.count_tokens, max_new_tokens=sampling.max_new_tokens,
                          history=generation.history), sampling

    async def stream(self, question: str, passages: list[Passage], generation: Generation) -> AsyncIterator[Piece]:
        """Fitted (how many passages fit the prompt), then the engine's Deltas, then Finished."""
        engine = self.engine  # one engine for the whole request, even if a promotion swaps it meanwhile
        prompt, sampling = self._fit(engine, question, passages, generation)
        yield Fitted(len(prompt.passages))
        async for piece in engine.stream(prompt.messages, sampling):
            yield piece

    def prompt(self, question: str, passages: list[Passage], generation: Generation) -> Prompted:
        """With vllm: the fitted prompt, for the Ingress to stream the answer from the LLM application itself. Each
        streamed batch of tokens then crosses one Serve call (LLM replica → Ingress) instead of two."""
        engine = self.engine
        assert isinstance(engine, ServeLLMEngine), "only a vllm Generator is asked for its prompt"
        prompt, sampling = self._fit(engine, question, passages, generation)
        return Prompted(len(prompt.passages), prompt.messages, sampling, engine.app, engine.model)

    def check_health(self) -> None:
        """Serve's probe: the promotion watcher runs. The engine is checked where it lives: vLLM's in the LLM
        application, whose replicas Ray Serve LLM probes (`LLMServer.check_health` asks the engine; a dead one has
        its replica replaced: tests/integration/test_serve.py kills one); transformers' is this replica's own
        process; an OpenAI server is someone else's to restart."""
        if hasattr(self, "watcher"):
            self.watcher.check()

    async def ready(self) -> GeneratorReady:
        out = GeneratorReady(ready=True, generator=self.engine.model, engine=self.cfg.engine)
        if isinstance(self.engine, ServeLLMEngine):
            try:
                llm, computes = await asyncio.wait_for(
                    asyncio.gather(self.engine.served(), self.engine.computes()), READY_TIMEOUT_S)
            except Exception as e:  # not deployed yet, starting, or failed: say which, do not raise
                why = f"the LLM application {self.cfg.vllm.llm_app!r} is not ready: {type(e).__name__}: {e}"
                return out.model_copy(update={"ready": False, "llm": why[:300]})
            return out.model_copy(update={"llm": llm, "computes": computes})
        return out
