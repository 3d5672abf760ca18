"""`ragline adapt`: from a collection alone to a better served embedder and reranker, or to nothing changed.

1. Synthetic questions (`synthesize`): the writer asks about sampled chunks; the round trip keeps what the current
   retriever leads back to; a stable share is held out.
2. Each role of `adapt.roles` trains on the training questions (hard negatives mined from the collection's index)
   and is judged on the held-out questions by a paired bootstrap of nDCG@k against what is served:
   - reranker: the candidate against the promoted version of `adapt.reranker_name` (or none), on the index served
     by then. A graph serving `serve.reranker.model=catalog:NAME` swaps to a promoted one.
   - embedder: taught by `adapt.teacher` (GPL: the cross-encoder's margins over the mined negatives), or
     contrastively without one. Judged as the collection re-embedded by the candidate (a staged index version)
     against the served index, retrieval alone. Promoted, the staged version is published: the graph swaps to it
     and embeds questions with its embedder; refused, it is discarded.
   - generator (opt-in: it is judged by the running graph): `rag_qa` fine-tuning on the training questions that
     kept an answer span, judged as `models promote` judges one: the served graph and a copy of it serving the
     candidate answer the held-out questions with an answer span, by a paired bootstrap of their F1. A graph
     serving `serve.generator.model=catalog:NAME` swaps to a promoted one.
Every step is stored under `adapt/<run>/` in the collection's storage and recorded in MLflow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, model_validator

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
    from app.eval.answers import Endpoint
    from app.index.search import Index
    from app.train.config import TrainJobConfig
    from app.train.run import TrainRunRecord

EXPERIMENT = "ragline-adapt"
Role = Literal["embedder", "reranker", "generator"]
# each role's job: the reranker's as deployments/jobs/reranker.yaml trains it on SciFact's qrels, the embedder's a
# short fine-tune, the generator's as deployments/jobs/rag_qa.yaml (2 epochs: measured 22.8 F1 on SQuAD dev, 3
# epochs 21.4, benchmarks/results/adapt_answers-*); adapt.train, adapt.embedder_train and adapt.generator_train go
# on top
QGEN, PROMPTED = "qgen", "SmolLM2-135M-Instruct"  # adapt.writer.model auto: the trained writer, else this one
TRAIN: dict[Role, dict[str, object]] = {
    "reranker": {"epochs": 2, "lr": 2e-4, "warmup_steps": 10, "batch_size": 8,
                 "reranker": {"negatives": 3, "mine_top_k": 30, "max_length": 192}},
    "embedder": {"epochs": 2, "lr": 3e-5, "warmup_steps": 10, "batch_size": 16,
                 "embedder": {"negatives": 3, "mine_top_k": 30, "max_length": 256}},
    "generator": {"epochs": 2, "lr": 2e-4, "warmup_steps": 10, "batch_size": 4, "grad_accum": 4,
                  "freeze_layers": 16, "num_workers": 1, "cpus_per_worker": 0.5, "torch_threads": 2,
                  "on_bad_record": "skip", "sft": {"max_length": 1024, "group_by_length": 64}},
}
TASK: dict[Role, str] = {"reranker": "reranker", "embedder": "embedder", "generator": "sft"}


class RoleReport(BaseModel):
    """One role's candidate, judged against what is served."""

    role: Role
    training_run: str
    served: str  # reranker: "NAME:vN" or "none"; embedder: the served index's embedder; generator: the graph's
    candidate: str  # "NAME:vN"
    comparison: Comparison  # nDCG@k on the held-out questions; generator: per-question F1 (0-1)
    decision: Literal["promoted", "refused"]
    index_version: int | None = None  # embedder, promoted: the index version it embedded
    teacher: str | None = None  # embedder: the cross-encoder spec whose margins it learned; None: contrastive
    train_s: float
    judge_s: float


class AdaptReport(BaseModel):
    """One `ragline adapt` run (stored as `adapt/<run>/report.json` beside its question sets)."""

    collection: str
    questions: SyntheticSet
    roles: list[RoleReport]

    @model_validator(mode="before")
    @classmethod
    def _one_role(cls, data: Any) -> Any:
        """Reports written before the embedder joined hold the reranker's fields at the top."""
        if isinstance(data, dict) and "roles" not in data and "decision" in data:
            role = {k: v for k, v in data.items() if k in RoleReport.model_fields}
            return {k: v for k, v in data.items() if k not in role} | {"roles": [{"role": "reranker"} | role]}
        return data


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


