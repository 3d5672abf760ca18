"""Answer quality of a served graph, asked exactly as users ask it: each question goes to `/v1/query` over HTTP
from a Ray Data pipeline (so a long question set fans out over actors), then the driver scores the answers.

Scores: SQuAD exact match and F1 (the official normalisation, max over gold answers), citation accuracy (the first
passage the answer cites is the gold document or holds a gold answer), the "I don't know" rate, answer length in
tokens, latency p50/p95 and tokens/s. Each run is stored under `runs/eval/` (the report, and one row per question
for error analysis) and logged to MLflow (experiment `ragline-eval`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

import httpx
import numpy as np
from pydantic import BaseModel

from app import collections, tracking
from app.catalog import Catalog, now_iso
from app.errors import Unavailable, UserError
from app.eval import RUNS, new_run_id
from app.qa import metrics as am
from app.qa.questions import Question, load_questions, sample
from app.storage import Storage

EXPERIMENT = "ragline-eval"
PER_ACTOR = 4  # most requests one asking actor keeps in flight


@dataclass(frozen=True)
class Endpoint:
    url: str
    key: str
    timeout_s: float = 300.0


class AnswerEvalReport(BaseModel):
    """One evaluation run. Rates are fractions in [0, 1]; exact_match and f1 are percentages, as SQuAD reports."""

    run_id: str
    dataset: str
    split: str
    questions: int  # asked
    errors: int  # requests that failed (scored as empty answers)
    index_version: int
    generator: str  # the model version that answered (the last one, if a promotion happened meanwhile)
    reranker: str = "none"  # the reranker version that ordered the passages ("none": the retriever's order)
    top_k: int
    exact_match: float
    f1: float
    citation_accuracy: float
    gold_in_context: float  # the gold document was among the passages the prompt held
    idk_rate: float
    answer_tokens: float  # mean completion tokens
    latency_p50_s: float
    latency_p95_s: float
    tokens_per_s: float  # completion tokens of the whole run / its wall time
    wall_s: float
    started_at: str


@dataclass(frozen=True)
class Scored:
    qid: str
    question: str
    answers: tuple[str, ...]
    answer: str
    exact_match: float
    f1: float
    cited_ok: bool
    gold_in_context: bool
    idk: bool
    completion_tokens: int
    latency_s: float
    error: str


class Answer(TypedDict):
    """The endpoint's answer to one question, as `AskEndpoint` asks it (a failed request: empty, with `error`)."""

    answer: str
    chunk_ids: list[str]  # of the passages the prompt held, in prompt order ([n] cites the n-th)
    doc_ids: list[str]  # of the same passages
    completion_tokens: int
    latency_s: float  # seconds, the whole request
    model: str  # the generator's model version ("" when the request failed)
    reranker: str  # the reranker's version, or "none" ("" when the request failed)
    index_version: int  # 0 when the request failed
    error: str  # "" when it answered


class AnswerRow(Answer):
    """An `Answer` as a row of `AskEndpoint`'s output, with its question's id. Ray Data may hand rows back with NumPy
    values (arrays for the lists, NumPy scalars for the numbers): `score` reads them by len, index, `in`, int() and
    float() only."""

    qid: str


class AskEndpoint:
    """map_batches callable: rows {qid, question} → the endpoint's answer, the passages its prompt held, tokens,
    latency and error ("" when it answered), one request per row, the batch's requests in flight together."""

    def __init__(self, endpoint: Endpoint, params: Mapping[str, object], in_flight: int):
        """`params`: the rest of each /v1/query body (top_k, collection, and max_tokens if given)."""
        self.endpoint, self.params = endpoint, params
        self.client = httpx.Client(timeout=endpoint.timeout_s, headers={"Authorization": f"Bearer {endpoint.key}"})
        self.pool = ThreadPoolExecutor(in_flight)

    def ask(self, question: str) -> Answer:
        """One question's answer. A 503 with Retry-After (the graph is at capacity) is asked again after that wait,
        as any client should, until the endpoint's timeout; the latency includes the waits."""
        t0 = time.perf_counter()
        while True:
            try:
                r = self.client.post(f"{self.endpoint.url.rstrip('/')}/v1/query",
                                     json={"question": question, **self.params})
            except httpx.TransportError as e:  # a timeout or a dropped connection fails this question, not the run
                return self.failed(time.perf_counter() - t0, f"{type(e).__name__}: {e}")
            wait = float(r.headers.get("retry-after", "nan"))
            if r.status_code != 503 or not wait >= 0 or time.perf_counter() - t0 + wait > self.endpoint.timeout_s:
                break
            time.sleep(wait)
        latency = time.perf_counter() - t0
        if r.status_code != 200:
            return self.failed(latency, f"HTTP {r.status_code}: {r.text[:300]}")
        body = r.json()
        return {"answer": body["answer"], "chunk_ids": [c["chunk_id"] for c in body["citations"]],
                "doc_ids": [c["doc_id"] for c in body["citations"]],
                "completion_tokens": int(body["usage"]["completion_tokens"] or 0), "latency_s": latency,
                "model": body["models"]["generator"], "reranker": body["models"]["reranker"],
                "index_version": int(body["index_version"]), "error": ""}

    @staticmethod
    def failed(latency: float, error: str) -> Answer:
        return {"answer": "", "chunk_ids": [], "doc_ids": [], "completion_tokens": 0, "latency_s": latency,
                "model": "", "reranker": "", "index_version": 0, "error": error}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        answers: Sequence[Mapping[str, object]] = list(self.pool.map(self.ask, [str(q) for q in batch["question"]]))
        return {"qid": list(batch["qid"]), **{k: [a[k] for a in answers] for k in answers[0]}}  # one column a key


