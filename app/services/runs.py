"""What the long-lived services share: a queue of runs worked one at a time over their records in storage
(`app.runs`), and the ingest run's record.

A `RunQueueService` is the body of a named, detached actor (one per storage root, `start`): it queues runs and
works them one at a time on a thread of its own, and after a restart (`max_restarts`) re-reads its records and
re-queues the runs that were queued or in flight when it died.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Required, TypedDict, TypeVar

from app.runs import R, RunRecord, RunStore
from app.storage import Storage

if TYPE_CHECKING:  # the pipeline imports Ray Data: not for a CLI that only lists runs
    from app.ingest.pipeline import DeleteReportDict, IngestReportDict
    from app.ingest.stages import Snapshot


class DeleteRequest(TypedDict):
    """What a removal run removes (`app.indexing.delete`)."""

    doc_ids: list[str]
    prefixes: list[str]  # source paths, directories, globs or URIs


class IngestRunRecord(RunRecord, total=False):
    """`runs/ingest/<run_id>.json` (`app.services.ingest`): the run as submitted, then how it went."""

    run_id: Required[str]
    paths: list[str]  # as submitted (local paths absolute)
    config: dict[str, object]  # the AppConfig (`model_dump`), validated again when the run starts
    build_index: bool
    sync: bool  # delete the documents of files gone from under `paths`
    delete: DeleteRequest  # a removal run (`paths` empty): what it removes
    deleted: DeleteReportDict  # a succeeded removal run's report
    submitted_at: str  # ISO 8601, UTC (`app.catalog.now_iso`), as are the other times
    started_at: str
    finished_at: str
    report: IngestReportDict  # succeeded runs
    error: str  # failed runs: "<exception type>: <message>"
    traceback: str  # failed runs


class IngestRunStatus(IngestRunRecord, total=False):
    """`IngestService.status`: the record without its config, with live progress and the place in the queue."""

    progress: Snapshot  # while running: the run ledger's counts so far
    queue_position: int | None  # 1 = next; None when not queued


L = TypeVar("L")  # what a running run reports while it runs (`RunQueueService.live`)


def ingest_run_store(storage: Storage) -> RunStore[IngestRunRecord]:
    """Ingest runs (`app.services.ingest`), oldest submission first."""
    return RunStore(storage, "ingest", key="run_id", order="submitted_at", noun="ingest run")


class RunQueueService(Generic[R, L]):
    """Queues runs and works them one at a time on a worker thread. A subclass names its store and its active
    states and says how one run is worked (`_execute`); R is its run record, L what a running run reports."""

    label: ClassVar[str]  # the service's name in notes ("IngestService")
    thread: ClassVar[str]  # the worker thread's name
    active: ClassVar[tuple[str, ...]]  # states of a run that is not finished: re-queued after a restart

    def __init__(self, storage_uri: str):
        self.storage = Storage(storage_uri)
        self.store = self._store()
        self.queue: queue.Queue[str] = queue.Queue()
        self.live: dict[str, L] = {}  # run id -> what a running run reports while it runs
        for record in self.store.all():
            if record["state"] in self.active:
                base: RunRecord = record  # the fields every kind of run has
                base["state"] = "queued"
                base["note"] = f"re-queued after the {self.label} restarted"
                base["restarts"] = base.get("restarts", 0) + 1
                self.store.save(record)
                self.queue.put(self.store.id_of(record))
        threading.Thread(target=self._work, name=self.thread, daemon=True).start()

    def _store(self) -> RunStore[R]:
        """Where this service's run records are (of `self.storage`)."""
        raise NotImplementedError

    def _execute(self, run_id: str) -> None:
        """Work one run to its end, recording how it ended."""
        raise NotImplementedError

    def ping(self) -> str:
        return self.storage.uri

    def runs(self) -> list[R]:
        return self.store.all()

    def _enqueue(self, record: R) -> str:
        self.store.save(record)
        self.queue.put(self.store.id_of(record))
        return self.store.id_of(record)

    def _is_active(self, run_id: str) -> bool:
        return self.store.exists(run_id) and self.store.load(run_id)["state"] in self.active

    def _position(self, run_id: str) -> int | None:
        with self.queue.mutex:
            pending = list(self.queue.queue)
        return pending.index(run_id) + 1 if run_id in pending else None

    def _work(self) -> None:
        while True:
            run_id = self.queue.get()
            try:
                self._execute(run_id)
            except Exception:  # the run's record says how it failed; keep serving the queue
                traceback.print_exc()
            finally:
                self.live.pop(run_id, None)


def actor_name(prefix: str, storage_uri: str) -> str:
    """One service per storage root, so two roots on one cluster never share a queue or a catalog."""
    return f"{prefix}-{hashlib.sha256(storage_uri.encode()).hexdigest()[:12]}"


def start(cls: type[RunQueueService[Any, Any]], name: str, storage: Storage, max_concurrency: int) -> Any:
    """The service `name` on the connected cluster, started (detached, in Ragline's namespace) if absent.

    max_task_retries: callers (the CLI polling status) ride through a restart instead of seeing
    ActorUnavailableError; max_concurrency: status and runs answer while the worker thread works a run."""
    import ray

    from app.raycluster import NAMESPACE

    return ray.remote(cls).options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=max_concurrency,
    ).remote(storage.uri)
