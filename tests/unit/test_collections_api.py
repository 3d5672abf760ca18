"""Collections and scoped keys at the HTTP edge, tried as an attacker would (FastAPI TestClient over fake stages,
no Ray): a key scoped to `hr` gets from every route the same answer for another collection as for one that does not
exist, no stage ever sees such a request, and what it lists is only its own. The served graph's own test is
tests/integration/test_collections.py."""

import hashlib
import json
import random
import statistics
import time

import pytest
from fastapi.testclient import TestClient

from app import apikeys
from app.config import ServeConfig
from app.rag.flow import RagFlow
from app.storage import Storage
from deployments.api import build_api
from deployments.readiness import LoadedCollection, RetrieverReady
from tests.unit.test_api import FakeStages, WordCounter

ADMIN = "admin-key-0123456789abcdef"
HR = "hr-reader-key-0123456789"
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
AS_HR = {"Authorization": f"Bearer {HR}"}
HR_ID = apikeys.key_id(hashlib.sha256(HR.encode()).digest())
# what a key scoped to hr may not read, exists or not: each must answer as "absent" does
FORBIDDEN = ("default", "eng")
ABSENT = "nope"
# names an attacker tries to reach `eng` (or anything) with: none may answer 200
VARIANTS = ("ENG", "Eng", "eng ", " eng", "../eng", "hr/../eng", "eng/", "./eng", "ｅｎｇ", "eng\u200b", "e\u0301ng",
            "hr\x00", "%2e%2e%2feng", "collections/eng", "*", "")


@pytest.fixture
def storage(tmp_path):
    root = Storage(str(tmp_path / "store"))
    for name in ("hr", "eng"):
        root.makedirs(f"collections/{name}")
    return root


@pytest.fixture
def stages():
    return FakeStages()


@pytest.fixture
def client(stages, storage):
    cfg = ServeConfig()
    cfg.api.request_timeout_s = 2
    cfg.api.key_refusal_hold_s = 0  # the timing test sends refused requests back to back
    keys = apikeys.KeyRing.of_entries(apikeys.parse(f"{ADMIN}\n{HR} collections=hr\n", "keys"))
    api = build_api(RagFlow(stages, candidates=0), cfg.api, keys, generator="SmolLM2-135M-Instruct",
                    max_new_tokens=cfg.generator.max_new_tokens, embedder=WordCounter(), storage=storage)
    return TestClient(api, raise_server_exceptions=False)


