"""Which collection a request reads, decided in one place: every route that names a collection calls `Access.open`,
so a collection the caller's key may not read and one that does not exist get the same answer (404, the same words),
from the same code, before any stage sees the request.

The collections that exist are listed from storage every `poll_interval_s` (and again, at most once a second, when
a readable name is not among them: a collection ingested a moment ago). A forbidden name never causes that look,
so it answers as fast as an absent one.
"""

from __future__ import annotations

import threading
import time

from fastapi import Request

from app import collections
from app.apikeys import Caller
from app.errors import Forbidden, NotFound
from app.storage import Storage
from deployments.api.errors import ModelNotFound
from deployments.guard import caller_of

RELIST_EVERY_S = 1.0
# An OpenAI client names the collection as the model (`model="ragline/hr"`): the one field it always sends.
COLLECTION_MODEL = "ragline/"


def collection_of_model(model: str | None, default_names: tuple[str, ...]) -> str:
    """The collection an OpenAI route's `model` names: `ragline/<name>`, or the default collection for no model or
    one of `default_names` (what the route serves under its own name); anything else is a ModelNotFound."""
    if model and model.startswith(COLLECTION_MODEL):
        return model.removeprefix(COLLECTION_MODEL)
    if model and model not in default_names:
        raise ModelNotFound(f"model {model!r} is not served; use {' or '.join(map(repr, default_names))} (the "
                            f"default collection) or {COLLECTION_MODEL}<collection> (see /v1/models)")
    return collections.DEFAULT


class Access:
    def __init__(self, root: Storage):
        self.root = root
        self.known = frozenset(collections.names(root))
        self.listed = time.monotonic()
        self.lock = threading.Lock()

    def refresh(self) -> None:
        """Lists the collections again (the Ingress's watcher calls it every poll)."""
        self.known, self.listed = frozenset(collections.names(self.root)), time.monotonic()

    def _exists(self, name: str) -> bool:
        if name in self.known:
            return True
        with self.lock:
            if time.monotonic() - self.listed >= RELIST_EVERY_S:
                self.refresh()
        return name in self.known

    def readable(self, caller: Caller) -> list[str]:
        """The collections `caller` may read that exist, the default first: what /v1/models and /v1/collections
        list."""
        return sorted((c for c in self.known if caller.scope.may_read(c)), key=lambda c: (c != collections.DEFAULT, c))

    def open(self, request: Request, name: str) -> str:
        """`name` if the request's key may read it and it exists, else NotFound; recorded for the audit log. A
        malformed name is the caller's mistake (422): no collection can have it, so saying so reveals nothing."""
        collections.check_name(name)
        request.state.collection = name
        if not (caller_of(request).scope.may_read(name) and self._exists(name)):
            raise NotFound(f"collection {name!r} does not exist")
        return name

    @staticmethod
    def admin(request: Request) -> Caller:
        caller = caller_of(request)
        if not caller.scope.admin:
            raise Forbidden(f"{request.url.path} needs an admin key (this key, {caller.key_id}, reads collections "
                            "only)")
        return caller
