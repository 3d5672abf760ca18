"""The benchmark tables (docs/benchmarks.md) and the README's headline numbers are what the committed benchmark
results give (benchmarks/readme_tables.py)."""

import json
import re
import subprocess

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


def test_the_docs_and_the_readme_match_the_committed_results():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert readme_tables.render(page) == page, "run benchmarks/readme_tables.py"
    readme = (ROOT / "README.md").read_text()
    assert readme_tables.render_headline(readme) == readme, "run benchmarks/readme_tables.py"


def test_the_readme_keeps_headline_numbers_only_and_links_each_to_its_full_table():
    readme = (ROOT / "README.md").read_text()
    assert "<!-- table:quality -->" not in readme and "<!-- table:headline -->" in readme
    anchors = re.findall(r"\(docs/benchmarks\.md#([a-z0-9-]+)\)", readme)
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "benchmarks.md").read_text(), re.M)}
    assert len(anchors) >= 5 and set(anchors) <= headings


def test_the_headline_is_rendered_from_the_newest_files(tmp_path):
    for f in readme_tables.RESULTS.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    ingest = json.loads(readme_tables.latest_per_cpu("ingest")[0].read_text())
    (tmp_path / "ingest-2099-01-01.json").write_text(json.dumps({**ingest, "speedup": 9.87}))
    out = readme_tables.render_headline("x\n<!-- table:headline -->\nold\n<!-- /table:headline -->\n", tmp_path)
    assert "9.87x as fast" in out and "old" not in out


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


def test_two_cpus_at_one_level_keep_a_table_each_the_newer_first(tmp_path):
    def hw(cpu: str) -> dict:
        return {"cpu": cpu, "level": "avx512_bf16", "flags": ["avx2", "avx512_bf16"], "cores": 2, "memory_gib": 23.5,
                "cuda": [], "forced": None}

    epyc, xeon = hw("AMD EPYC"), hw("Intel(R) Xeon(R) Processor")
    (tmp_path / "quality-2026-11-26-avx512_bf16.json").write_text(json.dumps({**result("2026-11-26", 0.71),
                                                                             "hardware": epyc}))
    (tmp_path / "quality-2026-11-27-avx512_bf16.json").write_text(json.dumps({**result("2026-11-27", 0.72),
                                                                             "hardware": epyc}))
    name = f"quality-2026-11-28-avx512_bf16-{readme_tables.cpu_slug(xeon['cpu'])}.json"
    assert name == "quality-2026-11-28-avx512_bf16-intel-xeon.json"
    (tmp_path / name).write_text(json.dumps({**result("2026-11-28", 0.73), "hardware": xeon}))
    assert [p.name for p in readme_tables.latest_per_cpu("quality", tmp_path)] == [
        name, "quality-2026-11-27-avx512_bf16.json"]
    out = readme_tables.render(BLOCK, tmp_path, ("quality",))
    assert out.index("On Intel(R) Xeon(R) Processor (avx512_bf16)") < out.index("On AMD EPYC (avx512_bf16)")
    assert "| 0.730 |" in out and "| 0.720 |" in out and "2026-11-26" not in out


def documents_result(ragline_ok: bool) -> dict:
    def parser(label: str, seconds: float, fid: float | None) -> dict:
        out = {"label": label, "ok": True, "median_s": seconds, "pages_per_s": round(2780 / seconds, 2)}
        return {**out, "fidelity": {"median": fid, "mean": fid - 0.01, "word_weighted": fid + 0.01}} if fid else out

    contenders = {"pdftotext": parser("Poppler pdftotext", 7.2, None), "pypdf": parser("pypdf loop", 63.5, 0.95),
                  "unstructured": parser("unstructured fast", 180.0, 0.97)}
    if ragline_ok:
        contenders["ragline"] = {**parser("Ragline", 139.0, 0.99), "parse_wall_s": 20.0, "parse_busy_s": 35.0,
                                 "parse_pages_per_wall_s": 139.0}
        ratios = {"fastest_baseline": "pypdf", "fastest_baseline_pages_per_s": 43.78, "ragline_over_fastest": 0.457,
                  "ragline_parse_over_fastest": 3.175}
    else:
        contenders["ragline"] = {"label": "Ragline", "ok": False,
                                 "error": "ModuleNotFoundError: No module named 'a|b'\n"}
        ratios = {"fastest_baseline": "pypdf", "fastest_baseline_pages_per_s": 43.78}
    return {"command": "python benchmarks/documents_bench.py --repeats 3", "date": "2026-11-27", "repeats": 3,
            "corpus": {"dir": "/x", "files": 61, "pages": 2780, "text_pages": 2700, "bytes": 31515442,
                       "packages": {"r-doc-pdf": {}, "gnuplot-doc": {}}},
            "versions": {"spacy_model": {"description": "stand-in for en_core_web_sm"}},
            "contenders": contenders, "ratios": ratios}


