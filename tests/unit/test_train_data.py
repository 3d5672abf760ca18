"""SFT records → chat-template tokens with loss only on the answers; packing; the job config's rules."""

import itertools
import json
import os

import numpy as np
import pytest
from transformers import AutoTokenizer

from app import envs
from app.models import generator
from app.train.config import SFTDataConfig, TrainJobConfig, load_job_config
from app.train.metrics import flops_per_token
from app.train.sft_data import IGNORE, BadRecord, SFTTokenize, collate_lm, encode, group_by_length, pack, to_messages
from app.train.strategies import lr_factor
from tests.helpers import ROOT

CFG = SFTDataConfig(paths=["x.jsonl"])


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(generator.resolve("SmolLM2-135M-Instruct", envs.cache_dir()))


def test_instruction_record_becomes_chat_with_optional_input_and_system():
    msgs = to_messages({"instruction": "Add", "input": "2 and 3", "response": "5", "system": "Be terse."}, CFG)
    assert msgs == [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Add\n\n2 and 3"},
                    {"role": "assistant", "content": "5"}]


@pytest.mark.parametrize("record,reason", [
    ({"instruction": "x"}, "missing_field"),
    ({"instruction": "  ", "response": "y"}, "empty"),
    ({"instruction": 3, "response": "y"}, "bad_template"),
    ({"messages": []}, "bad_template"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "bad_template"),
    ({"messages": [{"role": "wizard", "content": "hi"}, {"role": "assistant", "content": "x"}]}, "bad_template"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": " "}]}, "empty"),
])
def test_bad_records_say_why(record, reason):
    with pytest.raises(BadRecord) as e:
        to_messages(record, CFG)
    assert e.value.reason == reason


def test_labels_cover_exactly_the_assistant_turns(tokenizer):
    msgs = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "Green."}]
    ids, labels = encode(msgs, tokenizer, 512)
    learned = tokenizer.decode([t for t, y in zip(ids, labels, strict=True) if y != IGNORE])
    assert "Blue." in learned and "Green." in learned
    assert "Name a colour" not in learned and "Another" not in learned and "user" not in learned
    assert learned.count("<|im_end|>") == 2  # the model learns to end its turn
    with pytest.raises(BadRecord, match="more than max_length"):
        encode(msgs, tokenizer, 8)


def test_tokenize_stage_keeps_bad_rows_with_their_reason(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    stage = SFTTokenize(str(tmp_path), CFG.model_dump())
    out = stage({"record": np.array([json.dumps({"instruction": "a", "response": "b"}), "{oops", "[1]"]),
                 "source": np.array(["f.jsonl"] * 3)})
    assert out["drop"] == ["", "invalid_json", "bad_template"]
    assert out["tokens"][0] > 0 and out["input_ids"][1] == []


def test_packing_and_collation():
    batch = {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]], "labels": [[-100, 2, 3], [-100, 5], [-100, 7, 8, 9]]}
    packed = pack(batch, max_length=5)
    assert packed["input_ids"] == [[1, 2, 3, 4, 5], [6, 7, 8, 9]] and packed["tokens"] == [5, 4]
    t = collate_lm({"input_ids": np.array(packed["input_ids"], dtype=object),
                    "labels": np.array(packed["labels"], dtype=object)}, pad_id=0)
    assert t["input_ids"].shape == (2, 5) and t["labels"][1, 4].item() == IGNORE
    assert t["attention_mask"].sum().item() == 9
    t = collate_lm({"input_ids": np.array(packed["input_ids"], dtype=object),
                    "labels": np.array(packed["labels"], dtype=object)}, pad_id=0, multiple=8)
    assert t["input_ids"].shape == (2, 8) and t["attention_mask"].sum().item() == 9  # a recurring shape


def test_group_by_length_makes_micro_batches_of_like_length_in_a_replayable_order():
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 800, size=64)
    batch = {"input_ids": np.array([list(range(n)) for n in lengths], dtype=object),
             "labels": np.array([[IGNORE] * (n - 1) + [7] for n in lengths], dtype=object)}
    out = group_by_length(batch, micro_batch=4, seed=3)
    got = [len(x) for x in out["input_ids"]]
    assert sorted(got) == sorted(lengths.tolist())  # every example once
    assert all(len(x) == len(y) for x, y in zip(out["input_ids"], out["labels"], strict=True))

    def padded(ls: list[int]) -> int:
        return sum(max(ls[i: i + 4]) * 4 for i in range(0, len(ls), 4))

    assert padded(got) < 1.05 * sum(got) < padded(lengths.tolist())  # little padding left, less than before
    assert got != sorted(got)  # the runs come shuffled, not shortest first
    assert [len(x) for x in group_by_length(batch, micro_batch=4, seed=3)["input_ids"]] == got
    assert [len(x) for x in group_by_length(batch, micro_batch=4, seed=4)["input_ids"]] != got


