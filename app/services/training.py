"""TrainingService: the named, detached actor that owns fine-tuning runs for one storage root.

It queues runs and drives them one at a time from a worker thread (each run is a TorchTrainer whose workers
spread over the cluster), keeps every run's record in storage (`runs/train/<name>.json`) as it moves
queued → preparing → running → succeeded | failed, and registers the exported models in the catalog. After a
restart it re-reads the records and re-queues runs that were queued or in flight: started again under the same
name, a run resumes from its latest checkpoint.
"""

from __future__ import annotations

import functools
import hashlib
import queue
import threading
import traceback
from typing import Any

import ray

from app.catalog import now_iso
from app.raycluster import NAMESPACE
from app.storage import Storage
from app.train.config import TrainJobConfig
from app.train.run import load_records, run_name, run_training, save_record, validate

ACTIVE = ("queued", "preparing", "running")


def service_name(storage_uri: str) -> str:
    return f"training-{hashlib.sha256(storage_uri.encode()).hexdigest()[:12]}"


class TrainingService:
    def __init__(self, storage_uri: str):
        self.storage = Storage(storage_uri)
        self.queue: queue.Queue[str] = queue.Queue()
        self.live: dict[str, dict[str, Any]] = {}
        for record in load_records(self.storage):
            if record["state"] in ACTIVE:
                record.update(state="queued", note="re-queued after the TrainingService restarted",
                              restarts=record.get("restarts", 0) + 1)
                save_record(self.storage, record)
                self.queue.put(record["name"])
        threading.Thread(target=self._work, name="training-runner", daemon=True).start()

    def ping(self) -> str:
        return self.storage.uri

    def submit(self, config: dict[str, Any]) -> str:
        """Validate and queue a run; returns its name. A bad config or a missing model raises ValueError here."""
        cfg = TrainJobConfig.model_validate(config)
        validate(cfg)
        name = run_name(cfg)
        if any(r["name"] == name and r["state"] in ACTIVE for r in load_records(self.storage)):
            raise ValueError(f"run {name!r} is already queued or running")
        cfg.name = name
        save_record(self.storage, {"name": name, "task": cfg.task, "state": "queued", "submitted_at": now_iso(),
                                   "config": cfg.model_dump(), "storage": self.storage.uri})
        self.queue.put(name)
        return name

    def status(self, name: str) -> dict[str, Any]:
        rel = f"runs/train/{name}.json"
        if not self.storage.exists(rel):
            raise ValueError(f"training run {name!r} does not exist")
        return {**dict(self.storage.read_json(rel)), **self.live.get(name, {})}

    def runs(self) -> list[dict[str, Any]]:
        return load_records(self.storage)

    def _work(self) -> None:
        while True:
            name = self.queue.get()
            cfg = TrainJobConfig.model_validate(self.status(name)["config"])
            try:
                run_training(cfg, self.storage, on_update=functools.partial(self.live.__setitem__, name))
            except Exception:  # run_training recorded the failure in the run's record; keep serving the queue
                traceback.print_exc()
            finally:
                self.live.pop(name, None)


def get_or_start(storage: Storage) -> Any:
    """The service for `storage` on the connected cluster, started (detached) if absent."""
    return ray.remote(TrainingService).options(
        name=service_name(storage.uri), namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        max_restarts=-1, max_task_retries=-1, max_concurrency=8, num_cpus=0,
    ).remote(storage.uri)
