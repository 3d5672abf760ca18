"""Every error the HTTP API returns, mapped in this one place: `{"error": {"type", "message"[, "field"]}}` with the
status of its `app.errors` class. Failures of the stages behind the routes (Ray's own exceptions) are translated
here too, so a route only raises, and a bug is a 500 that never echoes its internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import NotFound, Overloaded, RaglineError, TimedOut, Unavailable

log = logging.getLogger("ray.serve")
# What a stage can raise besides RaglineError: Serve's queue limit, a replica that died, a deadline that passed,
# a replica's own exception wrapped by Ray.
STAGE_FAILURES = (BackPressureError, RayActorError, ActorUnavailableError, RayTaskError, TimeoutError)


class ModelNotFound(NotFound):
    kind = "model_not_found"


class ErrorInfo(BaseModel):
    type: str  # the `app.errors` kind (`invalid_request`, `not_found`, …), or the guard's (`unauthorized`, …)
    message: str
    field: str | None = None  # 422 for a body that does not validate: the first field named (sent only then)


class ErrorResponse(BaseModel):
    """Every error body, whoever sends it: a route, the handlers here, or the guard in front (deployments/guard.py)."""

    error: ErrorInfo


ERRORS = {  # status → when it is sent, as /openapi.json says it
    401: "Missing or invalid API key.",
    403: "The API key is not an admin key (admin routes only).",
    404: "No such thing to answer from (a chunk, a model, or a collection this key may not read: the same answer).",
    413: "The request body is over the limit.",
    422: "The request is invalid: a field, a size, a question the model's window cannot hold.",
    429: "This API key has too many requests waiting.",
    500: "A bug; the server's log has its trace.",
    503: "Not ready, at capacity, or a replica restarting; retry after Retry-After.",
    504: "The request took longer than the deadline and was cancelled.",
}
STAGE_ERRORS = (401, 413, 422, 429, 500, 503, 504)  # what any route that runs a stage can answer


def streamed(what: str) -> dict[int | str, dict[str, Any]]:
    """A route's 200 when it may stream: its JSON body (the route's `response_model`) or, with `stream: true`,
    server-sent events."""
    return {200: {"description": f"The answer; with `stream: true`, {what} as server-sent events.",
                  "content": {"text/event-stream": {}}}}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error responses a route declares (as vLLM's routers do), each an `ErrorResponse`."""
    return {s: {"model": ErrorResponse, "description": ERRORS[s]} for s in statuses}


def translate(e: BaseException, timeout_s: float) -> BaseException:
    """The caller-facing error for a stage's failure; anything that is not an `app.errors` type stays as it is
    (a bug: 500)."""
    if isinstance(e, RayTaskError) and e.cause is not None:
        e = e.cause  # the replica's own exception: a UserError stays the caller's, a bug stays a bug
    if isinstance(e, BackPressureError):
        return Overloaded("the service is at capacity; retry later")
    if isinstance(e, RayActorError | ActorUnavailableError):  # a replica died or restarts: Serve replaces it
        return Unavailable("a replica of the service stopped while answering; retry")
    if isinstance(e, TimeoutError):
        return TimedOut(f"the request took longer than {timeout_s}s and was cancelled")
    return e


def body(e: RaglineError) -> dict[str, dict[str, str]]:
    return {"error": {"type": e.kind, "message": str(e)}}


def install(app: FastAPI, *, retry_after_s: int, timeout_s: float) -> None:
    def respond(e: BaseException, path: str) -> JSONResponse:
        if not isinstance(e, RaglineError):
            log.error("request to %s failed", path, exc_info=e)  # the trace stays in the replica's log
            return JSONResponse({"error": {"type": "internal_error", "message": "internal error; see the server "
                                                                                "log"}}, 500)
        retry = {"Retry-After": str(retry_after_s)} if isinstance(e, Unavailable) and e.status == 503 else None
        return JSONResponse(body(e), e.status, headers=retry)

    async def on_error(request: Request, e: Exception) -> JSONResponse:
        return respond(translate(e, timeout_s), request.url.path)

    for kind in (RaglineError, *STAGE_FAILURES, Exception):
        app.add_exception_handler(kind, on_error)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        field, message = validation_message(e)
        return JSONResponse({"error": {"type": "invalid_request", "message": message, "field": field}}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        if e.status_code == 400:  # FastAPI could not decode the body at all (not UTF-8): malformed JSON, as above
            return JSONResponse({"error": {"type": "invalid_request", "message": f"malformed JSON: {e.detail}",
                                           "field": "body"}}, 422)
        return JSONResponse({"error": {"type": "not_found" if e.status_code == 404 else "http_error",
                                       "message": str(e.detail)}}, e.status_code)


def validation_message(err: RequestValidationError) -> tuple[str, str]:
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
