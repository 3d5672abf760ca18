"""README tables are what the committed benchmark results give (benchmarks/readme_tables.py)."""

import json

import pytest

from benchmarks import readme_tables
from tests.helpers import ROOT

BLOCK = "intro\n<!-- table:quality -->\nstale\n<!-- /table:quality -->\noutro\n"


def result(date: str, hybrid_fused: float) -> dict:
    modes = {}
    for mode in ("dense", "lexical", "hybrid"):
        modes[mode] = {"ndcg@10": 0.65, "recall@100": 0.9}
        modes[f"{mode}+ce"] = {"ndcg@10": 0.62}
        modes[f"{mode}+rerank"] = {"ndcg@10": hybrid_fused if mode == "hybrid" else 0.7}
    return {"command": "benchmarks/quality.py --runs 1 --rerank-top 50", "date": date, "split": "dev",
            "queries": 210, "rerank_top": 50, "runs": [{}], "median": modes}


def test_the_newest_results_file_renders_into_its_block(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "quality-2026-01-02.json").write_text(json.dumps(result("2026-01-02", 0.7)))
    (results / "quality-2026-11-23.json").write_text(json.dumps(result("2026-11-23", 0.725)))
    out = readme_tables.render(BLOCK, results, ("quality",))
    assert out.startswith("intro\n<!-- table:quality -->\n") and out.endswith("\n<!-- /table:quality -->\noutro\n")
    assert "stale" not in out and "2026-11-23" in out and "2026-01-02" not in out
    assert "| hybrid (RRF) | 0.650 | 0.620 | 0.725 | +0.075 | 0.900 |" in out
    assert readme_tables.render(out, results, ("quality",)) == out  # idempotent


def test_a_missing_block_or_results_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="run benchmarks/generate_bench.py"):
        readme_tables.render(BLOCK, tmp_path, ("generate",))
    (tmp_path / "quality-2026-01-01.json").write_text(json.dumps(result("2026-01-01", 0.7)))
    with pytest.raises(ValueError, match="no <!-- table:quality -->"):
        readme_tables.render("no block here", tmp_path, ("quality",))


def test_the_readme_matches_the_committed_results():
    readme = (ROOT / "README.md").read_text()
    assert readme_tables.render(readme) == readme, "run benchmarks/readme_tables.py"


def test_a_rerun_on_another_cpu_adds_its_table_and_each_names_its_cpu(tmp_path):
    avx2 = {"cpu": "AMD EPYC 7B13", "level": "avx2", "flags": ["avx2", "fma"], "cores": 2, "memory_gib": 23.4,
            "cuda": [], "forced": None}
    (tmp_path / "quality-2026-11-23.json").write_text(json.dumps(result("2026-11-23", 0.725)))  # before CPUs
    (tmp_path / "quality-2026-11-25-avx2.json").write_text(json.dumps({**result("2026-11-25", 0.7), "hardware": avx2}))
    (tmp_path / "quality-2026-11-27-avx2.json").write_text(json.dumps({**result("2026-11-27", 0.71),
                                                                      "hardware": avx2}))
    out = readme_tables.render(BLOCK, tmp_path, ("quality",))
    first, second = out.index("On an AMD EPYC with AVX512-BF16"), out.index("On AMD EPYC 7B13 (avx2), 2 cores, 23 GiB")
    assert first < second and "0.725" in out and "| 0.710 |" in out and "2026-11-25" not in out
