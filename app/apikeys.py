"""Bearer API keys for the HTTP endpoint, each with a scope: from RAGLINE_API_KEYS, the file RAGLINE_API_KEYS_FILE,
or (with neither) the file under the storage root, where one key is generated the first time (readable only by its
owner where the root is local). `ragline keys` (app/cli/keys.py) adds and revokes entries in that file.

The key file, one entry per line (`#` starts a comment, removed first; blank lines are skipped):

    KEY                                  every collection, and admin (a key as it was before scopes)
    KEY collections=hr,eng               reads collections hr and eng; not admin
    KEY collections=hr admin             reads hr; admin
    KEY admin                            every collection, and admin
    KEY collections=*                    every collection; not admin
    sha256:<64 hex> collections=hr       the same, with the key's SHA-256 digest in place of the key
    KEY_A, KEY_B collections=hr          several keys sharing the line's scopes

A key has at least MIN_KEY_CHARS characters. Scopes are whitespace-separated tokens after the key(s); commas
(with or without spaces around them) separate keys and collection names.

Replicas hold only SHA-256 digests of the keys (`KeyRing`). Where keys must travel to replicas on other machines
they travel as digests with their scopes (RAGLINE_API_KEY_HASHES in the application's runtime_env, which the
dashboard shows; `hashes_env`): a digest of a random key of ≥ 16 characters reveals nothing usable.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from app import envs
from app.collections import check_name
from app.errors import NotFound, UserError
from app.storage import Storage

KEY_FILE = "secrets/api-keys"
MIN_KEY_CHARS = 16
RELOAD_EVERY_S = 1.0  # how often a replica looks at its key file's modification time
DIGEST_PREFIX = "sha256:"
ADMIN = "admin"
COLLECTIONS = "collections="
EVERY = "*"  # collections=* : every collection, without admin (a bare key is every collection *and* admin)
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")
_COMMA_RE = re.compile(r"\s*,\s*")  # "a, b" and "a ,b" are "a,b": keys and collection names never hold spaces
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scope:
    """What a key may do. `collections`: the collections it may read, None for every one."""

    collections: frozenset[str] | None
    admin: bool

    def may_read(self, collection: str) -> bool:
        """Whether this key may read `collection`: the one question every route asks, so a collection a key may
        not read and one that does not exist can be answered alike."""
        return self.collections is None or collection in self.collections

    def tokens(self) -> list[str]:
        """The scope as key-file tokens (`admin` alone for the full scope, which a bare key means too)."""
        if self.collections is None:
            return [ADMIN] if self.admin else [COLLECTIONS + EVERY]
        return [COLLECTIONS + ",".join(sorted(self.collections)), *([ADMIN] if self.admin else [])]

    def describe(self) -> str:
        reads = "every collection" if self.collections is None else ", ".join(sorted(self.collections))
        return f"{reads}{'; admin' if self.admin else ''}"


FULL = Scope(None, True)


def key_id(digest: bytes) -> str:
    """A key's public name, from its digest: listed from a digest-only file and written to logs, never the key."""
    return "key-" + digest.hex()[:12]


@dataclass(frozen=True)
class Caller:
    """Who sent a request that passed the key check."""

    key_id: str
    digest: bytes  # the identity of the key in fair share
    scope: Scope


@dataclass(frozen=True)
class Entry:
    """One key of a key file. `key` is the key itself where the file holds it in clear, else None."""

    digest: bytes
    scope: Scope
    key: str | None
    line: int  # 1-based line number in its file, for errors and `revoke`
    comment: str  # the line's comment ("" if none), shared by every key on the line

    @property
    def key_id(self) -> str:
        return key_id(self.digest)

    def caller(self) -> Caller:
        return Caller(self.key_id, self.digest, self.scope)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return f"rl-{secrets.token_urlsafe(24)}"


