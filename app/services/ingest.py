"""IngestService: the named, detached actor that owns ingestion for one storage root.

It queues runs and executes them one at a time on a worker thread (each run is a Ray Data pipeline that spreads
over the cluster), records every run in the catalog (`runs/ingest/<id>.json`) as it moves
queued → running → succeeded | failed, and after a restart (`max_restarts`) re-reads those records and re-queues
the runs that were queued or running when it died: a re-run completes what the dead one started.
"""

from __future__ import annotations

import functools
import traceback
from typing import Any

import ray

from app.catalog import Catalog, now_iso
from app.config import AppConfig
from app.indexing import run_ingest
from app.ingest.inputs import expand
from app.ingest.pipeline import new_run_id
from app.services.runs import RunQueueService, RunStore, actor_name, ingest_runs, start
from app.storage import Storage

ACTIVE = ("queued", "running")


def service_name(storage_uri: str) -> str:
    """One service per storage root, so two roots on one cluster never share a queue or a catalog."""
    return actor_name("ingest", storage_uri)


class IngestService(RunQueueService):
    """`live` holds each running run's RunLedger (its per-stage progress)."""

    label = "IngestService"
    thread = "ingest-runner"
    active = ACTIVE

    def __init__(self, storage_uri: str):
        super().__init__(storage_uri)
        self.catalog = Catalog(self.storage)

    def _store(self) -> RunStore:
        return ingest_runs(self.storage)

    def submit(self, paths: list[str], config: dict[str, Any], build_index: bool = True) -> str:
        """Validate and queue a run; returns its id. Bad config or missing inputs raise a UserError here, before
        anything is queued."""
        read = AppConfig.model_validate(config).ingest.read
        expand(paths, read.max_file_bytes, read.follow_symlinks)
        return self._enqueue({"run_id": new_run_id(), "state": "queued", "paths": paths, "config": config,
                              "build_index": build_index, "submitted_at": now_iso()})

    def status(self, run_id: str) -> dict[str, Any]:
        record = self.store.load(run_id)
        record.pop("config", None)
        ledger = self.live.get(run_id)
        if ledger is not None and record["state"] == "running":
            record["progress"] = ray.get(ledger.snapshot.remote())
        record["queue_position"] = self._position(run_id)
        return record

    def runs(self) -> list[dict[str, Any]]:
        return [{k: r.get(k) for k in ("run_id", "state", "paths", "submitted_at", "finished_at", "error")}
                | {"dataset_version": (r.get("report") or {}).get("dataset_version"),
                   "index_version": (r.get("report") or {}).get("index_version")}
                for r in self.store.all()]

    def versions(self) -> dict[str, list[dict[str, Any]]]:
        return {kind: [m.model_dump(include={"version", "created_at", "parent", "counts", "run_id"})
                       for m in self.catalog.versions(kind)] for kind in ("datasets", "indexes")}

    def _execute(self, run_id: str) -> None:
        record = self.store.load(run_id)
        record.update(state="running", started_at=now_iso())
        self.store.save(record)
        try:
            cfg = AppConfig.model_validate(record["config"])
            report = run_ingest(record["paths"], cfg, self.storage, run_id=run_id,
                                build_index=record.get("build_index", True),
                                on_start=functools.partial(self.live.__setitem__, run_id))
            record.update(state="succeeded", report=report)
        except Exception as e:  # a failed run is recorded with its reason; the service keeps serving
            record.update(state="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        finally:
            self.live.pop(run_id, None)
            record["finished_at"] = now_iso()
            self.store.save(record)


def get_or_start(storage: Storage) -> Any:
    """The service for `storage` on the connected cluster, started (detached) if absent."""
    return start(IngestService, service_name(storage.uri), storage, max_concurrency=16)
