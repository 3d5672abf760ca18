"""Run records in storage: every run (ingest, training) is one JSON record, `runs/<kind>/<id>.json`, written
atomically as the run moves from state to state; storage is the source of truth. Each kind of run names its record
(a `RunRecord` with its own fields) and its store: `app.services.runs.ingest_run_store`, `app.train.run.training_runs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, Required, TypedDict, TypeVar, cast

from app.errors import NotFound
from app.storage import Storage


class RunRecord(TypedDict, total=False):
    """What the run queue itself reads and writes in every run record; each kind of run adds its own fields."""

    state: Required[str]  # a service's `active` states, then how the run ended
    note: str  # why the run was re-queued
    restarts: int  # how many times the service restarted while the run was queued or in flight


R = TypeVar("R", bound=RunRecord)  # the record of one kind of run


class RunStore(Generic[R]):
    """The records of one kind of run: `runs/<kind>/<id>.json`, the id in the record's `key` field, listed in the
    order of the record's `order` field."""

    def __init__(self, storage: Storage, kind: str, key: str, order: str, noun: str):
        self.storage, self.kind, self.key, self.order, self.noun = storage, kind, key, order, noun

    def _rel(self, run_id: str) -> str:
        return f"runs/{self.kind}/{run_id}.json"

    def exists(self, run_id: str) -> bool:
        return self.storage.exists(self._rel(run_id))

    def id_of(self, record: R) -> str:
        fields: Mapping[str, object] = record  # the key is named at run time
        return str(fields[self.key])

    def _order_of(self, record: R) -> str:
        fields: Mapping[str, object] = record
        return str(fields.get(self.order, ""))  # an ISO 8601 time; "" before the run has one

    def save(self, record: R) -> None:
        self.storage.write_json(self._rel(self.id_of(record)), record)

    def _read(self, rel: str) -> R:
        # storage holds only what `save` wrote: a record of this kind
        return cast(R, dict(self.storage.read_json(rel)))

    def load(self, run_id: str) -> R:
        if not self.exists(run_id):
            raise NotFound(f"{self.noun} {run_id!r} does not exist")
        return self._read(self._rel(run_id))

    def all(self) -> list[R]:
        names = [n for n in self.storage.listdir(f"runs/{self.kind}") if n.endswith(".json") and ".tmp-" not in n]
        records = [self._read(f"runs/{self.kind}/{n}") for n in names]
        return sorted(records, key=lambda r: (self._order_of(r), self.id_of(r)))