def _split(line: str) -> tuple[list[str], str]:
    """(whitespace-separated tokens, comment) of one line; commas glue the keys and names they separate."""
    code, _, comment = line.partition("#")
    return _COMMA_RE.sub(",", code).split(), comment.strip()


def _scope(tokens: list[str], at: str) -> Scope:
    collections: frozenset[str] | None = None
    admin = named = False
    for token in tokens:
        if token == ADMIN and not admin:
            admin = True
        elif token.startswith(COLLECTIONS) and not named:
            named = True
            names = token[len(COLLECTIONS):].split(",")
            if names != [EVERY]:
                try:
                    collections = frozenset(check_name(n) for n in names)
                except UserError as e:
                    raise UserError(f"{at}: {e}") from None
        else:
            raise UserError(f"{at}: unknown or repeated scope {token!r} (scopes are `collections=a,b` "
                            f"(or `collections=*`) and `admin`)")
    if not named:
        return FULL  # a bare key or `admin` alone: every collection, and admin
    return Scope(collections, admin)


def _key(token: str, at: str, clear_only: bool) -> tuple[bytes, str | None]:
    """(digest, the key itself or None) of one key-or-digest token."""
    if token.startswith(DIGEST_PREFIX):
        hexed = token[len(DIGEST_PREFIX):].lower()
        if clear_only:
            raise UserError(f"{at}: a digest ({token[:16]}…) where only keys are taken (digests belong in a key file)")
        if not _DIGEST_RE.fullmatch(hexed):
            raise UserError(f"{at}: a bad digest ({token[:16]}…): a digest is `sha256:` and 64 hex digits")
        return bytes.fromhex(hexed), None
    if len(token) < MIN_KEY_CHARS:
        raise UserError(f"{at}: an API key of {len(token)} characters; keys need at least {MIN_KEY_CHARS} (make "
                        "one with `ragline keys create` or `openssl rand -hex 32`)")
    return hashlib.sha256(token.encode()).digest(), token


