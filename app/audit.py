"""The audit log: who read what. One JSON line per request that passed the key check (and one per request refused
with 401, key_id null): time, key id (never the key), route, method, status, collection and the chunk ids the
response carried. The Guard (deployments/guard.py) writes it after the response has ended.

Each writer has a file of its own, `audit-<hostname>-<pid>.jsonl`, so the Ingress replicas of a cluster can share
one directory without interleaving lines or racing each other's rotation; files rotate by size (the standard
library's RotatingFileHandler: `.1` … `.<backups>`, the oldest dropped).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from logging.handlers import RotatingFileHandler

from app import envs
from app.storage import Storage

_instances = itertools.count()  # a second AuditLog in one process (tests) gets a file of its own too


@dataclass(frozen=True)
class AuditRecord:
    time: str  # ISO 8601, UTC
    key_id: str | None  # None: refused with 401 (no key, or one not accepted)
    route: str  # the request's path
    method: str
    status: int
    collection: str | None  # the collection the route read, None where it read none
    chunk_ids: list[str]  # the chunks the response carried


class _JsonLine(logging.Formatter):
    """A record's `audit` field as one JSON line; nothing else of the logging record is written."""

    def format(self, record: logging.LogRecord) -> str:
        audit: AuditRecord = record.__dict__["audit"]
        return json.dumps(asdict(audit), ensure_ascii=False, separators=(",", ":"))


def audit_dir(configured: str | None, storage: Storage) -> str:
    """Where the audit files go: as configured, else `audit/` under a local storage root, else under the local
    cache (an object store takes no appends)."""
    if configured:
        return os.path.expanduser(configured)
    if storage.is_local:
        return str(storage.local_path("audit"))
    return os.path.join(envs.cache_dir(), "audit")


class AuditLog:
    def __init__(self, directory: str, max_bytes: int, backups: int):
        os.makedirs(directory, exist_ok=True)
        n = next(_instances)
        self.path = os.path.join(directory, f"audit-{socket.gethostname()}-{os.getpid()}{f'-{n}' if n else ''}.jsonl")
        # A logger of its own, outside logging's registry: no parent to propagate to, no handler of another
        # instance, nothing the process's logging config can add to or silence.
        self.log = logging.Logger(f"ragline.audit.{n}", logging.INFO)
        self.log.propagate = False
        self.handler = RotatingFileHandler(self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.handler.setFormatter(_JsonLine())
        self.log.addHandler(self.handler)

    def write(self, key_id: str | None, route: str, method: str, status: int, collection: str | None = None,
              chunk_ids: list[str] | None = None) -> AuditRecord:
        record = AuditRecord(time=datetime.now(UTC).isoformat(timespec="milliseconds"), key_id=key_id, route=route,
                             method=method, status=status, collection=collection, chunk_ids=list(chunk_ids or []))
        self.log.info("audit", extra={"audit": record})
        return record

    def close(self) -> None:
        self.log.removeHandler(self.handler)
        self.handler.close()
