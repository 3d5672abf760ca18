"""The HTTP API's contract over fake stages (FastAPI TestClient, no Ray): status codes, error bodies, SSE framing,
OpenAI response shapes."""

import asyncio
import base64
import json
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient
from ray.serve.exceptions import BackPressureError

from app import apikeys
from app.config import ServeConfig
from app.errors import NotFound, NotReady
from app.rag.flow import RagFlow
from app.rag.protocol import Delta, Embedded, Finished, Fitted, Passage, Ranking, Retrieved, Search, Source
from app.storage import Storage
from deployments.api import build_api
from deployments.readiness import GeneratorReady, RerankerReady, RetrieverReady, Unanswered

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HIT = Passage(rank=1, score=0.5, chunk_id="c1", doc_id="zebra", chunk_index=0, source="/d/z.txt", title="Zebras",
              text="Zebras cross the Mara river in July.", start_char=0, end_char=36)
HIT2 = Passage(rank=2, score=0.25, chunk_id="c2", doc_id="lion", chunk_index=0, source="/d/l.txt", title="Lions",
               text="Lions nap.", start_char=0, end_char=10)


class FakeStages:
    """Deterministic stand-ins for the three deployments; `fail` makes the named stage raise."""

    def __init__(self):
        self.fail: dict[str, BaseException] = {}
        self.slow = 0.0
        self.calls: list[str] = []
        self.retrieved: list[bool] = []  # per rerank call: were the passages in the retriever's order
        self.searches: list[Search] = []  # what retrieve was asked, in order

    def _maybe_fail(self, stage: str) -> None:
        self.calls.append(stage)
        if stage in self.fail:
            raise self.fail[stage]

    async def retrieve(self, search):
        self._maybe_fail("retrieve")
        self.searches.append(search)
        return Retrieved(collection=search.collection, index_version=3, mode=search.mode or "hybrid",
                         embedder="all-MiniLM-L6-v2", hits=[HIT, HIT2][:search.k], timings_ms={"embed": 1.0})

    async def rerank(self, query, documents, top_n, retrieved):
        self._maybe_fail("rerank")
        self.retrieved.append(retrieved)
        return Ranking(reranker="none", order=list(range(len(documents)))[:top_n])

    async def stream(self, question, passages, generation):
        self._maybe_fail("generate")
        yield Fitted(len(passages))
        for word in ["Zebras ", "cross ", "in ", "July ", "[1]."]:
            await asyncio.sleep(self.slow)
            yield Delta(word)
        yield Finished("stop", 40, 5, "SmolLM2-135M-Instruct")

    async def embed(self, texts, collection):
        self._maybe_fail("embed")
        return Embedded(model="all-MiniLM-L6-v2", vectors=[[0.5, -0.25, 1.0] for _ in texts])

    async def source(self, chunk_id, collection):
        self._maybe_fail("source")
        if chunk_id != HIT.chunk_id:
            raise NotFound(f"chunk {chunk_id!r} is not in collection {collection!r}")
        document = f"{HIT.text} Lions watch them from the bank."
        return Source(collection=collection, index_version=3, chunk_id=HIT.chunk_id, doc_id=HIT.doc_id,
                      source=HIT.source, title=HIT.title,
                      chunk_index=0, start_char=HIT.start_char, end_char=HIT.end_char, document=document)

    async def ready(self):
        reranker = RerankerReady(ready=True, reranker="none", precision="fp32", computes="fp32 on cpu")
        if "retrieve" in self.fail:  # nothing published, and a generator that did not answer the probe
            return {"retriever": RetrieverReady(ready=False, reason="no index version is published yet"),
                    "reranker": reranker, "generator": Unanswered(ready=False, error="no answer within 3 s")}
        return {"retriever": RetrieverReady(ready=True, index_version=3, dataset_version=None,
                                            embedder="all-MiniLM-L6-v2", chunks=2, computes="onnx fp32 on cpu"),
                "reranker": reranker, "generator": GeneratorReady(ready=True, generator="SmolLM2", engine="hf")}


