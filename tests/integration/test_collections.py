"""Two collections in one served graph (tests/conftest.py `served`: the fixture corpus in `default`, the HR
handbook of tests/helpers.py in `hr`), a key scoped to `hr` made with `ragline keys create`, metadata filters in
the three search modes, and the key revoked. Leaves the key file with the hr key revoked; nothing else changes.
The edge's refusals, route by route and name by name, are tests/unit/test_collections_api.py's."""

import io
import json
import time

import httpx
from openai import OpenAI
from rich.console import Console
from typer.testing import CliRunner

from app.cli import app, render
from app.cli import keys as keys_cli

HR_DOCS = {f"hr-{i}" for i in range(6)} | {"legal-1", "finance-1"}
ASK = "annual leave policy"


def cli(served, monkeypatch, *args: str) -> str:
    """`ragline --storage ROOT ARGS` in this process: what it printed (its consoles are bound at import, so they
    are pointed at a buffer)."""
    buf = io.StringIO()
    console = Console(file=buf, width=250)
    monkeypatch.setattr(render, "out", console)
    monkeypatch.setattr(keys_cli, "out", console)
    r = CliRunner().invoke(app, ["--storage", served.storage.uri, *args])
    assert r.exit_code == 0, (r.output, r.exception)
    return buf.getvalue()


def retrieve(served, headers, **body) -> httpx.Response:
    return httpx.post(f"{served.url}/v1/retrieve", json={"query": ASK, **body}, headers=headers, timeout=60)


def until(check, timeout_s: float = 10.0) -> None:
    """The Ingress re-reads its key file within a second of a change."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the key file change was not picked up"
        time.sleep(0.2)


def test_two_collections_one_graph_a_scoped_key_and_filters_in_every_mode(served, monkeypatch):
    created = json.loads(cli(served, monkeypatch, "keys", "create", "--collections", "hr", "--label", "hr team",
                             "--json"))
    as_hr = {"Authorization": f"Bearer {created['key']}"}
    until(lambda: retrieve(served, as_hr, collection="hr").status_code == 200)

    # metadata filters apply inside the search: the weak legal match is not in the unfiltered top 5, yet a filtered
    # top 1 finds it, in every mode
    for mode in ("dense", "lexical", "hybrid"):
        top5 = [h["doc_id"] for h in retrieve(served, as_hr, collection="hr", mode=mode, top_k=5).json()["hits"]]
        assert "legal-1" not in top5 and set(top5) <= HR_DOCS, (mode, top5)
        legal = retrieve(served, as_hr, collection="hr", mode=mode, top_k=1, filter={"department": "legal"}).json()
        assert [h["doc_id"] for h in legal["hits"]] == ["legal-1"], (mode, legal)
        recent = retrieve(served, as_hr, collection="hr", mode=mode, top_k=10,
                          filter={"$and": [{"year": {"$gte": 2022}}, {"department": {"$in": ["hr", "legal"]}}]})
        assert {h["doc_id"] for h in recent.json()["hits"]} == {"hr-3", "hr-4", "hr-5"}, (mode, recent.text)
        early = retrieve(served, as_hr, collection="hr", mode=mode, top_k=10,
                         filter={"published": {"$lt": "2019-06-01"}})
        assert {h["doc_id"] for h in early.json()["hits"]} <= {"hr-0", "legal-1"}, (mode, early.text)
        assert all(h["metadata"]["published"] < "2019-06-01" for h in early.json()["hits"])
    unknown = retrieve(served, as_hr, collection="hr", filter={"salary": {"$gt": 1}})
    assert unknown.status_code == 422 and "salary" in unknown.json()["error"]["message"], unknown.text

    # the other collection is "not found", exactly as one that does not exist; its chunk ids are not found in hr
    zebra = retrieve(served, served.auth, query="zebra migration", top_k=1).json()["hits"][0]["chunk_id"]
    answers = {}
    for name in ("default", "nope"):
        r = httpx.get(f"{served.url}/v1/chunks/{zebra}", params={"collection": name}, headers=as_hr, timeout=30)
        answers[name] = (r.status_code, r.json()["error"]["message"].replace(repr(name), "X"))
    assert answers["default"] == answers["nope"] and answers["nope"][0] == 404
    for headers in (as_hr, served.auth):  # an id from default is not in hr, whoever asks
        r = httpx.get(f"{served.url}/v1/chunks/{zebra}", params={"collection": "hr"}, headers=headers, timeout=30)
        assert r.status_code == 404, r.text

    # answers from hr cite hr only, through /v1/query and through the OpenAI client naming the collection as the model
    r = httpx.post(f"{served.url}/v1/query", json={"question": "How many days of annual leave do staff accrue?",
                                                   "collection": "hr", "max_tokens": 16}, headers=as_hr, timeout=120)
    assert r.status_code == 200 and r.json()["collection"] == "hr", r.text
    assert {c["doc_id"] for c in r.json()["citations"]} <= HR_DOCS
    client = OpenAI(base_url=f"{served.url}/v1", api_key=created["key"], timeout=120)
    assert {m.id for m in client.models.list()} == {"SmolLM2-135M-Instruct", "all-MiniLM-L6-v2", "ragline/hr"}
    done = client.chat.completions.create(model="ragline/hr", max_tokens=8,
                                          messages=[{"role": "user", "content": "Who reviews vendor contracts?"}],
                                          extra_body={"filter": {"department": "legal"}})
    assert [c["doc_id"] for c in done.model_extra["citations"]] == ["legal-1"]
    ready = httpx.get(f"{served.url}/readyz", headers=as_hr, timeout=10).json()["retriever"]
    assert set(ready["collections"]) == {"hr"}, ready  # default is loaded too, and not named to this key

    # the audit log: this key's requests by its id, the chunks they returned, never the key
    audit = "".join(p.read_text() for p in (served.tmp / "audit").glob("audit-*.jsonl"))
    assert created["key"] not in audit
    mine = [json.loads(line) for line in audit.splitlines() if created["key_id"] in line]
    assert {(d["route"], d["collection"]) for d in mine} >= {("/v1/retrieve", "hr"), ("/v1/chunks/" + zebra,
                                                                                          "default")}
    assert any(set(d["chunk_ids"]) and d["route"] == "/v1/query" for d in mine)

    # the CLI: the collections and a filtered search of one
    status = json.loads(cli(served, monkeypatch, "status", "--collection", "hr", "--json"))
    assert status["collections"]["hr"]["chunks"] == len(HR_DOCS) and status["indexes"][0]["version"] == 1
    found = json.loads(cli(served, monkeypatch, "search", ASK, "--collection", "hr", "-k", "1", "--where",
                           '{"department": "finance"}', "--json"))
    assert [h["doc_id"] for h in found["hits"]] == ["finance-1"]

    cli(served, monkeypatch, "keys", "revoke", created["key_id"])
    until(lambda: retrieve(served, as_hr, collection="hr").status_code == 401)
