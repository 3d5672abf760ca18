"""Training data as Ray Data datasets: read → validate/tokenize in `map_batches` → materialized in the object
store (never gathered on the driver), with counts that reconcile (records = kept + each drop reason).

Bad records are found here, before any training worker starts: with `on_bad_record: fail` the job stops naming
the first ones (file and content); with `skip` they are dropped and counted.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

import pyarrow as pa
import ray
import ray.data

from app import collections
from app.errors import UserError
from app.storage import Storage
from app.train.config import RerankerDataConfig, TrainJobConfig
from app.train.reranker_data import MineNegatives, PairTokenize, QueryRow, self_pairs
from app.train.sft_data import SFTTokenize, group_by_length, pack
from app.train.tasks import task_named

SHOW_BAD = 5  # bad records named in the error
# CPUs each preparation task or actor asks for: a fraction, so preparing data fits beside a Serve graph that holds
# most of a small machine's CPUs (asking for whole ones waited forever on 2 cores)
PREP_CPUS = 0.25


class DataCounts(TypedDict):
    """Training records, reconciled: records = kept + the dropped of every reason."""

    records: int
    kept: int
    dropped: dict[str, int]  # reason → records
    queries: NotRequired[int]  # reranker: the queries the (query, positive) pairs come from
    group_size: NotRequired[int]  # reranker: rows per group (the positive and its negatives)


class SFTSource(TypedDict):
    """What sft data was, for the model's lineage."""

    paths: list[str]
    rag_qa: NotRequired[str]  # the question set of sft.rag_qa
    qgen: NotRequired[str]  # the SQuAD file of a qgen job
    split: NotRequired[str]


class RerankerSource(TypedDict):
    """What reranker (or embedder) data was, for the model's lineage."""

    beir_dir: str | None  # None (and no questions): pairs mined from the index itself
    questions: NotRequired[str]  # the question set the queries came from
    split: str | None
    index_storage: str
    index_version: int


DataSource = SFTSource | RerankerSource


@dataclass
class Prepared:
    dataset: ray.data.Dataset
    rows: int  # training rows (examples, packed rows or groups)
    counts: DataCounts
    pad_id: int
    source: DataSource


