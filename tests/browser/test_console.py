"""The web console in a real browser (Debian's Chromium, headless, driven by Playwright) against the Serve graph
deployed on the session's Ray with the packaged models and vLLM: enter the key, ask, watch the answer stream, open
a citation and check its highlighted span, then check Operate against the API. Screenshots of both views go to
`test-artifacts/` (RAGLINE_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import httpx
import pytest
import ray
from ray import serve

from app import apikeys, hardware, serving
from app.catalog import Catalog
from app.config import load_config
from app.services.ingest import get_or_start as ingest_service
from app.storage import Storage
from tests.helpers import PLANTED, ROOT, free_port, train_sft, write_corpus

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine with no network: no background connections, no first-run work (they fail, slowly)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
QUESTION = "When do zebras cross the Mara river?"
ARTIFACTS = Path(os.environ.get("RAGLINE_TEST_ARTIFACTS", ROOT / "test-artifacts"))
# Small CPU shares so the graph fits beside the session's other work on 2 cores; no stop string, so the answer
# runs to max_new_tokens and streams for a few seconds.
DEPLOYMENT_OPTIONS = {name: {"ray_actor_options": {"num_cpus": 0.05}}
                      for name in ("Ingress", "Retriever", "Reranker", "Generator")}
OVERRIDES = ["serve.generator.stop=[]", "serve.generator.max_new_tokens=48", "serve.generator.vllm.kv_cache_gib=1"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (scripts/test.sh installs it as root)")


@pytest.fixture(scope="module")
def console(ray_cluster, tmp_path_factory, tiny_lm):
    tmp = tmp_path_factory.mktemp("console")
    storage = Storage(str(tmp / "store"))
    write_corpus(tmp / "corpus")
    # through the IngestService, as `ragline ingest` does: Operate lists the runs it recorded
    cfg = load_config(None, ["ingest.read.max_error_fraction=0.5", "ingest.embed.concurrency=1"])
    service = ingest_service(storage)
    run_id = ray.get(service.submit.remote([str(tmp / "corpus")], cfg.model_dump()))
    while (run := ray.get(service.status.remote(run_id)))["state"] in ("queued", "running"):
        time.sleep(0.5)
    assert run["state"] == "succeeded", run
    ray.kill(service)
    # a training run, so Operate has loss and tokens/s to plot (two steps of a tiny model: the plots are under test)
    train_sft(storage, tiny_lm, "console-sft")
    schema = serving.load_serve_config(None, storage, None, OVERRIDES, deployment_options=DEPLOYMENT_OPTIONS)
    schema.http_options.port = free_port()
    serving.deploy(schema, timeout_s=600)
    yield {"url": serving.url_of(schema), "key": apikeys.load(storage)[0][0], "storage": storage,
           "run_id": run_id}
    serve.shutdown()


@pytest.fixture(scope="module")
def page(console):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)  # an answer on 2 busy cores
        yield page
        browser.close()


def api(console, path: str) -> dict:
    r = httpx.get(f"{console['url']}{path}", headers={"Authorization": f"Bearer {console['key']}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_ask_streams_a_cited_answer_and_opens_the_cited_span(console, page):
    page.goto(console["url"])
    # a wrong key is refused in words, and the key lives in this tab's sessionStorage only
    page.fill("#key-input", "not-a-key")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#key-error:has-text('The API key was refused')")
    page.fill("#key-input", console["key"])
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#ask:not([hidden])")
    assert page.evaluate("sessionStorage.getItem('ragline.apiKey')") == console["key"]
    assert console["key"] not in page.url

    # count the answer's text updates while it is still streaming: tokens arrive one SSE event at a time
    page.evaluate("""() => { window.updates = 0; new MutationObserver(() => {
        const a = document.querySelector('[data-testid=answer].streaming'); if (a && a.textContent) window.updates++;
    }).observe(document.getElementById('thread'), {subtree: true, childList: true, characterData: true}); }""")
    page.fill("#question", QUESTION)
    page.click("#ask-button")
    page.wait_for_selector(".turn .citations li")
    page.wait_for_selector("[data-testid=answer]:not(.streaming)")
    answer = page.inner_text("[data-testid=answer]")
    assert answer.strip(), "an answer"
    assert page.evaluate("window.updates") >= 3, "the answer appeared token by token, not at once"
    meta = page.inner_text(".turn .meta")
    assert "index v1" in meta and "generator SmolLM2-135M-Instruct" in meta and "retrieve" in meta
    first = page.locator(".turn .citations li").first
    assert "Zebra migration" in first.inner_text(), "the planted document is cited first"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "console-ask.png"), full_page=True)

    first.locator("a").click()  # the passage behind citation [1], its chunk highlighted in the document
    mark = page.wait_for_selector("#passage:not([hidden]) #cited-span")
    chunk_id = first.get_attribute("data-chunk")
    served = api(console, f"/v1/chunks/{chunk_id}")
    assert mark.inner_text() == served["document"][served["start_char"]:served["end_char"]]
    assert mark.inner_text() in PLANTED
    assert served["source"] in page.inner_text("#passage-meta") and "score" in page.inner_text("#passage-meta")
    page.screenshot(path=str(ARTIFACTS / "console-citation.png"), full_page=False)
    page.click("#passage-close")

    # the thread keeps its history: a follow-up is asked with the first turn before it
    page.fill("#question", "Which animals go with them?")
    page.click("#ask-button")
    page.wait_for_function("document.querySelectorAll('.turn [data-testid=answer]:not(.streaming)').length == 2")
    assert page.locator(".turn").count() == 2 and not page.inner_text("#ask-error")


def test_operate_shows_what_the_api_says(console, page):
    page.click(".tab[data-view=operate]")
    page.wait_for_selector("#ingest-runs table")
    ready = api(console, "/readyz")
    status = api(console, "/v1/status")
    catalog = Catalog(console["storage"])
    served = catalog.latest("indexes")
    assert served is not None and ready["retriever"]["index_version"] == served.version
    assert page.inner_text("[data-testid=served-index] .value") == str(served.version)
    assert page.inner_text("[data-testid=served-generator] .value") == ready["generator"]["generator"]
    # what the generator computes in, chosen by the hardware: never bf16 where the CPU would emulate it
    dtype = "bfloat16" if hardware.detect().cpu_bf16 else "float32"
    assert page.inner_text("[data-testid=computes-generator] .value").startswith(f"{dtype} on ")
    runs = page.inner_text("#ingest-runs")
    assert console["run_id"] in runs and "succeeded" in runs
    run = next(r for r in status["ingest_runs"] if r["run_id"] == console["run_id"])
    assert f"unreadable {run['dropped']['unreadable']}" in runs  # the fixture corpus's corrupt file
    versions = page.inner_text("#versions")
    assert "served" in versions and all(str(v.version) in versions for v in catalog.versions("datasets"))
    models = page.inner_text("#models")
    assert "sft" in models and "v1" in models
    training = page.locator("#training-runs tr", has_text="console-sft")
    assert training.locator("svg.spark polyline").count() == 2, "loss and tokens/s plotted"
    steps = next(r for r in status["training_runs"] if r["name"] == "console-sft")["steps"]
    assert steps == [1, 2]
    page.screenshot(path=str(ARTIFACTS / "console-operate.png"), full_page=True)
