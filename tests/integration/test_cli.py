"""The `ragline` command line over real processes: help, clear errors for bad input, ingest → search."""

import json
import subprocess
import sys
from pathlib import Path

import httpx
from ray import serve

from tests.helpers import free_port

EXE = str(Path(sys.executable).parent / "ragline")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600)


def assert_user_error(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    for needle in needles:
        assert needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_help_reads_well():
    done = run("--help")
    assert done.returncode == 0
    for command in ("demo", "ingest", "index", "search", "serve", "query", "status", "eval", "train", "models",
                    "adapt", "submit"):
        assert command in done.stdout
    assert "--storage" in done.stdout and "--set" in done.stdout
    assert "--source" in run("search", "--help").stdout
    assert "--in-process" in run("train", "sft", "--help").stdout and "promote" in run("models", "--help").stdout


def test_bad_input_is_reported_without_traceback(tmp_path, ray_cluster):
    store = str(tmp_path / "s")
    assert_user_error(run("--storage", store, "--set", "ingest.chunk.chunk_tokenz=3", "status"),
                      "ingest.chunk.chunk_tokenz", "Extra inputs")
    assert_user_error(run("--storage", store, "--set", "ingest.chunk", "status"), "not KEY=VALUE")
    bad_yaml = tmp_path / "c.yaml"
    bad_yaml.write_text("search:\n  top_k: -1\n")
    assert_user_error(run("--storage", store, "--config", str(bad_yaml), "status"), "search.top_k", str(bad_yaml))
    assert_user_error(run("--storage", store, "search", "zebras"), "no index version is published yet")
    assert_user_error(run("--storage", store, "--address", ray_cluster, "ingest", str(tmp_path / "nope")),
                      "nope does not exist")
    assert_user_error(run("--storage", store, "search", "x", "--mode", "fuzzy"), "--mode must be")
    assert run("--storage", store, "search", "x", "-k", "many").returncode == 2  # click's own type check
    assert_user_error(run("--storage", store, "models", "promote", "reranker", "3"), "has no version 3")
    assert_user_error(run("--storage", store, "train", "status", "nope"), "training run 'nope' does not exist")
    assert_user_error(run("--storage", store, "eval", "retrieval", "--dataset", str(tmp_path), "--rerank-top", "0"),
                      "--rerank-top must be between 1 and 1000")


def test_ingest_then_search_json(tmp_path, corpus, ray_cluster):
    path, want = corpus
    store = str(tmp_path / "s")
    common = ["--storage", store, "--address", ray_cluster, "--set", "ingest.read.max_error_fraction=0.5"]
    done = run(*common, "ingest", str(path), "--in-process", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["documents"]["kept"] == want["kept"] and report["index_version"] == 1

    hits = json.loads(run(*common, "search", "zebra migration river", "-k", "3", "--json").stdout)
    assert hits["index_version"] == 1 and hits["hits"][0]["doc_id"] == "zebra"
    assert {"source", "title", "text", "score", "start_char", "end_char", "chunk_id"} <= set(hits["hits"][0])
    lexical = json.loads(run(*common, "search", "zebra", "--mode", "lexical", "--source", "*.jsonl", "--json").stdout)
    assert all(h["source"].endswith("main.jsonl") for h in lexical["hits"])

    built = json.loads(run(*common, "index", "build", "--json").stdout)
    assert built == {"index_version": 2, "dataset_version": 1, "chunks": report["chunks"], "dense": {"type": "flat"},
                     "embedder": "all-MiniLM-L6-v2"}
    text = run(*common, "search", "zebra migration river").stdout
    assert "[1] Zebra migration" in text and "source:" in text and "main.jsonl" in text

    status = json.loads(run(*common, "status", "--json").stdout)
    assert [d["version"] for d in status["datasets"]] == [1] and [i["version"] for i in status["indexes"]] == [1, 2]
    assert {i["embedder"] for i in status["indexes"]} == {"all-MiniLM-L6-v2"}


def test_serve_and_query_bad_input(tmp_path):
    store = str(tmp_path / "s")
    assert_user_error(run("--storage", store, "query", "anything"), "no endpoint known", "ragline serve")
    assert_user_error(run("--storage", store, "query", "anything", "--url", "http://127.0.0.1:9"), "no API key")
    assert_user_error(run("--storage", store, "serve", "--serve-config", str(tmp_path / "nope.yaml")),
                      "nope.yaml does not exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("applications: [{name: ragline, import_path: deployments.graph:build_app,\n"
                   "                deployments: [{name: Generator, num_replicas: lots}]}]\n")
    assert_user_error(run("--storage", store, "serve", "--serve-config", str(bad)), "bad.yaml is invalid",
                      "num_replicas")
    assert_user_error(run("--storage", store, "--set", "serve.generator.engine=openai", "serve"), "base_url")


def test_demo_main_job(tmp_path, ray_cluster):
    """The README's main job (scripts/demo.sh runs exactly this after setting up), on the session's Ray."""
    store = str(tmp_path / "s")
    port = str(free_port())
    try:
        done = run("--storage", store, "--address", ray_cluster, "demo", "--port", port)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "counts reconcile" in done.stdout and "dataset / index version" in done.stdout
        assert "[1] " in done.stdout and "source: " in done.stdout
        # the answer comes from the exception-handling topics of the Python reference
        top = done.stdout.split("[1] ", 1)[1].split("\n", 1)[0]
        assert any(t in top for t in ("try", "exceptions", "raise", "with")), top
        # ... and ends with an answer from the served graph, with numbered sources from the corpus
        assert f"serving at http://127.0.0.1:{port}" in done.stdout and "API key (generated now" in done.stdout
        answer = done.stdout.split("A: ", 1)[1]
        assert answer.split("\n", 1)[0].strip() and "[1] " in answer and "demo-corpus" in answer
        assert "index v1" in answer
        # ... and tells where the web console is: the same port, the page shipped in the package
        assert f"Web console: http://127.0.0.1:{port}/ " in done.stdout
        assert f"web console at http://127.0.0.1:{port}/ " in done.stdout
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert page.status_code == 200 and "<title>Ragline console</title>" in page.text
        again = run("--storage", store, "--address", ray_cluster, "demo", "--port", port)  # idempotent
        assert again.returncode == 0 and "nothing new to add" in again.stdout and "A: " in again.stdout
        assert "generated now" not in again.stdout  # the key was printed once
        asked = run("--storage", store, "query", "What does the with statement do?", "--json")
        assert asked.returncode == 0 and json.loads(asked.stdout)["citations"], asked.stderr[-2000:]
    finally:
        serve.shutdown()  # free the session's CPUs for the tests that follow
