"""Generator engines behind one interface: `count_tokens(messages)` and `stream(messages, sampling)`.

`stream` yields `Delta` pieces and ends with one `Finished` (its `model`: the name of the model that answered).
Closing the stream early (a cancelled request, a client gone) stops generation.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from app import envs
from app.config import GeneratorConfig
from app.errors import RaglineError, Unavailable, UserError
from app.models import generator as generator_model
from app.rag.prompt import Message
from app.rag.protocol import Delta, Finished

LLM_DEPLOYMENT = "LLM"  # the deployment of the LLM application (deployments/llm.py)


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Prompted:
    """A prompt the Generator fitted for the LLM application (engine vllm), for its caller to stream the answer from
    there (`stream_llm`)."""

    passages: int  # how many of the passages fit the prompt (the stream's Fitted)
    messages: list[Message]
    sampling: Sampling
    llm_app: str  # the LLM application to ask
    model: str  # the generator's name until the LLM replica says its own


class Engine(Protocol):
    model: str  # the name callers see (OpenAI "model")

    def count_tokens(self, messages: list[Message]) -> int: ...

    def stream(self, messages: list[Message], sampling: Sampling) -> AsyncIterator[Delta | Finished]: ...


def make_engine(cfg: GeneratorConfig) -> Engine:
    if cfg.engine == "transformers":
        return TransformersEngine(cfg)
    if cfg.engine == "vllm":
        return ServeLLMEngine(cfg)
    return OpenAIEngine(cfg)


def _cut_at_stop(text: str, stop: tuple[str, ...]) -> int:
    """Index where the first stop string starts in `text` (len(text) if none does)."""
    return min((i for s in stop if (i := text.find(s)) >= 0), default=len(text))


class TransformersEngine(generator_model.ChatTemplateTokens):
    """transformers `generate` in a worker thread, streamed token by token (the CPU default)."""

    def __init__(self, cfg: GeneratorConfig):
        path = generator_model.resolve(cfg.model, cfg.cache_dir or envs.cache_dir())
        self.model_obj: Any
        self.model_obj, self.tokenizer = generator_model.load(path)
        self.model = cfg.model

    async def stream(self, messages: list[Message], sampling: Sampling) -> AsyncIterator[Delta | Finished]:
        import torch
        from transformers import AsyncTextIteratorStreamer, StoppingCriteria, StoppingCriteriaList

        stop = threading.Event()

        class _Stopped(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> bool:
                return stop.is_set()

        inputs = self.tokenizer(self.render(messages), return_tensors="pt", add_special_tokens=False)
        n_prompt = int(inputs["input_ids"].shape[1])
        streamer = AsyncTextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        greedy = sampling.temperature == 0
        kwargs = dict(**inputs, max_new_tokens=sampling.max_new_tokens, streamer=streamer, do_sample=not greedy,
                      stopping_criteria=StoppingCriteriaList([_Stopped()]),
                      pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                      **({} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p}))

        def run() -> Any:
            try:
                with torch.inference_mode():
                    return self.model_obj.generate(**kwargs)
            except BaseException:
                streamer.end()  # the loop below would wait for tokens that never come, holding the request
                raise

        task = asyncio.get_running_loop().run_in_executor(None, run)
        text = ""
        try:
            async for piece in streamer:
                emitted, text = len(text), text + piece
                if (cut := _cut_at_stop(text, sampling.stop)) < len(text):  # a stop string: end before it
                    piece = text[emitted:cut]
                    stop.set()
                if piece:
                    yield Delta(piece)
                if stop.is_set():
                    break
            out = await task
            n_new = int(out.shape[1]) - n_prompt
            finish = "length" if not stop.is_set() and n_new >= sampling.max_new_tokens else "stop"
            yield Finished(finish, n_prompt, n_new, self.model)
        finally:
            stop.set()  # cancelled or closed early: generate() returns at its next token


def llm_error(code: int, message: str) -> RaglineError:
    """vLLM's error as Ragline's: a 4xx is the request's fault (the caller's); a 5xx is the engine's (its process
    died: EngineDeadError, until Serve replaces the replica), so the caller may retry: unavailable, 503."""
    if code < 500:
        return UserError(f"the LLM refused the request: {message}")
    return Unavailable(f"the LLM failed ({code}): {message}; retry shortly")


def engine_dead(e: BaseException) -> bool:
    """Whether `e` is vLLM's EngineDeadError, raised through the LLM replica's handle (Ray re-raises it as a class
    deriving from it), without importing vLLM into every process that imports this module."""
    return any(c.__name__ == "EngineDeadError" for c in type(e).__mro__)


class ServeLLMEngine(generator_model.ChatTemplateTokens):
    """vLLM in the LLM Serve application (`deployments/llm.py`), called by DeploymentHandle: the prompt is fitted
    with the model's own tokenizer here, the engine batches every caller's sequences continuously there."""

    def __init__(self, cfg: GeneratorConfig):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        self.app = cfg.vllm.llm_app
        self.model = cfg.model
        self._llm: Any = None

    def handle(self) -> Any:
        if self._llm is None:  # looked up on first use: the LLM application may start after this replica
            self._llm = llm_handle(self.app)
        return self._llm

    async def served(self) -> str:
        return str(await self.handle().served.remote())

    async def computes(self) -> str:
        return str(await self.handle().computes.remote())

    async def stream(self, messages: list[Message], sampling: Sampling) -> AsyncIterator[Delta | Finished]:
        async with aclosing(stream_llm(self.handle(), messages, sampling, self.model)) as pieces:
            async for piece in pieces:
                yield piece


def llm_handle(app: str) -> Any:
    """The LLM deployment of application `app`, by deployment rather than application: while Serve rebuilds the
    application for a model swap it has no ingress to look up, but its LLM deployment keeps serving."""
    from ray import serve

    return serve.get_deployment_handle(LLM_DEPLOYMENT, app)


async def stream_llm(llm: Any, messages: list[Message], sampling: Sampling,
                     model: str) -> AsyncGenerator[Delta | Finished]:
    """The answer from the LLM deployment behind handle `llm`, streamed: Deltas, then Finished (its `model` the LLM
    replica's own label, else `model`). Closed early, it cancels the LLM replica's generator, which aborts the
    sequence."""
    request = {"messages": messages, "max_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
               "top_p": sampling.top_p, "stop": list(sampling.stop) or None, "stream": True,
               "stream_options": {"include_usage": True}}
    # An async generator of batches: lists of SSE strings ("data: {chunk JSON}\n\n"), errors among them.
    batches = llm.options(stream=True).chat_sse.remote(request)
    finish, prompt_tokens, completion_tokens = "stop", 0, 0
    finished = False
    try:
        async for batch in batches:
            for item in batch:
                data = item.removeprefix("data: ").strip()
                if data == "[DONE]":
                    continue
                chunk = json.loads(data)
                if error := chunk.get("error"):  # refused before any token, or failed mid-stream
                    raise llm_error(int(error.get("code") or 500), str(error.get("message")))
                model = chunk["model"]  # the LLM replica's own label: during a model swap, the truth
                for choice in chunk["choices"]:
                    if text := choice["delta"].get("content"):
                        yield Delta(text)
                    finish = choice.get("finish_reason") or finish
                if usage := chunk.get("usage"):
                    prompt_tokens, completion_tokens = usage["prompt_tokens"], usage["completion_tokens"]
        finished = True
        yield Finished(finish, prompt_tokens, completion_tokens, model)
    except Exception as e:
        if engine_dead(e):
            raise Unavailable(f"the LLM's engine has died ({e}); Serve is replacing its replica: retry "
                              "shortly") from e
        raise
    finally:
        # A caller gone: Serve cancels the LLM replica's generator, which aborts the sequence. A finished stream
        # needs no cancel (a ray.cancel round trip on every request).
        if not finished:
            batches.cancel()


class OpenAIEngine:
    """Any OpenAI-compatible server (a `vllm serve` fleet, `ray.serve.llm`) through the official client."""

    CHARS_PER_TOKEN = 4  # no tokenizer for a remote model: prompts are fitted on this estimate

    def __init__(self, cfg: GeneratorConfig):
        from openai import AsyncOpenAI

        server = cfg.openai
        assert server.base_url, "validated by GeneratorConfig"
        self.client = AsyncOpenAI(base_url=server.base_url, api_key=envs.secret(server.api_key_env) or "none",
                                  timeout=server.request_timeout_s)
        self.model = cfg.model

    def count_tokens(self, messages: list[Message]) -> int:
        return sum(len(m["content"]) // self.CHARS_PER_TOKEN + 4 for m in messages)

    async def stream(self, messages: list[Message], sampling: Sampling) -> AsyncIterator[Delta | Finished]:
        chunks = await self.client.chat.completions.create(  # type: ignore[call-overload]
            model=self.model, messages=messages, stream=True,
            max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            stop=list(sampling.stop) or None, stream_options={"include_usage": True})
        finish, usage = "stop", None
        try:
            async for chunk in chunks:
                for choice in chunk.choices:
                    if choice.delta.content:
                        yield Delta(choice.delta.content)
                    finish = choice.finish_reason or finish
                usage = chunk.usage or usage
        finally:
            await chunks.close()  # closes the HTTP stream, which stops generation on the server
        yield Finished(finish, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
                       self.model)
