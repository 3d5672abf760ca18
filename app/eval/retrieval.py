"""Retrieval quality of Ragline's search on a BEIR dataset: ingest its corpus into a dedicated storage root,
then mean nDCG@k and recall@k per search mode, with chunk hits collapsed to documents."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, cast

from tqdm import tqdm

# typing_extensions': pydantic reads it as part of /v1/status's response schema (typing's needs 3.12)
from typing_extensions import TypedDict

from app import hardware
from app.catalog import Precision, now_iso
from app.config import AppConfig
from app.errors import NotFound, UserError
from app.eval import RUNS, new_run_id
from app.eval.metrics import collapse_to_docs, mean, ndcg_at_k, recall_at_k
from app.models import cross_encoder
from app.qa.beir import load_beir
from app.storage import Storage

if TYPE_CHECKING:
    from app.passage import Passage

MODES = ("dense", "lexical", "hybrid")


class RetrievalEval(TypedDict):
    """`evaluate_retrieval`'s result (`ragline eval retrieval --json` prints it), stored as `runs/eval/<run_id>.json`
    in the storage root."""

    run_id: str  # retrieval-<UTC time>-<hex>
    finished_at: str  # ISO 8601, UTC
    dataset: str  # the dataset directory's name
    split: str
    queries: int  # judged queries evaluated
    index_version: int
    ingest_note: str | None  # the corpus ingest's note (IngestReport.note)
    # mode (or "<mode>+rerank", "<mode>+ce") → {"ndcg@<k>": mean, "recall@<k>": mean}, rounded to 4 places;
    # the reranked ones have nDCG only
    modes: dict[str, dict[str, float]]
    reranker: NotRequired[str]  # with a reranker: its name
    rerank_top: NotRequired[int]  # chunks reranked per query
    retriever_weight: NotRequired[float]  # weight of the retriever's order in "+rerank"


def evaluate_retrieval(dataset_dir: Path, split: str, storage_root: str, cfg: AppConfig,
                       modes: tuple[str, ...] | list[str] = MODES, k_ndcg: int = 10,
                       k_recall: int = 100, progress: bool = True, reranker: str | None = None,
                       rerank_top: int = 50) -> RetrievalEval:
    """Mean nDCG@k_ndcg and recall@k_recall per mode over the split's judged queries.

    The corpus goes into `{storage_root}/eval/{dataset name}`, never the user's own storage root. Each mode
    retrieves 3·k_recall chunks per query (several chunks may come from one document), collapsed to
    documents. With `reranker` (a CrossEncoder directory, hub id, or `catalog:NAME[:VERSION]` in the user's
    storage root) each mode's top `rerank_top` chunks are also reranked: "<mode>+rerank" as the serving graph
    does (the cross-encoder's order fused with the retriever's, `cfg.serve.reranker.retriever_weight`) and
    "<mode>+ce" by the cross-encoder's scores alone."""
    from app.index.search import Index, Searcher
    from app.indexing import ensure_index

    dataset_dir = Path(dataset_dir)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise UserError(f"unknown search mode(s) {bad}; choose from {list(MODES)}")
    queries, qrels = load_beir(dataset_dir, split)
    if not queries:
        raise UserError(f"{dataset_dir}: split {split!r} has no query with a relevant document")
    storage = Storage(f"{storage_root.rstrip('/')}/eval/{dataset_dir.name}")
    ingest = ensure_index(dataset_dir, storage, cfg)

    scorer = Reranking(reranker, Storage(storage_root), cfg.serve.reranker.max_length,
                       hardware.choose_precision(cfg.serve.reranker.precision, "cpu")) if reranker else None
    index = Index.load(storage)
    searcher = Searcher(index, cfg.search)
    qids = list(queries)
    vectors = searcher.embed([queries[q] for q in qids])
    n_chunks = 3 * max(k_recall, k_ndcg)
    per_mode: dict[str, dict[str, list[float]]] = {m: {"ndcg": [], "recall": []} for m in modes}
    rr = cfg.serve.reranker
    orders = {"rerank": rr.retriever_weight, "ce": 0.0}  # name → weight of the retriever's order
    reranked: dict[str, list[float]] = {f"{m}+{o}": [] for m in modes for o in orders} if scorer else {}
    for qid, vec in tqdm(list(zip(qids, vectors, strict=True)), desc=f"eval {dataset_dir.name}/{split}",
                         unit="query", disable=not progress):
        tops = {}
        for mode in modes:
            hits = index.search(queries[qid], vec, mode, n_chunks, cfg.search)  # type: ignore[arg-type]
            ranked = collapse_to_docs([h.doc_id for h in hits])
            per_mode[mode]["ndcg"].append(ndcg_at_k(ranked, qrels[qid], k_ndcg))
            per_mode[mode]["recall"].append(recall_at_k(ranked, qrels[qid], k_recall))
            tops[mode] = hits[:rerank_top]
        if scorer:
            # score each distinct chunk once, however many modes retrieved it
            scores = scorer.score(queries[qid], {h.chunk_id: h for hs in tops.values() for h in hs})
            for mode, hits in tops.items():
                for name, weight in orders.items():
                    order = cross_encoder.rerank_order([scores[h.chunk_id] for h in hits], weight, rr.rrf_k)
                    reranked[f"{mode}+{name}"].append(ndcg_at_k(collapse_to_docs([hits[i].doc_id for i in order]),
                                                                qrels[qid], k_ndcg))
    result: RetrievalEval = {
        "run_id": new_run_id("retrieval"),
        "finished_at": now_iso(),
        "dataset": dataset_dir.name,
        "split": split,
        "queries": len(qids),
        "index_version": index.version,
        "ingest_note": ingest.note,
        "modes": {m: {f"ndcg@{k_ndcg}": round(mean(v["ndcg"]), 4),
                      f"recall@{k_recall}": round(mean(v["recall"]), 4)} for m, v in per_mode.items()}
        | {m: {f"ndcg@{k_ndcg}": round(mean(v), 4)} for m, v in reranked.items()},
    }
    if scorer:
        result["reranker"] = scorer.name
        result["rerank_top"] = rerank_top
        result["retriever_weight"] = rr.retriever_weight
    Storage(storage_root).write_json(f"{RUNS}/{result['run_id']}.json", result)
    return result


def load_retrieval_runs(storage: Storage) -> list[RetrievalEval]:
    """Stored retrieval evaluations, oldest first."""
    names = sorted(n for n in storage.listdir(RUNS) if n.startswith("retrieval-") and n.endswith(".json")
                   and ".tmp-" not in n)
    return [cast(RetrievalEval, storage.read_json(f"{RUNS}/{n}")) for n in names]


class Reranking:
    """A CrossEncoder scoring (query, chunk) pairs the way the serving graph's reranker does."""

    def __init__(self, spec: str, storage: Storage, max_length: int, precision: Precision):
        located = cross_encoder.locate(spec, storage)
        if located is None:
            raise NotFound(f"{spec}: no version is promoted yet (`ragline models promote NAME VERSION`)")
        path, self.name = located
        self.model = cross_encoder.load(path, max_length=max_length)
        self.precision = precision

    def score(self, query: str, hits: dict[str, Passage]) -> dict[str, float]:
        ids = list(hits)
        scores = cross_encoder.score(self.model, [(query, cross_encoder.passage_text(hits[i].title, hits[i].text))
                                                  for i in ids], self.precision)
        return {i: s for i, s in zip(ids, scores, strict=True)}
