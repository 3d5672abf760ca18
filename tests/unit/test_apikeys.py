"""API keys with scopes (app/apikeys.py): the key-file grammar and its errors, the forms before scopes, who a
presented key is, the digests sent to replicas elsewhere, and a file followed without a restart."""

from __future__ import annotations

import hashlib
import os
import re
import time

import pytest

from app import apikeys
from app.apikeys import FULL, Scope
from app.collections import check_name
from app.errors import NotFound, UserError
from app.storage import Storage

A, B, C = "alpha-key-0123456789", "bravo-key-0123456789", "charlie-key-0123456789"


def sha(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def scopes(text: str) -> list[tuple[str | None, Scope]]:
    return [(e.key, e.scope) for e in apikeys.parse(text, "f")]


def test_the_grammar_gives_each_key_its_scope():
    text = (f"{A}\n"
            f"{B} collections=hr,eng  # the hr bot\n"
            f"{C} collections=hr admin\n"
            f"{sha('delta-key-0123456789')} admin\n"
            f"{sha('echo-key-0123456789')} collections=*\n"
            f"{sha('fox-key-0123456789')} admin collections=ops\n")
    assert scopes(text) == [
        (A, FULL), (B, Scope(frozenset({"hr", "eng"}), False)), (C, Scope(frozenset({"hr"}), True)),
        (None, FULL), (None, Scope(None, False)), (None, Scope(frozenset({"ops"}), True))]
    entries = apikeys.parse(text, "f")
    assert entries[1].comment == "the hr bot" and [e.line for e in entries] == [1, 2, 3, 4, 5, 6]
    assert entries[3].digest == hashlib.sha256(b"delta-key-0123456789").digest()
    assert entries[0].key_id == "key-" + hashlib.sha256(A.encode()).hexdigest()[:12]


def test_may_read_is_the_one_question():
    assert FULL.may_read("anything") and Scope(None, False).may_read("hr")
    hr = Scope(frozenset({"hr"}), False)
    assert hr.may_read("hr") and not hr.may_read("eng") and not hr.may_read("default")


def test_the_forms_before_scopes_still_read():
    text = (f"# team keys, retired: old-key-0123456789abcdef\n{A}, {B}  # ci\n\n{C} ,{sha('d-key-0123456789abc')} "
            "collections=hr , eng\n")
    got = scopes(text)
    assert got[:2] == [(A, FULL), (B, FULL)]  # several keys on a line, a comment line never live
    assert got[2:] == [(C, Scope(frozenset({"hr", "eng"}), False)), (None, Scope(frozenset({"hr", "eng"}), False))]


@pytest.mark.parametrize(("line", "message"), [
    ("short", "f line 2: an API key of 5 characters; keys need at least 16"),
    (f"{A} readonly", "f line 2: unknown or repeated scope 'readonly'"),
    (f"{A} admin admin", "f line 2: unknown or repeated scope 'admin'"),
    (f"{A} collections=hr collections=eng", "f line 2: unknown or repeated scope 'collections=eng'"),
    (f"{A} collections=HR", "f line 2: collection name 'HR': use 1 to 63 lower-case letters"),
    (f"{A} collections=", "f line 2: collection name ''"),
    (f"{A} collections=../etc", "f line 2: collection name '../etc'"),
    ("sha256:abc123", "f line 2: a bad digest"),
    ("sha256:" + "g" * 64, "f line 2: a bad digest"),
    ("collections=hr", "f line 2: a scope with no key before it"),
    (f"{A} {B}", f"f line 2: unknown or repeated scope {B!r}"),
    (f"{B}, {sha(B)}", "f line 2: the same key as line 2"),
    (A, "f line 2: the same key as line 1"),
])
def test_errors_name_the_file_and_line(line, message):
    with pytest.raises(UserError, match=re.escape(message)):
        apikeys.parse(f"{A}\n{line}\n", "f")


def test_collection_names():
    assert check_name("hr") == "hr" and check_name("eng-2_a") == "eng-2_a" and check_name("a" * 63)
    for bad in ("", "Hr", "-hr", "_hr", "h r", "hr/eng", "a" * 64, "hr\n", "hr.eng"):
        with pytest.raises(UserError, match=re.escape(f"collection name {bad!r}: use 1 to 63")):
            check_name(bad)


def test_environment_keys_stay_bare(tmp_path, monkeypatch):
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", f"{A}, {B}")
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEY_HASHES", "")
    entries, where, new = apikeys.load_entries(Storage(str(tmp_path)))
    assert where == "RAGLINE_API_KEYS" and new is None and [(e.key, e.scope) for e in entries] == [(A, FULL),
                                                                                                  (B, FULL)]
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", f"{A} collections=hr")
    with pytest.raises(UserError, match="only keys here"):
        apikeys.load_entries(Storage(str(tmp_path)))
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", sha(A))
    with pytest.raises(UserError, match="a digest"):
        apikeys.load_entries(Storage(str(tmp_path)))


def test_identify_returns_the_callers_scope_and_compares_every_digest(monkeypatch):
    text = f"{A}\n{B} collections=hr\n{sha(C)} collections=eng admin\n"
    ring = apikeys.KeyRing.of_entries(apikeys.parse(text, "f"))
    compared: list[bytes] = []
    real = apikeys.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return real(a, b)

    monkeypatch.setattr(apikeys.hmac, "compare_digest", counting)
    a = ring.identify(A)
    assert a is not None and a.scope == FULL and a.digest == hashlib.sha256(A.encode()).digest()
    assert len(compared) == 3  # the first key matched, and the other two were compared all the same
    c = ring.identify(C)
    assert c is not None and c.scope == Scope(frozenset({"eng"}), True) and c.key_id == apikeys.key_id(c.digest)
    b = ring.identify(B)
    assert b is not None and b.scope.may_read("hr") and not b.scope.may_read("eng") and not b.scope.admin
    assert ring.identify(B + "x") is None and ring.identify("") is None
    assert len(compared) == 15
    assert all(A not in repr(c) for c in ring.callers)  # the ring holds no key, only digests


def test_the_hashes_sent_to_replicas_carry_scopes(tmp_path, monkeypatch):
    entries = apikeys.parse(f"{A}  # a note\n{B}, {sha(C)} collections=hr,eng\n{sha('d-key-0123456789abc')} "
                            "collections=* \n", "f")
    env = apikeys.hashes_env(entries)
    assert A not in env and B not in env and "#" not in env and "\n" not in env
    back = apikeys.parse_hashes(env)
    assert [(e.digest, e.scope) for e in back] == [(e.digest, e.scope) for e in entries]
    assert apikeys.parse_hashes(env.replace(";", "\n")) == back
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEY_HASHES", env)
    ring, where = apikeys.ring(Storage(str(tmp_path)))
    assert where == "RAGLINE_API_KEY_HASHES"
    b = ring.identify(B)
    assert b is not None and b.scope == Scope(frozenset({"hr", "eng"}), False)
    # the form before scopes: comma-separated hex digests, every one with the full scope
    legacy = f"{apikeys.digest(A)}, {apikeys.digest(B)}"
    assert [(e.digest.hex(), e.scope) for e in apikeys.parse_hashes(legacy)] == [(apikeys.digest(A), FULL),
                                                                                 (apikeys.digest(B), FULL)]
    with pytest.raises(UserError, match="holds a key in clear"):
        apikeys.parse_hashes(f"{sha(A)};{B}")


def test_load_gives_keys_in_clear_and_says_when_there_are_none(tmp_path, monkeypatch):
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", "")
    f = tmp_path / "keys"
    f.write_text(f"{sha(A)}\n{B} collections=hr\n")
    assert apikeys.load(Storage(str(tmp_path)), str(f))[0] == [B]
    f.write_text(f"{sha(A)}\n")
    assert [e.key for e in apikeys.load_entries(Storage(str(tmp_path)), str(f))[0]] == [None]
    with pytest.raises(UserError, match="as digests only: give the key"):
        apikeys.load(Storage(str(tmp_path)), str(f))
    f.write_text("# nothing\n")
    with pytest.raises(UserError, match="holds no key"):
        apikeys.load_entries(Storage(str(tmp_path)), str(f))


def test_without_takes_out_one_key():
    text = f"# header\n{A}, {B} collections=hr  # shared\n{sha(C)} admin  # c\n"
    kid = apikeys.key_id(hashlib.sha256(B.encode()).digest())
    new, gone = apikeys.without(text, "f", kid)
    assert gone.key == B and new == f"# header\n{A} collections=hr  # shared\n{sha(C)} admin  # c\n"
    new, gone = apikeys.without(new, "f", apikeys.key_id(hashlib.sha256(C.encode()).digest()))
    assert gone.key is None and new == f"# header\n{A} collections=hr  # shared\n"
    with pytest.raises(NotFound, match="no key 'key-000000000000' in f"):
        apikeys.without(text, "f", "key-000000000000")


def test_a_revoked_key_is_refused_within_a_second_without_a_restart(tmp_path):
    f = tmp_path / "keys"
    f.write_text(f"{A}\n{sha(B)} collections=hr\n")
    ring, _ = apikeys.ring(Storage(str(tmp_path)), str(f))
    assert ring.matches(A) and ring.matches(B)
    new, _ = apikeys.without(f.read_text(), str(f), apikeys.key_id(hashlib.sha256(B.encode()).digest()))
    f.write_text(new)
    os.utime(f, ns=(time.time_ns(), time.time_ns() + 1_000_000))  # a new mtime even on a coarse clock
    assert ring.matches(B)  # looked at once a second at most
    deadline = time.monotonic() + apikeys.RELOAD_EVERY_S + 0.5
    while ring.matches(B):
        assert time.monotonic() < deadline, "the revoked key is still accepted"
        time.sleep(0.05)
    assert ring.matches(A)