def writer_model(cfg: AppConfig, root: Storage) -> tuple[str, str]:
    """The question writer: (a local directory vLLM loads, the name a synthesis run records). `auto`: the promoted
    `qgen` where there is one (measured: no reply without a question on SciFact, against 38% prompted), else the
    packaged SmolLM2, prompted."""
    from app.models import generator

    spec = cfg.adapt.writer.model
    cache = cfg.serve.generator.cache_dir or envs.cache_dir()
    if spec == "auto":
        qgen = generator.locate(f"catalog:{QGEN}", root, cache)
        return qgen if qgen is not None else (generator.resolve(PROMPTED, cache), PROMPTED)
    located = generator.locate(spec, root, cache)
    if located is None:
        raise NotFound(f"adapt.writer.model {spec}: no version is promoted yet")
    return located


def teacher(cfg: AppConfig, root: Storage) -> str | None:
    """The embedder's teacher as a `catalog:NAME:VERSION` or given spec (`adapt.teacher`), or None. auto: only a
    reranker that earned its promotion teaches (measured on SciFact: taught by a candidate the gate refused, the
    embedder scored dense nDCG@10 0.665 against 0.673 trained without a teacher)."""
    spec, name = cfg.adapt.teacher, cfg.adapt.reranker_name
    if spec != "auto":
        return spec
    promoted = Catalog(root).promoted(name)
    return f"catalog:{name}:{promoted.version}" if promoted else None


def read_rows(storage: Storage, rel: str) -> list[SyntheticRow]:
    import json

    return [json.loads(line) for line in storage.read_bytes(rel).decode().splitlines() if line.strip()]


def judge_reranker(storage: Storage, root: Storage, heldout: list[SyntheticRow], served: str | None,
                   candidate: str, cfg: AppConfig) -> Comparison:
    """The served reranker (None: the retriever's order) against the candidate, on the served index."""
    from app.eval.retrieval import Reranking
    from app.index.search import Index, Searcher

    hits = candidates(Searcher(Index.load(storage), cfg.search), heldout, cfg)
    rr, k = cfg.serve.reranker, cfg.gate.k
    precision = hardware.choose_precision(rr.precision, "cpu")
    scores = {spec: ndcg_per_question(heldout, hits, Reranking(spec, root, rr.max_length, precision) if spec
                                      else None, cfg, k) for spec in (served, candidate)}
    return _compare(scores[served], scores[candidate], cfg)


def judge_index(served: Index, candidate: Index, heldout: list[SyntheticRow], cfg: AppConfig) -> Comparison:
    """The served index against a candidate (another embedder's vectors), retrieval alone, each searched with its
    own embedder."""
    from app.index.search import Searcher

    scores = [ndcg_per_question(heldout, candidates(Searcher(index, cfg.search), heldout, cfg), None, cfg,
                                cfg.gate.k) for index in (served, candidate)]
    return _compare(scores[0], scores[1], cfg)


def _compare(served: list[float], candidate: list[float], cfg: AppConfig) -> Comparison:
    return paired_bootstrap(served, candidate, cfg.gate.resamples, cfg.gate.confidence, cfg.adapt.seed)


def role_job(cfg: AppConfig, role: Role, name: str, data: dict[str, object]) -> TrainJobConfig:
    """A role's training job: TRAIN[role] (the generator in bf16 where the CPU has it natively), then
    adapt.train (reranker), adapt.embedder_train or adapt.generator_train, then where its questions are (`data`,
    the job's data section); a bad field is the user's error, named as the setting's."""
    from app.train.config import parse_job_config, with_serving

    a = cfg.adapt
    setting, overrides, catalog_name = {
        "reranker": ("adapt.train", a.train, a.reranker_name),
        "embedder": ("adapt.embedder_train", a.embedder_train, a.embedder_name),
        "generator": ("adapt.generator_train", a.generator_train, a.generator_name)}[role]
    base = TRAIN[role] | ({"precision": "bf16"} if role == "generator" and hardware.detect().cpu_bf16 else {})
    task = TASK[role]
    section = {"rag_qa": data} if role == "generator" else data
    fields = merge(merge(base, overrides), {"task": task, "register_as": catalog_name, task: section})
    return with_serving(parse_job_config({"name": name} | fields, setting), cfg)


