"""Retrieval through the document path: SQuAD's paragraphs ingested as a JSONL corpus, as PDFs and as DOCX files,
each into its own storage root by `ragline ingest` (index built), and every dev question asked of each index.

    .venv/bin/python benchmarks/documents_quality.py [--limit N] [--only jsonl pdf docx] [--k 5] [--work DIR]
        [--ragline-rev REV] [--out FILE]

The corpora, from the shared SQuAD half A (`../shared/datasets/squad/dev-a-v1.1.json`, all 24 articles: the
other articles are the distractors, as in benchmarks/answers_bench.py):
  - JSONL: one record per paragraph, `app.qa.questions.write_corpus` (what answers_bench ingests);
  - PDF: one file per article rendered with reportlab: its title as a heading, then its paragraphs in order, on A5
    pages in DejaVu Sans 10/13 pt, so that page breaks fall inside paragraphs; the pages each paragraph's words land
    on are recorded as the PDF is laid out (the paragraph's parts, as reportlab splits it across a page break);
  - DOCX: one file per article with python-docx: a level-1 heading with its title, then one paragraph each.

Questions: the dev split's (`app.qa.questions.load_questions`, every question; `--limit N` spreads N over them), each
searched in process (`app.index.search.Searcher` over `Index.load(storage)`, the config's default mode, hybrid, top
`--k`), the questions embedded in one batch.

Scoring. A hit *finds* the gold paragraph when its text contains one of the question's gold answers (NFKC,
whitespace collapsed, case kept) and shares a run of at least 8 consecutive words with the gold paragraph (words:
NFKC, case-folded runs of word characters; the paragraph's own length where shorter). The answer alone would
accept any chunk that mentions "1973"; of the corpus's 112,681 distinct runs of 8 words, 84 occur in more than one
paragraph (repeated facts: "the Broncos finished the regular season with a 12–4 record"), so a hit that holds both
is the gold paragraph's text. A question is found when one of its top-k hits finds it; each corpus's rate is
found / asked, and the goal is PDF and DOCX ≥ 0.98x JSONL's. For PDFs, of the found questions, the first hit that
finds it must carry the page the answer is on in its `pages`: the page(s) that SQuAD's answer span (its
`answer_start` and text) lands on in the rendered PDF (goal ≥ 95%).

A corpus whose ingestion fails (Ragline reads no PDFs or DOCX files yet) is recorded with its error and the others
go on. Writes benchmarks/results/documents_quality-<date>-<cpu level>-<cpu>.json and rewrites README's table (or `--out
FILE` alone).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.qa.questions import Question, load_questions, sample, write_corpus  # noqa: E402
from benchmarks import readme_tables  # noqa: E402
from benchmarks.documents_bench import ragline_tree, run_ragline, shingles  # noqa: E402
from benchmarks.documents_worker import words  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "squad" / "dev-a-v1.1.json"
CORPORA = ("jsonl", "pdf", "docx")
MIN_SHARED_WORDS = 8
FONTS = {"DejaVuSans": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  # Debian's fonts-dejavu-core
         "DejaVuSans-Bold": "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"}
# per article: per paragraph, its parts in order as laid out: (page, words)
Placement = dict[str, list[list[tuple[int, int]]]]


def file_stem(title: str) -> str:
    return re.sub(r"[^\w.-]+", "_", title)


def read_articles(dataset: Path) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(dataset.read_text(encoding="utf-8"))
    articles: list[dict[str, Any]] = data["data"]
    return articles


# -- rendering ----------------------------------------------------------------------------------------------------


def render_pdfs(articles: list[dict[str, Any]], out: Path) -> tuple[Placement, dict[str, Any]]:
    """One PDF per article in `out`; where each paragraph's words landed, and what the layout came to."""
    from reportlab.lib.pagesizes import A5
    from reportlab.lib.styles import ParagraphStyle
    from reportlab.lib.units import mm
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.ttfonts import TTFont
    from reportlab.platypus import Flowable, Paragraph, SimpleDocTemplate

    for name, path in FONTS.items():
        if not Path(path).is_file():
            sys.exit(f"{path} is missing: apt-get install fonts-dejavu-core (the PDFs need a font with the "
                     "corpus's letters)")
        pdfmetrics.registerFont(TTFont(name, path))
    body = ParagraphStyle("body", fontName="DejaVuSans", fontSize=10, leading=13, spaceAfter=6)
    heading = ParagraphStyle("heading", fontName="DejaVuSans-Bold", fontSize=16, leading=20, spaceAfter=10)

    class Tracked(Paragraph):
        """A paragraph that remembers its index in the article, and passes it to the parts a page break makes."""

        index = -1

        def split(self, availWidth: float, availHeight: float) -> list[Flowable]:
            parts: list[Flowable] = super().split(availWidth, availHeight)
            for part in parts:
                part.index = self.index
            return parts

    class Doc(SimpleDocTemplate):
        placed: list[tuple[int, int, int]]  # (paragraph, page, words), in layout order

        def afterFlowable(self, flowable: Flowable) -> None:
            if isinstance(flowable, Paragraph) and getattr(flowable, "index", -1) >= 0:
                self.placed.append((flowable.index, self.page, laid_words(flowable)))

    placement: Placement = {}
    pages = split = 0
    out.mkdir(parents=True, exist_ok=True)
    for a in articles:
        doc = Doc(str(out / f"{file_stem(a['title'])}.pdf"), pagesize=A5, leftMargin=15 * mm, rightMargin=15 * mm,
                  topMargin=15 * mm, bottomMargin=15 * mm, title=a["title"].replace("_", " "),
                  author="SQuAD v1.1 (Wikipedia)")
        doc.placed = []
        flow: list[Flowable] = [Paragraph(escape(a["title"].replace("_", " ")), heading)]
        for i, p in enumerate(a["paragraphs"]):
            para = Tracked(escape(p["context"]), body)
            para.index = i
            flow.append(para)
        doc.build(flow)
        parts: list[list[tuple[int, int]]] = [[] for _ in a["paragraphs"]]
        for i, page, n in doc.placed:
            parts[i].append((page, n))
        for i, p in enumerate(a["paragraphs"]):
            laid = sum(n for _, n in parts[i])
            assert laid == len(p["context"].split()), (a["title"], i, laid, len(p["context"].split()))
        placement[a["title"]] = parts
        pages += doc.page
        split += sum(1 for ps in parts if len({page for page, _ in ps}) > 1)
    return placement, {"files": len(articles), "pages": pages, "paragraphs": sum(map(len, placement.values())),
                       "paragraphs_across_pages": split, "page": "A5", "font": "DejaVu Sans 10/13 pt"}


