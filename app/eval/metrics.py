"""Ranking metrics as pure functions over ranked document ids and relevance judgements.

`relevant` is either a set of relevant ids (binary gain 1) or a mapping id -> graded relevance (gain = the
grade; grades <= 0 count as not relevant).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from app.errors import UserError

Relevance = set[str] | frozenset[str] | Mapping[str, int]


def _gains(relevant: Relevance) -> dict[str, float]:
    if isinstance(relevant, Mapping):
        return {d: float(g) for d, g in relevant.items() if g > 0}
    return {d: 1.0 for d in relevant}


def collapse_to_docs(doc_ids: list[str]) -> list[str]:
    """Chunk-level ranking → document ranking by first occurrence: a document ranks at its best chunk."""
    seen: set[str] = set()
    out = []
    for d in doc_ids:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def ndcg_at_k(ranked_doc_ids: Sequence[str], relevant: Relevance, k: int = 10) -> float:
    """Normalised discounted cumulative gain at k.

        DCG@k  = sum_{i=1..k} gain(d_i) / log2(i + 1)
        IDCG@k = DCG@k of the ideal ordering (all judged gains sorted descending, truncated at k)
        nDCG@k = DCG@k / IDCG@k          (0.0 when there is nothing relevant)

    gain(d) is 1 for a relevant id with a set, or its grade with a mapping; unjudged ids gain 0. A document id
    repeated in the ranking only counts at its first position.
    """
    if k <= 0:
        raise UserError(f"k must be positive, got {k}")
    gains = _gains(relevant)
    if not gains:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for i, doc in enumerate(ranked_doc_ids[:k], start=1):
        if doc in seen:
            continue
        seen.add(doc)
        dcg += gains.get(doc, 0.0) / math.log2(i + 1)
    ideal = sorted(gains.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    return dcg / idcg


def recall_at_k(ranked_doc_ids: Sequence[str], relevant: Relevance, k: int = 100) -> float:
    """Fraction of the relevant documents retrieved in the top k.

        recall@k = |{d in top-k} ∩ R| / |R|     (0.0 when R is empty)

    where R is the set of relevant ids (grade > 0 for a mapping).
    """
    if k <= 0:
        raise UserError(f"k must be positive, got {k}")
    rel = set(_gains(relevant))
    if not rel:
        return 0.0
    return len(rel.intersection(ranked_doc_ids[:k])) / len(rel)


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, (1/n) * sum(x_i); 0.0 for no values."""
    vals = list(values)
    return sum(vals) / len(vals) if vals else 0.0
