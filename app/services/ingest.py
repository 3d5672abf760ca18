"""IngestService: the named, detached actor that owns ingestion for one storage root.

It queues runs and executes them one at a time on a worker thread (each run is a Ray Data pipeline that spreads
over the cluster), records every run in the catalog (`runs/ingest/<id>.json`) as it moves
queued → running → succeeded | failed, and after a restart (`max_restarts`) re-reads those records and re-queues
the runs that were queued or running when it died: a re-run completes what the dead one started.
"""

from __future__ import annotations

import functools
import traceback
from typing import Any, TypedDict

import ray

from app.catalog import Catalog, now_iso
from app.config import AppConfig
from app.indexing import delete, run_ingest
from app.ingest.inputs import expand
from app.ingest.pipeline import new_run_id
from app.services.runs import (
    IngestRunRecord,
    IngestRunStatus,
    RunQueueService,
    RunStore,
    actor_name,
    ingest_run_store,
    start,
)
from app.storage import Storage

ACTIVE = ("queued", "running")


def service_name(storage_uri: str) -> str:
    """One service per storage root, so two roots on one cluster never share a queue or a catalog."""
    return actor_name("ingest", storage_uri)


class IngestRunSummary(TypedDict):
    """One run in `IngestService.runs`: None where the record has no such field (yet)."""

    run_id: str | None
    state: str | None
    paths: list[str] | None
    submitted_at: str | None
    finished_at: str | None
    error: str | None
    dataset_version: int | None
    index_version: int | None


class VersionSummary(TypedDict):
    """A dataset or index version in `IngestService.versions`."""

    version: int
    created_at: str
    parent: int | None
    run_id: str | None
    counts: dict[str, int]


def _summary(r: IngestRunRecord) -> IngestRunSummary:
    report = r.get("report") or r.get("deleted")
    return {"run_id": r.get("run_id"), "state": r.get("state"), "paths": r.get("paths"),
            "submitted_at": r.get("submitted_at"), "finished_at": r.get("finished_at"), "error": r.get("error"),
            "dataset_version": report.get("dataset_version") if report else None,
            "index_version": report.get("index_version") if report else None}


# live: each running run's RunLedger actor handle (Any: Ray types an ActorHandle's methods as Never)
class IngestService(RunQueueService[IngestRunRecord, Any]):
    """`live` holds each running run's RunLedger (its per-stage progress)."""

    label = "IngestService"
    thread = "ingest-runner"
    active = ACTIVE

    def __init__(self, storage_uri: str):
        super().__init__(storage_uri)
        self.catalog = Catalog(self.storage)

    def _store(self) -> RunStore[IngestRunRecord]:
        return ingest_run_store(self.storage)

    def submit(self, paths: list[str], config: dict[str, object], build_index: bool = True,
               sync: bool = False) -> str:
        """Validate and queue a run; returns its id. Bad config or missing inputs raise a UserError here, before
        anything is queued. `config`: an AppConfig as a dict (`model_dump`); `sync`: also delete the documents of
        files gone from under `paths`."""
        read = AppConfig.model_validate(config).ingest.read
        expand(paths, read.max_file_bytes, read.follow_symlinks)
        return self._enqueue({"run_id": new_run_id(), "state": "queued", "paths": paths, "config": config,
                              "build_index": build_index, "sync": sync, "submitted_at": now_iso()})

    def submit_delete(self, doc_ids: list[str], prefixes: list[str], config: dict[str, object]) -> str:
        """Queue the removal of documents by id or source prefix (`app.indexing.delete`) behind the runs queued
        before it, so it never races an ingest run to publish; returns its run id."""
        AppConfig.model_validate(config)
        return self._enqueue({"run_id": new_run_id(), "state": "queued", "paths": [], "config": config,
                              "delete": {"doc_ids": doc_ids, "prefixes": prefixes}, "submitted_at": now_iso()})

    def status(self, run_id: str) -> IngestRunStatus:
        record: IngestRunStatus = {**self.store.load(run_id)}
        record.pop("config", None)
        ledger = self.live.get(run_id)
        if ledger is not None and record["state"] == "running":
            record["progress"] = ray.get(ledger.snapshot.remote())
        record["queue_position"] = self._position(run_id)
        return record

    def runs(self) -> list[IngestRunSummary]:  # type: ignore[override]  # summaries, not whole records
        return [_summary(r) for r in self.store.all()]

    def versions(self) -> dict[str, list[VersionSummary]]:
        return {kind: [{"version": m.version, "created_at": m.created_at, "parent": m.parent, "run_id": m.run_id,
                        "counts": dict(m.counts)} for m in self.catalog.versions(kind)]
                for kind in ("datasets", "indexes")}

    def _execute(self, run_id: str) -> None:
        record = self.store.load(run_id)
        record.update({"state": "running", "started_at": now_iso()})
        self.store.save(record)
        try:
            cfg = AppConfig.model_validate(record["config"])
            if "delete" in record:
                named = record["delete"]
                record.update({"state": "succeeded", "deleted": delete(
                    named["doc_ids"], named["prefixes"], cfg, self.storage, run_id=run_id).to_dict()})
            else:
                report = run_ingest(record["paths"], cfg, self.storage, run_id=run_id,
                                    build_index=record.get("build_index", True), sync=record.get("sync", False),
                                    on_start=functools.partial(self.live.__setitem__, run_id))
                record.update({"state": "succeeded", "report": report})
        except Exception as e:  # a failed run is recorded with its reason; the service keeps serving
            record.update({"state": "failed", "error": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()})
        finally:
            self.live.pop(run_id, None)
            record["finished_at"] = now_iso()
            self.store.save(record)


def get_or_start(storage: Storage) -> Any:
    """The service for `storage` on the connected cluster, started (detached) if absent."""
    return start(IngestService, service_name(storage.uri), storage, max_concurrency=16)