def test_warmup_then_cosine_schedule():
    f = [lr_factor(s, warmup=4, total=20) for s in range(21)]
    assert f[0] == pytest.approx(0.2) and f[3] == pytest.approx(0.8) and f[4] == pytest.approx(1.0)
    assert f[12] == pytest.approx(0.5) and f[20] == pytest.approx(0.0, abs=1e-9)
    assert all(a >= b for a, b in itertools.pairwise(f[4:]))


def test_flops_per_token_follows_palm():
    class M:
        class config:
            num_hidden_layers, hidden_size = 2, 64

    assert flops_per_token(M(), n_params=1000, seq_len=10) == 6 * 1000 + 12 * 2 * 64 * 10  # type: ignore[arg-type]


@pytest.mark.parametrize("fields,message", [
    ({"strategy": "deepspeed", "zero_stage": 0}, "zero_stage must be 1, 2 or 3"),
    ({"offload_optimizer": True}, "offload_optimizer needs strategy deepspeed"),
    ({"sft": {"paths": []}}, "sft.paths"),
    ({"sft": {"paths": ["x"], "max_lenght": 5}}, "max_lenght"),
    ({"register_as": "a b"}, "register_as"),
    ({"epochs": 0}, "epochs"),
    ({"freeze_layers": 4, "lora": {}}, "with lora the base model is frozen already"),
    ({"sft": {"rag_qa": {"dataset": "q.json", "split": "test"}}}, "rag_qa.split"),
    ({"sft": {"rag_qa": {"dataset": "q.json", "idk_fraction": 1}}}, "idk_fraction"),
    ({"reranker": {"beir_dir": "scifact", "questions": "q.json"}}, "beir_dir or questions, not both"),
])
def test_job_config_rejects(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainJobConfig.model_validate({"task": "sft", "sft": {"paths": ["x.jsonl"]}} | fields)


def test_the_rag_qa_job_trains_on_the_serving_prompt():
    from app.config import load_config
    from app.train.config import with_serving

    cfg = load_job_config(ROOT / "deployments/jobs/rag_qa.yaml", "sft", ["sft.rag_qa.limit=10"])
    assert cfg.sft.paths == [] and cfg.sft.rag_qa is not None and cfg.sft.rag_qa.generator is None
    assert cfg.precision == "bf16" and cfg.freeze_layers == 16 and cfg.torch_threads == 2
    assert cfg.sft.group_by_length % cfg.batch_size == 0
    serving = load_config(None, ["serve.generator.passages=2"])
    filled = with_serving(cfg, serving).sft.rag_qa
    assert filled is not None and filled.generator == serving.serve.generator and filled.search == serving.search
    assert filled.dataset == os.path.abspath("../shared/datasets/squad/dev-a-v1.1.json")


def test_the_question_set_reranker_job_trains_on_the_train_split():
    cfg = load_job_config(ROOT / "deployments/jobs/rag_qa_reranker.yaml", "reranker")
    assert cfg.reranker.questions == os.path.abspath("../shared/datasets/squad/dev-a-v1.1.json")
    assert cfg.reranker.split == "train" and cfg.reranker.beir_dir is None and cfg.register_as == "reranker"


def test_placement_strategy_is_one_of_rays():
    assert TrainJobConfig.model_validate({"task": "sft", "sft": {"paths": ["x.jsonl"]}}).placement_strategy == "PACK"
    cfg = load_job_config(None, "sft", ["sft.paths=[x.jsonl]", "placement_strategy=STRICT_SPREAD"])
    assert cfg.placement_strategy == "STRICT_SPREAD"
    with pytest.raises(ValueError) as e:
        load_job_config(None, "sft", ["sft.paths=[x.jsonl]", "placement_strategy=spread"])
    assert "placement_strategy" in str(e.value) and "'SPREAD'" in str(e.value) and "'STRICT_SPREAD'" in str(e.value)


def test_job_file_errors_name_the_file(tmp_path):
    p = tmp_path / "job.yaml"
    p.write_text("task: sft\nsft: {paths: [a.jsonl]}\nstrategy: fdsp\n")
    with pytest.raises(ValueError, match=r"job.yaml.*\n  strategy"):
        load_job_config(p, "sft")
    with pytest.raises(ValueError, match="does not exist"):
        load_job_config(tmp_path / "missing.yaml", "sft")
    cfg = load_job_config(p, "sft", ["strategy=fsdp"])
    assert cfg.strategy == "fsdp" and cfg.sft.paths == [os.path.abspath("a.jsonl")]  # relative to the caller


def test_rag_qa_leaves_out_and_counts_the_questions_without_an_answer(tmp_path):
    """A synthetic set (`ragline adapt`) holds questions whose writer gave no answer the passage holds."""
    from app.train.config import RagQAConfig
    from app.train.rag_qa import question_rows

    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "question": "Who keeps the lighthouse?", "answers": ["the keeper"], "doc_id": "d1"},
        {"id": "b", "question": "Why is the lamp red?", "answers": [], "doc_id": "d1"},
        {"id": "c", "question": "When was it built?", "doc_id": "d2"}]) + "\n")
    rows, unanswered = question_rows(RagQAConfig(dataset=str(path), split="all"))
    assert [r["qid"] for r in rows] == ["a"] and rows[0]["answers"] == ["the keeper"] and unanswered == 2


