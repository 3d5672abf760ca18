import pytest

from app import apikeys
from app.rag.prompt import build_prompt, user_turn
from app.storage import Storage


def words(messages):  # a stand-in tokenizer: one token per word
    return sum(len(m["content"].split()) for m in messages)


PASSAGES = [{"title": f"T{i}", "text": " ".join(["w"] * 50)} for i in range(5)]


def test_passages_are_numbered_and_the_question_comes_first_and_last():
    text = user_turn("why?", PASSAGES[:2])
    assert text.startswith("Question: why?")
    assert text.index("[1] T0") < text.index("[2] T1") < text.rindex("Question: why?")
    assert "[1] plain" in user_turn("q", [{"title": "", "text": "plain"}])


def test_lowest_ranked_passages_are_dropped_first_to_fit():
    p = build_prompt("why?", PASSAGES, system="s", count_tokens=words, max_context_tokens=200, max_new_tokens=60,
                     max_passages=5)
    assert [x["title"] for x in p.passages] == ["T0", "T1"] and p.prompt_tokens <= 140
    assert p.messages[-1]["content"].endswith("like [1].") and "why?" in p.messages[-1]["content"]


def test_history_goes_after_passages_and_the_question_is_never_cut():
    history = [{"role": "user", "content": " ".join(["old"] * 80)}, {"role": "assistant", "content": "ok"}]
    p = build_prompt("why?", PASSAGES, system="s", count_tokens=words, max_context_tokens=100, max_new_tokens=60,
                     max_passages=5, history=history)
    assert p.passages == [] and p.messages[1] == {"role": "assistant", "content": "ok"}
    with pytest.raises(ValueError, match="the question needs"):
        build_prompt(" ".join(["q"] * 50), [], system="s", count_tokens=words, max_context_tokens=80,
                     max_new_tokens=60, max_passages=5)


def test_api_keys_generated_once_and_compared(tmp_path, monkeypatch):
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", "")
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS_FILE", "")
    storage = Storage(str(tmp_path))
    with pytest.raises(ValueError, match="no API key"):
        apikeys.load(storage, create=False)
    keys, where, new = apikeys.load(storage)
    assert keys == [new] and where.endswith("secrets/api-keys")
    assert (tmp_path / "secrets/api-keys").stat().st_mode & 0o077 == 0
    assert apikeys.load(storage) == (keys, where, None)  # printed once: no new key the second time
    assert apikeys.matches(new, ["other", new]) and not apikeys.matches(new + "x", keys)
    f = tmp_path / "keys.txt"
    f.write_text("# team keys\nk1\n\nk2\n")
    assert apikeys.load(storage, str(f))[0] == ["k1", "k2"]
    with pytest.raises(ValueError, match="does not exist"):
        apikeys.load(storage, str(tmp_path / "missing"))
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", "a, b")
    assert apikeys.load(storage)[:2] == (["a", "b"], "RAGLINE_API_KEYS")
