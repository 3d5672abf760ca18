"""`ragline keys create|list|revoke` (app/cli/keys.py) on a key file under a temporary storage root."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

import app.cli
from app import apikeys
from app.cli import keys as keys_cli
from app.cli import render
from app.storage import Storage

runner = CliRunner()


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS", "")
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS_FILE", "")
    return tmp_path / "s"


def ragline(monkeypatch, store, *args: str) -> str:
    """`ragline --storage STORE ARGS` through typer's runner: its stdout (the commands print on a console bound at
    import, pointed here at a buffer). A command that fails fails the test."""
    buf = io.StringIO()
    console = Console(file=buf, width=250)
    monkeypatch.setattr(keys_cli, "out", console)
    monkeypatch.setattr(render, "out", console)  # print_json's
    result = runner.invoke(app.cli.app, ["--storage", str(store), *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return buf.getvalue()


def exits(monkeypatch, capsys, store, *args: str) -> tuple[int, str]:
    """`ragline --storage STORE ARGS` through the entry point: (exit status, stderr)."""
    monkeypatch.setattr("sys.argv", ["ragline", "--storage", str(store), *args])
    with pytest.raises(SystemExit) as exited:
        app.cli.main()
    code = exited.value.code
    return code if isinstance(code, int) else 1, capsys.readouterr().err


def test_create_writes_a_digest_and_shows_the_key_once(monkeypatch, store):
    made = json.loads(ragline(monkeypatch, store, "keys", "create", "--collections", "hr,eng", "--label", "hr bot",
                              "--json"))
    key, f = made["key"], store / "secrets" / "api-keys"
    assert made["collections"] == ["eng", "hr"] and made["admin"] is False and made["file"] == str(f)
    assert made["key_id"] == apikeys.key_id(bytes.fromhex(apikeys.digest(key))) and key.startswith("rl-")
    assert f.stat().st_mode & 0o777 == 0o600
    text = f.read_text()
    assert key not in text and text.startswith(f"sha256:{apikeys.digest(key)} collections=eng,hr  # hr bot created ")
    printed = ragline(monkeypatch, store, "keys", "create", "--admin")
    admin_key = printed.split()[-1]
    assert "cannot be shown again" in printed and admin_key.startswith("rl-") and admin_key not in f.read_text()
    ring = apikeys.ring(Storage(str(store)))[0]  # what a replica reading the file makes of it
    hr, admin = ring.identify(key), ring.identify(admin_key)
    assert hr is not None and hr.scope == apikeys.Scope(frozenset({"hr", "eng"}), False)
    assert admin is not None and admin.scope == apikeys.FULL
    assert f.stat().st_mode & 0o777 == 0o600  # the rewrite kept the mode


def test_list_shows_ids_and_scopes_never_a_key(monkeypatch, store):
    ragline(monkeypatch, store, "keys", "create", "--collections", "*", "--label", "reader")
    f = store / "secrets" / "api-keys"
    clear = "legacy-key-0123456789"
    f.write_text(f.read_text() + f"{clear} collections=hr admin  # from before\n")
    rows = json.loads(ragline(monkeypatch, store, "keys", "list", "--json"))
    assert [(r["collections"], r["admin"], r["label"], r["stored"]) for r in rows] == [
        (None, False, "reader", "digest"), (["hr"], True, "from before", "clear")]
    assert rows[0]["created"] and rows[1]["created"] is None
    table = ragline(monkeypatch, store, "keys", "list")
    for listing in (table, json.dumps(rows)):
        assert clear not in listing and apikeys.digest(clear) not in listing
    assert rows[1]["key_id"] in table and "every one" in table


def test_revoke_takes_one_key_out_and_keeps_the_last_admin(monkeypatch, capsys, store):
    admin = json.loads(ragline(monkeypatch, store, "keys", "create", "--json"))
    hr = json.loads(ragline(monkeypatch, store, "keys", "create", "--collections", "hr", "--json"))
    f = store / "secrets" / "api-keys"
    shared = ("shared-key-a-0123456789", "shared-key-b-0123456789")
    f.write_text(f.read_text() + f"{shared[0]}, {shared[1]} collections=ops  # two teams\n")
    ring = apikeys.ring(Storage(str(store)))[0]
    monkeypatch.setattr(apikeys, "RELOAD_EVERY_S", 0.0)
    assert ring.matches(hr["key"])

    gone = json.loads(ragline(monkeypatch, store, "keys", "revoke", hr["key_id"], "--json"))
    assert gone["key_id"] == hr["key_id"] and hr["key_id"] not in ragline(monkeypatch, store, "keys", "list")
    assert not ring.matches(hr["key"]) and ring.matches(admin["key"])  # the running ring followed the file
    b = apikeys.key_id(bytes.fromhex(apikeys.digest(shared[1])))
    ragline(monkeypatch, store, "keys", "revoke", b)
    assert f.read_text().endswith(f"\n{shared[0]} collections=ops  # two teams\n")  # the line keeps its other key

    code, err = exits(monkeypatch, capsys, store, "keys", "revoke", "key-000000000000")
    assert code == 2 and "no key 'key-000000000000'" in err and "Traceback" not in err
    code, err = exits(monkeypatch, capsys, store, "keys", "revoke", admin["key_id"])
    assert code == 2 and "the last key with admin scope" in err
    assert ring.matches(admin["key"])
    ragline(monkeypatch, store, "keys", "create", "--collections", "ops", "--admin")
    ragline(monkeypatch, store, "keys", "revoke", admin["key_id"])  # another admin exists now
    assert not ring.matches(admin["key"])


def test_file_option_and_bad_input(monkeypatch, capsys, store, tmp_path):
    other = tmp_path / "elsewhere" / "keys"
    made = json.loads(ragline(monkeypatch, store, "keys", "create", "--file", str(other), "--json"))
    assert made["file"] == str(other) and other.stat().st_mode & 0o777 == 0o600
    assert not (store / "secrets").exists()
    monkeypatch.setattr(apikeys.envs, "RAGLINE_API_KEYS_FILE", str(other))
    assert [r["key_id"] for r in json.loads(ragline(monkeypatch, store, "keys", "list", "--json"))] == [
        made["key_id"]]
    code, err = exits(monkeypatch, capsys, store, "keys", "create", "--collections", "HR")
    assert code == 2 and "collection name 'HR'" in err
    other.write_text(other.read_text() + "short\n")
    code, err = exits(monkeypatch, capsys, store, "keys", "create")
    assert code == 2 and f"{other} line 2" in err
