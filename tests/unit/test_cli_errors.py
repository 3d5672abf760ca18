"""The CLI's one place for errors (`app.cli.main`): each error type to its exit status and one line, a bug to its
traceback; and the run records both services keep (`app.services.runs.RunStore`)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from ray.exceptions import RayError

import app.cli
from app.errors import Conflict, NotFound, NotReady, RaglineError, TimedOut, Unavailable, UserError
from app.remote import Unreachable
from app.services.runs import ingest_run_store
from app.storage import Storage
from app.train.run import training_runs


class _Strict(BaseModel):
    n: int


def _validation_error() -> Exception:
    try:
        _Strict.model_validate({"n": "many"})
    except Exception as e:
        return e
    raise AssertionError("validated")


@pytest.mark.parametrize(("error", "code"), [
    (UserError("bad flag"), 2), (NotFound("no such version"), 2), (Conflict("already running"), 2),
    (Unavailable("not now"), 3), (NotReady("nothing published"), 3), (TimedOut("too slow"), 3),
    (Unreachable("no Ray dashboard answers"), 3), (RaglineError("the run failed"), 1),
    (RayError("node lost"), 1), (KeyboardInterrupt(), 130),
])
def test_each_error_type_has_its_exit_status_and_one_line(monkeypatch, capsys, error, code):
    def command() -> None:
        raise error

    monkeypatch.setattr(app.cli, "app", command)
    with pytest.raises(SystemExit) as exited:
        app.cli.main()
    assert exited.value.code == code
    stderr = capsys.readouterr().err
    assert stderr.startswith("error: ") and "Traceback" not in stderr
    if isinstance(error, RaglineError):
        assert stderr.strip() == f"error: {error}"


def test_a_validation_error_is_the_callers_and_a_bare_value_error_is_a_bug(monkeypatch, capsys):
    def invalid() -> None:
        raise _validation_error()

    monkeypatch.setattr(app.cli, "app", invalid)
    with pytest.raises(SystemExit) as exited:
        app.cli.main()
    assert exited.value.code == 2 and "validation error for _Strict" in capsys.readouterr().err

    def bug() -> None:
        raise ValueError("a bug, not the caller's mistake")

    monkeypatch.setattr(app.cli, "app", bug)
    with pytest.raises(ValueError, match="a bug"):  # escapes main: Python prints its traceback and exits 1
        app.cli.main()


def test_run_records_are_one_file_each_listed_in_order(tmp_path):
    storage = Storage(str(tmp_path))
    runs = ingest_run_store(storage)
    runs.save({"run_id": "b", "state": "queued", "submitted_at": "2026-01-02"})
    runs.save({"run_id": "a", "state": "running", "submitted_at": "2026-01-03"})
    runs.save({"run_id": "c", "state": "failed", "submitted_at": "2026-01-02"})
    assert [r["run_id"] for r in runs.all()] == ["b", "c", "a"]
    assert runs.load("a")["state"] == "running" and storage.exists("runs/ingest/a.json")
    with pytest.raises(NotFound, match="ingest run 'nope' does not exist"):
        runs.load("nope")
    training = training_runs(storage)
    training.save({"name": "sft-1", "task": "sft", "state": "queued"})
    assert storage.exists("runs/train/sft-1.json") and [r["name"] for r in training.all()] == ["sft-1"]
    with pytest.raises(NotFound, match="training run 'x' does not exist"):
        training.load("x")
