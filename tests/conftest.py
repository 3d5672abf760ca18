"""Every test belongs to exactly one tier, given by the directory it lives in (tests/<tier>/); the tiers are the
markers registered in pyproject.toml. `quality` runs only when asked for by name (`-m quality`): it is a
measurement, never part of CI."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray import serve

from app import hardware
from app.raycluster import NAMESPACE
from tests.helpers import (
    GRAPH_DEPLOYMENT_OPTIONS,
    GRAPH_OVERRIDES,
    Served,
    free_port,
    lighthouses_pdf,
    train_sft,
    write_corpus,
    write_hr_corpus,
)
from tests.s3server import S3Server, s3_environ, s3_server

# Run order: the quick tier first; e2e before the tiers that start the session's Ray (integration, browser), because
# `ray up`/`ray down` stop every Ray on this machine and so the e2e test refuses to run beside one.
TIERS = ("unit", "e2e", "integration", "browser", "gpu", "quality")
TESTS = Path(__file__).resolve().parent


def tier_of(item: pytest.Item) -> str:
    tier = Path(item.path).resolve().relative_to(TESTS).parts[0]
    if tier not in TIERS:
        raise pytest.UsageError(f"{item.nodeid}: a test lives in tests/<tier>/, the tier being one of {TIERS}")
    return tier


@pytest.hookimpl(tryfirst=True)  # mark first, so that `-m` then filters on the tier markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quality_asked = "quality" in (config.getoption("markexpr") or "")
    tiers = {item: tier_of(item) for item in items}
    for item, tier in tiers.items():
        item.add_marker(tier)
    deselected = [item for item in items if tiers[item] == "quality" and not quality_asked]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    skip = set(deselected)
    items[:] = sorted((item for item in items if item not in skip), key=lambda item: run_order(item, tiers[item]))


ARTIFACTS = Path(os.environ.get("RAGLINE_TEST_ARTIFACTS", TESTS.parent / "test-artifacts"))
SLOWEST_S = 1.0  # tests at least this long (setup + call + teardown) are listed: where CI's time goes, in full
_started = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Writes the run's wall time, outcome counts and every test of a second or more, slowest first (setup + call +
    teardown, seconds) to test-artifacts/durations.json: `benchmarks/ci_durations.py` files a CI run's copy under
    benchmarks/results, so the suite's growth shows test by test."""
    seconds: dict[str, float] = {}
    counts: dict[str, int] = {}
    for outcome, reports in terminalreporter.stats.items():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
                if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
                    counts[outcome] = counts.get(outcome, 0) + 1
    slowest = sorted(((t, s) for t, s in seconds.items() if s >= SLOWEST_S), key=lambda kv: -kv[1])
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "durations.json").write_text(json.dumps({
        "pytest_wall_s": round(time.time() - _started, 1), "counts": counts,
        "slowest": [{"test": test, "seconds": round(s, 1)} for test, s in slowest]}, indent=2) + "\n")
    # A CI log keeps only its tail, so the machine and where the time went are the last lines scripts/test.sh prints
    by_file: Counter[str] = Counter()
    for test, s in seconds.items():
        by_file[Path(test.split("::")[0]).stem] += s
    (ARTIFACTS / "where-the-time-went.txt").write_text(
        f"ran on {hardware.detect().summary()}; pytest {time.time() - _started:.0f} s; by file: "
        + ", ".join(f"{f} {s:.0f}" for f, s in by_file.most_common(10)) + "\n")


def run_order(item: pytest.Item, tier: str) -> tuple[int, int]:
    """Tier by tier, except the tests on the session's served graph (`served`): they run last, together, so the
    graph is deployed once and holds its CPUs and memory only while they run; the browser's first, since they
    read it as deployed, before the serve tests change it (see `served`)."""
    if "served" in getattr(item, "fixturenames", ()):
        return len(TIERS), 0 if tier == "browser" else 1
    return TIERS.index(tier), 0


# ---- what the tiers that run Ray share: one local Ray for the whole session, tiny language models ----


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[S3Server]:
    """A real S3-protocol server on loopback (moto's) with one bucket, its AWS_* environment in os.environ, so
    `Storage("s3://...")` and pyarrow reach it; started before the session's Ray, so Ray's workers reach it too
    (tests/s3server.py). Tests share the bucket: each writes under its own prefix (`s3_bucket.fresh_uri()`)."""
    with s3_server() as server, s3_environ(server):
        yield server