def served_index(endpoint: Endpoint, probe: str, collection: str) -> int:
    """The index version the endpoint serves for `collection` (it answers /v1/retrieve with it)."""
    r = httpx.post(f"{endpoint.url.rstrip('/')}/v1/retrieve",
                   json={"query": probe, "top_k": 1, "collection": collection},
                   headers={"Authorization": f"Bearer {endpoint.key}"}, timeout=endpoint.timeout_s)
    if r.status_code != 200:
        kind = UserError if r.status_code < 500 else Unavailable  # the caller's mistake (a key, a URL), or not now
        raise kind(f"{endpoint.url} answered /v1/retrieve with {r.status_code}: {r.text[:300]}")
    return int(r.json()["index_version"])


def check_documents(questions: list[Question], doc_ids: set[str], version: int) -> None:
    """Questions whose gold document the index lacks could only score zero: that is the user's error, named."""
    missing = sorted({q.doc_id for q in questions} - doc_ids)
    if missing:
        asked = sum(q.doc_id in set(missing) for q in questions)
        raise UserError(f"{asked} of {len(questions)} questions refer to {len(missing)} documents that index "
                        f"version {version} does not hold (first: {', '.join(missing[:3])}). Ingest the question "
                        "set's corpus first (for SQuAD: `ragline eval corpus DATASET corpus.jsonl`, then "
                        "`ragline ingest corpus.jsonl`)")


def score(questions: list[Question], rows: list[AnswerRow], chunk_text: dict[str, str],
          idk: str) -> list[Scored]:
    """One Scored per question; `rows` are AskEndpoint's outputs in any order, `chunk_text` the index's chunks."""
    by_qid = {r["qid"]: r for r in rows}
    out = []
    for q in questions:
        r = by_qid[q.qid]
        cited = am.cited_numbers(r["answer"])
        cited_ok = False
        if cited and 1 <= cited[0] <= len(r["chunk_ids"]):
            n = cited[0] - 1
            cited_ok = r["doc_ids"][n] == q.doc_id or am.contains_answer(chunk_text.get(r["chunk_ids"][n], ""),
                                                                          q.answers)
        out.append(Scored(q.qid, q.question, q.answers, r["answer"], am.exact_match(r["answer"], q.answers),
                          am.f1(r["answer"], q.answers), cited_ok, q.doc_id in r["doc_ids"],
                          am.is_idk(r["answer"], idk), int(r["completion_tokens"]), float(r["latency_s"]),
                          r["error"]))
    return out


def summarize(scored: list[Scored], *, run_id: str, dataset: str, split: str, index_version: int, generator: str,
              top_k: int, wall_s: float, started_at: str, reranker: str = "none") -> AnswerEvalReport:
    n = len(scored)
    assert n > 0
    latencies = [s.latency_s for s in scored if not s.error]
    tokens = sum(s.completion_tokens for s in scored)

    def pct(q: float) -> float:
        return round(float(np.percentile(latencies, q)), 3) if latencies else math.nan

    def rate(values: list[bool] | list[float]) -> float:
        return round(sum(values) / n, 4)

    return AnswerEvalReport(
        run_id=run_id, dataset=dataset, split=split, questions=n, errors=sum(bool(s.error) for s in scored),
        index_version=index_version, generator=generator, reranker=reranker, top_k=top_k,
        exact_match=round(100 * sum(s.exact_match for s in scored) / n, 2),
        f1=round(100 * sum(s.f1 for s in scored) / n, 2),
        citation_accuracy=rate([s.cited_ok for s in scored]), gold_in_context=rate([s.gold_in_context for s in scored]),
        idk_rate=rate([s.idk for s in scored]), answer_tokens=round(tokens / n, 2),
        latency_p50_s=pct(50), latency_p95_s=pct(95), tokens_per_s=round(tokens / wall_s, 2) if wall_s else 0.0,
        wall_s=round(wall_s, 2), started_at=started_at)


