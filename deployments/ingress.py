"""The HTTP ingress: a FastAPI app over the retriever → reranker → generator chain.

`build_api(backends, ...)` is plain FastAPI over a `Backends` object, so the same routes run in the Serve
`Ingress` (backends = DeploymentHandles), in-process (benchmarks) and against fakes (unit tests).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle
from ray.util.metrics import Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import apikeys
from app.config import ServeConfig
from app.models import embedder
from deployments import limits
from deployments.guard import Guard
from deployments.retriever import NotReady
from deployments.schemas import (
    ChatCompletionRequest,
    EmbeddingsRequest,
    QueryRequest,
    RerankRequest,
    RetrieveRequest,
)
from deployments.settings import Settings

log = logging.getLogger("ray.serve")
SNIPPET_CHARS = 240


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


class Backends(Protocol):
    """The three stages, however they are reached."""

    async def retrieve(self, query: str, mode: str | None, k: int, sources: list[str] | None) -> dict[str, Any]: ...

    async def rerank(self, query: str, passages: list[dict[str, Any]], top_n: int,
                     retrieved: bool = False) -> dict[str, Any]: ...

    def stream(self, question: str, passages: list[dict[str, Any]], **kwargs: Any) -> AsyncIterator[dict[str, Any]]: ...

    async def embed(self, texts: list[str]) -> dict[str, Any]: ...

    async def ready(self) -> dict[str, dict[str, Any]]: ...


class HandleBackends:
    """Backends over Serve DeploymentHandles (the composed graph)."""

    def __init__(self, retriever: DeploymentHandle, reranker: DeploymentHandle, generator: DeploymentHandle):
        self.retriever, self.reranker, self.generator = retriever, reranker, generator

    async def retrieve(self, query: str, mode: str | None, k: int, sources: list[str] | None) -> dict[str, Any]:
        return await self.retriever.retrieve.remote(query, mode, k, sources)

    async def rerank(self, query: str, passages: list[dict[str, Any]], top_n: int,
                     retrieved: bool = False) -> dict[str, Any]:
        return await self.reranker.rerank.remote(query, passages, top_n, retrieved)

    async def stream(self, question: str, passages: list[dict[str, Any]],
                     **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        # closing this generator (client gone, timeout) cancels the generator replica's stream
        pieces: Any = self.generator.options(stream=True).stream.remote(question, passages, **kwargs)
        async for piece in pieces:
            yield piece

    async def embed(self, texts: list[str]) -> dict[str, Any]:
        return await self.retriever.embed.remote(texts)

    async def ready(self) -> dict[str, dict[str, Any]]:
        parts = await asyncio.gather(self.retriever.ready.remote(), self.reranker.ready.remote(),
                                     self.generator.ready.remote())
        return dict(zip(("retriever", "reranker", "generator"), parts, strict=True))


def _cause(e: BaseException) -> BaseException:
    return e.cause if isinstance(e, RayTaskError) and e.cause is not None else e


def _validation_message(err: RequestValidationError) -> tuple[str, str]:
    """("field", "field: what is wrong; …") from pydantic's errors, without echoing the whole input."""
    parts, first = [], ""
    for e in err.errors():
        if e["type"] == "json_invalid":  # loc is ("body", character offset)
            return "body", f"malformed JSON: {e.get('ctx', {}).get('error', e['msg'])}"
        field = ".".join(str(p) for p in e["loc"] if p != "body") or "body"
        first = first or field
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{field}: {msg}")
    return first, "; ".join(parts)


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def citations(passages: list[dict[str, Any]], answer: str | None) -> list[dict[str, Any]]:
    """One entry per passage in the prompt ([n] is entry n); `cited` says whether the answer refers to it."""
    return [{"n": i, "chunk_id": p["chunk_id"], "doc_id": p["doc_id"], "source": p["source"], "title": p["title"],
             "snippet": p["text"][:SNIPPET_CHARS], "score": p.get("rerank_score", p["score"]),
             **({"cited": f"[{i}]" in answer} if answer is not None else {})}
            for i, p in enumerate(passages, start=1)]


