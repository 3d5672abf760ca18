"""Fine-tuning on Ray Train with two CPU workers: every strategy lowers the loss and exports a loadable model,
a planted worker death resumes from the last checkpoint's step, a run stopped on purpose resumes under its name,
and bad training data fails before any worker starts (or is skipped and counted)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.catalog import Catalog
from app.storage import Storage
from app.train.config import TrainJobConfig, load_job_config
from app.train.run import run_training, training_runs
from tests.helpers import ROOT, SAMPLE, metric_history

# five bad records, one per reason a record is dropped: missing field, invalid JSON, empty, no template, too long
BAD = ['{"instruction": "no answer here"}', "{not json", '{"instruction": "", "response": "x"}',
       json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
       json.dumps({"instruction": "long " * 400, "response": "ok"})]
BAD_COUNTS = {"bad_template": 1, "empty": 1, "invalid_json": 1, "missing_field": 1, "too_long": 1}


def job(tiny_lm: str, **fields) -> TrainJobConfig:
    base = {"task": "sft", "model": tiny_lm, "sft": {"paths": [str(SAMPLE)], "max_length": 128},
            "num_workers": 2, "batch_size": 4, "lr": 1e-2, "epochs": 4, "max_steps": 8, "checkpoint_every": 4,
            "seed": 0}
    return TrainJobConfig.model_validate(base | fields)


def squad_file(path: Path) -> Path:
    """A SQuAD v1.1 file from the Python reference's topics (every install has them): 3 articles of 15 paragraphs,
    2 questions each, the answer the paragraph's opening words."""
    from pydoc_data.topics import topics

    texts = [" ".join(t.split()[:60]) for t in list(topics.values())[:45]]
    data = [{"title": f"Topics_{a}", "paragraphs": [
        {"context": c, "qas": [{"id": f"{a}-{i}-{j}", "question": q, "answers": [{"text": " ".join(c.split()[:3]),
                                                                                    "answer_start": 0}]}
                               for j, q in enumerate(("How does this section begin?", "What opens this text?"))]}
        for i, c in enumerate(texts[a * 15:(a + 1) * 15])]} for a in range(3)]
    path.write_text(json.dumps({"version": "1.1", "data": data}))
    return path


@pytest.mark.parametrize("strategy", [{"strategy": "ddp"}, {"strategy": "fsdp"},
                                      {"strategy": "deepspeed", "zero_stage": 2},
                                      {"strategy": "deepspeed", "zero_stage": 3, "task": "qgen"}],
                         ids=["ddp", "fsdp", "zero2", "zero3-qgen"])
