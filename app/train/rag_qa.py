"""QA fine-tuning examples in the serving format (`sft.rag_qa`).

For each question the index retrieves passages as the serving graph's retriever does, `rag_prompt` fits them into
the prompt the Generator serves, and the answer the model learns is the short one the default prompt asks for:
the gold answer, then the number of the passage that holds it ("Denver Broncos [2]"). A question whose gold passage
is not in the prompt (missed by the retriever, cut by the token budget, or taken out on purpose for `idk_fraction`
of the questions) is answered with the configured "I don't know", so the model learns to decline rather than guess.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from app.config import GeneratorConfig, SearchConfig
from app.qa.metrics import contains_answer
from app.qa.questions import Question
from app.rag.prompt import rag_prompt
from app.storage import Storage
from app.train.config import RagQAConfig


def drops_gold(qid: str, fraction: float) -> bool:
    """Whether this question's gold passage is taken out: a stable hash of its id, so every run agrees."""
    return int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16) / 0x1_0000_0000 < fraction


def answer_for(question: Question, passages: list[dict[str, Any]], idk: str) -> str:
    """The first gold answer cited by the first passage in the prompt that is the gold document, else by one that
    holds the answer; `idk` when none does."""
    for want_doc in (True, False):
        for n, p in enumerate(passages, start=1):
            if (p["doc_id"] == question.doc_id) if want_doc else contains_answer(p["text"], question.answers):
                return f"{question.answers[0]} [{n}]"
    return idk


class RagQAExamples:
    """map_batches callable: question rows (the fields of `Question`) → {record: {"messages": [...]} as JSON,
    source}; the index and the tokenizer load once per actor."""

    def __init__(self, storage_uri: str, cfg: dict[str, Any], model_dir: str):
        from transformers import AutoTokenizer

        from app.index.search import Index, Searcher
        from app.models.generator import ChatTemplateTokens

        self.cfg = RagQAConfig.model_validate(cfg)
        assert self.cfg.generator is not None and self.cfg.search is not None, "filled in by prepare"
        self.gen: GeneratorConfig = self.cfg.generator
        self.search: SearchConfig = self.cfg.search
        self.searcher = Searcher(Index.load(Storage(storage_uri), self.cfg.index_version), self.search)
        self.tokens = ChatTemplateTokens(AutoTokenizer.from_pretrained(model_dir))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        questions = [Question(str(qid), str(q), tuple(str(a) for a in answers), str(doc), str(article))
                     for qid, q, answers, doc, article in zip(batch["qid"], batch["question"], batch["answers"],
                                                              batch["doc_id"], batch["article"], strict=True)]
        vectors = self.searcher.embed([q.question for q in questions])
        out: dict[str, list[Any]] = {"record": [], "source": []}
        index = self.searcher.index
        for q, vec in zip(questions, vectors, strict=True):
            hits = [h.to_dict() for h in index.search(q.question, vec, self.search.mode, self.cfg.top_k, self.search)]
            if drops_gold(q.qid, self.cfg.idk_fraction):
                hits = [h for h in hits if h["doc_id"] != q.doc_id and not contains_answer(h["text"], q.answers)]
            prompt = rag_prompt(q.question, hits, self.gen, self.tokens.count_tokens)
            messages = [*prompt.messages,
                        {"role": "assistant", "content": answer_for(q, prompt.passages, self.gen.idk_answer)}]
            out["record"].append(json.dumps({"messages": messages}))
            out["source"].append(f"{Path(self.cfg.dataset).name}#{q.qid}")
        return out


def question_rows(cfg: RagQAConfig) -> list[dict[str, Any]]:
    from app.qa.questions import load_questions, sample

    questions = sample(load_questions(Path(cfg.dataset), cfg.split), cfg.limit)
    return [{**asdict(q), "answers": list(q.answers)} for q in questions]
