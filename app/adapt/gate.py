"""Judging a reranker on held-out synthetic questions: per question, nDCG@k of the document it was written from,
with the retriever's candidates reordered as the serving graph's Reranker does (the cross-encoder's order fused
with the retriever's). The served reranker and the candidate are scored on the same questions and compared by a
paired bootstrap (`app.eval.paired`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.adapt.questions import SyntheticRow
from app.config import AppConfig
from app.eval.metrics import collapse_to_docs, ndcg_at_k
from app.models import cross_encoder

if TYPE_CHECKING:
    from app.eval.retrieval import Reranking
    from app.index.search import Searcher
    from app.passage import Passage


def candidates(searcher: Searcher, questions: Sequence[SyntheticRow], cfg: AppConfig) -> list[list[Passage]]:
    """Each question's retrieved chunks, as many as the served Reranker scores."""
    vectors = searcher.embed([q["question"] for q in questions])
    return [searcher.index.search(q["question"], v, cfg.search.mode, cfg.serve.reranker.candidates, cfg.search)
            for q, v in zip(questions, vectors, strict=True)]


def ndcg_per_question(questions: Sequence[SyntheticRow], hits: list[list[Passage]], scorer: Reranking | None,
                      cfg: AppConfig, k: int) -> list[float]:
    """nDCG@k of each question's own document; `scorer` None: the retriever's order (no reranker served)."""
    rr, out = cfg.serve.reranker, []
    for q, hs in zip(questions, hits, strict=True):
        order = list(range(len(hs)))
        if scorer is not None and hs:
            scores = scorer.score(q["question"], {h.chunk_id: h for h in hs})
            order = cross_encoder.rerank_order([scores[h.chunk_id] for h in hs], rr.retriever_weight, rr.rrf_k)
        out.append(ndcg_at_k(collapse_to_docs([hs[i].doc_id for i in order]), {q["doc_id"]}, k))
    return out
