"""`ragline keys create|list|revoke`: the API keys of the HTTP endpoint and their scopes, in the key file the
served replicas follow (`--file`, else RAGLINE_API_KEYS_FILE, else `secrets/api-keys` under the storage root).

A new key goes into the file as its digest only, so it is shown once, when made, and never again. Replicas re-read
a local key file when it changes (about once a second), so a key created or revoked here is live or dead there
without a restart. Each edit rewrites the file whole and atomically (a replica never reads half a line); two edits
at the same moment may lose one of them, so edit from one place at a time."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import BaseModel
from rich.table import Table

from app import apikeys, envs
from app.cli.context import Context
from app.cli.render import err, out, print_json
from app.collections import check_name
from app.errors import Conflict, UserError
from app.storage import Storage

FileOption = Annotated[Path | None, typer.Option("--file", help="The key file. [default: RAGLINE_API_KEYS_FILE, "
                                                 "else secrets/api-keys under the storage root]")]
_CREATED_RE = re.compile(r"^(?P<label>.*?)\s*created (?P<at>\S+)$")


@dataclass(frozen=True)
class KeyFile:
    """The file `ragline keys` edits: a local file, or the key file under a storage root on an object store."""

    where: str
    path: Path | None  # a local file
    storage: Storage | None  # else: apikeys.KEY_FILE under this root

    def read(self) -> str | None:
        """The file's text, None if there is no file yet."""
        if self.path is not None:
            return self.path.read_text(encoding="utf-8") if self.path.exists() else None
        assert self.storage is not None
        return self.storage.read_bytes(apikeys.KEY_FILE).decode() if self.storage.exists(apikeys.KEY_FILE) else None

    def write(self, text: str) -> None:
        """Replace the file whole: a temp file renamed into place (one PUT on an object store). The temp file is
        made readable by its owner alone before a byte is written, and the file keeps the mode it had."""
        if self.path is None:
            assert self.storage is not None
            return self.storage.write_bytes(apikeys.KEY_FILE, text.encode())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mode = self.path.stat().st_mode & 0o777 if self.path.exists() else 0o600
        tmp = self.path.with_name(f".{self.path.name}.tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, self.path)


def key_file(c: Context, file: Path | None) -> KeyFile:
    if named := file or (Path(envs.RAGLINE_API_KEYS_FILE) if envs.RAGLINE_API_KEYS_FILE else None):
        path = named.expanduser().absolute()
        return KeyFile(str(path), path, None)
    if c.storage.is_local:
        path = c.storage.local_path(apikeys.KEY_FILE)
        return KeyFile(str(path), path, None)
    return KeyFile(c.storage.path(apikeys.KEY_FILE), None, c.storage)


def _warn_if_env_keys() -> None:
    if envs.RAGLINE_API_KEYS:
        err.print("[yellow]note:[/] RAGLINE_API_KEYS is set: an endpoint started with it takes those keys and "
                  "ignores this file")


class KeyRow(BaseModel):
    key_id: str
    collections: list[str] | None  # None: every collection
    admin: bool
    label: str
    created: str | None
    stored: Literal["digest", "clear"]  # how the file holds the key


def _names(scope: apikeys.Scope) -> list[str] | None:
    return sorted(scope.collections) if scope.collections is not None else None


def row(e: apikeys.Entry) -> KeyRow:
    m = _CREATED_RE.match(e.comment)
    return KeyRow(key_id=e.key_id, collections=_names(e.scope), admin=e.scope.admin,
                  label=m["label"] if m else e.comment, created=m["at"] if m else None,
                  stored="clear" if e.key is not None else "digest")


class CreatedKey(BaseModel):
    key: str  # shown this once
    key_id: str
    collections: list[str] | None
    admin: bool
    label: str
    file: str


def scope_of(collections: str | None, admin: bool) -> apikeys.Scope:
    """`--collections a,b` (or `*`) and `--admin` as a scope; neither: every collection and admin, as a bare key."""
    if collections is None:
        return apikeys.FULL
    names = [n.strip() for n in collections.split(",") if n.strip()]
    if names == [apikeys.EVERY]:
        return apikeys.Scope(None, admin)
    if not names:
        raise UserError("--collections names no collection (give a,b or '*' for every collection)")
    return apikeys.Scope(frozenset(check_name(n) for n in names), admin)


def keys_create(
    ctx: typer.Context,
    collections: Annotated[str | None, typer.Option(help="Collections the key may read, comma-separated ('*': "
                                                    "every one). [default: every collection, and admin]")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="The key may also operate (runs, versions, models); "
                                        "implied when --collections is not given.")] = False,
    label: Annotated[str, typer.Option(help="A note kept beside the key (who or what it is for).")] = "",
    file: FileOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Make a key and add it to the key file as its digest; prints the key, once."""
    if "\n" in label or "\r" in label:
        raise UserError("--label is one line")
    scope = scope_of(collections, admin)
    kf = key_file(ctx.obj, file)
    text = kf.read() or ""
    apikeys.parse(text, kf.where)  # a broken file is said so now, not after a key was printed
    key = apikeys.new_key()
    d = bytes.fromhex(apikeys.digest(key))
    note = " ".join(filter(None, [label.strip(), f"created {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"]))
    new = text + ("" if not text or text.endswith("\n") else "\n") + apikeys.entry_line(d, scope, note) + "\n"
    apikeys.parse(new, kf.where)
    kf.write(new)
    created = CreatedKey(key=key, key_id=apikeys.key_id(d), collections=_names(scope), admin=scope.admin,
                         label=label.strip(), file=kf.where)
    _warn_if_env_keys()
    if as_json:
        return print_json(created.model_dump())
    out.print(f"{created.key_id} ({scope.describe()}) added to {kf.where}", highlight=False)
    out.print(f"API key, shown this once (the file keeps only its digest, so it cannot be shown again):\n  {key}",
              highlight=False, soft_wrap=True)


def keys_list(ctx: typer.Context, file: FileOption = None,
              as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The keys in the key file: id, scope, label and how each is stored; never a key itself."""
    kf = key_file(ctx.obj, file)
    text = kf.read()
    if text is None:
        raise UserError(f"no key file at {kf.where} (`ragline keys create` makes one; `ragline serve` makes one "
                        "with a key)")
    rows = [row(e) for e in apikeys.parse(text, kf.where)]
    if as_json:
        return print_json([r.model_dump() for r in rows])
    t = Table("key id", "collections", "admin", "label", "created", "stored", title=f"API keys in {kf.where}")
    for r in rows:
        t.add_row(r.key_id, "every one" if r.collections is None else ", ".join(r.collections),
                  "yes" if r.admin else "", r.label, r.created or "", r.stored)
    out.print(t)


def keys_revoke(
    ctx: typer.Context,
    key_id: Annotated[str, typer.Argument(help="The key's id, as `ragline keys list` shows it.")],
    file: FileOption = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Take a key out of the key file; replicas following the file refuse it within about a second."""
    kf = key_file(ctx.obj, file)
    text = kf.read()
    if text is None:
        raise UserError(f"no key file at {kf.where}")
    new, gone = apikeys.without(text, kf.where, key_id)
    left = apikeys.parse(new, kf.where)
    if not left:
        raise Conflict(f"{key_id} is the last key in {kf.where}: create another first (an endpoint with no key "
                       "refuses to start)")
    if gone.scope.admin and not any(e.scope.admin for e in left):
        raise Conflict(f"{key_id} is the last key with admin scope in {kf.where}: create another with --admin "
                       "first")
    kf.write(new)
    _warn_if_env_keys()
    if as_json:
        return print_json(row(gone).model_dump())
    out.print(f"revoked {key_id} ({gone.scope.describe()}) from {kf.where}; endpoints following this file refuse "
              "it within about a second", highlight=False)
