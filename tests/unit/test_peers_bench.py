"""The pure parts of the benchmark against LlamaIndex and Haystack (benchmarks/peers_bench.py): which documents a
quick run keeps, how chunk rankings are scored, which peer the ratio is taken against, and its table."""

import json
import math

import pytest

from benchmarks import readme_tables
from benchmarks.peers_bench import doc_ndcg, ratios, slice_ids, summarise, write_corpus


def test_a_limited_corpus_keeps_every_judged_document_then_fills_in_corpus_order():
    ids = ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert slice_ids(ids, {"d5", "d2"}, 4) == ["d1", "d2", "d3", "d5"]
    assert slice_ids(ids, {"d5", "d2", "gone"}, 2) == ["d2", "d5"]  # a judged id not in the corpus is no document
    assert slice_ids(ids, {"d5"}, None) == ids
    assert slice_ids(ids, set(), 10) == ids
    with pytest.raises(ValueError, match="below the 2 documents"):
        slice_ids(ids, {"d5", "d2"}, 1)


def test_the_written_slice_keeps_the_records_as_they_are(tmp_path):
    source = tmp_path / "corpus.jsonl"
    records = [{"_id": str(i), "title": f"t{i}", "text": f"text {i}"} for i in range(10)]
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert write_corpus(source, tmp_path / "out", 3, {"7"}) == 3
    kept = [json.loads(line) for line in (tmp_path / "out" / "corpus.jsonl").read_text().splitlines()]
    assert kept == [records[0], records[1], records[7]]


def test_chunk_rankings_are_collapsed_to_documents_before_ndcg():
    qrels = {"q1": {"b": 1}, "q2": {"a": 1}}
    # q1: "a" twice (two of its chunks), then "b": b is the second document, not the third hit
    rankings = {"q1": ["a", "a", "b"], "q2": ["a"]}
    assert doc_ndcg(rankings, qrels) == pytest.approx((1 / math.log2(3) + 1.0) / 2)
    assert doc_ndcg({"q2": ["a"]}, qrels) == pytest.approx(0.5)  # a judged query left unanswered scores 0
    # only the first ten documents count, however many chunks it takes to reach them
    deep = {"q1": [f"x{i}" for i in range(10)] + ["b"], "q2": ["a"]}
    assert doc_ndcg(deep, qrels) == pytest.approx(0.5)


def test_a_side_is_summarised_by_the_medians_of_its_runs_and_a_failed_run_is_kept_apart():
    def run(seconds: float, pss: float, p50: float, ranking: list[str]) -> dict:
        return {"ok": True, "seconds": seconds, "process_wall_s": seconds + 5, "startup_s": 5.0,
                "ingest_s": seconds - 5, "peak_pss_mb": pss, "peak_rss_mb": pss * 2, "documents": 100, "chunks": 180,
                "model_load_s": 0.5, "retrieval": {"dense": {"rankings": {"q": ranking}, "p50_ms": p50,
                                                             "latency_ms": [p50] * 19 + [p50 * 10]}}}

    runs = [run(20.0, 900.0, 10.0, ["a"]), {"ok": False, "error": "killed"}, run(30.0, 1000.0, 14.0, ["b", "a"]),
            run(25.0, 1100.0, 12.0, ["b", "a"])]
    s = summarise("haystack", runs, 100, {"q": {"a": 1}})
    assert s["ok"] and s["median_s"] == 25.0 and s["docs_per_s"] == 4.0 and s["runs_s"] == [20.0, 30.0, 25.0]
    assert s["peak_pss_mb"] == 1000.0 and s["ingest_s"] == 20.0 and s["failed_runs"] == ["killed"]
    dense = s["retrieval"]["dense"]
    assert dense["p50_ms"] == 12.0 and dense["p95_ms"] == 12.0  # the 20th latency of 20 is past the 95th
    assert dense["ndcg@10_runs"] == [1.0, 0.6309, 0.6309] and dense["ndcg@10"] == 0.6309  # their median
    failed = summarise("ragline", [{"ok": False, "error": "boom", "stderr_tail": "x"}], 100, {"q": {"a": 1}})
    assert failed == {"label": failed["label"], "ok": False, "error": "boom", "stderr_tail": "x"}


