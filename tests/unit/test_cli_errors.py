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
from tests.helpers import ROOT, free_port


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


@pytest.mark.parametrize("overrides,expected", [
    (["strategy=megatron"], "strategy"),
    (["strategy=deepspeed", "zero_stage=4"], "zero_stage must be 1, 2 or 3"),
    (["offload_params=true"], "offload_params needs strategy deepspeed with zero_stage 3"),
    (["model=/nonexistent/model"], "does not exist"),
    (["sft.paths=[]"], "sft.paths"),
    (["batch_size=0"], "batch_size"),
    (["name=../escape"], "name"),
    (["lr=-1"], "lr"),
    (["placement_strategy=spread"], "placement_strategy"),
])
def test_cli_rejects_a_bad_job_config_before_starting_anything(monkeypatch, capsys, tmp_path, overrides, expected):
    """A bad field or a model that does not exist: exit 2 and one line naming it, before Ray is touched (this tier
    fails any test that starts or joins Ray) or anything is written."""
    argv = ["ragline", "--storage", str(tmp_path / "s"), "--address", "127.0.0.1:1", "train", "sft", "--config",
            str(ROOT / "deployments" / "jobs" / "sft.yaml")]
    for o in overrides:
        argv += ["--set", o]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit) as exited:
        app.cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 2, err
    assert expected in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


def cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """`ragline ARGS` in this process: (exit status, stderr)."""
    monkeypatch.setattr("sys.argv", ["ragline", *args])
    with pytest.raises(SystemExit) as exited:
        app.cli.main()
    code = exited.value.code
    return code if isinstance(code, int) else (0 if code is None else 1), capsys.readouterr().err


def test_cluster_commands_bad_input(monkeypatch, capsys, tmp_path):
    """Addresses, working directories and configs that cannot work are refused before anything is sent (nor is Ray
    started or joined: this tier fails a test that does)."""
    store = str(tmp_path / "s")
    nobody = f"http://127.0.0.1:{free_port()}"  # a dashboard address where nothing listens
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "doc.txt").write_text("Zebras cross the Mara river in July.")
    path = str(tmp_path / "corpus")

    def user_error(*args: str, needles: tuple[str, ...]) -> None:
        code, err = cli(monkeypatch, capsys, *args)
        assert code == 2 and "Traceback" not in err, (code, err)
        assert all(n in err for n in needles), err

    user_error("--storage", store, "--address", "10.0.0.1:6379", "submit", "ingest", path,
               needles=("is not a dashboard address", "http://HEAD:8265"))
    user_error("--storage", store, "--address", nobody, "submit", "ingest", "--working-dir", str(tmp_path), path,
               needles=("is not a Ragline checkout",))
    outside = tmp_path / "outside.yaml"
    outside.write_text("search:\n  top_k: 3\n")
    user_error("--storage", store, "--config", str(outside), "--address", nobody, "submit", "ingest", path,
               needles=("is outside the working directory",))
    user_error("--address", nobody, "serve", needles=("needs the storage root its nodes share",))
    user_error("--storage", store, "--address", nobody, "ingest", path,
               needles=("is a dashboard address", "ragline submit"))
    for args in (("submit", "ingest", path), ("status",)):
        code, err = cli(monkeypatch, capsys, "--storage", store, "--address", nobody, *args)
        assert code == 3 and f"no Ray dashboard answers at {nobody}" in err and "Traceback" not in err, err
    assert cli(monkeypatch, capsys, "--storage", store, "--address", nobody, "submit", "ingest")[0] == 2  # usage


def test_delete_bad_input(monkeypatch, capsys, tmp_path):
    """`ragline delete` naming nothing, or naming what the corpus does not hold, or in a store with no corpus:
    exit 2 and one line, nothing written (in process: this tier fails a test that starts Ray)."""
    store = str(tmp_path / "s")
    code, err = cli(monkeypatch, capsys, "--storage", store, "delete")
    assert code == 2 and "name the documents to delete" in err and "Traceback" not in err
    code, err = cli(monkeypatch, capsys, "--storage", store, "delete", "doc1", "--in-process")
    assert code == 2 and "no dataset version is published yet" in err and "Traceback" not in err
    assert not (tmp_path / "s" / "datasets").exists()
