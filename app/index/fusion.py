"""Reciprocal rank fusion (Cormack et al., 2009): score(d) = Σ_i w_i / (k + rank_i(d)), ranks from 1."""

from __future__ import annotations


def rrf(rankings: list[list[int]], weights: list[float], k: int = 60) -> list[tuple[int, float]]:
    """Fuse ranked id lists; returns (id, score) best first, ties broken by id for determinism."""
    assert len(rankings) == len(weights)
    scores: dict[int, float] = {}
    for ranking, w in zip(rankings, weights, strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def rerank_order(scores: list[float], retriever_weight: float, k: int = 60) -> list[int]:
    """Candidates (given in the retriever's order) best first, as indices: the cross-encoder's order by `scores`,
    fused by RRF with the given order weighted `retriever_weight` against the cross-encoder's 1 (0: the
    cross-encoder's order alone). Ties go to the retriever's order."""
    by_score = sorted(range(len(scores)), key=lambda i: -scores[i])
    if retriever_weight == 0:
        return by_score
    return [i for i, _ in rrf([by_score, list(range(len(scores)))], [1.0, retriever_weight], k)]