class WordCounter:
    """A served embedder whose tokens are words."""

    name = "all-MiniLM-L6-v2"

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def serve_api(stages, cfg, keys, storage):
    """The API as the Ingress builds it, over the fakes (candidates: 0, no reranker configured)."""
    return build_api(RagFlow(stages, candidates=0), cfg.api, apikeys.KeyRing.of(keys),
                     generator="SmolLM2-135M-Instruct", max_new_tokens=cfg.generator.max_new_tokens,
                     embedder=WordCounter(), storage=storage)


@pytest.fixture
def stages():
    return FakeStages()


@pytest.fixture
def storage(tmp_path):
    return Storage(str(tmp_path / "store"))


@pytest.fixture
def client(stages, storage):
    cfg = ServeConfig()
    cfg.api.max_question_tokens = 20
    cfg.api.max_body_bytes = 2048
    cfg.api.request_timeout_s = 0.5
    api = serve_api(stages, cfg, [KEY, "second-key"], storage)
    return TestClient(api, raise_server_exceptions=False)  # as a real server: the 500 response, not a raise


def error(r, status, kind):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["type"] == kind and body["error"]["message"]
    assert "Traceback" not in r.text
    return body["error"]


def test_query_answers_with_citations_and_timings(client, stages):
    r = client.post("/v1/query", json={"question": "When do zebras cross?"}, headers=AUTH)
    assert r.status_code == 200
    body = r.json()
    assert body["answer"] == "Zebras cross in July [1]." and body["finish_reason"] == "stop"
    assert [c["doc_id"] for c in body["citations"]] == ["zebra", "lion"]
    assert body["citations"][0]["cited"] and not body["citations"][1]["cited"]
    assert set(body["citations"][0]) == {"n", "chunk_id", "doc_id", "source", "title", "location", "pages", "snippet",
                                         "score", "cited"}
    assert body["index_version"] == 3 and body["models"]["reranker"] == "none"
    assert {"retrieve", "rerank", "generate", "total"} <= set(body["timings_ms"])
    assert body["usage"] == {"prompt_tokens": 40, "completion_tokens": 5}
    assert stages.retrieved == [True]  # retrieved candidates: the reranker may fuse the retriever's order


def sse_events(text):
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines.get("event"), lines["data"]))
    return events


def test_query_stream_is_tokens_then_citations_then_done(client):
    with client.stream("POST", "/v1/query", json={"question": "zebras?", "stream": True}, headers=AUTH) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.read().decode())
    kinds = [k for k, _ in events]
    assert kinds == ["token"] * 5 + ["citations", "done"]
    assert "".join(json.loads(d)["text"] for k, d in events if k == "token") == "Zebras cross in July [1]."
    assert json.loads(events[-2][1])["citations"][0]["doc_id"] == "zebra"
    assert json.loads(events[-1][1])["finish_reason"] == "stop"


def test_chat_completions_openai_shapes(client):
    r = client.post("/v1/chat/completions", headers=AUTH, json={
        "model": "SmolLM2-135M-Instruct", "messages": [{"role": "user", "content": "zebras?"}]})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Zebras cross in July [1]."}
    assert body["choices"][0]["finish_reason"] == "stop" and body["usage"]["total_tokens"] == 45
    assert body["citations"][0]["doc_id"] == "zebra"

    with client.stream("POST", "/v1/chat/completions", headers=AUTH, json={
            "model": "ragline", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "zebras?"}]}]}) as s:
        events = sse_events(s.read().decode())
    assert all(k is None for k, _ in events) and events[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Zebras cross in July [1]."
    final = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert final[0]["choices"][0]["finish_reason"] == "stop" and final[0]["citations"][0]["doc_id"] == "zebra"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


def test_models_embeddings_retrieve_rerank(client, stages):
    models = client.get("/v1/models", headers=AUTH).json()
    assert {m["id"] for m in models["data"]} == {"SmolLM2-135M-Instruct", "all-MiniLM-L6-v2", "ragline/default"}
    emb = client.post("/v1/embeddings", headers=AUTH, json={"input": ["a", "b"], "model": "all-MiniLM-L6-v2"}).json()
    assert [d["index"] for d in emb["data"]] == [0, 1] and emb["data"][0]["embedding"] == [0.5, -0.25, 1.0]
    b64 = client.post("/v1/embeddings", headers=AUTH, json={"input": "a", "encoding_format": "base64"}).json()
    assert np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), "<f4").tolist() == [0.5, -0.25, 1.0]
    hits = client.post("/v1/retrieve", headers=AUTH, json={"query": "zebra", "top_k": 1}).json()
    assert [h["doc_id"] for h in hits["hits"]] == ["zebra"] and hits["index_version"] == 3
    assert hits["hits"][0] == HIT.model_dump()  # the passage itself is the wire shape, rerank_score (null) included
    rr = client.post("/v1/rerank", headers=AUTH, json={"query": "zebra", "documents": ["x", "y"]}).json()
    assert rr["reranker"] == "none" and [x["index"] for x in rr["results"]] == [0, 1]
    assert rr["results"][0]["relevance_score"] is None  # no model: no invented scores
    assert stages.retrieved == [False]  # a client's documents have no retrieval order to fuse


