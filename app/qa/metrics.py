"""Answer metrics as pure functions: SQuAD v1.1 exact match and F1 (the official normalisation, max over the gold
answers), the citation an answer gives, and whether it declined to answer.

Citations are scored on their own (`cited_numbers`), so the answer text is scored with its `[n]` markers removed:
"Denver Broncos [1]" is an exact match for "Denver Broncos".
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

CITATION = re.compile(r"\[(\d{1,3})\]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """The official SQuAD v1.1 normalisation: lower case, no punctuation, no articles, single spaces."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def strip_citations(answer: str) -> str:
    return " ".join(CITATION.sub(" ", answer).split())


def cited_numbers(answer: str) -> list[int]:
    """Passage numbers the answer cites, in order of first mention."""
    return list(dict.fromkeys(int(n) for n in CITATION.findall(answer)))


def _f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def exact_match(answer: str, golds: Sequence[str]) -> float:
    pred = normalize_answer(strip_citations(answer))
    return float(any(pred == normalize_answer(g) for g in golds))


def f1(answer: str, golds: Sequence[str]) -> float:
    pred = strip_citations(answer)
    return max((_f1(pred, g) for g in golds), default=0.0)


def contains_answer(text: str, golds: Sequence[str]) -> bool:
    """Whether a passage holds one of the gold answers (compared normalised, so "the Broncos" matches "Broncos")."""
    norm = f" {normalize_answer(text)} "
    return any(f" {g} " in norm for g in (normalize_answer(x) for x in golds) if g)


def is_idk(answer: str, idk: str) -> bool:
    """Whether the answer is the configured "I don't know" (or starts with it), compared normalised."""
    want, got = normalize_answer(idk), normalize_answer(strip_citations(answer))
    return bool(want) and got.startswith(want)
