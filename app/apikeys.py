"""Bearer API keys for the HTTP endpoint: from RAGLINE_API_KEYS, the file RAGLINE_API_KEYS_FILE, or (with
neither) one generated once and kept under the storage root, readable only by its owner where the root is local.

Replicas hold only SHA-256 digests of the keys (`KeyRing`). Where keys must travel to replicas on other machines
they travel as digests (RAGLINE_API_KEY_HASHES in the application's runtime_env, which the dashboard shows): a
digest of a random key of ≥ 16 characters reveals nothing usable.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import time
from pathlib import Path

from app import envs
from app.errors import NotFound, UserError
from app.storage import Storage

KEY_FILE = "secrets/api-keys"
MIN_KEY_CHARS = 16
RELOAD_EVERY_S = 1.0  # how often a replica looks at its key file's modification time
log = logging.getLogger(__name__)


def parse(text: str, where: str) -> list[str]:
    """Keys from `text`: one or more per line, comma-separated. `#` starts a comment, removed before the line is
    split, so a key on a comment line is never live. A key shorter than MIN_KEY_CHARS is an error naming its line."""
    keys = []
    for n, line in enumerate(text.splitlines(), start=1):
        for key in (k.strip() for k in line.split("#", 1)[0].split(",")):
            if key and len(key) < MIN_KEY_CHARS:
                raise UserError(f"{where} line {n}: an API key of {len(key)} characters; keys need at least "
                                f"{MIN_KEY_CHARS} (make one with `openssl rand -hex 32`)")
            if key:
                keys.append(key)
    return keys


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _read_file(path: str) -> list[str]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise NotFound(f"API key file {p} does not exist")
    keys = parse(p.read_text(encoding="utf-8"), str(p))
    if not keys:
        raise UserError(f"API key file {p} holds no key")
    return keys


def load(storage: Storage, keys_file: str | None = None, create: bool = True) -> tuple[list[str], str, str | None]:
    """(keys, where they come from, a key generated now or None). `keys_file` overrides the environment's file;
    with no key anywhere, one is generated under the storage root (`create`) or that is an error."""
    if envs.RAGLINE_API_KEYS and not keys_file:
        return parse(envs.RAGLINE_API_KEYS.replace(",", "\n"), "RAGLINE_API_KEYS"), "RAGLINE_API_KEYS", None
    if path := keys_file or envs.RAGLINE_API_KEYS_FILE:
        return _read_file(path), str(Path(path).expanduser()), None
    if not create and not storage.exists(KEY_FILE):
        raise UserError(f"no API key: set RAGLINE_API_KEYS or RAGLINE_API_KEYS_FILE, or run `ragline serve` "
                        f"(it keeps one in {storage.path(KEY_FILE)})")
    new = f"rl-{secrets.token_urlsafe(24)}"
    created = storage.create_exclusive(KEY_FILE, (new + "\n").encode())
    if created and storage.is_local:
        os.chmod(storage.local_path(KEY_FILE), 0o600)
    return parse(storage.read_bytes(KEY_FILE).decode(), storage.path(KEY_FILE)), storage.path(KEY_FILE), \
        new if created else None


class KeyRing:
    """The digests of the accepted keys. With a local key file, the file is read again when it changes (looked
    at once a second at most), so keys rotate without a restart; a file edited into an invalid state keeps the
    keys it held before, and says why in the log."""

    def __init__(self, digests: list[str], path: str | None = None):
        assert digests, "the API needs at least one key"
        self.digests = [bytes.fromhex(d) for d in digests]
        self.path = path
        self.mtime = os.stat(path).st_mtime_ns if path else 0
        self.checked = time.monotonic()

    @classmethod
    def of(cls, keys: list[str], path: str | None = None) -> KeyRing:
        return cls([digest(k) for k in keys], path)

    def matches(self, presented: str) -> bool:
        return self.identify(presented) is not None

    def identify(self, presented: str) -> bytes | None:
        """The digest of `presented` when it is an accepted key (what identifies the caller), else None. Constant
        time in the presented key: every digest is compared, with no early exit."""
        self._reload()
        h = hashlib.sha256(presented.encode()).digest()
        found = False
        for d in self.digests:
            found |= hmac.compare_digest(h, d)
        return h if found else None

    def _reload(self) -> None:
        if self.path is None or time.monotonic() - self.checked < RELOAD_EVERY_S:
            return
        self.checked = time.monotonic()
        try:
            mtime = os.stat(self.path).st_mtime_ns
            if mtime != self.mtime:
                self.digests = [bytes.fromhex(digest(k)) for k in _read_file(self.path)]
                self.mtime = mtime
                log.info("API keys reloaded from %s (%d keys)", self.path, len(self.digests))
        except (OSError, ValueError) as e:  # the file is mid-edit or broken: keep serving with the keys we had
            log.warning("API key file %s not reloaded, keeping %d keys: %s", self.path, len(self.digests), e)


def ring(storage: Storage, keys_file: str | None = None) -> tuple[KeyRing, str]:
    """The replica's KeyRing and where its keys came from: digests sent with the application
    (RAGLINE_API_KEY_HASHES), else the keys `load` finds, following their file when it is local."""
    if envs.RAGLINE_API_KEY_HASHES and not keys_file:
        return KeyRing([d.strip() for d in envs.RAGLINE_API_KEY_HASHES.split(",") if d.strip()]), \
            "RAGLINE_API_KEY_HASHES"
    keys, where, _ = load(storage, keys_file)
    path: str | None = None if where == "RAGLINE_API_KEYS" else where
    if where == storage.path(KEY_FILE):
        path = str(storage.local_path(KEY_FILE)) if storage.is_local else None
    return KeyRing.of(keys, path), where
