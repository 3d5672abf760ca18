"""Evaluation: retrieval quality on BEIR-format datasets (nDCG@k, recall@k) and answers through the served graph
(EM, F1, citations). Every evaluation is stored as one run under `runs/eval/` in the storage root."""

from __future__ import annotations

import datetime as dt
import uuid

RUNS = "runs/eval"


def new_run_id(kind: str) -> str:
    """`<kind>-<UTC time>-<6 hex>`: sorts by time, unique across processes."""
    return f"{kind}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