def prepare(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    """The task's training rows, in the same order on every run: a stopped run that starts again skips exactly the
    examples its checkpoint had consumed."""
    with _ordered():
        return task_named(cfg.task).prepare(cfg, model_path, storage)


@contextmanager
def _ordered() -> Iterator[None]:
    # Ray Data otherwise emits blocks as their tasks finish; datasets take the context they are made under
    options = ray.data.DataContext.get_current().execution_options
    before, options.preserve_order = options.preserve_order, True
    try:
        yield
    finally:
        options.preserve_order = before


def _records(paths: list[str]) -> ray.data.Dataset:
    """One row per record, {record: JSON text, source: file}; jsonl line by line (so one broken line is one bad
    record, not a failed file), parquet rows re-serialised."""
    from app.ingest.inputs import expand

    inputs = expand(paths)
    if inputs.refused:
        raise UserError("training data outside the given paths (symlinks): "
                        f"{', '.join(r['source'] for r in inputs.refused[:5])}")
    files, fs = inputs.files, inputs.filesystem
    bad = [inputs.source(f) for f in files if not f.endswith((".jsonl", ".json", ".parquet"))]
    if bad:
        raise UserError(f"training data must be .jsonl or .parquet files; not: {', '.join(bad[:5])}")
    parts = []
    jsonl = [f for f in files if not f.endswith(".parquet")]
    if jsonl:
        lines = ray.data.read_text(jsonl, include_paths=True, filesystem=fs, ray_remote_args={"num_cpus": PREP_CPUS})
        lines = lines.filter(lambda r: bool(r["text"].strip()), num_cpus=PREP_CPUS)
        parts.append(lines.map_batches(lambda t: pa.table({"record": t["text"], "source": t["path"]}),
                                       batch_format="pyarrow", num_cpus=PREP_CPUS))
    parquet = [f for f in files if f.endswith(".parquet")]
    if parquet:
        rows = ray.data.read_parquet(parquet, include_paths=True, filesystem=fs,
                                     ray_remote_args={"num_cpus": PREP_CPUS})
        parts.append(rows.map_batches(
            lambda t: pa.table({"record": [json.dumps({k: v for k, v in r.items() if k != "path"}, default=str)
                                           for r in t.to_pylist()],
                                "source": t["path"]}), batch_format="pyarrow", num_cpus=PREP_CPUS))
    return parts[0] if len(parts) == 1 else parts[0].union(*parts[1:])


def _reconcile(ds: ray.data.Dataset, cfg: TrainJobConfig) -> tuple[ray.data.Dataset, DataCounts]:
    """Count drops by reason; fail naming the first bad records, or filter them out (on_bad_record: skip)."""
    ds = ds.materialize()
    # counted on the driver from the one short column: a groupby shuffles through whole-CPU tasks
    drops = ds.select_columns(["drop"], num_cpus=PREP_CPUS)
    by_reason = Counter(str(d) for b in drops.iter_batches(batch_format="numpy") for d in b["drop"])
    kept = by_reason.pop("", 0)
    counts = DataCounts(records=kept + sum(by_reason.values()), kept=kept, dropped=dict(sorted(by_reason.items())))
    if by_reason and cfg.on_bad_record == "fail":
        bad = ds.filter(lambda r: r["drop"] != "", num_cpus=PREP_CPUS).take(SHOW_BAD)
        lines = [f"  {r['source']}: {r['drop']}: {r['detail']}" for r in bad]
        raise UserError(f"{sum(by_reason.values())} of {counts['records']} training records are bad "
                        f"({', '.join(f'{k} {v}' for k, v in sorted(by_reason.items()))}); first ones:\n"
                        + "\n".join(lines) + "\nfix them, or set on_bad_record: skip to drop and count them")
    if not kept:
        raise UserError(f"no usable training record (dropped: {counts['dropped']})")
    return ds.filter(lambda r: r["drop"] == "", num_cpus=PREP_CPUS), counts


@dataclass
class MadeExamples:
    """Records a task makes itself rather than reads from files (sft.rag_qa's, qgen's), as {record, source} rows."""

    kind: Literal["rag_qa", "qgen"]  # its key in the lineage (SFTSource)
    dataset: ray.data.Dataset
    left_out: dict[str, int]  # questions that made no record, by reason: counted with the drops
    source: str  # the file they came from
    split: str


def _rag_qa_records(cfg: TrainJobConfig, model_path: str, storage: Storage) -> MadeExamples:
    """Examples in the serving format (app/train/rag_qa.py); the questions without an answer are left out."""
    from app.config import AppConfig
    from app.train.config import with_serving
    from app.train.rag_qa import RagQAExamples, question_rows

    # the default serving config where the caller (run_training without the CLI) filled in none
    rq = with_serving(cfg.model_copy(deep=True), AppConfig()).sft.rag_qa
    assert rq is not None
    rows, unanswered = question_rows(rq)
    if not rows:
        raise UserError(f"{rq.dataset}: none of its {unanswered} {rq.split} questions has an answer to learn")
    # A question set lists its questions article by article; SGD wants them mixed (the loop's shuffle buffer of
    # 256 rows spans about one article). Seeded, so a resumed run sees the same order.
    random.Random(cfg.seed).shuffle(rows)
    examples = ray.data.from_items(rows).map_batches(
        RagQAExamples, fn_constructor_args=(collections.storage_of(storage, rq.collection).uri, rq.model_dump(),
                                            model_path), batch_size=64,
        compute=ray.data.ActorPoolStrategy(size=1), num_cpus=PREP_CPUS)
    return MadeExamples("rag_qa", examples, {"no_answer": unanswered} if unanswered else {}, rq.dataset, rq.split)


def prepare_sft(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    return _tokenized(cfg, model_path, _rag_qa_records(cfg, model_path, storage) if cfg.sft.rag_qa else None)


def prepare_qgen(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    """The question writer's examples (`app.train.qgen_data`), shuffled (seeded: SQuAD lists them article by
    article), tokenized as sft's records."""
    from app.train.qgen_data import qgen_records

    assert cfg.qgen.dataset is not None
    records, left_out = qgen_records(cfg.qgen)
    if not records:
        raise UserError(f"{cfg.qgen.dataset}: no {cfg.qgen.split} question makes an example (left out: {left_out})")
    random.Random(cfg.seed).shuffle(records)
    return _tokenized(cfg, model_path, MadeExamples("qgen", ray.data.from_items(records), left_out,
                                                    cfg.qgen.dataset, cfg.qgen.split))


def _tokenized(cfg: TrainJobConfig, model_path: str, made: MadeExamples | None) -> Prepared:
    """The records of `sft.paths` and `made`, rendered with the model's chat template and tokenized."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.chat_template is None:
        raise UserError(f"model {cfg.model_name} has no chat template: sft needs one to render records")
    parts = [_records(cfg.sft.paths)] if cfg.sft.paths else []
    source = SFTSource(paths=cfg.sft.paths)
    if made is not None:
        parts.append(made.dataset)
        source[made.kind], source["split"] = made.source, made.split
    records = parts[0] if len(parts) == 1 else parts[0].union(*parts[1:])
    ds = records.map_batches(SFTTokenize, fn_constructor_args=(model_path, cfg.sft.model_dump()), batch_size=256,
                             compute=ray.data.ActorPoolStrategy(size=1), num_cpus=PREP_CPUS)
    ds, counts = _reconcile(ds, cfg)
    if made is not None and made.left_out:  # left out before they became records: counted with the drops
        counts["records"] += sum(made.left_out.values())
        counts["dropped"] = dict(sorted((Counter(counts["dropped"]) + Counter(made.left_out)).items()))
    ds = ds.select_columns(["input_ids", "labels"], num_cpus=PREP_CPUS)
    if cfg.sft.packing:
        ds = ds.map_batches(pack, fn_kwargs={"max_length": cfg.sft.max_length},  # type: ignore[arg-type]
                            batch_size=4096, num_cpus=PREP_CPUS)
        ds = ds.select_columns(["input_ids", "labels"], num_cpus=PREP_CPUS)
    if cfg.sft.group_by_length:
        ds = ds.map_batches(group_by_length, batch_size=cfg.sft.group_by_length,  # type: ignore[arg-type]
                            fn_kwargs={"micro_batch": cfg.batch_size, "seed": cfg.seed}, num_cpus=PREP_CPUS)
    ds = ds.materialize()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return Prepared(ds, ds.count(), counts, int(pad), source)


def _beir_pairs(pairs: RerankerDataConfig, storage: Storage) -> tuple[list[QueryRow], Storage]:
    """(query rows, the storage root holding the BEIR corpus's index); the corpus is ingested there once."""
    from app.config import AppConfig
    from app.indexing import ensure_index
    from app.qa.beir import load_beir

    assert pairs.beir_dir is not None
    directory = Path(pairs.beir_dir)
    queries, qrels = load_beir(directory, pairs.split)
    if not queries:
        raise UserError(f"{directory}: split {pairs.split!r} has no query with a relevant document")
    eval_storage = Storage(f"{storage.uri.rstrip('/')}/eval/{directory.name}")
    if not eval_storage.exists("indexes"):
        ensure_index(directory, eval_storage, AppConfig())
    rows: list[QueryRow] = [{"qid": q, "query": queries[q], "positives": sorted(qrels[q])} for q in sorted(queries)]
    return rows, eval_storage


def _question_pairs(pairs: RerankerDataConfig) -> list[QueryRow]:
    """A question set's split as query rows: each question, its document the positive."""
    from app.qa.questions import load_questions

    assert pairs.questions is not None
    questions = load_questions(Path(pairs.questions), pairs.split, answers=False)
    if not questions:
        raise UserError(f"{pairs.questions}: split {pairs.split!r} has no question")
    return [{"qid": q.qid, "query": q.question, "positives": [q.doc_id]} for q in questions]


def prepare_groups(cfg: TrainJobConfig, pairs: RerankerDataConfig, storage: Storage, tokenize: type,
                   tokenize_args: tuple[object, ...], columns: list[str], pad_id: int,
                   label: tuple[type, tuple[object, ...]] | None = None) -> Prepared:
    """(query, positive, hard negatives) groups for the reranker and the embedder: pairs from BEIR qrels, a
    question set or the index itself (`pairs`), negatives mined from the index, scored by a `label` callable
    (class, constructor args) if the task has one, then tokenized by the task's `tokenize` callable into
    `columns`."""
    from app.index.search import Index

    if pairs.beir_dir:
        rows, index_storage = _beir_pairs(pairs, storage)
    elif pairs.questions:
        rows, index_storage = _question_pairs(pairs), collections.storage_of(storage, pairs.collection)
    else:
        index_storage = collections.storage_of(storage, pairs.collection)
        rows = self_pairs(Index.load(index_storage, pairs.index_version).chunks, pairs.self_queries, cfg.seed)
        if not rows:
            raise UserError("the index has no chunk long enough to make a (pseudo-query, passage) pair")
    version = Index.load(index_storage, pairs.index_version, verify=False).version
    ds: ray.data.Dataset = ray.data.from_items(rows)
    mining = pairs.model_dump(include=set(RerankerDataConfig.model_fields))  # the embedder's has more fields
    ds = ds.map_batches(MineNegatives, fn_constructor_args=(index_storage.uri, version, mining, cfg.seed),
                        batch_size=64, compute=ray.data.ActorPoolStrategy(size=1))
    if label is not None:
        ds = ds.map_batches(label[0], fn_constructor_args=label[1], batch_size=64,
                            compute=ray.data.ActorPoolStrategy(size=1))
    ds = ds.map_batches(tokenize, fn_constructor_args=tokenize_args, batch_size=64,
                        compute=ray.data.ActorPoolStrategy(size=1)).select_columns(columns).materialize()
    n = ds.count()
    if not n:
        raise UserError(f"none of the {len(rows)} queries' documents is in index version {version} of "
                        f"{index_storage.uri}: ingest them first (for a question set: `ragline eval corpus`, then "
                        "`ragline ingest`)")
    # one group per (query, positive) pair; a positive the index does not hold makes none
    total = sum(len(r["positives"]) for r in rows)
    counts = DataCounts(records=total, kept=n, dropped={"positive_not_in_index": total - n} if total > n else {},
                        queries=len(rows), group_size=1 + pairs.negatives)
    source = RerankerSource(beir_dir=pairs.beir_dir, split=pairs.split if pairs.beir_dir or pairs.questions else None,
                            index_storage=index_storage.uri, index_version=version)
    if pairs.questions:
        source["questions"] = pairs.questions
    return Prepared(ds, n, counts, pad_id, source)


def prepare_reranker(cfg: TrainJobConfig, model_path: str, storage: Storage) -> Prepared:
    from transformers import AutoTokenizer

    rc = cfg.reranker
    pad = AutoTokenizer.from_pretrained(model_path).pad_token_id or 0
    return prepare_groups(cfg, rc, storage, PairTokenize, (model_path, rc.max_length),
                          ["input_ids", "token_type_ids"], int(pad))
