"""The `qgen` task's examples: a SQuAD-format file's paragraphs as the question writer is shown them, each with
one of its questions and answer as the reply to learn (`app.models.question_writer`). Built on the driver: a
SQuAD file is a few thousand questions."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TypedDict

from app.models.question_writer import prompt, reply, shown
from app.qa.questions import load_questions, sample, squad_corpus
from app.train.config import QGenDataConfig
from app.train.rag_qa import consensus_answer


class QGenRecord(TypedDict):
    """A training record as `app.train.data` reads records: a chat record as JSON text, and where it came from."""

    record: str
    source: str


def qgen_records(cfg: QGenDataConfig) -> tuple[list[QGenRecord], dict[str, int]]:
    """(the records, the questions left out by reason): `answer_not_shown` where the answer lies past the words the
    writer is shown, `beyond_per_paragraph` past a paragraph's first `per_paragraph` questions."""
    assert cfg.dataset is not None, "validated by the task"
    path = Path(cfg.dataset)
    passages = {d["id"]: d for d in squad_corpus(path)}
    left_out: Counter[str] = Counter()
    taught: Counter[str] = Counter()
    picked = []
    for q in load_questions(path, cfg.split):
        doc = passages[q.doc_id]
        answer = consensus_answer(q.answers)
        if taught[q.doc_id] >= cfg.per_paragraph:
            left_out["beyond_per_paragraph"] += 1
        elif " ".join(answer.split()) not in shown(doc["text"], cfg.passage_words):
            left_out["answer_not_shown"] += 1
        else:
            taught[q.doc_id] += 1
            picked.append((q, doc, answer))
    kept = sample(picked, cfg.limit)
    if len(kept) < len(picked):
        left_out["beyond_limit"] += len(picked) - len(kept)
    records = [QGenRecord(record=json.dumps({"messages": [
        {"role": "user", "content": prompt(doc["title"], doc["text"], cfg.passage_words)},
        {"role": "assistant", "content": reply(q.question, answer)}]}), source=f"{path.name}#{q.qid}")
        for q, doc, answer in kept]
    return records, dict(left_out)

