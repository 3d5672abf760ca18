"""Answer scoring, question sets and QA examples as pure logic (no Ray, no model but a tokenizer-free counter)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import GeneratorConfig
from app.eval.answers import check_documents, score, summarize
from app.qa.metrics import cited_numbers, contains_answer, exact_match, f1, is_idk, normalize_answer
from app.qa.questions import Question, dev_articles, load_questions, sample, squad_corpus, write_corpus
from app.rag.prompt import rag_prompt, system_text
from app.rag.protocol import Passage
from app.storage import Storage
from app.train.rag_qa import answer_for, consensus_answer, drops_gold, with_gold

SQUAD = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "squad" / "dev-a-v1.1.json"


def test_official_normalisation_and_scores() -> None:
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert exact_match("Denver Broncos [1]", ["the Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("Broncos of Denver", ["Denver Broncos"]) == 0.0
    # precision 2/3, recall 1 → 0.8; the best of the gold answers counts
    assert f1("the Denver Broncos team [2]", ["Denver Broncos"]) == pytest.approx(0.8)
    assert f1("Carolina", ["Denver Broncos", "Carolina Panthers"]) == pytest.approx(2 / 3)
    assert f1("", ["x"]) == 0.0


def test_citations_passages_and_idk() -> None:
    assert cited_numbers("Paris [2], and also [1] then [2]") == [2, 1]
    assert cited_numbers("no citation") == []
    assert contains_answer("He played for the Denver Broncos in 2015.", ["denver broncos"])
    assert not contains_answer("The Denverite Broncos", ["Denver Broncos"])  # whole words only
    assert is_idk("I don't know.", "I don't know.") and is_idk("I don't know [1]", "I don't know.")
    assert not is_idk("Denver", "I don't know.")


def _squad_file(tmp_path: Path) -> Path:
    articles = [{"title": f"Article_{a}", "paragraphs": [
        {"context": f"Paragraph {p} of article {a} says the answer is gold{a}{p}.",
         "qas": [{"id": f"q{a}{p}", "question": f"What does paragraph {p} of {a} say?",
                  "answers": [{"text": f"gold{a}{p}", "answer_start": 0}]}]} for p in range(2)]} for a in range(8)]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": articles}))
    return path


def test_squad_splits_by_article_and_writes_its_corpus(tmp_path: Path) -> None:
    path = _squad_file(tmp_path)
    train, dev, every = (load_questions(path, s) for s in ("train", "dev", "all"))
    assert len(dev) == 4 and len(train) == 12 and len(every) == 16  # 2 of 8 articles (a quarter) are dev
    assert not {q.article for q in train} & {q.article for q in dev}
    assert {q.article for q in dev} == dev_articles([f"Article_{a}" for a in range(8)])
    q = every[3]
    assert (q.doc_id, q.answers, q.article) == ("Article_1#1", ("gold11",), "Article_1")
    corpus = squad_corpus(path)
    assert len(corpus) == 16 and corpus[3] == {"id": "Article_1#1", "title": "Article 1",
                                               "text": "Paragraph 1 of article 1 says the answer is gold11."}
    assert write_corpus(path, tmp_path / "out" / "c.jsonl") == 16
    assert sample(every, 4) == [every[0], every[4], every[8], every[12]] and sample(every, 99) == every


def test_the_real_split_keeps_six_articles_for_dev() -> None:
    if not SQUAD.is_file():
        pytest.skip(f"{SQUAD} is absent")
    dev = load_questions(SQUAD, "dev")
    assert len({q.article for q in dev}) == 6 and len(dev) == 1038


@pytest.mark.parametrize(("line", "message"), [
    ("not json", ":1: not JSON"),
    ('["a"]', ":1: a line is an object"),
    ('{"question": "", "answers": ["a"], "doc_id": "d"}', "'question' must be a non-empty string"),
    ('{"question": "q", "answers": [], "doc_id": "d"}', "'answers' must be a non-empty list of strings"),
    ('{"question": "q", "answers": ["a"]}', "'doc_id' must name the ingested document"),
])
def test_bad_jsonl_question_sets_are_named_by_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=message):
        load_questions(path)


def test_bad_question_files_and_splits(tmp_path: Path) -> None:
    good = tmp_path / "q.jsonl"
    good.write_text('{"question": "q?", "answers": "a", "doc_id": 7}\n')
    assert load_questions(good) == [Question("1", "q?", ("a",), "7")]
    with pytest.raises(ValueError, match="no splits"):
        load_questions(good, "dev")
    with pytest.raises(ValueError, match="unknown split"):
        load_questions(good, "test")
    with pytest.raises(ValueError, match="no such question file"):
        load_questions(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"title": "x"}]}')
    with pytest.raises(ValueError, match=r"data\[0\] needs a 'title' and a 'paragraphs' list"):
        load_questions(bad)


def test_questions_about_documents_the_index_lacks_are_an_error() -> None:
    qs = [Question("1", "q", ("a",), "doc-1"), Question("2", "q", ("a",), "doc-2"),
          Question("3", "q", ("a",), "doc-2")]
    check_documents(qs, {"doc-1", "doc-2"}, 3)
    with pytest.raises(ValueError, match=r"2 of 3 questions refer to 1 documents that index version 3 does not "
                                         r"hold \(first: doc-2\)"):
        check_documents(qs, {"doc-1"}, 3)


def test_scores_and_summary() -> None:
    qs = [Question("1", "Who won?", ("Denver Broncos",), "d1"), Question("2", "When?", ("1990",), "d2"),
          Question("3", "Where?", ("Paris",), "d3")]
    row = {"completion_tokens": 4, "latency_s": 1.0, "model": "sft:v2", "index_version": 1, "error": ""}
    rows = [{**row, "qid": "1", "answer": "Denver Broncos [2]", "chunk_ids": ["c9", "c1"], "doc_ids": ["d9", "d1"]},
            # cites passage 1, which is not the gold document but holds the answer
            {**row, "qid": "2", "answer": "in 1990 [1]", "chunk_ids": ["c7"], "doc_ids": ["d7"]},
            {**row, "qid": "3", "answer": "", "chunk_ids": [], "doc_ids": [], "completion_tokens": 0,
             "error": "HTTP 503: overloaded"}]
    scored = score(qs, rows, {"c7": "It opened in 1990.", "c1": "x", "c9": "y"}, "I don't know.")
    assert [(s.exact_match, s.cited_ok, s.gold_in_context) for s in scored] == \
        [(1.0, True, True), (0.0, True, False), (0.0, False, False)]
    report = summarize(scored, run_id="r", dataset="d", split="dev", index_version=1, generator="sft:v2", top_k=5,
                       wall_s=2.0, started_at="t")
    assert report.exact_match == pytest.approx(33.33) and report.errors == 1
    assert report.f1 == pytest.approx(100 * (1 + 2 / 3) / 3, abs=0.01)
    assert report.citation_accuracy == pytest.approx(0.6667) and report.tokens_per_s == 4.0
    assert report.latency_p50_s == 1.0  # failed requests are not latencies


def passage(doc_id: str, text: str = "", title: str = "") -> Passage:
    return Passage(chunk_id=f"{doc_id}:0", doc_id=doc_id, chunk_index=0, source=f"/d/{doc_id}", title=title, text=text,
                   start_char=0, end_char=len(text), score=0.0)


def test_qa_examples_cite_the_gold_passage_or_decline() -> None:
    q = Question("1", "Who won?", ("Denver Broncos",), "d1")
    passages = [passage("d5", "The Denver Broncos won."), passage("d1", "They won it.")]
    assert answer_for(q, passages, "I don't know.") == "Denver Broncos [2]"  # the gold document first
    assert answer_for(q, passages[:1], "I don't know.") == "Denver Broncos [1]"  # else one holding the answer
    assert answer_for(q, [passage("d7", "no")], "I don't know.") == "I don't know."
    assert consensus_answer(["the Denver Broncos", "Denver Broncos", "Broncos", "Denver Broncos"]) == "Denver Broncos"
    assert consensus_answer(["the Broncos", "Broncos", "Denver"]) == "Broncos"  # "the" normalises away; shortest
    hits = [passage(f"d{i}") for i in range(5)]
    assert with_gold("q", hits, passage("d1"), 3) == hits  # retrieved: left as it is
    places = {[h.doc_id for h in with_gold(str(i), hits, passage("g"), 3)].index("g") for i in range(50)}
    assert places == {0, 1, 2}  # missed: put among the first 3, not always last
    assert [h.doc_id for h in with_gold("q", hits, passage("d4"), 3)].count("d4") == 1  # moved up, not twice
    dropped = sum(drops_gold(str(i), 0.1) for i in range(10_000))
    assert 900 < dropped < 1100 and drops_gold("42", 0.1) == drops_gold("42", 0.1)


def test_the_served_prompt_asks_for_a_short_cited_answer() -> None:
    cfg = GeneratorConfig(idk_answer="No idea.")
    assert system_text(cfg).endswith("say: No idea.")
    passages = [passage(f"d{i}", f"passage {i}", title="T") for i in range(5)]
    prompt = rag_prompt("Who?", passages, cfg, lambda m: sum(len(x["content"]) for x in m) // 4)
    assert len(prompt.passages) == cfg.passages == 2
    user = prompt.messages[-1]["content"]
    assert user.startswith("Question: Who?") and user.count("Question: Who?") == 2 and "[2] T" in user


def test_a_generator_is_promoted_only_when_it_answers_better_past_noise(tmp_path: Path) -> None:
    from app.config import GateConfig
    from app.eval.answers import AnswerEvalReport, Scored, save
    from app.promotion import compare, question_set, refusal

    storage = Storage(str(tmp_path / "store"))

    def run(run_id: str, f1s: list[float], errors: int = 0) -> AnswerEvalReport:
        """A stored run whose question i scored f1s[i]."""
        report = AnswerEvalReport(run_id=run_id, dataset="dev-a.json", split="dev", questions=len(f1s),
                                  index_version=1, generator="g", top_k=5, exact_match=0,
                                  f1=100 * sum(f1s) / len(f1s), citation_accuracy=0, gold_in_context=0, idk_rate=0,
                                  answer_tokens=0, latency_p50_s=0, latency_p95_s=0, tokens_per_s=0, errors=errors,
                                  wall_s=1, started_at="t")
        save(storage, report, [Scored(f"q{i}", "?", ("a",), "a", 0.0, f, True, True, False, 1, 0.1, "")
                               for i, f in enumerate(f1s)])
        return report

    served = run("served", [0.2, 0.5, 0.0, 1.0] * 10)
    gate = GateConfig(resamples=500)

    def judged(candidate: AnswerEvalReport) -> str | None:
        return refusal(served, candidate, compare(storage, served, candidate, gate))

    assert judged(run("better", [0.4, 0.7, 0.1, 1.0] * 10)) is None
    # one question of forty much better, the rest the same: F1 is higher, but not past noise
    lucky = run("lucky", [0.2, 0.5, 0.0, 1.0] * 9 + [0.9, 0.5, 0.0, 1.0])
    assert lucky.f1 > served.f1 and "does not answer better past noise" in str(judged(lucky))
    assert "past noise" in str(judged(run("tie", [0.2, 0.5, 0.0, 1.0] * 10)))  # a tie keeps what users have
    failing = run("failing", [1.0] * 40, errors=3)
    assert "0 requests to the served graph and 3 to the candidate failed" in str(judged(failing))
    assert question_set({"sft": {"rag_qa": {"dataset": "/d/squad.json"}}}, None) == Path("/d/squad.json")
    assert question_set({"sft": {"rag_qa": None}}, tmp_path) == tmp_path
    with pytest.raises(ValueError, match="give --dataset"):
        question_set({"sft": {"paths": ["a.jsonl"], "rag_qa": None}}, None)

    # `models promote` (promote_generator) on the judgment: a refusal is a Conflict naming both scores and changes
    # nothing; an earned one is promoted
    import app.promotion as promotion
    from app.catalog import Catalog
    from app.errors import Conflict

    catalog = Catalog(storage)
    for n in (1, 2):
        storage.write_bytes(f"train/r{n}/export/model.safetensors", b"w")
        catalog.publish_model("sft", {"task": "sft", "run": f"r{n}", "base_model": "m", "dir": f"train/r{n}/export",
                                      "config": {"sft": {"rag_qa": {"dataset": "/d/squad.json"}}}})

    def promote(version: int, candidate: AnswerEvalReport) -> promotion.PromotionResult:
        def judge(_storage, spec, _endpoint, questions, **_kw) -> promotion.GeneratorJudgment:
            assert (spec, questions) == (f"catalog:sft:{version}", Path("/d/squad.json"))
            comparison = compare(storage, served, candidate, gate)
            return promotion.GeneratorJudgment(served=served, candidate=candidate, comparison=comparison,
                                               refusal=refusal(served, candidate, comparison))

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(promotion, "judge_generator", judge)
            return promotion.promote_generator(storage, "sft", version, None, idk="?")  # type: ignore[arg-type]

    tied = r"not promoted: sft v1 scores F1 42\.5 .* against F1 42\.5 \(exact match 0\.0\) for g, served now"
    with pytest.raises(Conflict, match=tied):
        promote(1, run("tied", [0.2, 0.5, 0.0, 1.0] * 10))
    assert catalog.promoted("sft") is None
    assert promote(2, run("better-2", [0.4, 0.7, 0.1, 1.0] * 10)).version == 2
    assert catalog.promoted("sft").version == 2
