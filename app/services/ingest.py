"""IngestService: the named, detached actor that owns ingestion for one storage root.

It queues runs and executes them one at a time on a worker thread (each run is a Ray Data pipeline that spreads
over the cluster), records every run in the catalog (`runs/ingest/<id>.json`) as it moves
queued → running → succeeded | failed, and after a restart (`max_restarts`) re-reads those records and re-queues
the runs that were queued or running when it died: a re-run completes what the dead one started.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import traceback
from typing import Any

import ray

from app.catalog import Catalog, now_iso
from app.config import AppConfig
from app.ingest.inputs import expand
from app.ingest.pipeline import new_run_id, run_ingest
from app.raycluster import NAMESPACE
from app.storage import Storage

ACTIVE = ("queued", "running")


def service_name(storage_uri: str) -> str:
    """One service per storage root, so two roots on one cluster never share a queue or a catalog."""
    return f"ingest-{hashlib.sha256(storage_uri.encode()).hexdigest()[:12]}"


class IngestService:
    def __init__(self, storage_uri: str):
        self.storage = Storage(storage_uri)
        self.catalog = Catalog(self.storage)
        self.queue: queue.Queue[str] = queue.Queue()
        self.live: dict[str, Any] = {}  # run id -> its RunLedger, while running
        for record in self.catalog.runs():
            if record["state"] in ACTIVE:
                record.setdefault("restarts", 0)
                record["restarts"] += 1
                record["state"] = "queued"
                record["note"] = "re-queued after the IngestService restarted"
                self.catalog.save_run(record)
                self.queue.put(record["run_id"])
        threading.Thread(target=self._work, name="ingest-runner", daemon=True).start()

    def ping(self) -> str:
        return self.storage.uri

    def submit(self, paths: list[str], config: dict[str, Any], build_index: bool = True) -> str:
        """Validate and queue a run; returns its id. Bad config or missing inputs raise ValueError here, before
        anything is queued."""
        read = AppConfig.model_validate(config).ingest.read
        expand(paths, read.max_file_bytes, read.follow_symlinks)
        run_id = new_run_id()
        self.catalog.save_run({"run_id": run_id, "state": "queued", "paths": paths, "config": config,
                               "build_index": build_index, "submitted_at": now_iso()})
        self.queue.put(run_id)
        return run_id

    def status(self, run_id: str) -> dict[str, Any]:
        record = self.catalog.load_run(run_id)
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
                for r in self.catalog.runs()]

    def versions(self) -> dict[str, list[dict[str, Any]]]:
        return {kind: [m.model_dump(include={"version", "created_at", "parent", "counts", "run_id"})
                       for m in self.catalog.versions(kind)] for kind in ("datasets", "indexes")}

    def _position(self, run_id: str) -> int | None:
        with self.queue.mutex:
            pending = list(self.queue.queue)
        return pending.index(run_id) + 1 if run_id in pending else None

    def _work(self) -> None:
        while True:
            run_id = self.queue.get()
            record = self.catalog.load_run(run_id)
            record.update(state="running", started_at=now_iso())
            self.catalog.save_run(record)
            try:
                cfg = AppConfig.model_validate(record["config"])

                def started(ledger: Any, rid: str = run_id) -> None:
                    self.live[rid] = ledger

                report = run_ingest(record["paths"], cfg, self.storage, run_id=run_id,
                                    build_index=record.get("build_index", True), on_start=started)
                record.update(state="succeeded", report=report)
            except Exception as e:  # a failed run is recorded with its reason; the service keeps serving
                record.update(state="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            finally:
                self.live.pop(run_id, None)
                record["finished_at"] = now_iso()
                self.catalog.save_run(record)


def get_or_start(storage: Storage) -> Any:
    """The service for `storage` on the connected cluster, started (detached) if absent."""
    # max_task_retries: callers (the CLI polling status) ride through a restart instead of seeing
    # ActorUnavailableError; max_concurrency: status/runs answer while the worker thread runs a pipeline.
    return ray.remote(IngestService).options(
        name=service_name(storage.uri), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=16,
    ).remote(storage.uri)
