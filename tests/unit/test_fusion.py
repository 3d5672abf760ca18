import pytest

from app.fusion import rrf
from app.models.cross_encoder import rerank_order


def test_rrf_scores_and_order():
    fused = rrf([[1, 2, 3], [3, 1]], [1.0, 1.0], k=60)
    scores = dict(fused)
    assert scores[1] == pytest.approx(1 / 61 + 1 / 62)
    assert scores[3] == pytest.approx(1 / 63 + 1 / 61)
    assert scores[2] == pytest.approx(1 / 62)
    assert [i for i, _ in fused] == [1, 3, 2]


def test_rrf_weights_and_ties():
    assert [i for i, _ in rrf([[1], [2]], [1.0, 2.0])] == [2, 1]
    assert [i for i, _ in rrf([[5], [4]], [1.0, 1.0])] == [4, 5]  # equal scores: by id
    assert rrf([[], []], [1.0, 1.0]) == []


def test_rerank_order_fuses_the_cross_encoder_with_the_retriever():
    scores = [0.1, 0.9, 0.5, -2.0]  # candidates in retriever order; the cross-encoder prefers 1, 2, 0, 3
    assert rerank_order(scores, 0.0) == [1, 2, 0, 3]  # the cross-encoder alone
    # equal weights, k=60: 1 is ranks (1, 2), 0 is (3, 1), 2 is (2, 3): 1/61+1/62 > 1/63+1/61 > 1/62+1/63
    assert rerank_order(scores, 1.0, k=60) == [1, 0, 2, 3]
    assert rerank_order([0.2, 0.9], 1.0) == [0, 1]  # ranks (2, 1) and (1, 2) tie: the retriever's order first
    assert rerank_order(scores, 0.5, k=1) == [1, 0, 2, 3]  # the cross-encoder's rank 1 outweighs a light retriever
    assert rerank_order(scores, 10.0, k=1) == [0, 1, 2, 3]  # a heavy retriever weight keeps its order
    assert rerank_order([], 1.0) == []
