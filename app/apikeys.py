"""Bearer API keys for the HTTP endpoint: from RAGLINE_API_KEYS, the file RAGLINE_API_KEYS_FILE, or (with
neither) one generated once and kept under the storage root, readable only by its owner where the root is local."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from app import envs
from app.storage import Storage

KEY_FILE = "secrets/api-keys"


def _parse(text: str) -> list[str]:
    return [line.strip() for line in text.replace(",", "\n").splitlines() if line.strip() and not line.startswith("#")]


def load(storage: Storage, keys_file: str | None = None, create: bool = True) -> tuple[list[str], str, str | None]:
    """(keys, where they come from, a key generated now or None). `keys_file` overrides the environment's file;
    with no key anywhere, one is generated under the storage root (`create`) or that is an error."""
    if envs.RAGLINE_API_KEYS and not keys_file:
        return _parse(envs.RAGLINE_API_KEYS), "RAGLINE_API_KEYS", None
    if path := keys_file or envs.RAGLINE_API_KEYS_FILE:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ValueError(f"API key file {p} does not exist")
        keys = _parse(p.read_text(encoding="utf-8"))
        if not keys:
            raise ValueError(f"API key file {p} holds no key")
        return keys, str(p), None
    if not create and not storage.exists(KEY_FILE):
        raise ValueError(f"no API key: set RAGLINE_API_KEYS or RAGLINE_API_KEYS_FILE, or run `ragline serve` "
                         f"(it keeps one in {storage.path(KEY_FILE)})")
    new = f"rl-{secrets.token_urlsafe(24)}"
    created = storage.create_exclusive(KEY_FILE, (new + "\n").encode())
    if created and storage.is_local:
        os.chmod(storage.local_path(KEY_FILE), 0o600)
    return _parse(storage.read_bytes(KEY_FILE).decode()), storage.path(KEY_FILE), new if created else None


def matches(presented: str, keys: list[str]) -> bool:
    """Constant time in the presented key: every configured key is compared, with no early exit."""
    found = False
    for key in keys:
        found |= hmac.compare_digest(presented.encode(), key.encode())
    return found
