"""QA fine-tuning examples in the serving format (`sft.rag_qa`).

For each question the index retrieves passages as the serving graph's retriever does, `rag_prompt` fits them into
the prompt the Generator serves, and the answer the model learns is the short one the default prompt asks for:
the gold answer most annotators gave, then the number of the passage that holds it ("Denver Broncos [2]"). For
`idk_fraction` of the questions the gold passage is taken out and the answer is the configured "I don't know", so
the model learns to decline when the passages lack the answer. A gold passage the retriever missed is put in
(`insert_gold`): a missed passage that taught "I don't know" would double the share of such answers, and a small
model answering greedily then declines far more often than it was taught to (the first run said it to 44% of dev
questions whose gold passage it had, after 19% of its examples).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from app.config import GeneratorConfig, SearchConfig
from app.passage import ChunkRow, Passage
from app.qa.metrics import contains_answer, normalize_answer
from app.qa.questions import Question
from app.rag.prompt import rag_prompt
from app.storage import Storage
from app.train.config import RagQAConfig


def drops_gold(qid: str, fraction: float) -> bool:
    """Whether this question's gold passage is taken out: a stable hash of its id, so every run agrees."""
    return int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16) / 0x1_0000_0000 < fraction


def with_gold(qid: str, hits: list[Passage], gold: Passage, keep: int) -> list[Passage]:
    """`hits` whose first `keep` hold `gold`: unchanged when they do, else `gold` takes a place among them chosen by
    a stable hash of the question id (not always the last, which the model would learn to cite)."""
    if any(h.doc_id == gold.doc_id for h in hits[:keep]):
        return hits
    at = int(hashlib.sha256(f"at:{qid}".encode()).hexdigest()[:8], 16) % max(1, min(keep, len(hits) + 1))
    rest = [h for h in hits if h.doc_id != gold.doc_id]
    return [*rest[:at], gold, *rest[at:]]


def consensus_answer(golds: Sequence[str]) -> str:
    """The gold answer most annotators gave (compared normalised), the shortest among equals: F1 takes the best
    match over all golds, so the span most of them share, at its tightest, is the one to learn. (SQuAD's
    first-listed answer is one annotator's span, often a word or two longer.)"""
    counts = Counter(normalize_answer(g) for g in golds)
    return min(golds, key=lambda g: (-counts[normalize_answer(g)], len(g)))


def answer_for(question: Question, passages: Sequence[Passage], idk: str) -> str:
    """The consensus gold answer cited by the first passage in the prompt that is the gold document, else by one
    that holds the answer; `idk` when none does."""
    for want_doc in (True, False):
        for n, p in enumerate(passages, start=1):
            if (p.doc_id == question.doc_id) if want_doc else contains_answer(p.text, question.answers):
                return f"{consensus_answer(question.answers)} [{n}]"
    return idk


class RagQAExamples:
    """map_batches callable: question rows (the fields of `Question`) → {record: {"messages": [...]} as JSON,
    source}; the index and the tokenizer load once per actor."""

    def __init__(self, storage_uri: str, cfg: Mapping[str, object], model_dir: str):
        """`cfg`: a RagQAConfig (`model_dump`)."""
        from transformers import AutoTokenizer

        from app.index.search import Index, Searcher
        from app.models.generator import ChatTemplateTokens

        self.cfg = RagQAConfig.model_validate(cfg)
        assert self.cfg.generator is not None and self.cfg.search is not None, "filled in by prepare"
        self.gen: GeneratorConfig = self.cfg.generator
        self.search: SearchConfig = self.cfg.search
        self.searcher = Searcher(Index.load(Storage(storage_uri), self.cfg.index_version), self.search)
        self.tokens = ChatTemplateTokens(AutoTokenizer.from_pretrained(model_dir))
        self.chunks_of: dict[str, list[ChunkRow]] = {}  # doc id → its chunks
        for c in self.searcher.index.chunks:
            self.chunks_of.setdefault(c["doc_id"], []).append(c)

    def gold_passage(self, q: Question) -> Passage | None:
        """The gold document's chunk that holds an answer (else its first), shaped as a search hit."""
        chunks = sorted(self.chunks_of.get(q.doc_id, []), key=lambda c: c["chunk_index"])
        if not chunks:
            return None
        c = next((c for c in chunks if contains_answer(c["text"], q.answers)), chunks[0])
        return Passage.from_row(c)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        questions = [Question(str(qid), str(q), tuple(str(a) for a in answers), str(doc), str(article))
                     for qid, q, answers, doc, article in zip(batch["qid"], batch["question"], batch["answers"],
                                                              batch["doc_id"], batch["article"], strict=True)]
        vectors = self.searcher.embed([q.question for q in questions])
        out: dict[str, list[Any]] = {"record": [], "source": []}
        index = self.searcher.index
        for q, vec in zip(questions, vectors, strict=True):
            hits = index.search(q.question, vec, self.search.mode, self.cfg.top_k, self.search)
            if drops_gold(q.qid, self.cfg.idk_fraction):
                hits = [h for h in hits if h.doc_id != q.doc_id and not contains_answer(h.text, q.answers)]
            elif self.cfg.insert_gold and (gold := self.gold_passage(q)) is not None:
                hits = with_gold(q.qid, hits, gold, self.gen.passages)
            prompt = rag_prompt(q.question, hits, self.gen, self.tokens.count_tokens)
            messages = [*prompt.messages,
                        {"role": "assistant", "content": answer_for(q, prompt.passages, self.gen.idk_answer)}]
            out["record"].append(json.dumps({"messages": messages}))
            out["source"].append(f"{Path(self.cfg.dataset).name}#{q.qid}")
        return out


class QuestionRow(TypedDict):
    """A `Question` as a Ray Data row (the `RagQAExamples` input)."""

    qid: str
    question: str
    answers: list[str]
    doc_id: str
    article: str


def question_rows(cfg: RagQAConfig) -> tuple[list[QuestionRow], int]:
    """(the questions with an answer, as rows; how many had none). A question without an answer teaches nothing
    here: a synthetic set (`ragline adapt`) holds many whose writer gave no answer the passage holds."""
    from app.qa.questions import load_questions, sample

    questions = sample(load_questions(Path(cfg.dataset), cfg.split, answers=False), cfg.limit)
    rows = [QuestionRow(qid=q.qid, question=q.question, answers=list(q.answers), doc_id=q.doc_id,
                        article=q.article) for q in questions if q.answers]
    return rows, len(questions) - len(rows)
