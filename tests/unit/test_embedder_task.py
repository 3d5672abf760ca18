"""The embedder task's pure parts: the micro-batch it collates, the contrastive loss and GPL's margin loss over it,
and the config that chooses between them."""

import numpy as np
import pytest
import torch

from app.train.config import EmbedderDataConfig
from app.train.embedder_task import collate_bi, loss, mean_pooled


def groups(n_queries: int, group_size: int) -> dict[str, np.ndarray]:
    queries = [[101, 7 + q, 102] for q in range(n_queries)]
    passages = [[[101] + [20 + q] * (1 + p) + [102] for p in range(group_size)] for q in range(n_queries)]
    return {"query_ids": np.array(queries, dtype=object), "passage_ids": np.array(passages, dtype=object)}


def test_collate_puts_the_queries_first_then_each_group():
    batch = collate_bi(groups(2, 3), pad_id=0, scale=20.0)
    assert batch["input_ids"].shape == (2 + 2 * 3, 5)  # the longest passage: 3 tokens + [CLS] and [SEP]
    assert (batch["queries"], batch["group_size"], batch["scale"]) == (2, 3, 20.0)
    assert batch["input_ids"][1].tolist() == [101, 8, 102, 0, 0] and batch["attention_mask"][1].tolist() == [1, 1, 1,
                                                                                                             0, 0]
    assert batch["input_ids"][2 + 3][1].item() == 21  # group 1's positive follows group 0's three passages


def test_mean_pooling_ignores_padding_and_gives_unit_vectors():
    hidden = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]])  # (1, T=3, H=2), the last token padding
    pooled = mean_pooled(hidden, torch.tensor([[1, 1, 0]]))
    assert torch.allclose(pooled, torch.tensor([[1.0, 0.0]]))


class Out:
    def __init__(self, hidden: torch.Tensor):
        self.last_hidden_state = hidden


def encoded(vectors: list[list[float]]) -> Out:
    """One-token sequences whose pooled vectors are `vectors` (normalised)."""
    return Out(torch.tensor(vectors).unsqueeze(1))


def test_the_loss_labels_each_querys_own_positive_among_every_passage_of_the_batch():
    # 2 queries, groups of 2: rows 0-1 queries, 2-3 query 0's (positive, negative), 4-5 query 1's
    right = encoded([[1, 0], [0, 1], [1, 0], [-1, 0], [0, 1], [0, -1]])
    wrong = encoded([[1, 0], [0, 1], [0, 1], [-1, 0], [1, 0], [0, -1]])  # each query nearest the other's positive
    batch = {"attention_mask": torch.ones(6, 1, dtype=torch.long), "queries": 2, "group_size": 2, "scale": 20.0}
    low, high = loss(right, batch), loss(wrong, batch)  # type: ignore[arg-type]
    assert low.item() == pytest.approx(0.0, abs=1e-6) and high.item() > 10


def test_collate_carries_the_teachers_logits_group_by_group():
    data = groups(2, 3) | {"teacher": np.array([[2.0, 0.5, -1.0], [1.0, 1.0, 0.0]], dtype=object)}
    batch = collate_bi(data, pad_id=0, scale=20.0)
    assert batch["teacher"].dtype == torch.float32 and batch["teacher"].tolist() == [[2.0, 0.5, -1.0],
                                                                                     [1.0, 1.0, 0.0]]
    assert "teacher" not in collate_bi(groups(2, 3), pad_id=0, scale=20.0)


def test_the_margin_loss_matches_the_teachers_margins_not_its_scores():
    # 1 query, a group of 3: the query [1, 0]; cosines 1 (positive), 0 and -1 (negatives); at scale 2 the
    # embedder's margins are 2 and 4
    out = encoded([[1, 0], [1, 0], [0, 1], [-1, 0]])
    batch = {"attention_mask": torch.ones(4, 1, dtype=torch.long), "queries": 1, "group_size": 3, "scale": 2.0}
    same = loss(out, batch | {"teacher": torch.tensor([[9.0, 7.0, 5.0]])})  # type: ignore[arg-type]
    assert same.item() == pytest.approx(0.0, abs=1e-6)  # shifted logits, the same margins
    # a "negative" the teacher finds as relevant as the positive: margin 0 wanted, 2 given; the other 4 → 5
    off = loss(out, batch | {"teacher": torch.tensor([[3.0, 3.0, -2.0]])})  # type: ignore[arg-type]
    assert off.item() == pytest.approx((2.0**2 + 1.0**2) / 2)


def test_the_margin_loss_needs_a_teacher():
    with pytest.raises(ValueError, match="loss margin_mse needs a teacher"):
        EmbedderDataConfig(loss="margin_mse")
    assert EmbedderDataConfig(loss="margin_mse", teacher="catalog:reranker").teacher == "catalog:reranker"


def test_the_teacher_scores_each_group_with_the_cross_encoders_logits(tmp_path):
    from app.models import cross_encoder
    from app.train.embedder_task import TeacherScores

    texts = [["Zebras migrate north each July.", "A for loop repeats a block."],
             ["Actin is stained by phalloidin.", "Zebras migrate north each July."]]
    batch = {"query": np.array(["When do zebras migrate?", "What stains actin?"], dtype=object),
             "texts": np.array(texts, dtype=object), "qid": np.array(["q1", "q2"], dtype=object)}
    model = cross_encoder.load(cross_encoder.resolve("all-MiniLM-L6-v2"), max_length=64)  # a head drawn at random
    model.save(str(tmp_path / "ce"))  # the teacher, a directory: the same head
    out = TeacherScores(str(tmp_path), str(tmp_path / "ce"), 64)(batch)
    assert list(out["qid"]) == ["q1", "q2"] and len(out["teacher"]) == 2 and all(len(t) == 2 for t in out["teacher"])
    pairs = [(q, t) for q, group in zip(batch["query"], texts, strict=True) for t in group]
    logits = cross_encoder.score(model, pairs, logits=True)
    assert np.allclose([s for t in out["teacher"] for s in t], logits, atol=1e-5)
    probabilities = cross_encoder.score(model, pairs)  # what serving reads: the sigmoid of the logit
    assert np.allclose(probabilities, 1 / (1 + np.exp(-np.array(logits))), atol=1e-5)