def calls(client: TestClient, collection: str, headers: dict[str, str]) -> dict[str, object]:
    """Every route that reads a collection, asked for `collection`: route → (status, error type, message with the
    name taken out)."""
    model = f"ragline/{collection}"
    requests = {
        "retrieve": lambda: client.post("/v1/retrieve", json={"query": "leave", "collection": collection},
                                        headers=headers),
        "query": lambda: client.post("/v1/query", json={"question": "leave?", "collection": collection},
                                     headers=headers),
        "query-stream": lambda: client.post("/v1/query", json={"question": "leave?", "collection": collection,
                                                               "stream": True}, headers=headers),
        "chat": lambda: client.post("/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "leave?"}]}, headers=headers),
        "embeddings": lambda: client.post("/v1/embeddings", json={"model": model, "input": "leave"}, headers=headers),
        "chunk": lambda: client.get("/v1/chunks/c1", params={"collection": collection}, headers=headers),
        "page": lambda: client.get("/v1/chunks/c1/pages/1", params={"collection": collection}, headers=headers),
    }
    out: dict[str, object] = {}
    for route, send in requests.items():
        r = send()
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        error = body.get("error", {})
        out[route] = (r.status_code, error.get("type"), str(error.get("message", "")).replace(repr(collection), "X"))
    return out


def test_a_scoped_key_reads_its_collection(client, stages):
    r = client.post("/v1/retrieve", json={"query": "leave", "collection": "hr"}, headers=AS_HR)
    assert r.status_code == 200 and r.json()["collection"] == "hr"
    assert stages.searches[-1].collection == "hr"
    r = client.post("/v1/chat/completions", json={"model": "ragline/hr", "messages": [{"role": "user",
                                                                                        "content": "leave?"}]},
                    headers=AS_HR)
    assert r.status_code == 200 and r.json()["ragline"]["collection"] == "hr"
    assert client.get("/v1/chunks/c1", params={"collection": "hr"}, headers=AS_HR).json()["collection"] == "hr"


def test_another_collection_answers_exactly_as_an_absent_one_and_reaches_no_stage(client, stages):
    absent = calls(client, ABSENT, AS_HR)
    assert all(status == 404 and kind == "not_found" for status, kind, _ in absent.values()), absent
    for name in FORBIDDEN:
        assert calls(client, name, AS_HR) == absent, name
    assert stages.calls == []  # no stage saw any of them
    # the admin key reads them all (the fake stages answer for any collection)
    assert all(status == 200 for status, _, _ in
               [v for k, v in calls(client, "eng", AS_ADMIN).items() if k != "page"]), "admin"


@pytest.mark.parametrize("name", VARIANTS)
def test_case_unicode_and_path_variants_never_reach_a_collection(client, stages, name):
    for route, (status, kind, _) in calls(client, name, AS_HR).items():
        assert status in (404, 422), (route, name, status)
        assert kind in ("not_found", "invalid_request"), (route, kind)
    assert stages.calls == []


def test_lists_show_only_what_the_key_may_read(client, stages):
    models = {m["id"] for m in client.get("/v1/models", headers=AS_HR).json()["data"]}
    assert "ragline/hr" in models and not {"ragline/default", "ragline/eng"} & models
    assert [c["name"] for c in client.get("/v1/collections", headers=AS_HR).json()["data"]] == ["hr"]
    assert [c["name"] for c in client.get("/v1/collections", headers=AS_ADMIN).json()["data"]] == [
        "default", "eng", "hr"]
    r = client.get("/v1/status", headers=AS_HR)  # spans every collection: admin keys only
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden" and HR not in r.text
    assert client.get("/v1/status", headers=AS_ADMIN).status_code == 200


def test_readiness_names_only_the_collections_the_key_may_read(client, stages):
    loaded = {"default": LoadedCollection(index_version=3, chunks=2, mib=1.0),
              "hr": LoadedCollection(index_version=1, chunks=8, mib=0.5)}

    async def ready():
        return {**await FakeStages.ready(stages), "retriever": RetrieverReady(
            ready=True, collection="default", index_version=3, dataset_version=2, embedder="all-MiniLM-L6-v2",
            chunks=2, computes="torch fp32 on cpu", collections=loaded, memory_budget_mib=4096)}

    stages.ready = ready
    as_hr = client.get("/readyz", headers=AS_HR).json()["retriever"]
    assert as_hr["collections"] == {"hr": {"index_version": 1, "chunks": 8, "mib": 0.5}}
    assert not {"collection", "index_version", "dataset_version", "chunks"} & set(as_hr)
    assert "default" not in json.dumps(as_hr)
    as_admin = client.get("/readyz", headers=AS_ADMIN).json()["retriever"]
    assert set(as_admin["collections"]) == {"default", "hr"} and as_admin["index_version"] == 3


@pytest.mark.parametrize("where, part", [
    ({"$gt": 1}, "$gt"), ({"year": {"$between": [1, 2]}}, "$between"), ({"$or": []}, "$or"),
    ({"year": {"$gte": [2020]}}, "year"), ({"a b": 1}, "a b"), ("department=hr", "filter")])
def test_a_bad_filter_is_a_422_naming_its_part(client, stages, where, part):
    r = client.post("/v1/retrieve", json={"query": "leave", "collection": "hr", "filter": where}, headers=AS_HR)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"].startswith("filter") and part in error["message"], error
    assert stages.calls == []


def test_a_filter_goes_to_the_search_of_the_named_collection(client, stages):
    where = {"department": "hr", "year": {"$gte": 2020}}
    r = client.post("/v1/retrieve", json={"query": "leave", "collection": "hr", "filter": where}, headers=AS_HR)
    assert r.status_code == 200, r.text
    assert stages.searches[-1].collection == "hr" and stages.searches[-1].where is not None


def test_forbidden_and_absent_take_the_same_time(client):
    """No existence leak by timing: 200 requests each, lower quartiles within noise (a forbidden name is refused
    before the collections are looked up, an absent one after a look at a cached set). On some machines a TestClient
    call takes either about 1.7 or about 3.0 ms, whatever it asks, in a mix that drifts during the run and, under
    load, with the call's place in a fixed order: so each pair goes in random order, and the lower quartiles, not
    medians between the modes, are compared."""
    times: dict[str, list[float]] = {"eng": [], ABSENT: []}
    rng = random.Random(0)
    for _ in range(200):
        for name in rng.sample(list(times), 2):
            t0 = time.perf_counter()
            r = client.post("/v1/retrieve", json={"query": "leave", "collection": name}, headers=AS_HR)
            times[name].append(time.perf_counter() - t0)
            assert r.status_code == 404
    forbidden, absent = (statistics.quantiles(times[n], n=4)[0] for n in ("eng", ABSENT))
    assert abs(forbidden - absent) < max(0.2e-3, 0.25 * absent), (forbidden, absent)


def test_the_audit_log_names_the_key_id_and_what_was_read_never_the_key(client, storage):
    client.post("/v1/retrieve", json={"query": "leave", "collection": "hr"}, headers=AS_HR)
    client.post("/v1/retrieve", json={"query": "leave", "collection": "eng"}, headers=AS_HR)
    client.get("/v1/chunks/c1", params={"collection": "hr"}, headers=AS_HR)
    text = "".join(p.read_text() for p in storage.local_path("audit").glob("audit-*.jsonl"))
    assert HR not in text and ADMIN not in text
    lines = [json.loads(line) for line in text.splitlines()]
    mine = [(d["route"], d["status"], d["collection"], d["chunk_ids"]) for d in lines if d["key_id"] == HR_ID]
    assert mine == [("/v1/retrieve", 200, "hr", ["c1", "c2"]), ("/v1/retrieve", 404, "eng", []),
                    ("/v1/chunks/c1", 200, "hr", ["c1"])]
