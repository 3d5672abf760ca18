import pytest

from app.index.fusion import rrf


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
