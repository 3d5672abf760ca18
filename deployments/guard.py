"""A pure ASGI middleware in front of the API: bearer-key check, request body size limit, fair share between
keys (`fairshare.py`, a refused request's slot held `refusal_hold_s` longer), request counters, the audit log.

The caller (`apikeys.Caller`: key id and scope) goes into the ASGI scope's state for the routes (`caller_of`); a
route that reads a collection says which, and the chunks it returned, in the same state (`record_read`), and the
Guard writes the audit line once the response has ended.

Pure ASGI (not BaseHTTPMiddleware) so streaming responses and client-disconnect detection pass through untouched.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ray.util.metrics import Counter
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send  # ASGI's, as the app behind the guard takes them

from app import apikeys
from app.apikeys import Caller
from app.audit import AuditLog
from deployments.fairshare import FairShare, LineFull

OPEN_PATHS = frozenset({"/healthz"})  # liveness probes carry no key
CLIENT_GONE = 499  # the audit status of a request whose client left before a response started (nginx's code)


def caller_of(request: HTTPConnection) -> Caller:
    """The caller of a request the Guard let through: its key id and scope (`caller.scope.may_read(name)`)."""
    caller = request.scope.get("state", {}).get("caller")
    assert isinstance(caller, Caller), f"{request.url.path} is served without a key check: no caller"
    return caller


def record_read(request: HTTPConnection, collection: str | None, chunk_ids: Sequence[str]) -> None:
    """What the audit line of this request says it read: the collection and the chunks its response carries."""
    state = request.scope.setdefault("state", {})
    state["collection"], state["chunk_ids"] = collection, list(chunk_ids)


def error_body(kind: str, message: str) -> bytes:
    return json.dumps({"error": {"type": kind, "message": message}}).encode()


async def send_error(send: Send, status: int, kind: str, message: str,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = error_body(kind, message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


class _Response:
    """The ASGI `send` of one request, remembering the status it sent (0 before the response starts)."""

    def __init__(self, send: Send):
        self.send, self.status = send, 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self.send(message)


class Guard:
    def __init__(self, app: ASGIApp, keys: apikeys.KeyRing, max_body_bytes: int, share: FairShare,
                 retry_after_s: int, refusal_hold_s: float = 0.0, open_paths: frozenset[str] = frozenset(),
                 audit: AuditLog | None = None):
        """`open_paths`: more paths served without a key (static files that hold no data); `retry_after_s`: sent
        with 429 when a key's line is full; `refusal_hold_s`: how long a refused request's slot stays taken after
        its response; `audit`: where each keyed request is recorded (None: nowhere)."""
        self.app, self.keys, self.max_body, self.share = app, keys, max_body_bytes, share
        self.audit = audit
        self.refusal_hold_s = refusal_hold_s
        self.retry_after = str(retry_after_s).encode()
        self.open_paths = OPEN_PATHS | open_paths
        self.requests = Counter("ragline_http_requests_total", description="HTTP requests by route and status.",
                                tag_keys=("route", "status"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route, response = scope["path"], _Response(send)
        try:
            await self._guarded(scope, receive, response)
        finally:
            self.requests.inc(tags={"route": route, "status": str(response.status or 500)})
            if self.audit is not None and route not in self.open_paths:
                state = scope.get("state", {})
                caller: Caller | None = state.get("caller")
                self.audit.write(caller.key_id if caller else None, route, scope["method"],
                                 response.status or CLIENT_GONE, state.get("collection"), state.get("chunk_ids"))

    async def _guarded(self, scope: Scope, receive: Receive, send: _Response) -> None:
        caller = None
        if scope["path"] not in self.open_paths:
            headers = dict(scope["headers"])
            scheme, _, key = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            caller = self.keys.identify(key.strip()) if scheme.lower() == "bearer" else None
            if caller is None:
                return await send_error(send, 401, "unauthorized", "missing or invalid API key "
                                        "(send Authorization: Bearer <key>)", [(b"www-authenticate", b"Bearer")])
            scope.setdefault("state", {})["caller"] = caller  # request.state.caller, for the routes
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body:
                return await send_error(send, 413, "request_too_large",
                                        f"request body is {int(declared)} bytes; the limit is {self.max_body}")
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self._shared(caller, scope, receive, send)
        # Read the body here (it is small by construction) so a chunked body over the limit is refused too.
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                return await send_error(send, 413, "request_too_large",
                                        f"request body is over the limit of {self.max_body} bytes")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later reads wait for the client's disconnect, as the server's would

        await self._shared(caller, scope, replay, send)

    async def _shared(self, caller: Caller | None, scope: Scope, receive: Receive, send: _Response) -> None:
        """Run the request in `caller`'s fair share (open paths, with no caller, run at once). The slot is held
        until the response has ended, streams included."""
        if caller is None:
            return await self.app(scope, receive, send)
        try:
            await self.share.acquire(caller.digest)
        except LineFull:
            return await send_error(send, 429, "rate_limited", f"this API key already has {self.share.max_waiting} "
                                    "requests waiting beside those running (api.key_max_waiting); retry later",
                                    [(b"retry-after", self.retry_after)])
        try:
            await self.app(scope, receive, send)
        finally:
            # A refused request keeps its slot a while: a key sending what the API refuses (malformed bodies,
            # out-of-range fields) gets each answer at once but cannot spend its share as fast as it can send.
            if self.refusal_hold_s and 400 <= send.status < 500:
                self.share.release_later(caller.digest, self.refusal_hold_s)
            else:
                self.share.release(caller.digest)
