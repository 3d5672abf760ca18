"""What every command is given: the config, loaded once, the storage root and the Ray address (`Context`, made
by the `ragline` callback from its options), and the connection to Ray for the commands that need one."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from app import collections, envs
from app.config import AppConfig, load_config
from app.errors import UserError
from app.storage import Storage


@dataclass
class Context:
    cfg: AppConfig
    storage: Storage
    address: str | None
    config_file: str | None  # as given, for deployments that load the config themselves (Serve args)
    overrides: list[str]
    storage_given: bool  # named by --storage, RAGLINE_STORAGE or the config, not the ./.ragline default

    def collection(self, name: str) -> Storage:
        """The storage root of collection `name` (`app/collections.py`): the root itself for the default."""
        return collections.storage_of(self.storage, name)


Collection = Annotated[str, typer.Option(help="The collection: a named corpus with its own dataset and index "
                                          "versions (`default` is the storage root's own).")]


def json_object(text: str, flag: str) -> dict[str, object]:
    """A flag's JSON object (a metadata filter), or a UserError naming the flag."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{flag}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise UserError(f"{flag}: give a JSON object, not {type(value).__name__}")
    return value


def open_storage(root: str) -> Storage:
    """Local roots become absolute: actors and workers do not share the caller's working directory."""
    return Storage(root if "://" in root else os.path.abspath(os.path.expanduser(root)))


def main_options(
    ctx: typer.Context,
    storage: Annotated[str | None, typer.Option(help="Storage root: local path or s3:// / gs:// URI. "
                                                     "[default: RAGLINE_STORAGE or ./.ragline]")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML config file. [default: RAGLINE_CONFIG]")] = None,
    address: Annotated[str | None, typer.Option(help="Ray address. [default: RAY_ADDRESS or a local Ray]")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config field, e.g. "
                                                   "--set ingest.chunk.chunk_tokens=128 (repeatable).")] = None,
) -> None:
    config_file = str(config) if config else envs.RAGLINE_CONFIG or None
    cfg = load_config(config_file, set_ or [])
    given = storage or cfg.storage or envs.RAGLINE_STORAGE
    ctx.obj = Context(cfg=cfg, storage=open_storage(given or envs.storage_root()),
                      address=address or cfg.ray_address or envs.ray_address(), config_file=config_file,
                      overrides=set_ or [], storage_given=bool(given))


def connect(c: Context) -> None:
    """Join the Ray cluster the context names (or the local one) for a command that runs on it."""
    from app import raycluster
    from app.remote import is_dashboard_url

    if is_dashboard_url(c.address):
        raise UserError(f"{c.address} is a dashboard address: this command needs the cluster itself (ray://HEAD:"
                        "10001 or HEAD:6379); send it as a job with `ragline submit`")
    raycluster.connect(c.address)
    # Ray prints raylet/worker notices to sys.stdout from background threads; send them to stderr so stdout
    # carries only our output (tables, or --json that parses).
    sys.stdout = sys.stderr