def test_auth(client):
    assert client.get("/healthz").json() == {"status": "ok"}  # open
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"}):
        r = client.post("/v1/query", json={"question": "zebras?"}, headers=headers)
        error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
    error(client.get("/readyz"), 401, "unauthorized")
    assert client.post("/v1/retrieve", json={"query": "z"}, headers={"Authorization": "Bearer second-key"}).is_success


@pytest.mark.parametrize(("body", "field"), [
    ({"question": "   "}, "question"),
    ({"question": ""}, "question"),
    ({}, "question"),
    ({"question": "zebras?", "top_k": 0}, "top_k"),
    ({"question": "zebras?", "top_k": "many"}, "top_k"),
    ({"question": "zebras?", "top_k": 1000}, "top_k"),
    ({"question": "zebras?", "colour": "blue"}, "colour"),
    ({"question": "zebras?", "mode": "fuzzy"}, "mode"),
    ({"question": " ".join(["word"] * 21)}, "question"),  # over max_question_tokens (20 words here)
])
def test_bad_query_bodies_are_422_naming_the_field(client, body, field):
    e = error(client.post("/v1/query", json=body, headers=AUTH), 422, "invalid_request")
    assert e["message"].startswith(field) or e.get("field") == field, e


@pytest.mark.parametrize(("path", "body", "message"), [
    ("/v1/retrieve", {"query": "z", "sources": ["*.md"] * 4}, "sources: 4 items; the limit is 3 (api.max_sources)"),
    ("/v1/retrieve", {"query": "z", "sources": ["*" * 40]}, "sources[0]: 40 characters; the limit is 32"),
    ("/v1/query", {"question": "x" * 200}, "question: 200 characters; the limit is 100 (api.max_question_chars)"),
    ("/v1/query", {"question": "zebras \ud800?"}, "question: not valid Unicode text"),
    ("/v1/query", {"question": "zebras?", "temperature": 1e-300}, "temperature: use 0 for greedy"),
    ("/v1/rerank", {"query": "q", "documents": ["d"] * 5}, "documents: 5 items; the limit is 4"),
    ("/v1/rerank", {"query": "q", "documents": ["d", "e" * 65]}, "documents[1]: 65 characters; the limit is 64"),
    ("/v1/embeddings", {"input": ["a"] * 5}, "input: 5 items; the limit is 4 (api.max_embed_inputs)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}] * 7}, "messages: 7 items"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a" * 65}, {"role": "user", "content": "hi"}]},
     "messages[0].content: 65 characters; the limit is 64 (api.max_message_chars)"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b", "c"]},
     "stop: 3 items; the limit is 2"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "seed": 2**70}, "seed"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
     "messages.0.content"),
])
def test_every_list_and_text_is_bounded_and_bad_unicode_is_422(stages, storage, path, body, message):
    cfg = ServeConfig()
    cfg.api = cfg.api.model_copy(update={
        "max_sources": 3, "max_source_chars": 32, "max_question_chars": 100, "max_rerank_documents": 4,
        "max_embed_inputs": 4, "max_document_chars": 64, "max_messages": 6, "max_message_chars": 64, "max_stop": 2})
    api = serve_api(stages, cfg, [KEY], storage)
    raw = json.dumps(body).encode()  # a lone surrogate goes out as JSON's own escape, as a client sends it
    r = TestClient(api).post(path, content=raw, headers={**AUTH, "content-type": "application/json"})
    assert message in error(r, 422, "invalid_request")["message"]
    assert stages.calls == [], "refused before any stage ran"