def laid_words(paragraph: Any) -> int:
    """The words a laid-out reportlab Paragraph (or the part of one a page break left) holds, from its lines: a
    plain one's are (extra space, [words]), one of several fragments' (an escaped "&" makes three) FragLines of
    fragments."""
    para = paragraph.blPara
    if para.kind == 0:
        return sum(len(line[1]) for line in para.lines)
    return sum(len("".join(frag.text for frag in line.words).split()) for line in para.lines)


def render_docx(articles: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    import docx

    out.mkdir(parents=True, exist_ok=True)
    for a in articles:
        document = docx.Document()
        title = a["title"].replace("_", " ")
        document.core_properties.title = title
        document.add_heading(title, level=1)
        for p in a["paragraphs"]:
            document.add_paragraph(p["context"])
        document.save(str(out / f"{file_stem(a['title'])}.docx"))
    return {"files": len(articles), "paragraphs": sum(len(a["paragraphs"]) for a in articles)}


def answer_pages(context: str, start: int, text: str, parts: list[tuple[int, int]]) -> set[int]:
    """The pages the answer span [start, start + len(text)) of a paragraph lands on, from its laid-out parts."""
    first = len(context[:start].split())
    if start > 0 and not context[start - 1].isspace():
        first -= 1  # the answer begins inside a word
    last = len(context[:start + len(text)].split()) - 1
    pages, at = set(), 0
    for page, n in parts:
        if at <= last and first < at + n:
            pages.add(page)
        at += n
    return pages


# -- scoring ------------------------------------------------------------------------------------------------------


def flat(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


class Gold:
    """What finds a question: its answers, and the runs of words of its paragraph."""

    def __init__(self, answers: tuple[str, ...], paragraph: str, min_shared: int = MIN_SHARED_WORDS):
        self.answers = [flat(a) for a in answers]
        self.n = max(1, min(min_shared, len(words(paragraph))))
        self.grams = shingles(paragraph, self.n)

    def found_by(self, hit_text: str) -> bool:
        text = flat(hit_text)
        return any(a in text for a in self.answers) and not self.grams.isdisjoint(shingles(hit_text, self.n))


def ask(storage: Path, questions: list[Question], golds: dict[str, Gold], k: int,
        pages_of: dict[str, set[int]] | None) -> dict[str, Any]:
    """Every question searched in process; found rate, and (`pages_of`: each question's answer pages) whether the
    first finding hit's pages hold the answer."""
    from app.config import load_config
    from app.index.search import Index, Searcher
    from app.storage import Storage

    cfg = load_config(None, []).search
    searcher = Searcher(Index.load(Storage(str(storage))), cfg)
    t0 = time.perf_counter()
    vectors = searcher.embed([q.question for q in questions])
    found = on_page = 0
    misses: list[str] = []
    page_misses: list[dict[str, Any]] = []
    for q, vector in zip(questions, vectors, strict=True):
        hits = searcher.index.search(q.question, vector, cfg.mode, k, cfg)
        first = next((h for h in hits if golds[q.qid].found_by(h.text)), None)
        if first is None:
            misses.append(q.qid)
            continue
        found += 1
        if pages_of is not None:
            if set(first.pages) & pages_of[q.qid]:
                on_page += 1
            else:
                page_misses.append({"qid": q.qid, "answer_pages": sorted(pages_of[q.qid]),
                                    "hit_pages": list(first.pages), "location": first.location})
    out: dict[str, Any] = {"questions": len(questions), "found": found, "found_rate": round(found / len(questions), 4),
                           "search_s": round(time.perf_counter() - t0, 2), "mode": cfg.mode, "k": k,
                           "misses": misses[:50]}
    if pages_of is not None:
        out["answer_page"] = {"found": found, "on_page": on_page,
                              "share": round(on_page / found, 4) if found else None, "misses": page_misses[:50]}
    return out


# -- the run ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="SQuAD v1.1 JSON (default: half A)")
    ap.add_argument("--split", default="dev", help="whose questions are asked (dev, train, all)")
    ap.add_argument("--limit", type=int, default=None, help="N questions spread over the split (default: all)")
    ap.add_argument("--k", type=int, default=5, help="hits per question")
    ap.add_argument("--only", nargs="+", choices=CORPORA, default=list(CORPORA), metavar="NAME",
                    help=f"ingest and ask only these corpora ({', '.join(CORPORA)})")
    ap.add_argument("--ragline-rev", default=None, metavar="REV",
                    help="ingest with the Ragline code of this commit (exported into the work directory) instead "
                    "of the checkout's, e.g. a JSONL baseline from before a change; questions are still searched "
                    "with the checkout's code")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the rendered files and storage roots here (default: a temporary directory)")
    ap.add_argument("--out", type=Path, default=None,
                    help="results file (default: benchmarks/results/documents_quality-<date>-<cpu level>-<cpu>.json, "
                    "and the README table is rewritten)")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be at least 1")
    dataset = args.dataset.resolve()
    articles = read_articles(dataset)
    questions = sample(load_questions(dataset, args.split), args.limit)
    contexts = {a["title"]: a["paragraphs"] for a in articles}
    golds: dict[str, Gold] = {}
    starts: dict[str, list[tuple[int, str]]] = {}
    for a in articles:
        for p in a["paragraphs"]:
            for qa in p.get("qas", []):
                starts[qa["id"]] = [(x["answer_start"], x["text"]) for x in qa.get("answers", [])]
    for q in questions:
        title, _, i = q.doc_id.rpartition("#")
        golds[q.qid] = Gold(q.answers, contexts[title][int(i)]["context"])

    corpora: dict[str, Any] = {}
    layout: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ragline-docquality-") as tmp_s:
        work = args.work.resolve() if args.work else Path(tmp_s)
        tree, commit = ragline_tree(args.ragline_rev, work)
        pages_of: dict[str, set[int]] | None = None
        for name in args.only:
            inputs = work / f"{name}-input"
            shutil.rmtree(inputs, ignore_errors=True)
            if name == "jsonl":
                layout["jsonl"] = {"files": 1, "documents": write_corpus(dataset, inputs / "squad.jsonl")}
            elif name == "pdf":
                placement, layout["pdf"] = render_pdfs(articles, inputs)
                pages_of = {}
                for q in questions:
                    title, _, i = q.doc_id.rpartition("#")
                    context = contexts[title][int(i)]["context"]
                    pages_of[q.qid] = set().union(*(answer_pages(context, s, t, placement[title][int(i)])
                                                    for s, t in starts[q.qid]))
                layout["pdf"]["answers_across_pages"] = sum(1 for p in pages_of.values() if len(p) > 1)
                print(f"rendered {layout['pdf']['files']} PDFs, {layout['pdf']['pages']} pages; "
                      f"{layout['pdf']['paragraphs_across_pages']} of {layout['pdf']['paragraphs']} paragraphs "
                      "cross a page break", flush=True)
            else:
                layout["docx"] = render_docx(articles, inputs)
            storage = work / f"{name}-storage"
            shutil.rmtree(storage, ignore_errors=True)
            res = run_ragline(inputs, storage, [], tree, index=True)
            if not res["ok"] or res.get("index_version") is None:
                # the temporary directory named as such: the message goes into the README
                error = (res.get("error") or "no index version was built").replace(str(work), "WORK")
                corpora[name] = {"ok": False, "error": error, "stderr_tail": res.get("stderr_tail", "")}
                print(f"{name}: ingest failed: {error}", flush=True)
                continue
            print(f"{name}: ingested in {res['seconds']:.1f} s ({res['chunks']} chunks); asking "
                  f"{len(questions)} questions", flush=True)
            scored = ask(storage, questions, golds, args.k, pages_of if name == "pdf" else None)
            corpora[name] = {"ok": True, "ingest_s": round(res["seconds"], 2), "documents": res["documents"],
                             "chunks": res["chunks"], **scored}
            print(f"{name}: found {scored['found']} of {scored['questions']} ({scored['found_rate']:.3f})"
                  + (f"; answer's page in the hit's pages: {scored['answer_page']['share']}" if name == "pdf" else ""),
                  flush=True)

    base = corpora.get("jsonl", {})
    ratios = {f"{n}_over_jsonl": round(c["found_rate"] / base["found_rate"], 4)
              for n, c in corpora.items() if n != "jsonl" and c["ok"] and base.get("ok") and base["found_rate"]}
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/documents_quality.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "dataset": dataset.name, "split": args.split, "questions": len(questions), "limit": args.limit, "k": args.k,
        "min_shared_words": MIN_SHARED_WORDS, "articles": len(articles),
        "ragline": {"rev": args.ragline_rev, "commit": commit},
        "layout": layout, "corpora": corpora, "ratios": ratios,
    }
    print(json.dumps(ratios))
    readme_tables.save("documents_quality", result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

