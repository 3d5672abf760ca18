"""Question sets for answer evaluation and QA fine-tuning: SQuAD v1.1 JSON, or JSONL `{question, answers, doc_id}`.

SQuAD paragraphs become documents with the id `<article>#<paragraph index>` (`squad_corpus` writes them as a JSONL
corpus for `ragline ingest`). Splits are by article, never by question, so the dev split asks about articles that no
training example has seen: `dev` is the quarter of the articles that sort first by the SHA-256 of their title,
`train` the rest, `all` everything. JSONL question sets have no splits (only `all`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict, TypeVar

from app.errors import NotFound, UserError

T = TypeVar("T")
SPLITS = ("train", "dev", "all")
DEV_FRACTION = 0.25


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    answers: tuple[str, ...]  # gold answers (SQuAD has up to 5 per question, often repeated)
    doc_id: str  # the document that holds the answer
    article: str = ""  # SQuAD article title; "" for JSONL sets


class SquadAnswer(TypedDict):
    text: str
    answer_start: int  # character offset in the paragraph's context


class SquadQA(TypedDict):
    id: str
    question: str
    answers: NotRequired[list[SquadAnswer]]


class SquadParagraph(TypedDict):
    context: str
    qas: NotRequired[list[SquadQA]]


class SquadArticle(TypedDict):
    """An entry of a SQuAD v1.1 file's `data` list: an article and its paragraphs."""

    title: str
    paragraphs: list[SquadParagraph]


def is_squad(path: Path) -> bool:
    return path.suffix.lower() == ".json"


def _read_squad(path: Path) -> list[SquadArticle]:
    """The file's articles; their title and paragraphs are checked here, the rest where it is read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable SQuAD JSON file ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f"{path}: a SQuAD v1.1 file is an object with a 'data' list of articles")
    for i, article in enumerate(data["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("title"), str) \
                or not isinstance(article.get("paragraphs"), list):
            raise UserError(f"{path}: data[{i}] needs a 'title' and a 'paragraphs' list")
    return list(data["data"])


def dev_articles(titles: list[str]) -> set[str]:
    """The quarter of the articles (at least one) that sort first by SHA-256 of the title: stable across runs and
    machines, and independent of the file's order."""
    ranked = sorted(titles, key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    return set(ranked[: max(1, round(len(ranked) * DEV_FRACTION))])


def squad_doc_id(title: str, paragraph: int) -> str:
    return f"{title}#{paragraph}"


def squad_corpus(path: Path) -> list[dict[str, str]]:
    """Every paragraph of every article (all splits: the other articles are the distractors a retriever faces) as
    {id, title, text}."""
    return [{"id": squad_doc_id(a["title"], i), "title": a["title"].replace("_", " "), "text": p["context"]}
            for a in _read_squad(path) for i, p in enumerate(a["paragraphs"])]


def write_corpus(path: Path, out: Path) -> int:
    docs = squad_corpus(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    return len(docs)


def load_questions(path: Path, split: str = "all", answers: bool = True) -> list[Question]:
    """The split's questions, in file order. Malformed entries are the user's error (UserError), named by
    position. `answers=False`: a JSONL question may have none (a synthetic set for retrieval training, `ragline
    adapt`); its `answers` is then empty."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; choose from {list(SPLITS)}")
    if not path.is_file():
        raise NotFound(f"{path}: no such question file")
    return _squad_questions(path, split) if is_squad(path) else _jsonl_questions(path, split, answers)


def _squad_questions(path: Path, split: str) -> list[Question]:
    articles = _read_squad(path)
    dev = dev_articles([a["title"] for a in articles])
    out = []
    for a in articles:
        if split != "all" and (a["title"] in dev) != (split == "dev"):
            continue
        for i, p in enumerate(a["paragraphs"]):
            for qa in p.get("qas", []):
                answers = tuple(x["text"] for x in qa.get("answers", []) if isinstance(x, dict) and x.get("text"))
                if not answers:
                    raise UserError(f"{path}: question {qa.get('id')!r} in {a['title']} has no answer text")
                out.append(Question(str(qa["id"]), qa["question"], answers, squad_doc_id(a["title"], i), a["title"]))
    return out


def _jsonl_questions(path: Path, split: str, need_answers: bool) -> list[Question]:
    if split != "all":
        raise UserError(f"{path}: JSONL question sets have no splits; use --split all (or a SQuAD JSON file)")
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise UserError(f"{where}: a line is an object {{question, answers, doc_id}}")
        question, answers, doc_id = row.get("question"), row.get("answers"), row.get("doc_id")
        if isinstance(answers, str):
            answers = [answers]
        if answers is None and not need_answers:
            answers = []
        if not isinstance(question, str) or not question.strip():
            raise UserError(f"{where}: 'question' must be a non-empty string")
        if not isinstance(answers, list) or (need_answers and not answers) or not all(
                isinstance(a, str) and a.strip() for a in answers):
            raise UserError(f"{where}: 'answers' must be a non-empty list of strings")
        if not isinstance(doc_id, str | int) or str(doc_id) == "":
            raise UserError(f"{where}: 'doc_id' must name the ingested document that holds the answer")
        out.append(Question(str(row.get("id", lineno)), question, tuple(answers), str(doc_id)))
    if not out:
        raise UserError(f"{path}: no questions")
    return out


def sample(questions: list[T], limit: int | None) -> list[T]:
    """`limit` questions (or examples made from them) spread evenly over the set (every k-th), so a short run
    still covers every article."""
    if limit is None or limit >= len(questions):
        return questions
    step = len(questions) / limit
    return [questions[int(i * step)] for i in range(limit)]