@pytest.fixture(scope="session")
def ray_cluster(s3_bucket):
    # address="local": always a fresh cluster of our own, even if a `ray start` one runs on this machine
    # metrics exported every 2 s rather than Ray's 10: the vLLM tests read the engine's metrics where Prometheus does
    # Ray Train's controller looks at its workers every 0.5 s rather than 2: every state of a run (workers started,
    # loop finished) waits for that look, about 1 s of a tiny run's 25 on average, and the session trains ~16 runs
    from app.raycluster import init_local

    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.5"  # read by the driver, passed on to the controller
    # Ray's log monitor lists the log directory every 0.1 s while it holds under 1,000 files; the session starts
    # hundreds of workers, three files each, and with log_to_driver off nobody reads what it publishes: listing
    # every 5 s instead. Inherited by the clusters the tests start in subprocesses.
    os.environ["LOG_NAME_UPDATE_INTERVAL_S"] = "5"
    os.environ["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] = "0"

    init_local(num_cpus=2, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
               _system_config={"metrics_report_interval_ms": 2000})
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def tiny_llama(path: Path, hidden_size: int) -> str:
    """A two-layer Llama with SmolLM2's tokenizer and chat template, four attention heads of hidden_size / 4."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from app import envs
    from app.models import generator

    tokenizer = AutoTokenizer.from_pretrained(generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir()))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    """The training strategies are under test, not the model."""
    return tiny_llama(tmp_path_factory.mktemp("tiny-lm"), 64)


@pytest.fixture(scope="session")
def tiny_lm_vllm(tmp_path_factory) -> str:
    """The same with head_dim 32, the smallest vLLM's CPU attention takes: the model-swap test serves it."""
    return tiny_llama(tmp_path_factory.mktemp("tiny-lm-vllm"), 128)


@pytest.fixture(scope="session")
def served(ray_cluster, s3_bucket, tmp_path_factory, tiny_lm_vllm) -> Iterator[Served]:
    """The Serve graph with the packaged models and vLLM on the session's Ray, deployed once for the browser and
    serve tests (which `run_order` runs last, the browser's first), over a store on S3 (`s3_bucket`: every replica
    reads its index, keys and models from the bucket; MLflow tracks into `tmp/mlruns` and the audit log goes to
    `tmp/audit`, as a user of a remote root configures them) with: the fixture corpus and a
    two-page PDF ingested through the IngestService (index version 1; Operate lists the run), the `hr` collection
    (tests/helpers.py `write_hr_corpus`, its own index version 1) and one SFT version of
    the tiny Llama (`sft` v1, unpromoted; Operate plots its run). Tests may add to it (an index version, a promoted
    model) and say so in their docstrings; the last serve tests change what is served (a promoted generator, a
    killed engine)."""
    from app import apikeys, collections, envs, serving
    from app.config import load_config
    from app.services.ingest import get_or_start as ingest_service
    from app.storage import Storage

    tmp = tmp_path_factory.mktemp("served")
    storage = Storage(s3_bucket.fresh_uri("served"))
    tracking = pytest.MonkeyPatch()
    tracking.setattr(envs, "MLFLOW_TRACKING_URI", (tmp / "mlruns").as_uri())
    write_corpus(tmp / "corpus")
    (tmp / "corpus" / "lighthouses.pdf").write_bytes(lighthouses_pdf())  # a PDF whose pages the console shows
    cfg = load_config(None, ["ingest.read.max_error_fraction=0.5", "ingest.embed.concurrency=1"])
    write_hr_corpus(tmp / "hr")
    # as `ragline ingest` and `ragline ingest --collection hr` do: a service (and a queue) per collection, the two
    # runs at once
    services = [ingest_service(storage), ingest_service(collections.storage_of(storage, "hr"))]
    runs = [ray.get(service.submit.remote([str(tmp / path)], cfg.model_dump()))
            for service, path in zip(services, ("corpus", "hr"), strict=True)]
    for service, run_id in zip(services, runs, strict=True):
        while (run := ray.get(service.status.remote(run_id)))["state"] in ("queued", "running"):
            time.sleep(0.5)
        assert run["state"] == "succeeded", run
        ray.kill(service)
    run_id = runs[0]
    overrides = [*GRAPH_OVERRIDES, f"serve.api.audit_dir={tmp / 'audit'}"]
    schema = serving.load_serve_config(None, storage, None, overrides, deployment_options=GRAPH_DEPLOYMENT_OPTIONS)
    schema.http_options.port = free_port()
    # trained while the graph starts (most of a start is importing vLLM): the graph reserves 0.75 CPU of the 2, the
    # training worker 1 and its tokenizing actor 0.25
    serving.submit(schema)
    sft = train_sft(storage, tiny_lm_vllm, "graph-sft")
    serving.wait_running([a.name for a in schema.applications], 600)
    yield Served(url=serving.url_of(schema), key=apikeys.load(storage)[0][0], storage=storage, cfg=cfg,
                 overrides=overrides, tmp=tmp, sft=sft, ingest_run=run_id)
    serve.shutdown()
    tracking.undo()
