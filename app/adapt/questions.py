"""Synthetic questions, the pure part: the writer's prompt, what of its reply is a question, which questions are
held out, and the JSONL rows a synthetic set is written as (the question-set format `ragline train` and
`eval answers` read, `app.qa.questions`). The prompt itself is `app.models.question_writer`'s.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal, TypedDict

MIN_WORDS, MAX_WORDS = 4, 30  # a question's length in words: shorter is a fragment, longer a copied sentence
# what a small writer produces when it has no question: a question about questions, or the prompt echoed
DEGENERATE = re.compile(r"\b(the answer to (this|the) question|the text above|this passage)\b", re.IGNORECASE)

ASKS = re.compile(r"(what|which|who|whom|whose|when|where|why|how|is|are|does|do|did|can|could|was|were|has|have)\b",
                  re.IGNORECASE)
ANSWER = re.compile(r"\bAnswer\s*:", re.IGNORECASE)
ANSWER_TEXT = re.compile(r"\bAnswer\s*:\s*([^\n]+)", re.IGNORECASE)
MAX_ANSWER_WORDS = 12

# duplicate: a question its chunk was already asked (adapt.writer.questions_per_chunk above 1)
Rejection = Literal["no_question", "too_short", "too_long", "degenerate", "copied", "duplicate"]


class SyntheticRow(TypedDict):
    """One line of a synthetic question set (JSONL): a question about one chunk of the index."""

    id: str  # the chunk's id, and `#<ask>` where a chunk was asked several questions
    question: str
    doc_id: str  # the chunk's document: the relevant document of the question
    chunk_id: str
    rank: int  # where the current retriever ranked doc_id (1-based; 0: not in the round trip's top k)
    answers: list[str]  # the writer's answer, where the chunk holds it in a sentence asked about; else empty


@dataclass(frozen=True)
class Written:
    question: str | None
    rejected: Rejection | None
    answer: str | None = None  # the reply's answer, where the passage holds it word for word (`answer_span`)


def parse(reply: str, passage: str) -> Written:
    """The question in the writer's reply (its first line, up to the first '?'; a line that asks without one, up
    to an "Answer:"), or why there is none."""
    line = ANSWER.split(reply.strip().split("\n", 1)[0], 1)[0].strip()
    end = line.find("?")
    if end < 0 and not ASKS.match(line):
        return Written(None, "no_question")
    question = " ".join(line[:end].split() if end >= 0 else line.rstrip(" .:").split()) + "?"
    if DEGENERATE.search(question):  # first: its repetitions are often too long too
        return Written(None, "degenerate")
    words = len(question.split())
    if words < MIN_WORDS:
        return Written(None, "too_short")
    if words > MAX_WORDS:
        return Written(None, "too_long")
    if question[:-1].lower() in " ".join(passage.split()).lower():  # a sentence of the passage with a '?'
        return Written(None, "copied")
    return Written(question, None, answer_span(reply, passage, question))


def answer_span(reply: str, passage: str, question: str) -> str | None:
    """The reply's "Answer: ..." when the passage holds it word for word (case and spacing aside) in a sentence
    the question is about (`about`): a span a generator can learn to quote. A longer one is a sentence, not an
    answer; one elsewhere in the passage most often answers another question than the one asked."""
    found = ANSWER_TEXT.search(reply)
    if not found:
        return None
    answer = " ".join(found.group(1).split()).strip(" .")
    if not answer or len(answer.split()) > MAX_ANSWER_WORDS:
        return None
    return answer if any(answer.lower() in s.lower() for s in about(question, passage)) else None


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"[a-z0-9]+")
# words that say nothing of which sentence a question is about
FUNCTION_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "been", "by", "can", "could", "did", "do", "does", "for", "from",
    "had", "has", "have", "how", "in", "is", "it", "its", "of", "on", "or", "that", "the", "their", "there", "these",
    "this", "those", "to", "was", "were", "what", "when", "where", "which", "who", "whom", "whose", "why", "will",
    "with"))


def about(question: str, passage: str) -> list[str]:
    """The passage's sentences (spacing normalised) that share the most content words with the question, all of
    them where they tie: the sliding-window baseline of the SQuAD paper, whose answers mostly lie in such a
    sentence."""
    sentences = SENTENCE_END.split(" ".join(passage.split()))
    asked = set(WORD.findall(question.lower())) - FUNCTION_WORDS
    shared = [len(asked & set(WORD.findall(s.lower()))) for s in sentences]
    most = max(shared)
    return [s for s, n in zip(sentences, shared, strict=True) if n == most]


def held_out(chunk_id: str, fraction: float, seed: int) -> bool:
    """Whether a chunk's question is held out to judge candidates: a stable hash, so reruns agree and no
    question is both trained on and judged by."""
    digest = hashlib.sha256(f"{seed}:{chunk_id}".encode()).hexdigest()
    return int(digest[:8], 16) / 0x1_0000_0000 < fraction