def _squad(path, articles):
    """A SQuAD v1.1 file: {title: [(context, [(question, answer), ...]), ...]}."""
    data = [{"title": t, "paragraphs": [
        {"context": c, "qas": [{"id": f"{t}-{i}-{j}", "question": q, "answers": [{"text": a, "answer_start": 0}]}
                               for j, (q, a) in enumerate(qas)]} for i, (c, qas) in enumerate(paragraphs)]}
        for t, paragraphs in articles.items()]
    path.write_text(json.dumps({"version": "1.1", "data": data}))
    return path


def test_qgen_teaches_the_writers_reply_to_the_writers_prompt_and_counts_what_it_leaves_out(tmp_path):
    """Each record is adapt's prompt for the paragraph and the reply adapt's parser reads; per paragraph, its
    first questions whose answer the writer is shown."""
    from app.adapt.questions import parse
    from app.models.question_writer import prompt
    from app.train.config import QGenDataConfig
    from app.train.qgen_data import qgen_records

    far = "word " * 30 + "the keeper"  # the answer lies past the first 20 words
    path = _squad(tmp_path / "s.json", {"Light_house": [
        ("The lamp is lit by the keeper at dusk.", [("Who lights the lamp?", "the keeper"),
                                                    ("When is the lamp lit?", "at dusk")]),
        (far, [("Who is named last?", "the keeper"), ("What is repeated?", "word")])]})
    records, left_out = qgen_records(QGenDataConfig(dataset=str(path), split="all", passage_words=20))
    chats = [json.loads(r["record"])["messages"] for r in records]
    assert [m[0]["content"] for m in chats] == [prompt("Light house", "The lamp is lit by the keeper at dusk.", 20),
                                                 prompt("Light house", far, 20)]
    assert parse(chats[0][1]["content"], "The lamp is lit by the keeper at dusk.") == parse(
        "Who lights the lamp?\nAnswer: the keeper", "The lamp is lit by the keeper at dusk.")
    assert chats[1][1]["content"] == "What is repeated?\nAnswer: word"  # the first question's answer is not shown
    assert [r["source"] for r in records] == ["s.json#Light_house-0-0", "s.json#Light_house-1-1"]
    assert left_out == {"beyond_per_paragraph": 1, "answer_not_shown": 1}  # 4 questions = 2 records + 2 left out

    two, _ = qgen_records(QGenDataConfig(dataset=str(path), split="all", passage_words=20, per_paragraph=2))
    assert len(two) == 3
    one, left = qgen_records(QGenDataConfig(dataset=str(path), split="all", passage_words=20, per_paragraph=2,
                                            limit=1))
    assert len(one) == 1 and left == {"answer_not_shown": 1, "beyond_limit": 2}


@pytest.mark.parametrize("fields,message", [
    ({}, "qgen.dataset: give a SQuAD v1.1 JSON file"),
    ({"qgen": {"dataset": "s.json", "per_paragraph": 0}}, "per_paragraph"),
    ({"qgen": {"dataset": "s.json"}, "sft": {"rag_qa": {"dataset": "q.json"}}}, "sft.rag_qa is for the sft task"),
])
def test_qgen_job_config_rejects(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainJobConfig.model_validate({"task": "qgen"} | fields)


def test_qgen_inputs_must_be_a_squad_file(tmp_path):
    from app.errors import NotFound, UserError
    from app.train.tasks import task_named

    check = task_named("qgen").check_inputs
    with pytest.raises(NotFound, match="qgen.dataset .*missing.json is not a file"):
        check(load_job_config(None, "qgen", [f"qgen.dataset={tmp_path / 'missing.json'}"]))
    (tmp_path / "q.jsonl").write_text('{"question": "Who?", "answers": ["me"], "doc_id": "d"}\n')
    with pytest.raises(UserError, match="a SQuAD v1.1 JSON file is needed"):
        check(load_job_config(None, "qgen", [f"qgen.dataset={tmp_path / 'q.jsonl'}"]))


def test_the_qgen_job_file_trains_the_writer_on_the_train_articles():
    cfg = load_job_config(ROOT / "deployments/jobs/qgen.yaml", "qgen")
    assert cfg.qgen.dataset == os.path.abspath("../shared/datasets/squad/dev-a-v1.1.json")
    assert cfg.qgen.split == "train" and cfg.register_as == "qgen" and cfg.model_name == "SmolLM2-135M-Instruct"
    assert cfg.sft.group_by_length % cfg.batch_size == 0