def side(docs_per_s: float, dense: float, ok: bool = True) -> dict:
    return {"ok": ok, "docs_per_s": docs_per_s, "retrieval": {"dense": {"ndcg@10": dense}}}


def test_the_ratio_is_taken_against_the_faster_peer_with_both_dense_scores():
    r = ratios({"llamaindex": side(10.0, 0.64), "haystack": side(12.5, 0.63), "ragline": side(30.0, 0.65)})
    assert r["faster_peer"] == "haystack" and r["ragline_over_faster_peer"] == 2.4
    assert r["dense_ndcg_delta"] == pytest.approx(0.02) and r["dense_ndcg_delta_vs_best_peer"] == pytest.approx(0.01)
    assert r["goal_met"] is True
    slower = ratios({"llamaindex": side(10.0, 0.66), "haystack": {"ok": False}, "ragline": side(15.0, 0.65)})
    assert slower["faster_peer"] == "llamaindex" and slower["goal_met"] is False
    assert "ragline_over_faster_peer" not in ratios({"llamaindex": side(10.0, 0.66), "ragline": {"ok": False}})
    assert ratios({"ragline": side(15.0, 0.65)}) == {}


def peers_result() -> dict:
    def ingest(label: str, seconds: float, modes: dict[str, tuple[float, float]], ok: bool = True) -> dict:
        if not ok:
            return {"label": label, "ok": False, "error": "ImportError: no module | named x"}
        return {"label": label, "ok": True, "median_s": seconds, "docs_per_s": round(5183 / seconds, 2),
                "startup_s": 6.0, "chunks": 9800, "peak_pss_mb": 2345.6,
                "retrieval": {m: {"ndcg@10": n, "p50_ms": p, "p95_ms": p * 2} for m, (n, p) in modes.items()},
                "settings": {"num_workers": 2}}

    sides = {"llamaindex": ingest("LlamaIndex", 400.0, {"dense": (0.641, 15.2), "bm25": (0.655, 1.1)}),
             "haystack": ingest("Haystack", 380.0, {"dense": (0.632, 25.0), "bm25": (0.62, 9.0)}),
             "ragline": {**ingest("Ragline", 100.0, {"dense": (0.648, 8.0), "lexical": (0.666, 1.0),
                                                     "hybrid": (0.684, 9.5)}),
                         "embedder": {"runtime": "openvino", "precision": "bf16"}}}
    return {"command": "python benchmarks/peers_bench.py --repeats 3", "date": "2026-11-28", "repeats": 3,
            "queries": 210, "split": "dev", "corpus": {"documents": 5183, "limit": None},
            "settings": {"chunk_tokens": 224, "overlap_tokens": 32, "split_words": 144, "split_overlap_words": 21,
                         "chunks_per_query": 30},
            "versions": {"peers": {"llama-index-core": "0.14.25", "haystack-ai": "3.4.1",
                                   "sentence-transformers-haystack": "2.0.0", "sentence-transformers": "6.2.0",
                                   "torch": "2.13.0+cpu"}},
            "sides": sides, "ratios": ratios(sides)}


def test_the_peers_table_shows_ingest_and_retrieval_per_millisecond(tmp_path):
    block = "<!-- table:peers -->\n<!-- /table:peers -->\n"
    assert "Not measured yet: run `python benchmarks/peers_bench.py`." in readme_tables.render(
        block, tmp_path, ("peers",))
    (tmp_path / "peers-2026-11-28.json").write_text(json.dumps(peers_result()))
    out = readme_tables.render(block, tmp_path, ("peers",))
    assert "SciFact's 5,183 documents, each side in turn, median of 3 runs" in out
    assert "| Haystack | 380.0 | 13.6 | 6.0 | 9,800 | 2,346 | 0.632 |" in out
    assert "| Ragline | 100.0 | 51.8 | 6.0 | 9,800 | 2,346 | 0.648 |" in out
    assert "over haystack's, the faster peer: **3.80x** (goal ≥ 2x at equal or better nDCG)" in out
    assert "dense nDCG@10 0.648 against 0.632 (+0.016)" in out
    assert "| LlamaIndex BM25 | 0.655 | 1.1 | 2.2 |" in out and "| Ragline hybrid (RRF) | 0.684 | 9.5 | 19.0 |" in out
    assert "`num_workers=2`" in out and 'split_by=\\"word\\"' not in out and 'split_by="word"' in out
    assert "the peers in PyTorch fp32 (their default), Ragline in openvino bf16 (its default on this CPU)." in out
    assert readme_tables.render(out, tmp_path, ("peers",)) == out

    failed = peers_result()
    failed["sides"]["ragline"] = {"label": "Ragline", "ok": False, "error": "boom | bang\n"}
    failed["ratios"] = ratios(failed["sides"])
    (tmp_path / "peers-2026-11-29.json").write_text(json.dumps(failed))
    out = readme_tables.render(block, tmp_path, ("peers",))
    assert "| Ragline | failed: `boom \\| bang` | – | – | – | – | – |" in out
    assert "No Ragline figure (its run failed); the faster peer is haystack, 13.6 documents/s." in out


