"""`ragline adapt`: from a collection alone to a better served reranker, or to nothing changed.

1. Synthetic questions (`synthesize`): the writer asks about sampled chunks; the round trip keeps what the current
   retriever leads back to; a stable share is held out.
2. The reranker task trains on the training questions (hard negatives mined from the collection's index).
3. The gate scores the served reranker (the promoted version of `adapt.reranker_name`, or none) and the candidate
   on the held-out questions, and promotes the candidate only when a paired bootstrap puts it above what is
   served. A graph serving `serve.reranker.model=catalog:NAME` then swaps to it; a worse candidate changes nothing.
Every step is stored under `adapt/<run>/` in the collection's storage and recorded in MLflow.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from app import collections, envs, hardware, tracking
from app.adapt.gate import candidates, ndcg_per_question
from app.adapt.questions import SyntheticRow
from app.adapt.synthesize import RUNS, SyntheticSet, local_file, synthesis_run, synthesize
from app.catalog import Catalog
from app.config import AppConfig
from app.config_files import merge
from app.errors import NotFound, RaglineError, UserError
from app.eval.paired import Comparison, paired_bootstrap
from app.storage import Storage

if TYPE_CHECKING:
    from app.train.config import TrainJobConfig

EXPERIMENT = "ragline-adapt"
# the reranker's job, as deployments/jobs/reranker.yaml trains it on SciFact's qrels; adapt.train goes on top
TRAIN: dict[str, object] = {"epochs": 2, "lr": 2e-4, "warmup_steps": 10, "batch_size": 8,
                            "reranker": {"negatives": 3, "mine_top_k": 30, "max_length": 192}}


class AdaptReport(BaseModel):
    """One `ragline adapt` run (stored as `adapt/<run>/report.json` beside its question sets)."""

    collection: str
    questions: SyntheticSet
    training_run: str
    served: str  # the reranker judged as served: "NAME:vN", or "none"
    candidate: str  # "NAME:vN"
    comparison: Comparison  # nDCG@k on the held-out questions
    decision: Literal["promoted", "refused"]
    train_s: float
    judge_s: float


class AdaptRun(BaseModel):
    """A synthesis run, and the adaptation that used it if one finished (`ragline status`)."""

    questions: SyntheticSet
    report: AdaptReport | None = None


def adapt_runs(storage: Storage) -> list[AdaptRun]:
    """A collection's adapt runs, oldest first (run ids sort by time)."""
    out = []
    for run in sorted(storage.listdir(RUNS)):
        if not storage.exists(f"{RUNS}/{run}/questions.json"):  # a run still writing, or not Ragline's
            continue
        report = f"{RUNS}/{run}/report.json"
        out.append(AdaptRun(questions=synthesis_run(storage, run, storage.uri), report=AdaptReport.model_validate(
            storage.read_json(report)) if storage.exists(report) else None))
    return out


def writer_model(cfg: AppConfig, root: Storage) -> str:
    """The question writer's files: a local directory vLLM loads."""
    from app.models import generator

    located = generator.locate(cfg.adapt.writer.model, root, cfg.serve.generator.cache_dir or envs.cache_dir())
    if located is None:
        raise NotFound(f"adapt.writer.model {cfg.adapt.writer.model}: no version is promoted yet")
    return located[0]


def read_rows(storage: Storage, rel: str) -> list[SyntheticRow]:
    import json

    return [json.loads(line) for line in storage.read_bytes(rel).decode().splitlines() if line.strip()]


def judge(storage: Storage, root: Storage, questions: SyntheticSet, served: str | None, candidate: str,
          cfg: AppConfig) -> Comparison:
    """The served reranker (None: the retriever's order) against the candidate, on the held-out questions."""
    from app.eval.retrieval import Reranking
    from app.index.search import Index, Searcher

    heldout = read_rows(storage, questions.heldout_file)
    searcher = Searcher(Index.load(storage, questions.index_version), cfg.search)
    hits = candidates(searcher, heldout, cfg)
    rr, k = cfg.serve.reranker, cfg.gate.k
    precision = hardware.choose_precision(rr.precision, "cpu")
    scores = {spec: ndcg_per_question(heldout, hits, Reranking(spec, root, rr.max_length, precision) if spec
                                      else None, cfg, k) for spec in (served, candidate)}
    gate = cfg.gate
    return paired_bootstrap(scores[served], scores[candidate], gate.resamples, gate.confidence, cfg.adapt.seed)


