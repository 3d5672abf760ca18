"""The audit log (app/audit.py) and the Guard that writes it (deployments/guard.py): one JSON line per keyed
request, never the key, rotated by size, a file per writer; the caller in the routes' state."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fastapi import FastAPI, Request

from app import apikeys
from app.audit import AuditLog, audit_dir
from app.storage import Storage
from deployments.fairshare import FairShare
from deployments.guard import Guard, caller_of, record_read

HR_KEY, ADMIN_KEY = "hr-reader-key-0123456789", "admin-key-0123456789"


def lines(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("audit-*.jsonl*")) for line in f.read_text().splitlines()]


def test_records_are_json_lines_without_the_key(tmp_path):
    log = AuditLog(str(tmp_path), max_bytes=1 << 20, backups=2)
    log.write("key-0123456789ab", "/v1/retrieve", "POST", 200, "hr", ["c1", "c2"])
    log.write(None, "/v1/query", "POST", 401)
    log.close()
    got = lines(tmp_path)
    assert [{k: v for k, v in r.items() if k != "time"} for r in got] == [
        {"key_id": "key-0123456789ab", "route": "/v1/retrieve", "method": "POST", "status": 200, "collection": "hr",
         "chunk_ids": ["c1", "c2"]},
        {"key_id": None, "route": "/v1/query", "method": "POST", "status": 401, "collection": None, "chunk_ids": []}]
    assert got[0]["time"].endswith("+00:00") and Path(log.path).name.startswith("audit-")


def test_the_file_rotates_at_its_size_limit(tmp_path):
    log = AuditLog(str(tmp_path), max_bytes=1024, backups=2)
    for i in range(60):  # ~130 bytes a line: several rotations, of which two backups are kept
        log.write("key-0123456789ab", f"/v1/retrieve/{i}", "POST", 200, "hr", [f"chunk-{i}"])
    log.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    base = Path(log.path).name
    assert files == [base, f"{base}.1", f"{base}.2"]
    assert all(p.stat().st_size <= 1024 for p in tmp_path.iterdir())
    routes = [r["route"] for r in lines(tmp_path)]
    assert "/v1/retrieve/59" in routes and "/v1/retrieve/0" not in routes  # the oldest went


def test_two_writers_in_one_directory_write_separate_files(tmp_path):
    first, second = AuditLog(str(tmp_path), 1 << 20, 1), AuditLog(str(tmp_path), 1 << 20, 1)
    first.write("key-aaaaaaaaaaaa", "/v1/query", "POST", 200)
    second.write("key-bbbbbbbbbbbb", "/v1/query", "POST", 200)
    first.close()
    second.close()
    assert first.path != second.path
    assert [json.loads(Path(p).read_text())["key_id"] for p in (first.path, second.path)] == [
        "key-aaaaaaaaaaaa", "key-bbbbbbbbbbbb"]


def test_audit_dir_defaults_under_a_local_root(tmp_path):
    assert audit_dir(None, Storage(str(tmp_path))) == str(tmp_path / "audit")
    assert audit_dir(str(tmp_path / "elsewhere"), Storage(str(tmp_path))) == str(tmp_path / "elsewhere")


def test_the_guard_puts_the_caller_in_state_and_audits_what_the_route_read(tmp_path):
    app = FastAPI()
    seen: list[apikeys.Caller] = []

    @app.get("/v1/read/{collection}")
    async def read(collection: str, request: Request) -> dict[str, list[str]]:
        caller = caller_of(request)
        seen.append(caller)
        assert request.state.caller is caller  # what Starlette shows a route
        if not caller.scope.may_read(collection):
            record_read(request, collection, [])
            return {"chunks": []}
        record_read(request, collection, [f"{collection}-1", f"{collection}-2"])
        return {"chunks": [f"{collection}-1", f"{collection}-2"]}

    keys = apikeys.parse(f"{HR_KEY} collections=hr\n{ADMIN_KEY}\n", "f")
    audit = AuditLog(str(tmp_path), 1 << 20, 1)
    guard = Guard(app, apikeys.KeyRing.of_entries(keys), 65_536, FairShare(slots=1, max_waiting=4),
                  retry_after_s=1, audit=audit)

    async def get(path: str, key: str) -> int:
        statuses: list[int] = []

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await guard({"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
                     "root_path": "", "scheme": "http", "server": ("testserver", 80),
                     "headers": [(b"authorization", f"Bearer {key}".encode())]}, receive, send)
        return statuses[0]

    async def run() -> list[int]:
        return [await get("/v1/read/hr", HR_KEY), await get("/v1/read/eng", HR_KEY),
                await get("/v1/read/eng", ADMIN_KEY), await get("/v1/read/hr", "not-a-key-0123456789"),
                await get("/healthz", "")]

    assert asyncio.run(run()) == [200, 200, 200, 401, 404]
    audit.close()
    assert [c.key_id for c in seen] == [keys[0].key_id, keys[0].key_id, keys[1].key_id]
    assert seen[0].scope == keys[0].scope and seen[0].digest == keys[0].digest
    got = [{k: v for k, v in r.items() if k != "time"} for r in lines(tmp_path)]
    assert got == [  # /healthz is open: no key checked, no line
        {"key_id": keys[0].key_id, "route": "/v1/read/hr", "method": "GET", "status": 200, "collection": "hr",
         "chunk_ids": ["hr-1", "hr-2"]},
        {"key_id": keys[0].key_id, "route": "/v1/read/eng", "method": "GET", "status": 200, "collection": "eng",
         "chunk_ids": []},
        {"key_id": keys[1].key_id, "route": "/v1/read/eng", "method": "GET", "status": 200, "collection": "eng",
         "chunk_ids": ["eng-1", "eng-2"]},
        {"key_id": None, "route": "/v1/read/hr", "method": "GET", "status": 401, "collection": None,
         "chunk_ids": []}]
    text = "".join(p.read_text() for p in tmp_path.iterdir())
    assert HR_KEY not in text and ADMIN_KEY not in text
