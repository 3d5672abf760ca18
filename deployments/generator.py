"""Generator deployment: builds the cited prompt and streams the answer from the configured engine: vLLM in the
LLM Serve application (`deployments/llm.py`, by handle), transformers in this replica, or an OpenAI-compatible server.

`model: catalog:NAME` serves the promoted version of a model Ragline fine-tuned (`ragline train sft`). This replica
follows promotions for its tokenizer and name (and, with transformers, the weights) in the background: requests in
flight finish on the engine they started with. With vllm the LLM application rolls its own replicas over.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.util.metrics import Counter

from app import envs
from app.models import generator as generator_model
from app.models import trained
from app.rag.engines import Engine, Sampling, ServeLLMEngine, make_engine
from app.rag.prompt import Message, rag_prompt
from deployments.settings import Settings

log = logging.getLogger("ray.serve")
READY_TIMEOUT_S = 5.0


@serve.deployment(name="Generator")
class Generator:
    def __init__(self, settings: Settings):
        self.cfg = settings.app.serve.generator
        self.storage = settings.open_storage()
        self.engine: Engine = self._load(None)  # type: ignore[assignment]
        self.tokens = Counter("ragline_tokens_generated_total", description="Tokens generated.",
                              tag_keys=("model",))
        self._stopped = threading.Event()
        if trained.is_catalog(self.cfg.model):
            threading.Thread(target=self._watch, name="generator-watch", daemon=True).start()

    def _load(self, serving: str | None) -> Engine | None:
        """The engine for the configured model; for catalog:NAME, None while the promoted version is `serving`."""
        if self.cfg.engine == "openai":
            return make_engine(self.cfg)
        found = generator_model.locate(self.cfg.model, self.storage, self.cfg.cache_dir or envs.cache_dir())
        if found is None:
            raise ValueError(f"generator.model {self.cfg.model}: no version is promoted yet "
                             "(`ragline models promote NAME VERSION`)")
        path, label = found
        if label == serving:
            return None
        engine = make_engine(self.cfg.model_copy(update={"model": path}))
        engine.model = label
        return engine

    def _watch(self) -> None:
        while not self._stopped.wait(5.0):
            try:
                if (engine := self._load(self.engine.model)) is not None:
                    self.engine = engine  # the swap: requests already streaming keep the engine they started with
                    log.info("generating with %s", engine.model)
            except Exception:  # a damaged new version: keep the current engine, retry later
                log.exception("could not load the promoted generator; still serving %s", self.engine.model)

    def sampling(self, max_tokens: int | None, temperature: float | None, top_p: float | None,
                 stop: list[str] | None) -> Sampling:
        return Sampling(max_new_tokens=min(max_tokens or self.cfg.max_new_tokens, self.cfg.max_new_tokens),
                        temperature=self.cfg.temperature if temperature is None else temperature,
                        top_p=self.cfg.top_p if top_p is None else top_p,
                        stop=tuple(self.cfg.stop if stop is None else stop))

    async def stream(self, question: str, passages: list[dict[str, Any]], history: list[Message] | None = None,
                     max_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None,
                     stop: list[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """First `{"passages": n}` (how many passages fit the prompt), then the engine's pieces, then the end."""
        sampling = self.sampling(max_tokens, temperature, top_p, stop)
        engine = self.engine  # one engine for the whole request, even if a promotion swaps it meanwhile
        prompt = rag_prompt(question, passages, self.cfg, engine.count_tokens, max_new_tokens=sampling.max_new_tokens,
                            history=history or [])
        yield {"passages": len(prompt.passages)}
        async for piece in engine.stream(prompt.messages, sampling):
            if "completion_tokens" in piece:
                self.tokens.inc(piece["completion_tokens"], tags={"model": engine.model})
            yield piece

    async def generate(self, question: str, passages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """The whole answer at once: {"text", "passages", "finish_reason", "prompt_tokens", "completion_tokens"}."""
        out: dict[str, Any] = {"text": ""}
        async for piece in self.stream(question, passages, **kwargs):
            if "text" in piece:
                out["text"] += piece["text"]
            else:
                out.update(piece)
        return out

    async def ready(self) -> dict[str, Any]:
        out = {"ready": True, "generator": self.engine.model, "engine": self.cfg.engine}
        if isinstance(self.engine, ServeLLMEngine):
            try:
                out["llm"] = await asyncio.wait_for(self.engine.served(), READY_TIMEOUT_S)
            except Exception as e:  # not deployed yet, starting, or failed: say which, do not raise
                return {**out, "ready": False, "llm": f"the LLM application {self.cfg.llm_app!r} is not ready: "
                        f"{type(e).__name__}: {e}"[:300]}
        return out
