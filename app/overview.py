"""What has run and what is published under one storage root, read in one go for people to look at: ingest runs
with their counts, dataset, index and model versions, training runs with their loss and throughput by step, and
the latest evaluations. The web console's Operate view shows it (`GET /v1/status`).

Storage is the source of truth, so this reads records and manifests only: no actor, no cluster.
"""

from __future__ import annotations

# typing_extensions': pydantic reads these views as /v1/status's response schema (typing's needs 3.12)
from typing_extensions import TypedDict

from app import tracking
from app.catalog import Catalog, Kind
from app.eval.answers import AnswerEvalReport, load_runs
from app.eval.retrieval import RetrievalEval, load_retrieval_runs
from app.runs import RunRecord, RunStore
from app.services.runs import IngestRunRecord, ingest_run_store
from app.storage import Storage

LATEST_EVALS = 5  # evaluations of each kind shown, newest first
SERIES = ("loss", "tokens_per_s")  # a training run's metrics shown by step


class IngestRunView(TypedDict):
    run_id: str
    state: str
    paths: list[str]
    submitted_at: str | None
    finished_at: str | None
    error: str | None
    read: int | None  # documents; None until the run succeeded
    kept: int | None
    dropped: dict[str, int]  # reason → documents
    quarantined: list[dict[str, str]]  # files set aside: {source, reason (exception type), detail}
    refused: list[dict[str, str]]  # files never read: {source, reason (too_large | outside_roots), detail}
    chunks: int | None
    dataset_version: int | None
    index_version: int | None


class VersionView(TypedDict):
    version: int
    created_at: str
    parent: int | None
    run_id: str | None
    documents: int | None
    chunks: int | None
    embedder: str


class ModelVersionView(TypedDict):
    version: int
    created_at: str
    run: str
    base_model: str


class ModelView(TypedDict):
    name: str
    promoted: int | None
    versions: list[ModelVersionView]


class TrainingView(TypedDict):
    name: str
    task: str
    state: str
    started_at: str | None
    finished_at: str | None
    model: str | None  # "NAME vN": the version it registered
    error: str | None
    steps: list[int]  # logged steps, ascending; loss[i] and tokens_per_s[i] are step steps[i]'s
    loss: list[float]
    tokens_per_s: list[float]


class Evals(TypedDict):
    answers: list[AnswerEvalReport]  # newest first
    retrieval: list[RetrievalEval]


class Overview(TypedDict):
    storage: str
    ingest_runs: list[IngestRunView]  # newest first
    datasets: list[VersionView]  # newest first
    indexes: list[VersionView]
    models: list[ModelView]
    training_runs: list[TrainingView]  # newest first
    evals: Evals


class _TrainRecord(RunRecord, total=False):
    """The fields of a training run's record (`app.train.run.TrainRunRecord`) shown here."""

    name: str
    task: str
    started_at: str
    finished_at: str
    model: dict[str, object]  # {name, version}
    error: str
    mlflow: dict[str, str]  # {uri, run_id}


def overview(storage: Storage) -> Overview:
    catalog = Catalog(storage)
    return {
        "storage": storage.uri,
        "ingest_runs": [_ingest_run(r) for r in reversed(ingest_run_store(storage).all())],
        "datasets": _versions(catalog, "datasets"),
        "indexes": _versions(catalog, "indexes"),
        "models": [{"name": name, "promoted": p.version if (p := catalog.promoted(name)) else None,
                    "versions": [{"version": m.version, "created_at": m.created_at, "run": m.run,
                                  "base_model": m.base_model} for m in reversed(catalog.model_versions(name))]}
                   for name in catalog.model_names()],
        "training_runs": [_training_run(r) for r in reversed(_training_runs(storage).all())],
        "evals": {"answers": load_runs(storage)[::-1][:LATEST_EVALS],
                  "retrieval": load_retrieval_runs(storage)[::-1][:LATEST_EVALS]},
    }


def _training_runs(storage: Storage) -> RunStore[_TrainRecord]:
    # where `app.train.run.training_runs` keeps them; read here without importing the training code
    return RunStore(storage, "train", key="name", order="started_at", noun="training run")


def _ingest_run(r: IngestRunRecord) -> IngestRunView:
    view: IngestRunView = {
        "run_id": r["run_id"], "state": r["state"], "paths": r.get("paths", []), "submitted_at": r.get("submitted_at"),
        "finished_at": r.get("finished_at"), "error": r.get("error"), "read": None, "kept": None, "dropped": {},
        "quarantined": [], "refused": [], "chunks": None, "dataset_version": None, "index_version": None}
    if report := r.get("report"):  # a succeeded run's counts
        documents = report["documents"]
        view.update({"read": documents["read"], "kept": documents["kept"],
                     "dropped": {reason: n for reason, n in documents["dropped"].items() if n},
                     "quarantined": report["quarantined"], "refused": report["inputs"]["refused_files"],
                     "chunks": report["chunks"], "dataset_version": report.get("dataset_version"),
                     "index_version": report.get("index_version")})
    return view


def _versions(catalog: Catalog, kind: Kind) -> list[VersionView]:
    return [{"version": m.version, "created_at": m.created_at, "parent": m.parent, "run_id": m.run_id,
             "documents": m.counts.get("documents"), "chunks": m.counts.get("chunks"), "embedder": m.embedder.name}
            for m in reversed(catalog.versions(kind))]


def _training_run(r: _TrainRecord) -> TrainingView:
    series: dict[str, dict[int, float]] = {key: {} for key in SERIES}
    if run := r.get("mlflow"):
        client = tracking.client(run["uri"])
        for key, by_step in series.items():
            # a resumed run logs its steps again from its checkpoint: the latest value of a step stands
            for m in sorted(client.get_metric_history(run["run_id"], key), key=lambda m: m.timestamp):
                by_step[m.step] = m.value
    steps = sorted(set.intersection(*(set(by_step) for by_step in series.values())))
    model = r.get("model")
    return {"name": r.get("name", ""), "task": r.get("task", ""), "state": r["state"],
            "started_at": r.get("started_at"), "finished_at": r.get("finished_at"),
            "model": f"{model['name']} v{model['version']}" if model else None, "error": r.get("error"),
            "steps": steps, "loss": [series["loss"][s] for s in steps],
            "tokens_per_s": [series["tokens_per_s"][s] for s in steps]}
