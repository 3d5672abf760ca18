"""`ragline adapt`'s pure parts: the writer's prompt and what of its reply is a question, the held-out split, the
round trip's rank, the chunk sample, the paired bootstrap that gates promotion, and the synthetic question set as
the question-set reader takes it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.adapt.questions import held_out, parse
from app.adapt.roundtrip import doc_rank
from app.adapt.synthesize import sample_chunks
from app.cli import app as cli
from app.errors import UserError
from app.eval.paired import paired_bootstrap
from app.models import question_writer
from app.models.question_writer import prompt
from app.qa.questions import load_questions

PASSAGE = "Lifeact is a 17 amino acid peptide that stains filamentous actin in living cells without disturbing them."


def test_the_prompt_puts_the_passage_first_and_ends_on_question():
    p = prompt("Lifeact", "word " * 500, words=20)
    assert p.startswith("Lifeact. word word") and p.endswith("Question:")
    assert p.count("word") == 20 + 0  # the passage is cut to its first 20 words
    assert prompt("", "a b c", 10).startswith("a b c\n")


@pytest.mark.parametrize(("reply", "question", "rejected"), [
    (" What does Lifeact stain in living cells?\nAnswer: filamentous actin", "What does Lifeact stain in living cells?",
     None),
    ("What  does Lifeact\tstain? It stains actin", "What does Lifeact stain?", None),  # first '?' ends it
    ("How is actin stained in living cells Answer: with Lifeact", "How is actin stained in living cells?", None),
    ("Lifeact stains actin.", None, "no_question"),
    ("Why?", None, "too_short"),
    ("What " + "very " * 40 + "long?", None, "too_long"),
    ("What is the answer to this question?", None, "degenerate"),
    ("Lifeact is a 17 amino acid peptide that stains filamentous actin?", None, "copied"),
])
def test_a_reply_is_a_question_or_a_reason(reply, question, rejected):
    written = parse(reply, PASSAGE)
    assert (written.question, written.rejected) == (question, rejected)


def test_an_answer_is_kept_only_where_the_passage_holds_it():
    assert parse("What does Lifeact stain?\nAnswer: Filamentous  actin.", PASSAGE).answer == "Filamentous actin"
    assert parse("What does Lifeact stain? Answer: filamentous actin", PASSAGE).answer == "filamentous actin"
    assert parse("What does Lifeact stain?\nAnswer: microtubules", PASSAGE).answer is None  # not in the passage
    assert parse("What does Lifeact stain?", PASSAGE).answer is None
    long = "Lifeact is a 17 amino acid peptide that stains filamentous actin in living cells"
    assert parse(f"What is Lifeact?\nAnswer: {long}", PASSAGE).answer is None  # a sentence, not an answer


def test_an_answer_is_kept_only_in_a_sentence_the_question_is_about():
    from app.adapt.questions import about

    two = ("The Royal Garden lies south of the palace. Warsaw is the capital of Poland.\n\nIt has  two rivers.")
    assert about("What lies south of the palace?", two) == ["The Royal Garden lies south of the palace."]
    assert about("Where is it?", two) == ["The Royal Garden lies south of the palace.",  # no content word: all tie
                                          "Warsaw is the capital of Poland.", "It has two rivers."]
    # a span of the passage that answers another sentence's question is no answer to this one
    assert parse("What is the name of the Royal Garden?\nAnswer: Warsaw", two).answer is None
    assert parse("What is the capital of Poland?\nAnswer: Warsaw", two).answer == "Warsaw"
    assert parse("Where does the Royal Garden lie?\nAnswer: south of  the palace", two).answer == \
        "south of the palace"


def test_the_reply_qgen_teaches_is_the_one_adapt_reads():
    taught = question_writer.reply(" What does Lifeact stain? ", "filamentous actin ")
    assert parse(taught, PASSAGE) == parse("What does Lifeact stain?\nAnswer: filamentous actin", PASSAGE)
    assert parse(taught, PASSAGE).answer == "filamentous actin"


def test_the_held_out_split_is_stable_and_near_its_fraction():
    ids = [f"doc{i}#{i % 3}" for i in range(4000)]
    first = [held_out(i, 0.2, seed=0) for i in ids]
    assert first == [held_out(i, 0.2, seed=0) for i in ids]
    assert 0.18 < sum(first) / len(ids) < 0.22
    assert first != [held_out(i, 0.2, seed=1) for i in ids]  # the seed draws another split


def test_doc_rank_counts_documents_not_chunks():
    assert doc_rank("b", ["a", "a", "c", "b", "b"]) == 3
    assert doc_rank("z", ["a", "b"]) == 0


def test_the_sample_is_seeded_and_skips_short_chunks():
    chunks = [{"chunk_id": f"c{i}", "doc_id": f"d{i}", "title": None, "text": "w " * (5 if i % 2 else 40)}
              for i in range(50)]
    picked = sample_chunks(chunks, 10, min_words=30, seed=7)
    assert len(picked) == 10 and all(int(c["chunk_id"][1:]) % 2 == 0 for c in picked)
    assert picked == sample_chunks(chunks, 10, 30, seed=7) != sample_chunks(chunks, 10, 30, seed=8)
    assert picked[0]["title"] == ""
    assert len(sample_chunks(chunks, 100, 30, seed=7)) == 25  # all there are


def test_a_clear_gain_passes_the_gate_and_noise_or_a_loss_does_not():
    served = [0.5, 0.0, 1.0, 0.3, 0.6, 0.2, 0.9, 0.4] * 10
    better = paired_bootstrap(served, [min(1.0, s + 0.1) for s in served], resamples=1000)
    assert better.better and better.low > 0 and better.difference == pytest.approx(0.0875)  # 1.0 cannot gain
    # as many questions gained as lost: the mean moves a little, the interval spans zero
    noisy = [s + (0.3 if i % 2 else -0.28) for i, s in enumerate(served)]
    noise = paired_bootstrap(served, noisy, resamples=1000)
    assert noise.difference > 0 and noise.low < 0 < noise.high and not noise.better
    worse = paired_bootstrap(served, [s - 0.1 for s in served], resamples=1000)
    assert not worse.better and worse.high < 0
    assert not paired_bootstrap(served, served).better  # a tie keeps what is served
    assert "over 80 questions" in better.describe("nDCG@10")


def test_a_synthetic_set_reads_as_questions_without_answers(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"id": "c1", "question": "What stains actin?", "doc_id": "d1", "chunk_id": "c1",
                                "rank": 2}) + "\n")
    (q,) = load_questions(path, "all", answers=False)
    assert (q.qid, q.question, q.answers, q.doc_id) == ("c1", "What stains actin?", (), "d1")
    with pytest.raises(UserError, match="'answers' must be a non-empty list"):
        load_questions(path, "all")  # answer evaluation and rag_qa need them


def test_adapt_names_a_synthesis_run_that_does_not_exist(tmp_path):
    result = CliRunner().invoke(cli, ["--storage", str(tmp_path), "adapt", "--questions", "adapt-nope"])
    assert result.exit_code != 0 and "no synthesis run 'adapt-nope' in collection 'default'" in str(result.exception)
    result = CliRunner().invoke(cli, ["--storage", str(tmp_path), "adapt", "--collection", "Bad/Name"])
    assert "collection name 'Bad/Name'" in str(result.exception)


def test_a_bad_training_field_fails_before_any_question_is_written(tmp_path):
    from app.adapt.run import adapt
    from app.config import AppConfig, load_config
    from app.storage import Storage

    cfg = AppConfig.model_validate({"adapt": {"train": {"lr": "fast", "epochz": 2}}})
    with pytest.raises(UserError, match=r"invalid config \(adapt.train\)") as e:
        adapt(Storage(str(tmp_path)), "default", cfg)  # raises before it needs Ray or an index
    assert "lr: Input should be a valid number" in str(e.value) and "epochz: Extra inputs" in str(e.value)
    cfg = AppConfig.model_validate({"adapt": {"embedder_train": {"embedder": {"scale": -1}}}})
    with pytest.raises(UserError, match=r"invalid config \(adapt.embedder_train\)"):
        adapt(Storage(str(tmp_path)), "default", cfg)
    cfg = AppConfig.model_validate({"adapt": {"roles": ["generator"], "generator_train": {"sft": {"max_length": 1}}}})
    with pytest.raises(UserError, match=r"invalid config \(adapt.generator_train\)"):
        adapt(Storage(str(tmp_path)), "default", cfg)
    with pytest.raises(UserError, match="adapt.chunks"):
        load_config(None, ["adapt.chunks=0"])
    with pytest.raises(UserError, match="adapt.roles"):
        load_config(None, ["adapt.roles=[writer]"])


def test_the_generators_job_is_rag_qa_on_the_questions_and_its_judge_the_served_graph(tmp_path):
    from app import hardware
    from app.adapt.run import adapt, role_job
    from app.adapt.synthesize import SynthesisCounts, SyntheticSet
    from app.config import AppConfig
    from app.eval.answers import Endpoint
    from app.storage import Storage

    cfg = AppConfig.model_validate({"adapt": {"roles": ["generator"], "generator_name": "answers",
                                              "generator_train": {"epochs": 1}}})
    job = role_job(cfg, "generator", "g", {"dataset": "/q/train.jsonl", "split": "all", "collection": "hr"})
    assert (job.task, job.register_as, job.epochs, job.freeze_layers) == ("sft", "answers", 1, 16)
    assert job.precision == ("bf16" if hardware.detect().cpu_bf16 else "auto")
    rq = job.sft.rag_qa
    assert rq is not None and (rq.dataset, rq.split, rq.collection) == ("/q/train.jsonl", "all", "hr")
    assert rq.generator == cfg.serve.generator  # the served prompt is what it learns
    root = Storage(str(tmp_path))
    with pytest.raises(UserError, match="the served graph judges: run `ragline serve`"):
        adapt(root, "default", cfg)  # before any question is written
    no_span = {"id": "c1", "question": "Who?", "doc_id": "d", "chunk_id": "c1", "rank": 0, "answers": []}
    root.write_bytes("adapt/a1/heldout.jsonl", (json.dumps(no_span) + "\n").encode())
    unanswered = SyntheticSet(run_id="a1", created_at="t", index_version=1, writer="w", counts=SynthesisCounts(
        sampled=2, rejected={}, dropped=0, train=1, heldout=1), write_s=0, round_trip_s=0,
        train_file="adapt/a1/train.jsonl", heldout_file="adapt/a1/heldout.jsonl", rejected_file="-")
    with pytest.raises(UserError, match="none of its 1 held-out questions has an answer span"):
        adapt(root, "default", cfg, unanswered, Endpoint("http://127.0.0.1:1", "k"))  # before any training


def test_a_report_written_before_the_embedder_joined_reads_as_the_rerankers():
    """`ragline status` reads the adapt runs already stored: the benchmark's 2026-11-27 report is one."""
    import json

    from app.adapt.run import AdaptReport
    from tests.helpers import ROOT

    old = json.loads((ROOT / "benchmarks" / "results" / "adapt-2026-11-27-avx512_bf16.json").read_text())["adapt"]
    (role,) = AdaptReport.model_validate(old).roles
    assert (role.role, role.candidate, role.decision) == ("reranker", old["candidate"], old["decision"])
    assert role.comparison.n == old["comparison"]["n"]