def parse(text: str, where: str, scoped: bool = True) -> list[Entry]:
    """The entries of a key file (grammar in the module docstring). `#` starts a comment, removed before the line
    is read, so a key on a comment line is never live. Errors name `where` and the line. `scoped=False` (the
    RAGLINE_API_KEYS variable): keys in clear only, no scopes, so each has the full scope."""
    entries: list[Entry] = []
    seen: dict[bytes, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        at = f"{where} line {n}"
        tokens, comment = _split(line)
        if not tokens:
            continue
        if tokens[0] == ADMIN or tokens[0].startswith(COLLECTIONS):
            raise UserError(f"{at}: a scope with no key before it")
        if not scoped and tokens[1:]:
            raise UserError(f"{at}: {tokens[1]!r}: only keys here (scopes belong in a key file)")
        scope = _scope(tokens[1:], at)
        for token in tokens[0].split(","):
            if not token:
                continue
            d, key = _key(token, at, clear_only=not scoped)
            if d in seen:
                raise UserError(f"{at}: the same key as line {seen[d]} ({key_id(d)})")
            seen[d] = n
            entries.append(Entry(d, scope, key, n, comment))
    return entries


def entry_line(d: bytes, scope: Scope, comment: str = "") -> str:
    """A key-file line for the digest `d` (no key in clear, so the file can be read without giving one away)."""
    assert "\n" not in comment
    return " ".join([DIGEST_PREFIX + d.hex(), *scope.tokens()]) + (f"  # {comment}" if comment else "")


def without(text: str, where: str, kid: str) -> tuple[str, Entry]:
    """`text` (a key file) with the key `kid` taken out, and its entry. A line holding several keys loses only that
    key and keeps its scopes and comment; a line left with none goes, its comment with it. NotFound if absent."""
    entries = parse(text, where)
    gone = [e for e in entries if e.key_id == kid]
    if not gone:
        raise NotFound(f"no key {kid!r} in {where} (`ragline keys list` shows them)")
    assert len(gone) == 1, f"two keys in {where} share the id {kid}"
    target = gone[0]
    lines = text.splitlines()
    tokens, comment = _split(lines[target.line - 1])
    kept = [t for t in tokens[0].split(",") if t and _key(t, where, False)[0] != target.digest]
    if kept:
        lines[target.line - 1] = " ".join([",".join(kept), *tokens[1:]]) + (f"  # {comment}" if comment else "")
    else:
        del lines[target.line - 1]
    return "".join(line + "\n" for line in lines), target


def hashes_env(entries: list[Entry]) -> str:
    """RAGLINE_API_KEY_HASHES for `entries`: key-file lines of digests with their scopes, joined by `;` (an
    environment variable holds one line well); no key in clear and no comment."""
    return ";".join(entry_line(e.digest, e.scope) for e in entries)


def parse_hashes(value: str) -> list[Entry]:
    """The entries RAGLINE_API_KEY_HASHES carries: `hashes_env`'s form (entries as key-file lines of `sha256:`
    digests, separated by `;` or newlines), or the form before scopes, comma-separated hex digests (full scope)."""
    where = "RAGLINE_API_KEY_HASHES"
    if DIGEST_PREFIX not in value:
        value = ",".join(DIGEST_PREFIX + d.strip() for d in value.split(",") if d.strip())
    entries = parse(value.replace(";", "\n"), where)
    if any(e.key is not None for e in entries):
        raise UserError(f"{where} holds a key in clear: it carries digests only (`sha256:<hex>`)")
    return entries


def _read_file(path: str) -> list[Entry]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise NotFound(f"API key file {p} does not exist")
    entries = parse(p.read_text(encoding="utf-8"), str(p))
    if not entries:
        raise UserError(f"API key file {p} holds no key")
    return entries


def load_entries(storage: Storage, keys_file: str | None = None, create: bool = True
                 ) -> tuple[list[Entry], str, str | None]:
    """(entries, where they come from, a key generated now or None). `keys_file` overrides the environment's file;
    with no key anywhere, one is generated under the storage root (`create`) or that is an error."""
    if envs.RAGLINE_API_KEYS and not keys_file:
        return parse(envs.RAGLINE_API_KEYS.replace(",", "\n"), "RAGLINE_API_KEYS", scoped=False), \
            "RAGLINE_API_KEYS", None
    if path := keys_file or envs.RAGLINE_API_KEYS_FILE:
        return _read_file(path), str(Path(path).expanduser()), None
    if not create and not storage.exists(KEY_FILE):
        raise UserError(f"no API key: set RAGLINE_API_KEYS or RAGLINE_API_KEYS_FILE, or run `ragline serve` "
                        f"(it keeps one in {storage.path(KEY_FILE)})")
    new = new_key()
    created = storage.create_exclusive(KEY_FILE, (new + "\n").encode())
    if created and storage.is_local:
        os.chmod(storage.local_path(KEY_FILE), 0o600)
    where = storage.path(KEY_FILE)
    entries = parse(storage.read_bytes(KEY_FILE).decode(), where)
    if not entries:
        raise UserError(f"API key file {where} holds no key")
    return entries, where, new if created else None


def load(storage: Storage, keys_file: str | None = None, create: bool = True) -> tuple[list[str], str, str | None]:
    """As `load_entries`, with the keys themselves: for a client of the endpoint (`ragline query`), which needs a
    key it can send. UserError where the keys are there only as digests."""
    entries, where, new = load_entries(storage, keys_file, create)
    keys = [e.key for e in entries if e.key is not None]
    if not keys:
        raise UserError(f"{where} holds the API keys as digests only: give the key (--key)")
    return keys, where, new


@dataclass(frozen=True)
class KeySource:
    """The key file a ring follows: a local file (`storage` None), or the key file of a root on an object store,
    which a ring looks at from a thread of its own (a stat there is a network round trip, not for a request's
    path). A file is taken to have changed when its modification time or size has: S3 keeps the time to the
    second, so two edits of one size within a second are seen as one."""

    path: str
    storage: Storage | None = None

    def stamp(self) -> tuple[int, int]:
        if self.storage is None:
            st = os.stat(self.path)
            return st.st_mtime_ns, st.st_size
        info = self.storage.fs.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"API key file {self.path} does not exist")
        return int(info.mtime_ns or 0), int(info.size or 0)

    def read(self) -> list[Entry]:
        if self.storage is None:
            return _read_file(self.path)
        entries = parse(self.storage.read_bytes(KEY_FILE).decode("utf-8"), self.path)
        if not entries:
            raise UserError(f"API key file {self.path} holds no key")
        return entries


