"""MLflow tracking of training and eval runs through `MlflowClient` (no global active run, so the driver and
rank 0 can each write to the same run)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from app import envs
from app.errors import UserError
from app.storage import Storage

EXPERIMENT = "ragline"


def tracking_uri(configured: str | None, storage: Storage) -> str:
    """The configured URI, else MLflow's own MLFLOW_TRACKING_URI, else a file store under a local storage root
    (MLflow keeps no file store on an object store)."""
    if configured or envs.MLFLOW_TRACKING_URI:
        return configured or envs.MLFLOW_TRACKING_URI
    if not storage.is_local:
        raise UserError(f"runs cannot be tracked under {storage.uri}: MLflow's file store needs a local path; set "
                        "train.mlflow_tracking_uri or MLFLOW_TRACKING_URI (a tracking server, or file:///a/local/dir)")
    return storage.local_path("mlruns").as_uri()


def client(uri: str) -> Any:
    if uri.startswith("file:"):
        # MLflow 3 keeps its file store (no server, files beside the checkpoints) only on request
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    return MlflowClient(uri)


def start_run(uri: str, name: str, params: Mapping[str, object], run_id: str | None,
              experiment: str = EXPERIMENT) -> str:
    """The run of an earlier attempt (`run_id`), or a new one in `experiment` with `params` logged."""
    c = client(uri)
    if run_id:
        return run_id
    found = c.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else c.create_experiment(experiment)
    run_id = c.create_run(experiment_id, run_name=name).info.run_id
    for k, v in _flat(params).items():
        if v is not None:
            c.log_param(run_id, k, str(v)[:500])
    return str(run_id)


def log_metrics(uri: str, run_id: str, metrics: Mapping[str, object], step: int) -> None:
    """The numeric entries of `metrics` (others, such as a report's strings, are left out)."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    scalars = [Metric(k, float(v), now, step) for k, v in metrics.items()
               if isinstance(v, int | float) and not isinstance(v, bool)]
    client(uri).log_batch(run_id, metrics=scalars)


def finish(uri: str, run_id: str, tags: dict[str, str], status: str = "FINISHED") -> None:
    c = client(uri)
    for k, v in tags.items():
        c.set_tag(run_id, k, v)
    c.set_terminated(run_id, status=status)


def _flat(tree: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested params as MLflow's dotted keys: {"a": {"b": 1}} → {"a.b": 1}."""
    out: dict[str, object] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