def evaluate_answers(dataset: Path, split: str, endpoint: Endpoint, storage: Storage, *, idk: str,
                     limit: int | None = None, top_k: int = 5, max_tokens: int | None = None, concurrency: int = 8,
                     mlflow_uri: str | None = None, collection: str = collections.DEFAULT) -> AnswerEvalReport:
    """Ask the split's questions (or `limit` of them) at the endpoint, score, store and log the run. Needs a
    connected Ray; `storage` is the root the endpoint serves (its `collection`'s index names the documents and
    their text; the run is kept in the root).
    `max_tokens` caps answers below the server's own budget (None: the server's)."""
    import ray.data

    from app.index.search import Index

    questions = sample(load_questions(dataset, split), limit)
    version = served_index(endpoint, questions[0].question, collection)
    corpus = collections.storage_of(storage, collection)
    if version not in {m.version for m in Catalog(corpus).versions("indexes")}:
        raise UserError(f"{endpoint.url} serves index version {version}, which {corpus.uri} does not hold: give "
                        "the --storage the graph serves")
    chunks = Index.load(corpus, version, verify=False).chunks
    check_documents(questions, set(chunks.column("doc_id")), version)

    params = {"top_k": top_k, "collection": collection, **({"max_tokens": max_tokens} if max_tokens else {})}
    started, t0 = now_iso(), time.perf_counter()
    per_actor = min(PER_ACTOR, concurrency)
    actors = math.ceil(concurrency / per_actor)
    rows = cast(list[AnswerRow], (
        ray.data.from_items([{"qid": q.qid, "question": q.question} for q in questions])
        .map_batches(AskEndpoint, fn_constructor_args=(endpoint, params, per_actor), batch_size=per_actor,
                     compute=ray.data.ActorPoolStrategy(size=actors),
                     num_cpus=0.05)  # waits on HTTP: no CPU of the graph's
        .take_all()))
    wall = time.perf_counter() - t0
    if all(r["error"] for r in rows):
        raise Unavailable(f"every request failed; the first: {rows[0]['error']}")
    scored = score(questions, rows, {c["chunk_id"]: c["text"] for c in chunks}, idk)
    answered = next(r for r in reversed(rows) if not r["error"])
    run_id = new_run_id("answers")
    report = summarize(scored, run_id=run_id, dataset=dataset.name, split=split, index_version=version,
                       generator=str(answered["model"]), reranker=str(answered["reranker"]), top_k=top_k,
                       wall_s=wall, started_at=started)
    save(storage, report, scored)
    _log(mlflow_uri, storage, report, limit)
    return report


def per_question(storage: Storage, run_id: str) -> dict[str, Scored]:
    """A stored run's questions, by id, as they were scored."""
    import json

    rows = (json.loads(line) for line in storage.read_bytes(f"{RUNS}/{run_id}.rows.jsonl").decode().splitlines())
    return {r["qid"]: Scored(**{**r, "answers": tuple(r["answers"])}) for r in rows}


def save(storage: Storage, report: AnswerEvalReport, scored: list[Scored]) -> None:
    import json

    storage.write_bytes(f"{RUNS}/{report.run_id}.rows.jsonl",
                        "".join(json.dumps(asdict(s)) + "\n" for s in scored).encode())
    storage.write_json(f"{RUNS}/{report.run_id}.json", report.model_dump())


def load_runs(storage: Storage) -> list[AnswerEvalReport]:
    names = [n for n in storage.listdir(RUNS) if n.startswith("answers-") and n.endswith(".json")
             and ".tmp-" not in n]
    return sorted((AnswerEvalReport.model_validate(storage.read_json(f"{RUNS}/{n}")) for n in names),
                  key=lambda r: r.started_at)


def _log(uri: str | None, storage: Storage, report: AnswerEvalReport, limit: int | None) -> None:
    uri = tracking.tracking_uri(uri, storage)
    params = {"dataset": report.dataset, "split": report.split, "limit": limit, "top_k": report.top_k,
              "generator": report.generator, "reranker": report.reranker, "index_version": report.index_version}
    run = tracking.start_run(uri, report.run_id, params, None, experiment=EXPERIMENT)
    metrics = report.model_dump(include={"exact_match", "f1", "citation_accuracy", "gold_in_context", "idk_rate",
                                         "answer_tokens", "latency_p50_s", "latency_p95_s", "tokens_per_s",
                                         "errors", "questions"})
    tracking.log_metrics(uri, run, {k: v for k, v in metrics.items() if not math.isnan(v)}, step=0)
    tracking.finish(uri, run, {"ragline.generator": report.generator})