def test_malformed_json_and_wrong_shapes(client):
    e = error(client.post("/v1/query", content=b'{"question": ', headers={**AUTH, "content-type": "application/json"}),
              422, "invalid_request")
    assert "malformed JSON" in e["message"] and e["field"] == "body"
    # bytes that are not UTF-8 (FastAPI's own 400): the same 422, the status /openapi.json declares
    e = error(client.post("/v1/retrieve", content=b"\x1e\xe9A\xb3\x100\xa91", headers={
        **AUTH, "content-type": "application/json"}), 422, "invalid_request")
    assert "malformed JSON" in e["message"] and e["field"] == "body"
    error(client.post("/v1/chat/completions", json={"messages": []}, headers=AUTH), 422, "invalid_request")
    e = error(client.post("/v1/chat/completions", headers=AUTH,
                          json={"messages": [{"role": "assistant", "content": "hi"}]}), 422, "invalid_request")
    assert "last message" in e["message"]
    error(client.post("/v1/chat/completions", headers=AUTH,
                      json={"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}), 404,
          "model_not_found")
    error(client.post("/v1/embeddings", headers=AUTH, json={"input": []}), 422, "invalid_request")
    error(client.post("/v1/embeddings", headers=AUTH, json={"input": "a", "dimensions": 7}), 422, "invalid_request")
    error(client.post("/v1/rerank", headers=AUTH, json={"query": "q", "documents": []}), 422, "invalid_request")
    error(client.get("/v1/nothing", headers=AUTH), 404, "not_found")


def test_body_over_the_limit_is_413(client):
    big = {"question": "x" * 4000}
    error(client.post("/v1/query", json=big, headers=AUTH), 413, "request_too_large")

    def chunks():  # no content-length: the limit holds for a chunked body too
        yield b'{"question": "'
        yield b"y" * 4000
        yield b'"}'

    error(client.post("/v1/query", content=chunks(), headers={**AUTH, "content-type": "application/json"}), 413,
          "request_too_large")


def test_overload_not_ready_and_internal_errors(client, stages):
    stages.fail["generate"] = BackPressureError(num_queued_requests=16, max_queued_requests=16)
    r = client.post("/v1/query", json={"question": "zebras?"}, headers=AUTH)
    error(r, 503, "overloaded")
    assert r.headers["retry-after"] == "1"
    stages.fail = {"retrieve": NotReady("no index version is published yet")}
    error(client.post("/v1/retrieve", json={"query": "z"}, headers=AUTH), 503, "not_ready")
    r = client.get("/readyz", headers=AUTH)
    assert r.status_code == 503
    body = r.json()  # what each stage said, and nothing it did not (no nulls for a not-ready retriever's fields)
    assert body["ready"] is False
    assert body["retriever"] == {"ready": False, "reason": "no index version is published yet"}
    assert body["generator"] == {"ready": False, "error": "no answer within 3 s"}
    assert set(body["admission"]) == {"running", "tokens_per_s", "share_of_max_tokens", "budget_s"}
    stages.fail = {"rerank": KeyError("secret internals")}
    e = error(client.post("/v1/query", json={"question": "zebras?"}, headers=AUTH), 500, "internal_error")
    assert "secret internals" not in e["message"]


def test_a_replicas_errors_keep_their_meaning_across_ray(client, stages):
    """Ray wraps a replica's exception: the caller's mistake stays a 422, a bug stays a 500 (a bare ValueError is
    a bug, not the caller's fault), and a dead replica is a 503 to retry."""
    from ray.exceptions import RayActorError, RayTaskError

    from app.errors import UserError

    def wrapped(cause: Exception) -> RayTaskError:
        return RayTaskError("Retriever.retrieve", "Traceback (most recent call last): ...", cause)

    stages.fail = {"retrieve": wrapped(UserError("sources: bad pattern"))}
    assert error(client.post("/v1/retrieve", json={"query": "z"}, headers=AUTH), 422,
                 "invalid_request")["message"] == "sources: bad pattern"
    stages.fail = {"retrieve": wrapped(ValueError("a bug's message"))}
    assert "a bug" not in error(client.post("/v1/retrieve", json={"query": "z"}, headers=AUTH), 500,
                                "internal_error")["message"]
    stages.fail = {"generate": RayActorError()}
    r = client.post("/v1/query", json={"question": "zebras?"}, headers=AUTH)
    error(r, 503, "unavailable")
    assert r.headers["retry-after"] == "1"


def test_timeout_is_504_and_stops_the_stream(client, stages):
    stages.slow = 0.3  # five tokens at 0.3 s each: over the 0.5 s request timeout
    error(client.post("/v1/query", json={"question": "zebras?"}, headers=AUTH), 504, "timeout")
    with client.stream("POST", "/v1/query", json={"question": "zebras?", "stream": True}, headers=AUTH) as r:
        events = sse_events(r.read().decode())
    assert events[-1][0] == "error" and json.loads(events[-1][1])["error"]["type"] == "timeout"
    assert len([k for k, _ in events if k == "token"]) < 5


def test_questions_are_measured_by_the_served_indexs_embedder(tmp_path):
    """The Ingress names and counts with the embedder of the index the Retriever serves (pinned, else the latest),
    and with the configured one only until an index is published."""
    from app.catalog import Catalog, EmbedderInfo, Manifest, now_iso
    from app.storage import Storage
    from deployments.ingress import IndexEmbedder

    storage = Storage(str(tmp_path))
    follow = IndexEmbedder(storage, None, "all-MiniLM-L6-v2", poll_interval_s=3600)
    assert follow.name == "all-MiniLM-L6-v2" and follow.count_tokens("zebras cross rivers") > 0
    for name in ("sentence-transformers/all-MiniLM-L6-v2", "all-minilm-l6-v2"):  # both the packaged MiniLM
        Catalog(storage).publish(Manifest(kind="indexes", version=0, created_at=now_iso(),
                                          embedder=EmbedderInfo(name=name, revision="r", dim=384)))
        follow._refresh()
        if name.startswith("sentence-transformers/"):  # version 1: pin it
            pinned = IndexEmbedder(storage, 1, "all-MiniLM-L6-v2", poll_interval_s=3600)
        pinned._refresh()
        assert follow.name == name and follow.count_tokens("zebras cross rivers") > 0
        assert pinned.name == "sentence-transformers/all-MiniLM-L6-v2"
    follow.watcher.stop()
    pinned.watcher.stop()


def test_the_console_loads_without_a_key_and_everything_it_shows_needs_one(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/console/console.js"' in page.text
    for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = client.get(f"/console/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
        assert "https://" not in r.text, "shipped in the package: nothing from a CDN"
    error(client.get("/console/index.py", headers=AUTH), 404, "not_found")
    for path in ("/v1/status", "/v1/chunks/c1", "/console/index.py"):
        error(client.get(path), 401, "unauthorized")
    assert "/v1/status" in client.get("/openapi.json", headers=AUTH).json()["paths"]


def test_a_cited_chunk_opens_in_its_document(client):
    r = client.get(f"/v1/chunks/{HIT.chunk_id}", headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["document"][body["start_char"]:body["end_char"]] == HIT.text
    assert (body["doc_id"], body["title"], body["source"], body["index_version"]) == ("zebra", "Zebras", HIT.source, 3)
    assert "not in collection 'default'" in error(client.get("/v1/chunks/nope", headers=AUTH), 404,
                                                 "not_found")["message"]
    error(client.get(f"/v1/chunks/{'x' * 200}", headers=AUTH), 422, "invalid_request")


def test_status_shows_runs_versions_and_evaluations_from_storage(client, storage):
    from app.eval import answers
    from app.services.runs import ingest_run_store

    assert client.get("/v1/status", headers=AUTH).json() == {
        "storage": storage.uri, "ingest_runs": [], "datasets": [], "indexes": [], "models": [], "training_runs": [],
        "evals": {"answers": [], "retrieval": []}}
    report = {"documents": {"read": 7, "kept": 5, "dropped": {"empty": 1, "exact_duplicate": 0, "unreadable": 1}},
              "inputs": {"files": 7, "unreadable_files": 1, "skipped_files": [], "refused_files": []},
              "quarantined": [{"source": "/d/bad.html", "reason": "ParserRejectedMarkup", "detail": "bad tag"}],
              "chunks": 9, "dataset_version": 1, "index_version": 1}
    ingest_run_store(storage).save({"run_id": "r1", "state": "succeeded", "paths": ["/d"], "report": report,
                                    "submitted_at": "2026-11-25T10:00:00+00:00"})
    ingest_run_store(storage).save({"run_id": "r2", "state": "failed", "error": "UserError: no files",
                                    "submitted_at": "2026-11-25T11:00:00+00:00"})
    evaluated = answers.AnswerEvalReport(
        run_id="answers-1", dataset="qs.jsonl", split="dev", questions=1, errors=0, index_version=1,
        generator="sft:v2", top_k=5, exact_match=100.0, f1=100.0, citation_accuracy=1.0, gold_in_context=1.0,
        idk_rate=0.0, answer_tokens=3.0, latency_p50_s=0.5, latency_p95_s=0.5, tokens_per_s=6.0, wall_s=1.0,
        started_at="2026-11-25T12:00:00+00:00")
    answers.save(storage, evaluated, [])
    status = client.get("/v1/status", headers=AUTH).json()
    assert [r["run_id"] for r in status["ingest_runs"]] == ["r2", "r1"], "newest first"
    failed, done = status["ingest_runs"]
    assert failed["error"] == "UserError: no files" and failed["read"] is None and failed["quarantined"] == []
    assert (done["read"], done["kept"], done["dropped"]) == (7, 5, {"empty": 1, "unreadable": 1})
    assert done["quarantined"][0]["reason"] == "ParserRejectedMarkup" and done["index_version"] == 1
    assert status["evals"]["answers"][0]["generator"] == "sft:v2" and status["evals"]["answers"][0]["f1"] == 100.0


def test_generations_past_what_can_finish_in_time_are_refused_at_once_streamed_or_not(stages, storage):
    """One answer is generating and nothing is measured yet (floor 1): the next answers get 503 + Retry-After at
    once, streamed or not, while retrieval still works; once the first has finished, answers are admitted again."""
    cfg = ServeConfig()
    cfg.api.generation_floor, cfg.api.request_timeout_s = 1, 10
    stages.slow = 0.2  # five words: a second of generating
    with TestClient(serve_api(stages, cfg, [KEY], storage)) as client:
        first: list = []
        running = threading.Thread(target=lambda: first.append(
            client.post("/v1/query", json={"question": "When do zebras cross?"}, headers=AUTH)))
        running.start()
        while "generate" not in stages.calls:
            time.sleep(0.01)
        for body in ({"question": "Zebras?"}, {"question": "Zebras?", "stream": True}):
            t0 = time.perf_counter()
            r = client.post("/v1/query", json=body, headers=AUTH)
            assert time.perf_counter() - t0 < 0.5 and r.headers["retry-after"] == "1"
            assert "not measured yet" in error(r, 503, "overloaded")["message"]
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Zebras?"}]},
                        headers=AUTH)
        error(r, 503, "overloaded")
        assert client.post("/v1/retrieve", json={"query": "zebras"}, headers=AUTH).status_code == 200
        running.join()
        assert first[0].status_code == 200
        admission = client.get("/readyz", headers=AUTH).json()["admission"]
        assert admission["running"] == 0 and admission["tokens_per_s"] > 0, admission
        assert client.post("/v1/query", json={"question": "Zebras?", "stream": True}, headers=AUTH).status_code == 200
        assert client.get("/readyz", headers=AUTH).json()["admission"]["running"] == 0  # the stream gave it back


def test_openapi_describes_every_body_and_what_the_routes_send_matches_it(client, stages):
    """Every route declares its 200 body and its error bodies (`{"error": {...}}`, not FastAPI's `detail`), and
    real responses, success and error, streamed or not, validate against /openapi.json as schemathesis checks them
    against the deployed graph (tests/integration/test_serve.py)."""
    import schemathesis

    spec = client.get("/openapi.json", headers=AUTH).json()
    error_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            responses = op["responses"]
            if path.endswith("/pages/{page}"):  # a page image
                assert set(responses["200"]["content"]) == {"image/png"}, (method, path)
            else:
                ok = responses["200"]["content"]["application/json"]["schema"]
                assert ok.get("$ref") or ok.get("type") == "object", (method, path, ok)  # not `{}`: undescribed
            if path == "/healthz":  # open, and answers nothing else
                continue
            assert responses["401"]["content"]["application/json"]["schema"] == error_ref, (method, path)
            assert responses["500"]["content"]["application/json"]["schema"] == error_ref, (method, path)
            if op.get("requestBody") or op.get("parameters"):
                assert responses["422"]["content"]["application/json"]["schema"] == error_ref, (method, path)
            if op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get(
                    "$ref", "").endswith(("QueryRequest", "ChatCompletionRequest")):
                assert "text/event-stream" in responses["200"]["content"], (method, path)

    schema = schemathesis.openapi.from_dict(spec)
    question = {"question": "zebras?"}
    chat = {"messages": [{"role": "user", "content": "zebras?"}]}
    calls = [
        ("GET", "/healthz", "/healthz", None), ("GET", "/readyz", "/readyz", None),
        ("GET", "/v1/models", "/v1/models", None), ("GET", "/v1/status", "/v1/status", None),
        ("GET", "/v1/chunks/{chunk_id}", "/v1/chunks/c1", None),
        ("GET", "/v1/chunks/{chunk_id}", "/v1/chunks/nope", None),  # 404
        ("GET", "/v1/chunks/{chunk_id}/pages/{page}", "/v1/chunks/c1/pages/1", None),  # 404: not from a PDF
        ("GET", "/v1/chunks/{chunk_id}/pages/{page}", "/v1/chunks/c1/pages/0", None),  # 422
        ("POST", "/v1/retrieve", "/v1/retrieve", {"query": "zebra"}),
        ("POST", "/v1/retrieve", "/v1/retrieve", {"query": "zebra", "top_k": 0}),  # 422
        ("POST", "/v1/rerank", "/v1/rerank", {"query": "zebra", "documents": ["x", "y"]}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"input": ["a", "b"]}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"input": "a", "encoding_format": "base64"}),
        ("POST", "/v1/embeddings", "/v1/embeddings", {"input": "a", "model": "other"}),  # 404
        ("POST", "/v1/query", "/v1/query", question), ("POST", "/v1/query", "/v1/query", {**question, "stream": True}),
        ("POST", "/v1/chat/completions", "/v1/chat/completions", chat),
        ("POST", "/v1/chat/completions", "/v1/chat/completions",
         {**chat, "stream": True, "stream_options": {"include_usage": True}}),
    ]
    seen = set()
    for method, path, url, body in calls:
        for headers in (AUTH, {}):
            r = client.request(method, url, json=body, headers=headers)
            documented = spec["paths"][path][method.lower()]["responses"]
            assert str(r.status_code) in documented, (method, url, r.status_code, r.text)
            schema[path][method].validate_response(r)  # raises with what does not match
            seen.add(r.status_code)
    stages.fail = {"retrieve": NotReady("no index version is published yet")}
    for method, path, body in (("GET", "/readyz", None), ("POST", "/v1/retrieve", {"query": "zebra"})):
        r = client.request(method, path, json=body, headers=AUTH)
        assert r.status_code == 503
        schema[path][method].validate_response(r)
    assert seen == {200, 401, 404, 422}
