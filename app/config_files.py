"""Config files and dotted overrides, for every config tree (the app's `AppConfig`, a training job's): the mapping
a YAML file holds, `KEY=VALUE` overrides as a nested mapping, their merge, and a validation error said per field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from app.errors import NotFound, UserError


def _set_dotted(tree: dict[str, object], dotted: str, value: object) -> None:
    node = tree
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise UserError(f"override {dotted!r}: {part!r} is not a section")
        node = child
    node[leaf] = value


def parse_overrides(overrides: list[str]) -> dict[str, object]:
    """`["ingest.chunk.chunk_tokens=128", ...]` → a nested dict; values are parsed as YAML scalars."""
    tree: dict[str, object] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"override {item!r} is not KEY=VALUE (for example ingest.chunk.chunk_tokens=128)")
        _set_dotted(tree, key.strip(), yaml.safe_load(raw))
    return tree


def merge(base: Mapping[str, object], top: Mapping[str, object]) -> dict[str, object]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(old := out.get(key), dict):
            out[key] = merge(old, value)
        else:
            out[key] = value
    return out


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}):"]
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, object]:
    """The mapping at the top of a YAML file; NotFound or UserError naming the file if it is missing or not a
    mapping."""
    p = Path(path)
    if not p.is_file():
        raise NotFound(f"{what} {p} does not exist")
    try:
        loaded = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise UserError(f"{what} {p} is not valid YAML: {e}") from e
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UserError(f"{what} {p} must hold a mapping at the top level, not {type(loaded).__name__}")
    return loaded