def test_the_headline_names_the_peers_ratio_once_measured(tmp_path):
    for f in readme_tables.RESULTS.glob("*.json"):
        if not f.name.startswith("peers-"):
            (tmp_path / f.name).write_text(f.read_text())
    block = "x\n<!-- table:headline -->\n<!-- /table:headline -->\n"
    assert "SciFact documents against the faster of LlamaIndex" not in readme_tables.render_headline(block, tmp_path)
    (tmp_path / "peers-2026-11-28.json").write_text(json.dumps(peers_result()))
    out = readme_tables.render_headline(block, tmp_path)
    assert ("| [Ingest of 5,183 SciFact documents against the faster of LlamaIndex and Haystack (dense nDCG@10 of "
            "each)](docs/benchmarks.md#against-llamaindex-and-haystack) | 3.80x the documents/s (0.648 against "
            "0.632) |") in out


def answering_run(tps: float, cold: float = 30.0, rss: float = 900.0) -> dict[str, object]:
    point = {"tokens_per_s": tps, "ttft_p50_ms": 200.0, "ttft_p95_ms": 400.0, "latency_p50_ms": 900.0,
             "latency_p95_ms": 1200.0, "wall_s": 2.0, "answer_tokens": 31.0}
    return {"x1": point, "x8": {**point, "tokens_per_s": tps * 3}, "x32": {**point, "tokens_per_s": tps * 4},
            "cold_start_s": cold, "rss_mb": rss}


def test_answering_is_compared_with_the_peer_faster_at_the_most_clients_and_tabled():
    from benchmarks import peers_answer_bench as pa

    sides = {"ragline": pa.summarise([answering_run(15), answering_run(17), answering_run(16)]),
             "haystack": pa.summarise([answering_run(5)]), "llamaindex": pa.summarise([answering_run(6)])}
    assert sides["ragline"]["x32"]["tokens_per_s"] == 64 and sides["ragline"]["cold_start_s"] == 30
    r = pa.ratios(sides)
    assert r["faster_peer"] == "llamaindex" and r["tokens_per_s_x32"] == pytest.approx(64 / 24)
    assert pa.ratios({"haystack": sides["haystack"]}) == {} and pa.ratios({"ragline": sides["ragline"]}) == {}
    result = {"date": "2026-11-28", "command": "python benchmarks/peers_answer_bench.py", "model": "SmolLM2",
              "max_tokens": 32, "repeats": 3, "clients": [1, 8, 32], "cpus": 2, "settings": {"top_k": 2},
              "versions": {"haystack-ai": "3.4.1", "transformers-haystack": "2.0.0", "llama-index-core": "0.14.25",
                           "llama-index-llms-huggingface": "0.8.0", "transformers": "5", "torch": "2",
                           "fastapi": "0.1", "uvicorn": "0.5"},
              "sides": sides, "ratios": r}
    table = readme_tables.peers_answer_table(result, "`x.json`")
    assert "| LlamaIndex query engine in FastAPI (transformers) | 32 | 24.0 |" in table
    assert "the faster peer: 2.7x at 1, 2.7x at 8, 2.7x at 32 client(s) (goal ≥ 10x at 32)" in table
