"""The training task registry: every task registers all its parts once, and nothing else branches on a task's
name."""

import dataclasses
import re

import pytest

from app.config import AdaptConfig, ServeConfig
from app.errors import UserError
from app.train.config import TrainJobConfig, load_job_config, parse_job_config
from app.train.tasks import TASKS, TrainTask, model_setting, task_named
from tests.helpers import ROOT

JOBS = {"sft": {"sft": {"paths": ["x.jsonl"]}}, "reranker": {}, "embedder": {},  # the least each task's job needs
        "qgen": {"qgen": {"dataset": "squad.json"}}}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_has_all_its_parts(name):
    task = TASKS[name]
    assert task.name == name and task.summary and task.default_model
    hooks = [f.name for f in dataclasses.fields(TrainTask) if f.name not in ("name", "summary", "stage",
                                                                             "default_model")]
    assert hooks and all(callable(getattr(task, h)) for h in hooks), hooks
    # where a promoted model of this task is used has a model to set: a stage of the Serve graph (the retriever's
    # is its index's embedder: promoting one re-embeds the collection) or adapt's question writer
    section, stage, field = model_setting(task.stage).split(".")
    config = {"serve": ServeConfig, "adapt": AdaptConfig}[section]
    fields = config.model_fields[stage].annotation.model_fields  # type: ignore[union-attr]
    assert field in fields or task.stage == "retriever"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_job_of_each_task_takes_the_tasks_default_model_and_rules(name):
    cfg = TrainJobConfig.model_validate({"task": name} | JOBS[name])
    assert cfg.model_name == TASKS[name].default_model and cfg.catalog_name == name


def test_an_unknown_task_is_a_user_error_naming_the_known_ones():
    with pytest.raises(UserError, match="unknown training task 'qgen2': the tasks are sft, reranker, embedder, qgen"):
        task_named("qgen2")
    with pytest.raises(UserError, match=r"invalid config \(defaults\):\n  task: .*unknown training task 'qgen2'"):
        load_job_config(None, "qgen2")
    with pytest.raises(UserError, match="unknown training task"):
        parse_job_config({"task": "sft2", "sft": {"paths": ["x.jsonl"]}}, "job.yaml")


@pytest.mark.parametrize("fields,message", [
    ({"lora": {}}, "lora and freeze_layers are for sft"),
    ({"freeze_layers": 2}, "lora and freeze_layers are for sft"),
])
@pytest.mark.parametrize("task", ["reranker", "embedder"])
def test_the_pair_tasks_rule_their_own_config(task, fields, message):
    with pytest.raises(ValueError, match=message):
        TrainJobConfig.model_validate({"task": task} | fields)


def test_a_pair_source_is_beir_or_questions_not_both():
    with pytest.raises(ValueError, match="embedder: give beir_dir or questions, not both"):
        TrainJobConfig.model_validate({"task": "embedder", "embedder": {"beir_dir": "b", "questions": "q"}})


def test_stages_come_from_the_registry():
    assert [task_named(t).stage for t in ("sft", "reranker", "embedder")] == ["generator", "reranker", "retriever"]


def test_nothing_branches_on_a_tasks_name():
    """What differs per task lives in its TrainTask; a comparison with a task's name elsewhere is one the next task
    (an embedder, a question generator) would have to find and extend."""
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for d in ("app", "deployments") for p in sorted((ROOT / d).rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\btask\s*[!=]=|[!=]=\s*\S*\.task\b", line)]
    assert not found, "\n".join(found)
