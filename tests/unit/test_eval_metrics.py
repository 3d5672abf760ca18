"""Ranking metrics and the BEIR reader (no Ray, no model)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from app.eval.metrics import collapse_to_docs, mean, ndcg_at_k, recall_at_k
from app.qa.beir import load_beir


def test_ndcg_perfect_ranking_is_one() -> None:
    assert ndcg_at_k(["a", "b", "x"], {"a", "b"}, k=10) == pytest.approx(1.0)


def test_ndcg_single_relevant_at_rank_two() -> None:
    assert ndcg_at_k(["x", "a", "y"], {"a"}, k=10) == pytest.approx(1 / math.log2(3))


def test_ndcg_nothing_relevant_retrieved_is_zero() -> None:
    assert ndcg_at_k(["x", "y"], {"a"}, k=10) == 0.0
    assert ndcg_at_k(["x", "y"], set(), k=10) == 0.0


def test_ndcg_relevant_beyond_k_does_not_count() -> None:
    assert ndcg_at_k(["x", "y", "a"], {"a"}, k=2) == 0.0


def test_ndcg_graded() -> None:
    # ranking b(1), a(2): DCG = 1/1 + 2/log2(3); ideal a(2), b(1): IDCG = 2/1 + 1/log2(3)
    got = ndcg_at_k(["b", "a"], {"a": 2, "b": 1, "z": 0}, k=10)
    assert got == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_ndcg_ideal_truncated_at_k() -> None:
    # three relevant, k=1: the ideal is one relevant document at rank 1
    assert ndcg_at_k(["a", "b", "c"], {"a", "b", "c"}, k=1) == pytest.approx(1.0)
    # two relevant, found at ranks 1 and 3 with k=2: DCG = 1, IDCG = 1 + 1/log2(3)
    assert ndcg_at_k(["a", "x", "b"], {"a", "b"}, k=2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_recall() -> None:
    assert recall_at_k(["a", "x", "b"], {"a", "b", "c", "d"}, k=100) == pytest.approx(0.5)
    assert recall_at_k(["a", "x", "b"], {"a", "b"}, k=2) == pytest.approx(0.5)
    assert recall_at_k(["a"], {"a": 1, "b": 0}, k=10) == pytest.approx(1.0)
    assert recall_at_k(["a"], set(), k=10) == 0.0


def test_mean() -> None:
    assert mean([1.0, 0.0, 0.5]) == pytest.approx(0.5)
    assert mean([]) == 0.0


def test_collapse_to_docs_keeps_best_chunk_rank() -> None:
    assert collapse_to_docs(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]


def _dataset(tmp_path: Path, qrels: bytes, split: str = "dev") -> Path:
    d = tmp_path / "tiny"
    (d / "qrels").mkdir(parents=True)
    (d / "queries.jsonl").write_text("\n".join(json.dumps({"_id": q, "text": f"question {q}"})
                                               for q in ("1", "2", "3")) + "\n")
    (d / "qrels" / f"{split}.tsv").write_bytes(qrels)
    return d


def test_load_beir_crlf_header_and_zero_scores(tmp_path: Path) -> None:
    d = _dataset(tmp_path, b"query-id\tcorpus-id\tscore\r\n1\tA\t1\r\n1\tB\t2\r\n2\tC\t0\n3\tD\t1\n")
    queries, qrels = load_beir(d, "dev")
    assert qrels == {"1": {"A": 1, "B": 2}, "3": {"D": 1}}
    assert queries == {"1": "question 1", "3": "question 3"}  # query 2 has no relevant document


def test_load_beir_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_beir(tmp_path / "nope", "dev")


def test_load_beir_missing_split_names_file(tmp_path: Path) -> None:
    d = _dataset(tmp_path, b"query-id\tcorpus-id\tscore\n1\tA\t1\n")
    with pytest.raises(ValueError, match=r"test\.tsv is missing.*splits: dev"):
        load_beir(d, "test")


def test_load_beir_missing_queries_file(tmp_path: Path) -> None:
    d = _dataset(tmp_path, b"query-id\tcorpus-id\tscore\n1\tA\t1\n")
    (d / "queries.jsonl").unlink()
    with pytest.raises(ValueError, match=r"queries\.jsonl is missing"):
        load_beir(d, "dev")


def test_load_beir_bad_line_names_file_and_line(tmp_path: Path) -> None:
    d = _dataset(tmp_path, b"query-id\tcorpus-id\tscore\r\n1\tA\t1\r\n1 B 1\r\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:3: expected 3 tab-separated fields") as e:
        load_beir(d, "dev")
    assert str(d / "qrels" / "dev.tsv") in str(e.value)


def test_load_beir_non_integer_score_names_file_and_line(tmp_path: Path) -> None:
    d = _dataset(tmp_path, b"query-id\tcorpus-id\tscore\n1\tA\t1\n2\tB\t1.5\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:3: score '1\.5' is not an integer") as e:
        load_beir(d, "dev")
    assert str(d / "qrels" / "dev.tsv") in str(e.value)


def test_load_beir_real_scifact_if_present() -> None:
    d = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "scifact"
    if not d.is_dir():
        pytest.skip("scifact not available")
    queries, qrels = load_beir(d, "dev")
    assert len(queries) == len(qrels) > 0
