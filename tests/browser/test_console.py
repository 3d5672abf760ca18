"""The web console in a real browser (Debian's Chromium, headless, driven by Playwright) against the session's
served graph (tests/conftest.py `served`: the packaged models and vLLM), as deployed, before the serve tests change
it: enter the key, ask, watch the answer stream, open
a citation and check its highlighted span, then check Operate against the API. Screenshots of both views go to
`test-artifacts/` (RAGLINE_TEST_ARTIFACTS)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from app import hardware
from app.catalog import Catalog
from tests.helpers import PLANTED, ROOT

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine with no network: no background connections, no first-run work (they fail, slowly)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
QUESTION = "When do zebras cross the Mara river?"
ARTIFACTS = Path(os.environ.get("RAGLINE_TEST_ARTIFACTS", ROOT / "test-artifacts"))
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (scripts/test.sh installs it as root)")


@pytest.fixture(scope="module")
def page(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)  # an answer on 2 busy cores
        # The graph's answer budget is long (the serve tests need one): the console asks, the test caps the answer
        # at 48 tokens, still several seconds of streaming, by adding max_tokens to the request the page sends.
        page.route("**/v1/chat/completions", lambda route: route.continue_(
            post_data=json.dumps({**json.loads(route.request.post_data or "{}"), "max_tokens": 48})))
        yield page
        browser.close()


def api(served, path: str) -> dict:
    r = httpx.get(f"{served.url}{path}", headers=served.auth, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_ask_streams_a_cited_answer_and_opens_the_cited_span(served, page):
    page.goto(served.url)
    # a wrong key is refused in words, and the key lives in this tab's sessionStorage only
    page.fill("#key-input", "not-a-key")
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#key-error:has-text('The API key was refused')")
    page.fill("#key-input", served.key)
    page.click("#key-form button[type=submit]")
    page.wait_for_selector("#ask:not([hidden])")
    assert page.evaluate("sessionStorage.getItem('ragline.apiKey')") == served.key
    assert served.key not in page.url
    # the collections this key may read (all: it is the store's first key), the default chosen
    page.wait_for_function("document.querySelectorAll('#collection option').length == 2")
    assert page.eval_on_selector_all("#collection option", "os => os.map(o => o.value)") == ["default", "hr"]
    assert page.input_value("#collection") == "default"

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
    chunk = api(served, f"/v1/chunks/{chunk_id}")
    assert mark.inner_text() == chunk["document"][chunk["start_char"]:chunk["end_char"]]
    assert mark.inner_text() in PLANTED
    assert chunk["source"] in page.inner_text("#passage-meta") and "score" in page.inner_text("#passage-meta")
    page.screenshot(path=str(ARTIFACTS / "console-citation.png"), full_page=False)
    page.click("#passage-close")

    # the thread keeps its history: a follow-up is asked with the first turn before it
    page.fill("#question", "Which animals go with them?")
    page.click("#ask-button")
    page.wait_for_function("document.querySelectorAll('.turn [data-testid=answer]:not(.streaming)').length == 2")
    assert page.locator(".turn").count() == 2 and not page.inner_text("#ask-error")

    # a passage from a PDF opens beside its page, rendered by the server with the passage highlighted (opened as a
    # citation link opens it: asking a third question would only cost another answer's time)
    r = httpx.post(f"{served.url}/v1/retrieve", json={"query": "harbour museum log books", "top_k": 1},
                   headers=served.auth, timeout=30)
    (hit,) = r.json()["hits"]
    assert hit["source"].endswith("lighthouses.pdf") and (hit["location"], hit["pages"]) == ("pp. 1–2", [1, 2])
    page.evaluate("(c) => openPassage(c)", {"n": 1, **hit})
    page.wait_for_function("document.getElementById('passage-page-image').naturalWidth > 0")
    assert page.is_visible("#passage-page") and "pp. 1–2" in page.inner_text("#passage-meta")
    assert "page 1 of lighthouses.pdf" in page.inner_text("#passage-page-caption")
    png = httpx.get(f"{served.url}/v1/chunks/{hit['chunk_id']}/pages/1", headers=served.auth, timeout=30)
    assert png.headers["content-type"] == "image/png" and png.content.startswith(b"\x89PNG")
    missing = httpx.get(f"{served.url}/v1/chunks/{hit['chunk_id']}/pages/3", headers=served.auth, timeout=30)
    assert missing.status_code == 404 and "has 2 pages" in missing.json()["error"]["message"]
    page.screenshot(path=str(ARTIFACTS / "console-page.png"), full_page=False)
    page.click("#passage-close")


def test_operate_shows_what_the_api_says(served, page):
    page.click(".tab[data-view=operate]")
    page.wait_for_selector("#ingest-runs table")
    ready = api(served, "/readyz")
    status = api(served, "/v1/status")
    catalog = Catalog(served.storage)
    index = catalog.latest("indexes")
    assert index is not None and ready["retriever"]["index_version"] == index.version
    assert page.inner_text("[data-testid=served-index] .value") == str(index.version)
    assert page.inner_text("[data-testid=served-generator] .value") == ready["generator"]["generator"]
    # what the generator computes in and on how many threads, chosen by the hardware: never bf16 where the CPU would
    # emulate it
    dtype = "bfloat16" if hardware.detect().cpu_bf16 else "float32"
    threads = hardware.generator_threads(0, dtype)
    assert page.inner_text("[data-testid=computes-generator] .value").startswith(f"{dtype}, {threads} thread")
    runs = page.inner_text("#ingest-runs")
    assert served.ingest_run in runs and "succeeded" in runs
    run = next(r for r in status["ingest_runs"] if r["run_id"] == served.ingest_run)
    assert f"unreadable {run['dropped']['unreadable']}" in runs  # the fixture corpus's corrupt file
    versions = page.inner_text("#versions")
    assert "served" in versions and all(str(v.version) in versions for v in catalog.versions("datasets"))
    models = page.inner_text("#models")
    assert "sft" in models and "v1" in models
    training = page.locator("#training-runs tr", has_text="graph-sft")
    assert training.locator("svg.spark polyline").count() == 2, "loss and tokens/s plotted"
    steps = next(r for r in status["training_runs"] if r["name"] == "graph-sft")["steps"]
    assert steps == [1, 2]
    page.screenshot(path=str(ARTIFACTS / "console-operate.png"), full_page=True)