class KeyRing:
    """The digests of the accepted keys with their scopes. With a key file (`source`), the file is read again when
    it changes (looked at once a second at most), so keys are added and revoked without a restart; a file edited
    into an invalid state keeps the keys it held before, and says why in the log."""

    def __init__(self, callers: list[Caller], source: KeySource | None = None):
        assert callers, "the API needs at least one key"
        self.callers = callers
        self.source = source
        self.stamp = source.stamp() if source else (0, 0)
        self.checked = time.monotonic()
        self.looking = False  # a thread is looking at a remote file

    @classmethod
    def of(cls, keys: list[str], source: KeySource | None = None) -> KeyRing:
        """Keys with the full scope (taken as given: length is a key file's rule)."""
        digests = [hashlib.sha256(k.encode()).digest() for k in keys]
        return cls([Caller(key_id(d), d, FULL) for d in digests], source)

    @classmethod
    def of_entries(cls, entries: list[Entry], source: KeySource | None = None) -> KeyRing:
        return cls([e.caller() for e in entries], source)

    def matches(self, presented: str) -> bool:
        return self.identify(presented) is not None

    def identify(self, presented: str) -> Caller | None:
        """The caller whose key `presented` is, else None. Constant time in the presented key: every digest is
        compared, with no early exit."""
        self._due()
        h = hashlib.sha256(presented.encode()).digest()
        found: Caller | None = None
        for c in self.callers:
            if hmac.compare_digest(h, c.digest):
                found = c
        return found

    def _due(self) -> None:
        if self.source is None or self.looking or time.monotonic() - self.checked < RELOAD_EVERY_S:
            return
        self.checked = time.monotonic()
        if self.source.storage is None:
            self._reload()
        else:
            self.looking = True
            threading.Thread(target=self._reload, name="ragline-keys", daemon=True).start()

    def _reload(self) -> None:
        assert self.source is not None
        try:
            stamp = self.source.stamp()
            if stamp != self.stamp:
                self.callers = [e.caller() for e in self.source.read()]
                self.stamp = stamp
                log.info("API keys reloaded from %s (%d keys)", self.source.path, len(self.callers))
        except (OSError, ValueError) as e:  # the file is mid-edit or broken: keep serving with the keys we had
            log.warning("API key file %s not reloaded, keeping %d keys: %s", self.source.path, len(self.callers), e)
        finally:
            self.looking = False
            self.checked = time.monotonic()


def ring(storage: Storage, keys_file: str | None = None) -> tuple[KeyRing, str]:
    """The replica's KeyRing and where its keys came from: digests sent with the application
    (RAGLINE_API_KEY_HASHES), else the keys `load_entries` finds, following their file when it is local."""
    if envs.RAGLINE_API_KEY_HASHES and not keys_file:
        return KeyRing.of_entries(parse_hashes(envs.RAGLINE_API_KEY_HASHES)), "RAGLINE_API_KEY_HASHES"
    entries, where, _ = load_entries(storage, keys_file)
    source: KeySource | None = None if where == "RAGLINE_API_KEYS" else KeySource(where)
    if where == storage.path(KEY_FILE):
        source = KeySource(str(storage.local_path(KEY_FILE))) if storage.is_local else KeySource(where, storage)
    return KeyRing.of_entries(entries, source), where