def reranker_job(cfg: AppConfig, name: str, data: dict[str, object]) -> TrainJobConfig:
    """The reranker's training job: TRAIN, then adapt.train, then where its questions are (`data`, the job's
    `reranker` fields); a bad field is the user's error, named as adapt.train's."""
    from app.train.config import parse_job_config, with_serving

    a = cfg.adapt
    fields = merge(merge(TRAIN, a.train), {"task": "reranker", "register_as": a.reranker_name, "reranker": data})
    return with_serving(parse_job_config({"name": name} | fields, "adapt.train"), cfg)


def adapt(root: Storage, collection: str, cfg: AppConfig, questions: SyntheticSet | None = None) -> AdaptReport:
    """The whole adaptation of one collection (`questions`: a synthesis run to reuse instead of writing new
    questions). Needs a connected Ray."""
    from app.train.run import run_training

    storage = collections.storage_of(root, collection)
    a = cfg.adapt
    reranker_job(cfg, "check", {})  # a bad adapt.train fails now, not after the questions are written
    if questions is None:
        questions = synthesize(storage, a, cfg.search, writer_model(cfg, root))
    if not questions.counts.train or not questions.counts.heldout:
        raise UserError(f"synthesis run {questions.run_id} kept {questions.counts.train} training and "
                        f"{questions.counts.heldout} held-out questions of {questions.counts.sampled} chunks: too "
                        "few to train and judge (raise adapt.chunks or adapt.round_trip_k)")
    catalog = Catalog(root)
    promoted = catalog.promoted(a.reranker_name)
    served = f"catalog:{a.reranker_name}:{promoted.version}" if promoted else None

    started = time.monotonic()
    data = {"questions": str(local_file(storage, questions.train_file)), "split": "all", "collection": collection,
            "index_version": questions.index_version}
    job = reranker_job(cfg, f"{a.reranker_name}-{questions.run_id}", data)
    record = run_training(job, root)
    if record["state"] != "succeeded" or not record.get("model"):
        raise RaglineError(f"training run {record['name']} {record['state']}: {record.get('error')}")
    version = int(record["model"]["version"])
    train_s = time.monotonic() - started

    started = time.monotonic()
    candidate = f"catalog:{a.reranker_name}:{version}"
    comparison = judge(storage, root, questions, served, candidate, cfg)
    judge_s = time.monotonic() - started
    if comparison.better:
        catalog.promote(a.reranker_name, version)
    report = AdaptReport(
        collection=collection, questions=questions, training_run=record["name"],
        served=f"{a.reranker_name}:v{promoted.version}" if promoted else "none",
        candidate=f"{a.reranker_name}:v{version}", comparison=comparison,
        decision="promoted" if comparison.better else "refused", train_s=round(train_s, 1), judge_s=round(judge_s, 1))
    storage.write_json(f"{RUNS}/{questions.run_id}/report.json", report.model_dump())
    _log(cfg, root, report)
    return report


def _log(cfg: AppConfig, root: Storage, report: AdaptReport) -> None:
    uri = tracking.tracking_uri(None, root)
    q, c = report.questions, report.comparison
    run = tracking.start_run(uri, q.run_id, {"collection": report.collection, "adapt": cfg.adapt.model_dump(),
                                             "served": report.served, "candidate": report.candidate}, None,
                             experiment=EXPERIMENT)
    tracking.log_metrics(uri, run, {**q.counts.model_dump(exclude={"rejected"}), "write_s": q.write_s,
                                    "round_trip_s": q.round_trip_s, "train_s": report.train_s,
                                    "judge_s": report.judge_s, "ndcg_served": c.served,
                                    "ndcg_candidate": c.candidate, "ndcg_low": c.low, "ndcg_high": c.high}, step=0)
    tracking.finish(uri, run, {"ragline.decision": report.decision})