def test_the_documents_table_shows_each_parser_and_a_failed_ragline_with_its_error(tmp_path):
    block = "<!-- table:documents -->\n<!-- /table:documents -->\n"
    (tmp_path / "documents-2026-11-27.json").write_text(json.dumps(documents_result(ragline_ok=False)))
    out = readme_tables.render(block, tmp_path, ("documents",))
    assert "61 PDFs, 2,780 pages (2,700 with text), 30 MiB: the manuals of 2 Debian packages" in out
    assert "| pypdf loop | 63.5 | 43.8 | 0.950 | 0.960 |" in out
    assert "| Poppler pdftotext | 7.2 | 386.1 | the reference | – |" in out
    assert "| Ragline | failed: `ModuleNotFoundError: No module named 'a\\|b'` | – | – | – |" in out
    assert "No Ragline figure yet (its run failed); the faster plain parser is pypdf, 43.8 pages/s." in out
    assert "stand-in for spaCy's en_core_web_sm" in out
    assert readme_tables.render(out, tmp_path, ("documents",)) == out  # the escaped "|" survives a re-render

    (tmp_path / "documents-2026-11-28.json").write_text(json.dumps(documents_result(ragline_ok=True)))
    out = readme_tables.render(block, tmp_path, ("documents",))
    assert "| Ragline | 139.0 | 20.0 | 0.990 | 1.000 |" in out
    assert "| Ragline's parse stage (wall; 35.0 s busy) | 20.0 | 139.0 | – | – |" in out
    assert "**0.46x** end to end (embedding included), 3.17x its parse stage" in out


def test_the_documents_quality_table_sets_each_corpus_against_jsonl(tmp_path):
    def corpus(found: int, page: float | None = None) -> dict:
        out = {"ok": True, "documents": {"kept": 24}, "chunks": 1500, "found": found,
               "found_rate": round(found / 1038, 4), "mode": "hybrid"}
        return {**out, "answer_page": {"share": page}} if page is not None else out

    r = {"command": "python benchmarks/documents_quality.py", "date": "2026-11-27", "dataset": "dev-a-v1.1.json",
         "split": "dev", "questions": 1038, "k": 5, "min_shared_words": 8, "articles": 24,
         "ragline": {"commit": "abc1234"},
         "layout": {"jsonl": {}, "pdf": {"pages": 357, "paragraphs": 913, "paragraphs_across_pages": 261},
                    "docx": {}},
         "corpora": {"jsonl": corpus(1000), "pdf": corpus(990, 0.97),
                     "docx": {"ok": False, "error": "no supported files"}},
         "ratios": {"pdf_over_jsonl": 0.99}}
    (tmp_path / "documents_quality-2026-11-27.json").write_text(json.dumps(r))
    out = readme_tables.render("<!-- table:documents_quality -->\n<!-- /table:documents_quality -->\n", tmp_path,
                               ("documents_quality",))
    assert ("articles as a JSONL corpus (a record per paragraph), PDFs (357 A5 pages; 261 of 913 paragraphs cross a "
            "page break) and DOCX files, each ingested by `ragline ingest` (Ragline abc1234); 1,038 dev questions, "
            "top 5 hybrid hits each") in out
    assert "| JSONL | 24 | 1,500 | 0.963 (1,000) | 1.00x | – |" in out
    assert "| PDF | 24 | 1,500 | 0.954 (990) | 0.990x | 97.0% |" in out
    assert "| DOCX | failed: `no supported files` | – | – | – | – |" in out


def test_a_second_run_of_the_day_goes_beside_the_first_and_is_the_one_read(tmp_path):
    hw = {"cpu": "AMD EPYC 7B13", "level": "avx2", "flags": ["avx2", "fma"], "cores": 2, "memory_gib": 23.4,
          "cuda": [], "forced": None}
    first = {**result("2026-11-27", 0.7), "hardware": hw}
    path = readme_tables.results_path("quality", first, tmp_path)
    assert path.name == "quality-2026-11-27-avx2-amd-epyc-7b13.json"
    path.write_text(json.dumps(first))
    second = readme_tables.results_path("quality", first, tmp_path)
    assert second.name == "quality-2026-11-27.2-avx2-amd-epyc-7b13.json"
    second.write_text(json.dumps({**result("2026-11-27", 0.71), "hardware": hw}))
    (tmp_path / "quality-2026-11-26-avx2-amd-epyc-7b13.json").write_text(json.dumps(first))
    assert readme_tables.latest("quality", tmp_path) == second
    assert readme_tables.latest_per_cpu("quality", tmp_path) == [second]
    # git keeps both: a results file it ignored would be read here and missing from every clone
    for name in (path.name, second.name):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"benchmarks/results/{name}"], cwd=ROOT)
        assert ignored.returncode == 1, f"{name} is in .gitignore"
