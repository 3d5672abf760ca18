"""Ragline's errors: what went wrong, said to the person who can fix it.

Each class says in one place how it reaches that person: `exit_code` for the CLI (`app.cli`), `status` and `kind`
for HTTP (`deployments.api.errors`). Anything else that escapes (a bare `ValueError` from a bug, say) is an
internal error: exit 1, HTTP 500, never blamed on the caller.

    RaglineError          1  500 internal_error   a run failed (its message says what to do)
    ├── UserError         2  422 invalid_request  the caller's input, config or flag is wrong
    │   ├── NotFound      2  404 not_found        a named version, model, file or route does not exist
    │   ├── Forbidden     2  403 forbidden        the API key may not do this (an admin route)
    │   └── Conflict      2  409 conflict         the request contradicts the state (already promoted, running…)
    └── Unavailable       3  503 unavailable      not now: retry later (nothing published, a replica restarting)
        ├── NotReady      3  503 not_ready        nothing to serve yet (no index version published)
        ├── Overloaded    3  503 overloaded       at capacity
        └── TimedOut      3  504 timeout          took longer than its deadline and was cancelled

`UserError` is a `ValueError`, so pydantic validators may raise it and the standard library's idiom still holds.
"""

from __future__ import annotations

from typing import ClassVar


class RaglineError(Exception):
    exit_code: ClassVar[int] = 1
    status: ClassVar[int] = 500
    kind: ClassVar[str] = "internal_error"


class UserError(RaglineError, ValueError):
    exit_code = 2
    status = 422
    kind = "invalid_request"


class NotFound(UserError):
    status = 404
    kind = "not_found"


class Forbidden(UserError):
    status = 403
    kind = "forbidden"


class Conflict(UserError):
    status = 409
    kind = "conflict"


class Unavailable(RaglineError):
    exit_code = 3
    status = 503
    kind = "unavailable"


class NotReady(Unavailable):
    kind = "not_ready"


class Overloaded(Unavailable):
    kind = "overloaded"


class TimedOut(Unavailable):
    status = 504
    kind = "timeout"
