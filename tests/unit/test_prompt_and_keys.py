import os
import time

import pytest

from app import apikeys
from app.rag.prompt import build_prompt, user_turn
from app.rag.protocol import Passage
from app.storage import Storage


def words(messages):  # a stand-in tokenizer: one token per word
    return sum(len(m["content"].split()) for m in messages)


def passage(title: str, text: str) -> Passage:
    return Passage(chunk_id=f"{title}#0", doc_id=title, chunk_index=0, source=f"/d/{title}.md", title=title, text=text,
                   start_char=0, end_char=len(text), score=0.5)


PASSAGES = [passage(f"T{i}", " ".join(["w"] * 50)) for i in range(5)]


def test_passages_are_numbered_and_the_question_comes_first_and_last():
    text = user_turn("why?", PASSAGES[:2])
    assert text.startswith("Question: why?")
    assert text.index("[1] T0") < text.index("[2] T1") < text.rindex("Question: why?")
    assert "[1] plain" in user_turn("q", [passage("", "plain")])


def test_lowest_ranked_passages_are_dropped_first_to_fit():
    p = build_prompt("why?", PASSAGES, system="s", count_tokens=words, max_context_tokens=200, max_new_tokens=60,
                     max_passages=5)
    assert [x.title for x in p.passages] == ["T0", "T1"] and p.prompt_tokens <= 140
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
    ring = apikeys.KeyRing.of(["other-key-0123456789", new])
    assert ring.matches(new) and not ring.matches(new + "x") and new.encode() not in repr(vars(ring)).encode()
    f = tmp_path / "keys.txt"
    f.write_text("# team keys, retired: old-key-0123456789abcdef\nteam-key-0123456789, ci-key-0123456789  # ci\n\n")
    assert apikeys.load(storage, str(f))[0] == ["team-key-0123456789", "ci-key-0123456789"]
    with pytest.raises(ValueError, match="does not exist"):
        apikeys.load(storage, str(tmp_path / "missing"))
    f.write_text("good-key-0123456789\nshort\n")
    with pytest.raises(ValueError, match=r"keys.txt line 2: an API key of 5 characters; keys need at least 16"):
        apikeys.load(storage, str(f))
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", "env-key-a-0123456789, env-key-b-0123456789")
    assert apikeys.load(storage)[:2] == (["env-key-a-0123456789", "env-key-b-0123456789"], "RAGLINE_API_KEYS")
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEY_HASHES", apikeys.digest("sent-as-a-digest-0123"))
    assert apikeys.ring(storage)[0].matches("sent-as-a-digest-0123")


def test_a_key_file_is_followed_without_a_restart(tmp_path, monkeypatch):
    f = tmp_path / "keys.txt"
    f.write_text("first-key-0123456789\n")
    ring, where = apikeys.ring(Storage(str(tmp_path)), str(f))
    assert where == str(f) and ring.matches("first-key-0123456789")
    monkeypatch.setattr(apikeys, "RELOAD_EVERY_S", 0.0)
    f.write_text("second-key-0123456789\n")
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 1_000_000))  # a new mtime even on a coarse clock
    assert ring.matches("second-key-0123456789") and not ring.matches("first-key-0123456789")
    f.write_text("bad\n")  # mid-edit: the keys it had stay
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 2_000_000))
    assert ring.matches("second-key-0123456789")
