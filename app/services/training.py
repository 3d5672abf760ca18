"""TrainingService: the named, detached actor that owns fine-tuning runs for one storage root.

It queues runs and drives them one at a time from a worker thread (each run is a TorchTrainer whose workers
spread over the cluster), keeps every run's record in storage (`runs/train/<name>.json`) as it moves
queued → preparing → running → succeeded | failed, and registers the exported models in the catalog. After a
restart it re-reads the records and re-queues runs that were queued or in flight: started again under the same
name, a run resumes from its latest checkpoint.
"""

from __future__ import annotations

import functools
from typing import Any

from app.catalog import now_iso
from app.errors import Conflict
from app.runs import RunStore
from app.services.runs import RunQueueService, actor_name, start
from app.storage import Storage
from app.train.config import TrainJobConfig, parse_job_config
from app.train.run import TrainRunRecord, run_name, run_training, training_runs, validate

ACTIVE = ("queued", "preparing", "running")


def service_name(storage_uri: str) -> str:
    return actor_name("training", storage_uri)


class TrainingService(RunQueueService[TrainRunRecord, TrainRunRecord]):
    """`live` holds each running run's latest record (steps, metrics), ahead of the one in storage."""

    label = "TrainingService"
    thread = "training-runner"
    active = ACTIVE

    def __init__(self, storage_uri: str):
        super().__init__(storage_uri)
        self.model_paths: dict[str, str] = {}  # what submit validated, by run name (a re-queued run validates again)

    def _store(self) -> RunStore[TrainRunRecord]:
        return training_runs(self.storage)

    def submit(self, config: dict[str, object]) -> str:
        """Validate and queue a run; returns its name. A bad config or a missing model raises a UserError here."""
        cfg = parse_job_config(config, "the submitted job")
        model_path = validate(cfg)
        name = run_name(cfg)
        if self._is_active(name):
            raise Conflict(f"run {name!r} is already queued or running")
        self.model_paths[name] = model_path
        cfg.name = name
        return self._enqueue({"name": name, "task": cfg.task, "state": "queued", "submitted_at": now_iso(),
                              "config": cfg.model_dump(), "storage": self.storage.uri})

    def status(self, name: str) -> TrainRunRecord:
        live = self.live.get(name)
        return {**self.store.load(name), **live} if live is not None else self.store.load(name)

    def _execute(self, name: str) -> None:
        # run_training records how the run ended in its record (a failure is raised, and printed, as well)
        cfg = TrainJobConfig.model_validate(self.store.load(name)["config"])
        run_training(cfg, self.storage, on_update=functools.partial(self.live.__setitem__, name),
                     model_path=self.model_paths.pop(name, None))


def get_or_start(storage: Storage) -> Any:
    """The service for `storage` on the connected cluster, started (detached) if absent."""
    return start(TrainingService, service_name(storage.uri), storage, max_concurrency=8)
