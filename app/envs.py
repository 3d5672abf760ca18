"""The one place Ragline reads environment variables.

Everything else takes these values as arguments, so tests and Ray workers see exactly what the caller passed.
"""

import os

#: Storage root (local path or any pyarrow.fs URI such as s3://bucket/prefix). Default: ./.ragline
RAGLINE_STORAGE: str = os.environ.get("RAGLINE_STORAGE", "")
#: Ray cluster address (as for ray.init). Empty: start or join a local Ray.
RAY_ADDRESS: str = os.environ.get("RAY_ADDRESS", "")
#: A YAML config file used when --config is not given.
RAGLINE_CONFIG: str = os.environ.get("RAGLINE_CONFIG", "")
#: Comma-separated bearer API keys for the HTTP endpoint.
RAGLINE_API_KEYS: str = os.environ.get("RAGLINE_API_KEYS", "")
#: A file holding API keys, one per line.
RAGLINE_API_KEYS_FILE: str = os.environ.get("RAGLINE_API_KEYS_FILE", "")
#: Local cache for converted models. Default: ~/.cache/ragline
RAGLINE_CACHE: str = os.environ.get("RAGLINE_CACHE", "")


def storage_root() -> str:
    return RAGLINE_STORAGE or "./.ragline"


def ray_address() -> str | None:
    return RAY_ADDRESS or None


def cache_dir() -> str:
    return RAGLINE_CACHE or os.path.expanduser("~/.cache/ragline")


def secret(name: str) -> str:
    """A secret the config names by environment variable (for example the openai engine's API key)."""
    return os.environ.get(name, "")
