"""Synthetic questions for a collection: sampled chunks → the question writer (vLLM on Ray Data) → the round trip
→ a training set, a held-out set and the rejected replies, written under `adapt/<run>/` in the collection's
storage."""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.adapt.questions import SyntheticRow, held_out
from app.adapt.roundtrip import RoundTrip
from app.adapt.writer import write_questions
from app.catalog import now_iso
from app.config import AdaptConfig, SearchConfig
from app.errors import NotFound, UserError
from app.eval import new_run_id
from app.storage import Storage

RUNS = "adapt"


class SynthesisCounts(BaseModel):
    """Every question asked is counted once: sampled = rejected + dropped + train + heldout."""

    sampled: int  # questions asked: chunks × adapt.writer.questions_per_chunk
    rejected: dict[str, int]  # the writer's reply held no usable question, by reason (app.adapt.questions)
    dropped: int  # training questions the round trip did not lead back to their chunk's document
    train: int
    heldout: int  # never filtered by the round trip
    answered: int = 0  # of train and heldout: with an answer span the chunk holds (for the generator); 0 in
    # runs written before answers were kept


class SyntheticSet(BaseModel):
    """One synthesis run: what was asked, what was kept, and where the sets are."""

    run_id: str
    created_at: str
    index_version: int
    writer: str  # the writer model: a packaged name, a directory, or catalog:NAME:VERSION
    counts: SynthesisCounts
    write_s: float  # the question writer's wall time, its engine's load included
    round_trip_s: float
    train_file: str  # storage-relative JSONL (app.adapt.questions.SyntheticRow)
    heldout_file: str
    rejected_file: str  # {chunk_id, reason, reply}: what the writer said instead of a question


def synthesis_run(storage: Storage, run_id: str, where: str) -> SyntheticSet:
    """A stored synthesis run, or NotFound naming `where` it was looked for (a collection, for the user)."""
    rel = f"{RUNS}/{run_id}/questions.json"
    if not storage.exists(rel):
        raise NotFound(f"no synthesis run {run_id!r} in {where}")
    return SyntheticSet.model_validate(storage.read_json(rel))


def sample_chunks(chunks: Any, n: int, min_words: int, seed: int) -> list[dict[str, str]]:
    """Up to `n` chunks of at least `min_words` words, drawn without replacement (seeded) from an index's chunk
    table (`app.index.search.ChunkTable`)."""
    order = list(range(len(chunks)))
    random.Random(seed).shuffle(order)
    out: list[dict[str, str]] = []
    for row in order:
        c = chunks[row]
        if len(c["text"].split()) >= min_words:
            out.append({k: c[k] or "" for k in ("chunk_id", "doc_id", "title", "text")})
            if len(out) == n:
                break
    return out


TEXT_FIELDS = ("question", "rejected", "answer")  # a writer's row's optional strings (app.adapt.writer)


def synthesize(storage: Storage, cfg: AdaptConfig, search: SearchConfig, model_path: str, writer: str,
               index_version: int | None = None) -> SyntheticSet:
    """Writes one synthetic question set for the index version (default: the latest) with the writer at
    `model_path` (named `writer` in the record). Needs a connected Ray."""
    import ray.data

    from app.index.search import Index

    index = Index.load(storage, index_version)
    picked = sample_chunks(index.chunks, cfg.chunks, cfg.min_chunk_words, cfg.seed)
    if not picked:
        raise UserError(f"index version {index.version} has no chunk of {cfg.min_chunk_words} words or more to "
                        "write questions about (adapt.min_chunk_words)")
    started = time.monotonic()
    per_chunk = cfg.writer.questions_per_chunk
    asks = [{**c, "ask": j} for c in picked for j in range(per_chunk)]
    # blocks of a writer batch each (from_items makes one per row: a task each)
    chunks = ray.data.from_items(asks, override_num_blocks=max(1, len(asks) // cfg.writer.batch_size))
    written = write_questions(chunks, cfg.writer, model_path).materialize()
    write_s = time.monotonic() - started
    started = time.monotonic()
    rows = written.map_batches(
        RoundTrip, fn_constructor_kwargs={"storage_uri": storage.uri, "index_version": index.version,
                                          "search": search.model_dump(), "mode": cfg.round_trip_mode,
                                          "k": cfg.round_trip_k},
        batch_size=64, compute=ray.data.ActorPoolStrategy(size=1)).take_all()
    round_trip_s = time.monotonic() - started
    assert len(rows) == len(asks), f"{len(asks)} questions asked, {len(rows)} came back"

    rejected: dict[str, int] = {}
    sets: dict[str, list[Any]] = {"train": [], "heldout": [], "rejected": []}
    seen: set[tuple[str, str]] = set()
    for r in sorted(rows, key=lambda r: (r["chunk_id"], int(r["ask"]))):
        # ray.data.llm's stages pass rows through pandas, which turns a missing string into NaN (truthy, not str)
        r = {k: v if isinstance(v, str) or k not in TEXT_FIELDS else None for k, v in r.items()}
        if not r["rejected"] and (r["chunk_id"], r["question"].lower()) in seen:
            r["rejected"] = "duplicate"
        if r["rejected"]:
            rejected[r["rejected"]] = rejected.get(r["rejected"], 0) + 1
            sets["rejected"].append({"chunk_id": r["chunk_id"], "reason": r["rejected"], "reply": r["reply"]})
            continue
        seen.add((r["chunk_id"], r["question"].lower()))
        ask_id = r["chunk_id"] if per_chunk == 1 else f"{r['chunk_id']}#{int(r['ask'])}"
        row: SyntheticRow = {"id": ask_id, "question": r["question"], "doc_id": r["doc_id"],
                             "chunk_id": r["chunk_id"], "rank": int(r["rank"]),
                             "answers": [r["answer"]] if r["answer"] else []}
        # Held-out questions skip the filter: kept only where the served retriever found them, they would judge
        # every candidate on the questions that retriever already answers (measured: its order scored nDCG@10
        # 0.96 on them).
        if held_out(r["chunk_id"], cfg.heldout, cfg.seed):
            sets["heldout"].append(row)
        elif row["rank"]:
            sets["train"].append(row)
    run_id = new_run_id("adapt")
    files = {name: f"{RUNS}/{run_id}/{name}.jsonl" for name in sets}
    for name, rel in files.items():
        storage.write_bytes(rel, "".join(json.dumps(r) + "\n" for r in sets[name]).encode())
    dropped = len(rows) - len(sets["rejected"]) - len(sets["train"]) - len(sets["heldout"])
    result = SyntheticSet(
        run_id=run_id, created_at=now_iso(), index_version=index.version, writer=writer,
        counts=SynthesisCounts(sampled=len(asks), rejected=rejected, dropped=dropped, train=len(sets["train"]),
                               heldout=len(sets["heldout"]),
                               answered=sum(1 for r in sets["train"] + sets["heldout"] if r["answers"])),
        write_s=round(write_s, 1), round_trip_s=round(round_trip_s, 1), train_file=files["train"],
        heldout_file=files["heldout"], rejected_file=files["rejected"])
    storage.write_json(f"{RUNS}/{run_id}/questions.json", result.model_dump())
    return result


def local_file(storage: Storage, rel: str) -> Path:
    """A storage file as a local path (downloaded into a temporary directory when the storage is remote): the
    training job's driver reads question sets from local files."""
    if storage.is_local:
        return storage.local_path(rel)
    path = Path(tempfile.mkdtemp(prefix="ragline-adapt-")) / Path(rel).name
    path.write_bytes(storage.read_bytes(rel))
    return path