def adapt(root: Storage, collection: str, cfg: AppConfig, questions: SyntheticSet | None = None,
          endpoint: Endpoint | None = None) -> AdaptReport:
    """The whole adaptation of one collection (`questions`: a synthesis run to reuse instead of writing new
    questions; `endpoint`: the served graph, which judges a generator). Needs a connected Ray."""
    storage = collections.storage_of(root, collection)
    a = cfg.adapt
    for role in a.roles:  # a bad adapt.train fails now, not after the questions are written
        role_job(cfg, role, "check", {"dataset": "questions"} if role == "generator" else {})
    if "generator" in a.roles and endpoint is None:
        raise UserError("adapt.roles has generator, which the served graph judges: run `ragline serve` with this "
                        "--storage first, or give --url")
    if questions is None:
        questions = synthesize(storage, a, cfg.search, *writer_model(cfg, root))
    if not questions.counts.train or not questions.counts.heldout:
        raise UserError(f"synthesis run {questions.run_id} kept {questions.counts.train} training and "
                        f"{questions.counts.heldout} held-out questions of {questions.counts.sampled} chunks: too "
                        "few to train and judge (raise adapt.chunks or adapt.round_trip_k)")
    heldout = read_rows(storage, questions.heldout_file)
    data = {"questions": str(local_file(storage, questions.train_file)), "split": "all", "collection": collection,
            "index_version": questions.index_version}
    steps: dict[Role, Callable[[], RoleReport]] = {
        "embedder": lambda: _adapt_embedder(root, storage, collection, cfg, questions, heldout, data),
        "reranker": lambda: _adapt_reranker(root, storage, cfg, questions, heldout, data),
        "generator": lambda: _adapt_generator(root, storage, collection, cfg, questions, heldout,
                                              str(data["questions"]), endpoint)}
    report = AdaptReport(collection=collection, questions=questions, roles=[steps[role]() for role in a.roles])
    storage.write_json(f"{RUNS}/{questions.run_id}/report.json", report.model_dump())
    _log(cfg, root, report)
    return report


def _train(cfg: AppConfig, role: Role, name: str, questions: SyntheticSet, data: dict[str, object],
           root: Storage) -> tuple[TrainRunRecord, int, float]:
    """(the run, the model version it exported, seconds)."""
    from app.train.run import run_training

    started = time.monotonic()
    job = role_job(cfg, role, f"{name}-{questions.run_id}", data)
    record = run_training(job, root)
    if record["state"] != "succeeded" or not record.get("model"):
        raise RaglineError(f"training run {record['name']} {record['state']}: {record.get('error')}")
    return record, int(record["model"]["version"]), round(time.monotonic() - started, 1)


def _adapt_embedder(root: Storage, storage: Storage, collection: str, cfg: AppConfig, questions: SyntheticSet,
                    heldout: list[SyntheticRow], data: dict[str, object]) -> RoleReport:
    from app.index.build import discard, stage_index
    from app.index.search import Index
    from app.models import embedder

    name = cfg.adapt.embedder_name
    taught_by = teacher(cfg, root)
    if taught_by is not None:
        data = data | {"loss": "margin_mse", "teacher": taught_by}
    record, version, train_s = _train(cfg, "embedder", name, questions, data, root)
    started = time.monotonic()
    served = Index.load(storage)
    dataset = Catalog(storage).resolve("datasets", None)
    variant = embedder.Variant(dataset.embedder.runtime, dataset.embedder.precision)
    staged = stage_index(storage, cfg, None, embedder.target(f"catalog:{name}:{version}", root, variant))
    comparison = judge_index(served, Index.open(storage, staged), heldout, cfg)
    index_version = None
    if comparison.better:
        Catalog(root).promote(name, version)
        index_version = Catalog(storage).publish(staged).version
    else:
        discard(storage, staged)
    return RoleReport(role="embedder", training_run=record["name"], served=served.manifest.embedder.name,
                      candidate=f"{name}:v{version}", comparison=comparison,
                      decision="promoted" if comparison.better else "refused", index_version=index_version,
                      teacher=taught_by, train_s=train_s, judge_s=round(time.monotonic() - started, 1))


