"""Reciprocal rank fusion (Cormack et al., 2009): score(d) = Σ_i w_i / (k + rank_i(d)), ranks from 1.

Pure ranking arithmetic, shared by hybrid search (`app.index.search`: FAISS + BM25) and reranking
(`app.models.cross_encoder`: the cross-encoder's order + the retriever's).
"""

from __future__ import annotations


def rrf(rankings: list[list[int]], weights: list[float], k: int = 60) -> list[tuple[int, float]]:
    """Fuse ranked id lists; returns (id, score) best first, ties broken by id for determinism."""
    assert len(rankings) == len(weights)
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