def test_the_auto_writer_is_the_promoted_qgen_else_the_packaged_model_prompted(tmp_path):
    from app import envs
    from app.adapt.run import writer_model
    from app.catalog import Catalog
    from app.config import AppConfig
    from app.errors import NotFound
    from app.models import generator
    from app.storage import Storage

    root, cfg = Storage(str(tmp_path)), AppConfig()
    assert cfg.adapt.writer.model == "auto"
    assert writer_model(cfg, root) == (generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir()),
                                       "SmolLM2-135M-Instruct")
    root.write_bytes("models/qgen/files-1/config.json", b"{}")
    catalog = Catalog(root)
    version = catalog.publish_model("qgen", {"task": "qgen", "run": "r", "base_model": "SmolLM2-135M-Instruct",
                                             "dir": "models/qgen/files-1"}).version
    assert writer_model(cfg, root)[1] == "SmolLM2-135M-Instruct"  # trained, not yet promoted
    catalog.promote("qgen", version)
    assert writer_model(cfg, root) == (str(tmp_path / "models/qgen/files-1"), "qgen:v1")
    named = cfg.model_copy(deep=True)
    named.adapt.writer.model = "catalog:other"
    with pytest.raises(NotFound, match="adapt.writer.model catalog:other: no version is promoted yet"):
        writer_model(named, root)


