"""Generator deployment: builds the cited prompt and streams the answer from the configured engine
(transformers on CPU, vLLM on GPU, or an OpenAI-compatible server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from ray import serve
from ray.util.metrics import Counter

from app.rag.engines import Sampling, make_engine
from app.rag.prompt import Message, build_prompt
from deployments.settings import Settings


@serve.deployment(name="Generator")
class Generator:
    def __init__(self, settings: Settings):
        self.cfg = settings.app.serve.generator
        self.engine = make_engine(self.cfg)
        self.tokens = Counter("ragline_tokens_generated_total", description="Tokens generated.",
                              tag_keys=("model",))

    def sampling(self, max_tokens: int | None, temperature: float | None, top_p: float | None,
                 stop: list[str] | None) -> Sampling:
        return Sampling(max_new_tokens=min(max_tokens or self.cfg.max_new_tokens, self.cfg.max_new_tokens),
                        temperature=self.cfg.temperature if temperature is None else temperature,
                        top_p=self.cfg.top_p if top_p is None else top_p, stop=tuple(stop or ()))

    async def stream(self, question: str, passages: list[dict[str, Any]], history: list[Message] | None = None,
                     max_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None,
                     stop: list[str] | None = None) -> AsyncIterator[dict[str, Any]]:
        """First `{"passages": n}` (how many passages fit the prompt), then the engine's pieces, then the end."""
        sampling = self.sampling(max_tokens, temperature, top_p, stop)
        prompt = build_prompt(question, passages, system=self.cfg.system_prompt,
                              count_tokens=self.engine.count_tokens, max_context_tokens=self.cfg.max_context_tokens,
                              max_new_tokens=sampling.max_new_tokens, max_passages=self.cfg.passages,
                              history=history or [])
        yield {"passages": len(prompt.passages)}
        async for piece in self.engine.stream(prompt.messages, sampling):
            if "completion_tokens" in piece:
                self.tokens.inc(piece["completion_tokens"], tags={"model": self.engine.model})
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

    def ready(self) -> dict[str, Any]:
        return {"ready": True, "generator": self.engine.model, "engine": self.cfg.engine}