def _adapt_reranker(root: Storage, storage: Storage, cfg: AppConfig, questions: SyntheticSet,
                    heldout: list[SyntheticRow], data: dict[str, object]) -> RoleReport:
    name = cfg.adapt.reranker_name
    catalog = Catalog(root)
    promoted = catalog.promoted(name)
    served = f"catalog:{name}:{promoted.version}" if promoted else None
    record, version, train_s = _train(cfg, "reranker", name, questions, data, root)
    started = time.monotonic()
    comparison = judge_reranker(storage, root, heldout, served, f"catalog:{name}:{version}", cfg)
    if comparison.better:
        catalog.promote(name, version)
    return RoleReport(role="reranker", training_run=record["name"],
                      served=f"{name}:v{promoted.version}" if promoted else "none", candidate=f"{name}:v{version}",
                      comparison=comparison, decision="promoted" if comparison.better else "refused",
                      train_s=train_s, judge_s=round(time.monotonic() - started, 1))


def _adapt_generator(root: Storage, storage: Storage, collection: str, cfg: AppConfig, questions: SyntheticSet,
                     heldout: list[SyntheticRow], train_path: str, endpoint: Endpoint | None) -> RoleReport:
    """rag_qa on the training questions (`train_path`, local) with an answer span; judged on the held-out ones
    with an answer span."""
    import json

    from app.promotion import judge_generator

    assert endpoint is not None  # adapt checked
    answered = [r for r in heldout if r["answers"]]
    if not answered:
        raise UserError(f"synthesis run {questions.run_id}: none of its {len(heldout)} held-out questions has an "
                        "answer span to judge a generator by")
    judged = f"{RUNS}/{questions.run_id}/heldout-answered.jsonl"
    storage.write_bytes(judged, "".join(json.dumps(r) + "\n" for r in answered).encode())
    name = cfg.adapt.generator_name
    data = {"dataset": train_path, "split": "all", "collection": collection, "index_version": questions.index_version}
    record, version, train_s = _train(cfg, "generator", name, questions, data, root)
    started = time.monotonic()
    j = judge_generator(root, f"catalog:{name}:{version}", endpoint, local_file(storage, judged),
                        idk=cfg.serve.generator.idk_answer, gate=cfg.gate, split="all", limit=None,
                        collection=collection)
    if j.refusal is None:
        Catalog(root).promote(name, version)
    return RoleReport(role="generator", training_run=record["name"], served=j.served.generator,
                      candidate=f"{name}:v{version}", comparison=j.comparison,
                      decision="promoted" if j.refusal is None else "refused", train_s=train_s,
                      judge_s=round(time.monotonic() - started, 1))


def _log(cfg: AppConfig, root: Storage, report: AdaptReport) -> None:
    uri = tracking.tracking_uri(None, root)
    q = report.questions
    run = tracking.start_run(uri, q.run_id, {"collection": report.collection, "adapt": cfg.adapt.model_dump()} | {
        f"{r.role}.{k}": getattr(r, k) for r in report.roles for k in ("served", "candidate")}, None,
        experiment=EXPERIMENT)
    metrics = {**q.counts.model_dump(exclude={"rejected"}), "write_s": q.write_s, "round_trip_s": q.round_trip_s}
    for r in report.roles:
        c, m = r.comparison, f"{r.role}_{'f1' if r.role == 'generator' else 'ndcg'}"
        metrics |= {f"{r.role}_train_s": r.train_s, f"{r.role}_judge_s": r.judge_s, f"{m}_served": c.served,
                    f"{m}_candidate": c.candidate, f"{m}_low": c.low, f"{m}_high": c.high}
    tracking.log_metrics(uri, run, metrics, step=0)
    tracking.finish(uri, run, {f"ragline.{r.role}": r.decision for r in report.roles})