def build_api(backends: Backends, cfg: ServeConfig, keys: apikeys.KeyRing, count_tokens: Callable[[str], int],
              models: dict[str, str]) -> Guard:
    """`models`: {"generator": name, "embedder": name}. Returns the guarded ASGI app."""
    api = cfg.api
    app = FastAPI(title="Ragline", summary="Grounded answers over your documents", version="1")
    latency = Histogram("ragline_stage_latency_ms", description="Latency of each stage of a request (ms).",
                        boundaries=[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000],
                        tag_keys=("stage",))

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse({"error": {"type": e.kind, "message": e.message}}, e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        field, message = _validation_message(e)
        return JSONResponse({"error": {"type": "invalid_request", "message": message, "field": field}}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": {"type": "not_found" if e.status_code == 404 else "http_error",
                                       "message": str(e.detail)}}, e.status_code)

    @app.exception_handler(Exception)
    async def _internal(request: Request, e: Exception) -> JSONResponse:
        log.exception("request to %s failed", request.url.path)  # the trace stays in the replica's log
        return JSONResponse({"error": {"type": "internal_error", "message": "internal error; see the server log"}},
                            500)

    def fail(e: BaseException) -> ApiError:
        """The caller-facing error for a failure inside a stage."""
        e = _cause(e)
        if isinstance(e, BackPressureError):
            return ApiError(503, "overloaded", "the service is at capacity; retry later",
                            {"Retry-After": str(api.retry_after_s)})
        if isinstance(e, NotReady):
            return ApiError(503, "not_ready", str(e), {"Retry-After": str(api.retry_after_s)})
        if isinstance(e, RayActorError | ActorUnavailableError):  # a replica died or restarts: Serve replaces it
            return ApiError(503, "unavailable", "a replica of the service stopped while answering; retry",
                            {"Retry-After": str(api.retry_after_s)})
        if isinstance(e, ValueError):
            return ApiError(422, "invalid_request", str(e))
        if isinstance(e, TimeoutError):
            return ApiError(504, "timeout", f"the request took longer than {api.request_timeout_s}s and was "
                            "cancelled")
        raise e

    async def stage(name: str, timings: dict[str, float], call: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await call
        except (BackPressureError, NotReady, ValueError, RayTaskError, RayActorError, ActorUnavailableError) as e:
            raise fail(e) from None
        finally:
            timings[name] = (time.perf_counter() - t0) * 1e3
            latency.observe(timings[name], tags={"stage": name})

    def within_limits(req: BaseModel) -> None:
        """Sizes first, before a tokenizer or a stage sees the request."""
        if problems := limits.violations(req, api):
            raise ApiError(422, "invalid_request", "; ".join(problems))

    def check_question(text: str, field: str, top_k: int) -> None:
        if (n := count_tokens(text)) > api.max_question_tokens:
            raise ApiError(422, "invalid_request", f"{field}: {n} tokens; the limit is {api.max_question_tokens}")
        if top_k > api.max_top_k:
            raise ApiError(422, "invalid_request", f"top_k: {top_k} is over the limit of {api.max_top_k}")

    async def context(question: str, top_k: int, mode: str | None, sources: list[str] | None,
                      timings: dict[str, float]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Retrieve candidates, rerank them to `top_k` passages."""
        k = max(top_k, cfg.reranker.candidates) if cfg.reranker.model else top_k
        found = await stage("retrieve", timings, backends.retrieve(question, mode, k, sources))
        ranked = await stage("rerank", timings, backends.rerank(question, found["hits"], top_k, retrieved=True))
        return found, ranked

    def meta(found: dict[str, Any], ranked: dict[str, Any], timings: dict[str, float],
             end: dict[str, Any]) -> dict[str, Any]:
        """`end`: the generator's last piece; its `model` names the version that answered (catalog:NAME → NAME:vN)."""
        return {"index_version": found["index_version"], "mode": found["mode"],
                "models": {"generator": end.get("model") or models["generator"], "embedder": models["embedder"],
                           "reranker": ranked["reranker"]},
                "timings_ms": {k: round(v, 2) for k, v in timings.items()}}

    async def with_timeout(call: Any) -> Any:
        try:
            return await asyncio.wait_for(call, api.request_timeout_s)  # cancels the downstream calls on expiry
        except TimeoutError as e:
            raise fail(e) from None

    async def answer(question: str, passages: list[dict[str, Any]], timings: dict[str, float],
                     **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"text": ""}
        t0 = time.perf_counter()
        try:
            async for piece in backends.stream(question, passages, **kwargs):
                if "text" in piece:
                    out["text"] += piece["text"]
                else:
                    out.update(piece)
        except (BackPressureError, ValueError, RayTaskError, RayActorError, ActorUnavailableError) as e:
            raise fail(e) from None
        timings["generate"] = (time.perf_counter() - t0) * 1e3
        latency.observe(timings["generate"], tags={"stage": "generate"})
        return out

    async def sse(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Errors after the response started cannot change its status: they become an `error` event."""
        try:
            async with asyncio.timeout(api.request_timeout_s):
                async for chunk in events:
                    yield chunk
        except (TimeoutError, BackPressureError, NotReady, ValueError, RayTaskError, RayActorError,
                ActorUnavailableError, ApiError) as e:
            err = e if isinstance(e, ApiError) else fail(e)
            yield _sse("error", {"error": {"type": err.kind, "message": err.message}})

    def streaming(events: AsyncIterator[bytes]) -> StreamingResponse:
        return StreamingResponse(sse(events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        parts = await backends.ready()
        ok = all(p["ready"] for p in parts.values())
        return JSONResponse({"ready": ok, **parts}, 200 if ok else 503)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "ragline"}
                                           for m in (models["generator"], models["embedder"])]}

    @app.post("/v1/retrieve")
    async def retrieve(req: RetrieveRequest) -> dict[str, Any]:
        within_limits(req)
        check_question(req.query, "query", req.top_k)
        timings: dict[str, float] = {}
        found = await with_timeout(stage("retrieve", timings, backends.retrieve(req.query, req.mode, req.top_k,
                                                                                req.sources)))
        return {"index_version": found["index_version"], "mode": found["mode"], "hits": found["hits"],
                "timings_ms": {**found["timings_ms"], "total": round(timings["retrieve"], 2)}}

    @app.post("/v1/rerank")
    async def rerank(req: RerankRequest) -> dict[str, Any]:
        within_limits(req)
        check_question(req.query, "query", 1)
        docs = [{"index": i, "text": t} for i, t in enumerate(req.documents)]
        ranked = await with_timeout(stage("rerank", {}, backends.rerank(req.query, docs, req.top_n or len(docs))))
        return {"reranker": ranked["reranker"],
                "results": [{"index": p["index"], "relevance_score": p.get("rerank_score"), "document": p["text"]}
                            for p in ranked["passages"]]}

    @app.post("/v1/embeddings")
    async def embeddings(req: EmbeddingsRequest) -> dict[str, Any]:
        within_limits(req)
        if req.model and req.model != models["embedder"]:
            raise ApiError(404, "model_not_found", f"model {req.model!r} is not served; embeddings come from "
                           f"{models['embedder']!r}")
        texts = [req.input] if isinstance(req.input, str) else req.input
        for i, t in enumerate(texts):
            check_question(t, f"input[{i}]", 1)
        out = await with_timeout(stage("embed", {}, backends.embed(texts)))
        dim = len(out["vectors"][0])
        if req.dimensions is not None and req.dimensions != dim:
            raise ApiError(422, "invalid_request", f"dimensions: the model gives {dim}-dimensional vectors")

        def encode(v: list[float]) -> list[float] | str:
            if req.encoding_format == "base64":  # little-endian float32, as OpenAI sends it
                return base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
            return v

        n_tokens = sum(count_tokens(t) for t in texts)
        return {"object": "list", "model": out["model"], "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
                "data": [{"object": "embedding", "index": i, "embedding": encode(v)}
                         for i, v in enumerate(out["vectors"])]}

    @app.post("/v1/query", response_model=None)
    async def query(req: QueryRequest) -> dict[str, Any] | StreamingResponse:
        within_limits(req)
        check_question(req.question, "question", req.top_k)
        timings: dict[str, float] = {}
        gen = {"max_tokens": req.max_tokens, "temperature": req.temperature}
        t0 = time.perf_counter()

        async def run() -> dict[str, Any]:
            found, ranked = await context(req.question, req.top_k, req.mode, req.sources, timings)
            out = await answer(req.question, ranked["passages"], timings, **gen)
            timings["total"] = (time.perf_counter() - t0) * 1e3
            return {"answer": out["text"].strip(), "finish_reason": out["finish_reason"],
                    "citations": citations(ranked["passages"][: out["passages"]], out["text"]),
                    "usage": {"prompt_tokens": out["prompt_tokens"], "completion_tokens": out["completion_tokens"]},
                    **meta(found, ranked, timings, out)}

        if not req.stream:
            return await with_timeout(run())

        async def events() -> AsyncIterator[bytes]:
            found, ranked = await context(req.question, req.top_k, req.mode, req.sources, timings)
            used, text, end = [], "", {}
            t1 = time.perf_counter()
            async for piece in backends.stream(req.question, ranked["passages"], **gen):
                if "passages" in piece:
                    used = ranked["passages"][: piece["passages"]]
                elif "text" in piece:
                    text += piece["text"]
                    yield _sse("token", {"text": piece["text"]})
                else:
                    end = piece
            timings["generate"] = (time.perf_counter() - t1) * 1e3
            timings["total"] = (time.perf_counter() - t0) * 1e3
            yield _sse("citations", {"citations": citations(used, text), **meta(found, ranked, timings, end)})
            yield _sse("done", {"finish_reason": end.get("finish_reason"),
                                "usage": {k: end.get(k) for k in ("prompt_tokens", "completion_tokens")}})

        return streaming(events())

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(req: ChatCompletionRequest) -> dict[str, Any] | StreamingResponse:
        within_limits(req)
        if req.model and req.model not in (models["generator"], "ragline"):
            raise ApiError(404, "model_not_found", f"model {req.model!r} is not served; use "
                           f"{models['generator']!r} (see /v1/models)")
        question = req.messages[-1].text().strip()
        check_question(question, "messages[-1].content", req.top_k)
        history = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                   for m in req.messages[:-1] if m.role in ("user", "assistant", "system", "developer")]
        stop = [req.stop] if isinstance(req.stop, str) else req.stop
        gen = {"history": history, "max_tokens": req.max_completion_tokens or req.max_tokens,
               "temperature": req.temperature, "top_p": req.top_p, "stop": stop}
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        timings: dict[str, float] = {}

        def usage(end: dict[str, Any]) -> dict[str, int]:
            p, c = end.get("prompt_tokens") or 0, end.get("completion_tokens") or 0
            return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

        if not req.stream:
            async def run() -> dict[str, Any]:
                found, ranked = await context(question, req.top_k, req.mode, req.sources, timings)
                out = await answer(question, ranked["passages"], timings, **gen)
                return {"id": cid, "object": "chat.completion", "created": created, "model": models["generator"],
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": out["text"].strip()},
                                     "finish_reason": out["finish_reason"]}],
                        "usage": usage(out), "citations": citations(ranked["passages"][: out["passages"]],
                                                                     out["text"]),
                        "ragline": meta(found, ranked, timings, out)}

            return await with_timeout(run())

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            return _sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": models["generator"],
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

        async def events() -> AsyncIterator[bytes]:
            found, ranked = await context(question, req.top_k, req.mode, req.sources, timings)
            yield chunk({"role": "assistant", "content": ""})
            used, text, end = [], "", {}
            async for piece in backends.stream(question, ranked["passages"], **gen):
                if "passages" in piece:
                    used = ranked["passages"][: piece["passages"]]
                elif "text" in piece:
                    text += piece["text"]
                    yield chunk({"content": piece["text"]})
                else:
                    end = piece
            yield chunk({}, end.get("finish_reason", "stop"), citations=citations(used, text),
                        ragline=meta(found, ranked, timings, end))
            if req.stream_options and req.stream_options.include_usage:
                yield _sse(None, {"id": cid, "object": "chat.completion.chunk", "created": created,
                                  "model": models["generator"], "choices": [], "usage": usage(end)})
            yield _sse(None, "[DONE]")

        return streaming(events())

    return Guard(app, keys, api.max_body_bytes)


@serve.deployment(name="Ingress")
@serve.ingress()
class Ingress:
    """The Serve ingress: holds the three DeploymentHandles and serves `build_api` over them."""

    def __init__(self, retriever: DeploymentHandle, reranker: DeploymentHandle, generator: DeploymentHandle,
                 settings: Settings, api_keys_file: str | None = None):
        cfg = settings.app
        keys, where = apikeys.ring(settings.open_storage(), api_keys_file)
        log.info("API keys from %s", where)
        tokenizer = embedder.load_tokenizer(cfg.ingest.embed.model)
        self.api = build_api(HandleBackends(retriever, reranker, generator), cfg.serve, keys,
                             lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]),
                             {"generator": cfg.serve.generator.model, "embedder": cfg.ingest.embed.model})

    def __serve_build_asgi_app__(self) -> Guard:
        return self.api

