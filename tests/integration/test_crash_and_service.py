"""A driver killed mid-run leaves no version and a re-run completes it; the IngestService outlives the process
that submitted to it and recovers its queue after a restart."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ray

from app.catalog import Catalog
from app.dataset import live_documents
from app.index.build import load_chunks
from app.indexing import run_ingest
from app.services.ingest import service_name
from app.storage import Storage
from tests.helpers import topic_text, wait_for

N_DOCS = 120  # ≈ 240 chunks: long enough on 2 cores to be killed in the middle


def big_corpus(d: Path, start: int = 0, n: int = N_DOCS) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + n):
        (d / f"doc{i:04d}.txt").write_text(topic_text(i))
    return d


def assert_complete(storage: Storage, n_docs: int) -> None:
    m = Catalog(storage).latest("datasets")
    assert m is not None and m.counts["documents"] == n_docs
    table = load_chunks(storage, m)
    ids = table.column("chunk_id").to_pylist()
    assert len(ids) == len(set(ids)) == m.counts["chunks"]
    assert len(set(table.column("doc_id").to_pylist())) == n_docs
    assert Catalog(storage).verify(m) == []


DRIVER = """
import sys, ray
from app.config import load_config
from app.indexing import run_ingest
from app.storage import Storage
ray.init(address=sys.argv[1], namespace="ragline", log_to_driver=False)
run_ingest([sys.argv[2]], load_config(), Storage(sys.argv[3]))
"""


def test_killed_driver_leaves_no_version_and_rerun_completes(ray_cluster, tmp_path):
    corpus = big_corpus(tmp_path / "corpus")
    store = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, ray_cluster, str(corpus), str(store)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # The segment directory appears when the pipeline starts executing; embedding ~240 chunks then takes
        # well over 10 s on 2 cores, so a kill 3 s later lands in the middle of the run.
        segments = store / "datasets" / "segments"
        wait_for(lambda: list(segments.glob("*")), 240, "the pipeline to start writing")
        time.sleep(3)
        assert proc.poll() is None, "the run finished before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    storage = Storage(str(store))
    assert Catalog(storage).versions("datasets") == [], "a killed run must not leave a visible version"
    report = run_ingest([str(corpus)], __import__("app.config").config.load_config(), storage)
    assert report["documents"]["kept"] == N_DOCS and report["dataset_version"] == 1
    assert_complete(storage, N_DOCS)


def ragline(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "ragline"
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_service_survives_caller_and_recovers_after_restart(ray_cluster, tmp_path):
    store = str(tmp_path / "store")
    first = big_corpus(tmp_path / "first", n=10)  # only the second run must be long enough to be killed in
    # the submitting process exits at once; the detached service carries on
    out = ragline("--storage", store, "--address", ray_cluster, "ingest", str(first), "--detach", "--json")
    run1 = json.loads(out.stdout)["run_id"]
    service = ray.get_actor(service_name(store), namespace="ragline")
    done = wait_for(lambda: (s := ray.get(service.status.remote(run1)))["state"] in ("succeeded", "failed") and s,
                    300, "the first run to finish")
    assert done["state"] == "succeeded", done.get("error")
    assert done["report"]["documents"]["kept"] == 10

    # a second run, a sync of the same folder after files were deleted, edited and added: kill the service while it
    # runs; the published version is untouched, and the service restarts, re-reads the catalog and re-runs it
    (first / "doc0000.txt").unlink()
    (first / "doc0001.txt").unlink()
    (first / "doc0002.txt").write_text(topic_text(5000))
    big_corpus(first, start=N_DOCS)
    run2 = ray.get(service.submit.remote([str(first)], __import__("app.config").config.load_config().model_dump(),
                                         True, True))
    wait_for(lambda: ray.get(service.status.remote(run2)).get("progress", {}).get("stages", {}).get("chunk"),
             240, "the second run to be chunking (embedding comes next and takes many seconds)")
    ray.kill(service, no_restart=False)
    v1 = Catalog(Storage(store)).latest("datasets")
    assert v1 is not None and v1.version == 1 and len(live_documents(Storage(store), v1)) == 10
    final = wait_for(lambda: (s := ray.get(service.status.remote(run2)))["state"] in ("succeeded", "failed") and s,
                     400, "the re-queued run to finish")
    assert final["state"] == "succeeded", final.get("error")
    assert final["restarts"] == 1 and "re-queued" in final["note"]
    assert final["report"]["changes"] == {"added": N_DOCS, "updated": 1, "unchanged": 0, "removed": 2,
                                          "live_before": 10, "live_after": 8 + N_DOCS}
    runs = {r["run_id"]: r for r in ray.get(service.runs.remote())}
    assert runs[run1]["state"] == runs[run2]["state"] == "succeeded"
    versions = ray.get(service.versions.remote())
    assert [v["version"] for v in versions["datasets"]] == [1, 2]
    assert_complete(Storage(store), 8 + N_DOCS)

    status = json.loads(ragline("--storage", store, "status", "--json").stdout)
    assert {r["run_id"] for r in status["runs"]} == {run1, run2} and len(status["indexes"]) == 2
