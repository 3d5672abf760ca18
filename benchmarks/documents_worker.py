"""The child processes of benchmarks/documents_bench.py, run by whichever Python has the library they need: only the
standard library is imported at the top, so Ragline's environment (pypdf) and the benchmark's own
(benchmarks/.venv-unstructured: unstructured, rapidfuzz) can both run this file.

    python documents_worker.py extract pypdf|unstructured OUT_DIR PDF...   one text file per PDF in OUT_DIR
    python documents_worker.py score REFERENCE_DIR CANDIDATE_DIR            word-level similarity per text file

Both print one JSON object on stdout's last line. `extract` times its loop over the files (imports and interpreter
start-up excluded, reported apart as `import_s`); a file its parser raises on is recorded with the error and gets an
empty text. `score` is the fidelity measure described in documents_bench.py.
"""

from __future__ import annotations

import json
import re
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The fidelity tokens: NFKC (ligatures such as "ﬁ" become "fi"), case-folded, runs of word characters (so
    whitespace and the spacing of punctuation do not count, the words and their order do)."""
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _pypdf() -> Callable[[str], str]:
    from pypdf import PdfReader

    def text(path: str) -> str:  # what a user writes
        reader = PdfReader(path)
        return "\n".join(reader.pages[i].extract_text() for i in range(len(reader.pages)))

    return text


def _unstructured() -> Callable[[str], str]:
    from unstructured.partition.pdf import partition_pdf

    def text(path: str) -> str:
        return "\n\n".join(el.text for el in partition_pdf(filename=path, strategy="fast"))

    return text


PARSERS: dict[str, Callable[[], Callable[[str], str]]] = {"pypdf": _pypdf, "unstructured": _unstructured}


def extract(parser: str, out_dir: Path, files: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    parse = PARSERS[parser]()
    t1 = time.perf_counter()
    documents: dict[str, dict[str, Any]] = {}
    for f in files:
        d0 = time.perf_counter()
        try:
            text, error = parse(f), None
        except Exception as e:  # a parser's failure on one file is a result, not the end of the run
            text, error = "", f"{type(e).__name__}: {e}"[:500]
        documents[Path(f).name] = {"seconds": round(time.perf_counter() - d0, 4), "chars": len(text), "error": error}
        (out_dir / f"{Path(f).name}.txt").write_text(text, encoding="utf-8")
    return {"parser": parser, "import_s": round(t1 - t0, 3), "seconds": round(time.perf_counter() - t1, 3),
            "documents": documents}


def score(reference: Path, candidate: Path) -> dict[str, Any]:
    """Per reference text file with any words: the normalized Indel similarity of the candidate's word sequence
    to it, 1 - (insertions + deletions) / (len(a) + len(b)), i.e. 2·LCS / (len(a) + len(b)); a missing candidate
    file scores 0."""
    from rapidfuzz.distance import Indel

    out: dict[str, Any] = {}
    for ref in sorted(reference.glob("*.txt")):
        a = words(ref.read_text(encoding="utf-8"))
        if not a:
            continue
        cand = candidate / ref.name
        b = words(cand.read_text(encoding="utf-8")) if cand.is_file() else []
        out[ref.name.removesuffix(".txt")] = {"similarity": round(Indel.normalized_similarity(a, b), 4),
                                              "words": len(b), "reference_words": len(a)}
    return out


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "extract":
        out_dir = Path(argv[2])
        out_dir.mkdir(parents=True, exist_ok=True)
        result = extract(argv[1], out_dir, argv[3:])
    elif len(argv) == 3 and argv[0] == "score":
        result = score(Path(argv[1]), Path(argv[2]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