def test_several_questions_a_chunk_need_sampling():
    from pydantic import ValidationError

    from app.config import WriterConfig

    with pytest.raises(ValidationError, match="questions_per_chunk above 1 needs a temperature above 0"):
        WriterConfig(questions_per_chunk=2)
    assert WriterConfig(questions_per_chunk=2, temperature=0.7).questions_per_chunk == 2


def test_the_embedders_teacher_is_the_promoted_reranker_else_none(tmp_path):
    from app.adapt.run import teacher
    from app.catalog import Catalog
    from app.config import AppConfig
    from app.storage import Storage

    root, cfg = Storage(str(tmp_path)), AppConfig()
    assert cfg.adapt.teacher == "auto" and cfg.adapt.roles == ["reranker", "embedder"]  # the teacher trains first
    assert teacher(cfg, root) is None  # no cross-encoder yet: the embedder learns contrastively
    catalog = Catalog(root)
    for n in (1, 2):
        root.write_bytes(f"models/reranker/files-{n}/config.json", b"{}")
        catalog.publish_model("reranker", {"task": "reranker", "run": f"r{n}", "base_model": "all-MiniLM-L6-v2",
                                           "dir": f"models/reranker/files-{n}"})
    assert teacher(cfg, root) is None  # candidates the gate did not let through teach nothing
    catalog.promote("reranker", 1)
    assert teacher(cfg, root) == "catalog:reranker:1"
    for spec in ("/models/ce", None):
        named = cfg.model_copy(deep=True)
        named.adapt.teacher = spec
        assert teacher(named, root) == spec


def test_the_writers_chat_template_is_applied_in_the_prompt_task_only_where_it_just_frames_the_message(tmp_path):
    """`chat_frame`: the packaged SmolLM2's template around a message is what the template renders for it; a
    template that rewrites the message (here: upper-cases it) is left to ray.data.llm's chat-template stage."""
    from transformers import AutoTokenizer

    from app import envs
    from app.adapt.writer import chat_frame
    from app.models import generator

    path = generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir())
    frame = chat_frame(path)
    assert frame is not None
    message = [{"role": "user", "content": prompt("Lifeact", PASSAGE, 40)}]
    tokenizer = AutoTokenizer.from_pretrained(path)
    rendered = tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
    assert frame[0] + message[0]["content"] + frame[1] == rendered and frame[1].endswith("assistant\n")

    tokenizer.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | upper }}{% endfor %}"
    tokenizer.save_pretrained(tmp_path)
    assert chat_frame(str(tmp_path)) is None