def test_each_strategy_lowers_the_loss_and_exports(ray_cluster, s3_bucket, tiny_lm, tmp_path, strategy):
    """ddp also skips and counts bad records, keeps its storage root (checkpoints, the export, the model version)
    on a real S3-protocol server, and has a worker die at step 5: Ray Train restarts the group, which resumes from
    the last checkpoint it had registered. ZeRO-3 trains adapt's question writer (the qgen task: sft's training on
    records it makes from a SQuAD file, counted with what it left out), which is promoted without a judgment."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    storage = Storage(str(tmp_path / "store"))
    counts = {"records": 41, "kept": 41, "dropped": {}}
    if strategy.get("task") == "qgen":
        from app.train.config import QGenDataConfig
        from app.train.qgen_data import qgen_records

        qgen = QGenDataConfig(dataset=str(squad_file(tmp_path / "squad.json")), split="all", passage_words=40)
        records, left_out = qgen_records(qgen)
        assert len(records) == 45 and left_out == {"beyond_per_paragraph": 45}
        strategy = {**strategy, "qgen": qgen.model_dump(), "sft": {"max_length": 192}}
        counts = {"records": 90, "kept": 45, "dropped": left_out}
    if strategy["strategy"] == "ddp":  # with bad records, skipped and counted (on_bad_record: skip)
        data = tmp_path / "with-bad.jsonl"
        data.write_text(SAMPLE.read_text().rstrip("\n") + "\n" + "\n".join(BAD) + "\n")
        strategy = {**strategy, "on_bad_record": "skip", "sft": {"paths": [str(data)], "max_length": 128},
                    "mlflow_tracking_uri": (tmp_path / "mlruns").as_uri(), "max_failures": 1, "checkpoint_every": 2,
                    "chaos_fail_at_step": 5}
        counts = {"records": 46, "kept": 41, "dropped": BAD_COUNTS}
        storage = Storage(s3_bucket.fresh_uri())
    ctrl_c = signal.getsignal(signal.SIGINT)
    record = run_training(job(tiny_lm, name="s", **strategy), storage)
    # Ray Train's Ctrl-C handler (which holds its controller alive) is not left behind
    assert signal.getsignal(signal.SIGINT) is ctrl_c
    assert record["state"] == "succeeded" and record["metrics"]["step"] == 8
    losses = metric_history(record, "loss")
    assert sorted({s for s, _ in losses}) == list(range(1, 9))  # after a resume, its steps are logged again
    assert losses[-1][1] < losses[0][1] * 0.8, losses
    if "chaos_fail_at_step" in strategy:
        assert_resumed_mid_epoch(record, storage)
    assert record["counts"] == counts
    m = record["metrics"]
    assert m["tokens_per_s"] > 0 and len(m["tokens_per_s_per_worker"]) == 2 and m["peak_memory_mb"] > 0
    assert m["checkpoint_save_s"] >= 0

    cfg = job(tiny_lm, **strategy)
    manifest = Catalog(storage).get_model(cfg.catalog_name, record["model"]["version"])
    assert manifest.run == "s" and manifest.data["counts"]["kept"] == counts["kept"] and manifest.config[
        "strategy"] == strategy["strategy"] and manifest.task == cfg.task
    if cfg.task == "qgen":
        promoted = subprocess.run([str(Path(sys.executable).parent / "ragline"), "--storage", storage.uri, "models",
                                   "promote", "qgen", str(manifest.version)], capture_output=True, text=True)
        assert promoted.returncode == 0 and "adapt.writer.model=catalog:qgen follows it" in promoted.stdout, \
            promoted.stdout + promoted.stderr
    if storage.is_local:
        directory = storage.local_path(manifest.dir)
    else:
        assert storage.uri.removeprefix("s3://") in record["checkpoint"]  # Ray Train's path on its filesystem
        assert any("/step-" in f for f in storage.list_files("train"))
        directory = storage.download_dir(manifest.dir, tmp_path / "export")
    model = AutoModelForCausalLM.from_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is an identifier?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == ids["input_ids"].shape[1] + 5


def assert_resumed_mid_epoch(record: dict, storage: Storage) -> None:
    """A run with a worker planted to die at step 5 (`chaos_fail_at_step`), checkpointing every 2 steps."""
    assert storage.exists(f"train/{record['name']}/chaos-fired")  # the worker did die
    starts = metric_history(record, "attempt_start_step")
    # The first attempt started at 0; the second at the newest checkpoint Ray Train had registered when the
    # worker died (step 4, or step 2 if the step-4 report was still in flight): mid-epoch (5 steps per epoch here),
    # so neither from zero nor from the start of the epoch, and it carried on from exactly that step.
    resumed = {v for _, v in starts} - {0.0}
    assert len(resumed) == 1 and resumed <= {2.0, 4.0}, starts
    (at,) = resumed
    assert min(s for s, v in starts if v == at) == at + 1 and max(s for s, _ in starts) == 8


def test_a_stopped_run_resumes_under_its_name(ray_cluster, tiny_lm, tmp_path):
    storage = tmp_path / "store"
    cmd = [str(Path(sys.executable).parent / "ragline"), "--storage", str(storage), "--address", ray_cluster,
           "train", "sft", "--in-process", "--json", "--set", f"model={tiny_lm}", "--set", f"sft.paths=[{SAMPLE}]",
           "--set", "name=stop-me", "--set", "max_steps=20", "--set", "checkpoint_every=5", "--set",
           "batch_size=2", "--set", "epochs=20"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 300
    snapshot = storage / "train" / "stop-me" / "checkpoint_manager_snapshot.json"
    # stop once Ray Train has registered a checkpoint (its snapshot names it), not merely uploaded one
    while not (snapshot.exists() and "step-" in snapshot.read_text()):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    proc.communicate(timeout=120)
    first = training_runs(Storage(str(storage))).all()[0]
    assert first["state"] in ("stopped", "failed"), first

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert record["state"] == "succeeded" and record["metrics"]["step"] == 20
    starts = {v for _, v in metric_history(record, "attempt_start_step")}
    # the second attempt began at a checkpoint of the first (a multiple of 5), not at 0
    assert len(starts) == 2 and max(starts) >= 5 and max(starts) % 5 == 0, starts


def test_bad_records_fail_before_training_naming_them(ray_cluster, tiny_lm, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(SAMPLE.read_text().splitlines()[:12] + BAD) + "\n")
    storage = Storage(str(tmp_path / "store"))
    with pytest.raises(ValueError) as e:
        run_training(job(tiny_lm, name="bad", sft={"paths": [str(data)], "max_length": 128}), storage)
    msg = str(e.value)
    assert "5 of 17 training records are bad" in msg and "missing_field" in msg and "invalid_json" in msg
    assert "bad.jsonl" in msg and "on_bad_record: skip" in msg
    assert not storage.exists("train/bad")  # no worker ever started
    # with on_bad_record: skip they are counted and training goes on: test_each_strategy_lowers_the_loss_and_exports
    # [ddp] trains so


def test_job_files_in_deployments_validate():
    for task in ("sft", "reranker", "embedder", "qgen"):
        cfg = load_job_config(ROOT / "deployments" / "jobs" / f"{task}.yaml", task)
        assert cfg.task == task
    with pytest.raises(ValueError, match="is for task 'sft', not 'reranker'"):
        load_job_config(ROOT / "deployments" / "jobs" / "sft.yaml", "reranker")
