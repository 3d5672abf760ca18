"""The reference pages, generated from the code every time the site is built (an MkDocs hook: `hooks:` in
mkdocs.yml). They exist only in the built site, never in the repository, so they cannot go stale:

    reference/cli.md       the typer app `app.cli.app`, walked as click commands: usage, help, arguments, options
    reference/config.md    `app.config.AppConfig`'s pydantic models: each field's path, type, default, description
    reference/api.md       the OpenAPI document of `deployments.api.build_api` (over fake stages, no Ray)
    reference/metrics.md   every `Counter(`/`Gauge(`/`Histogram(` of ray.util.metrics in app/ and deployments/ (AST)

It also serves the console's screenshots from tests/browser/screenshots/ as `img/`, so they are not copied.
`python docs/gen.py DIR` writes the same pages into DIR, for reading them without a build.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import tempfile
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATED = "<!-- generated from the code by docs/gen.py at build time; edit the code, not this page -->\n\n"


def _cell(text: object) -> str:
    """One Markdown table cell: one line, no column separators."""
    return " ".join(str(text).split()).replace("|", "\\|")


# --- the command line ---------------------------------------------------------------------------------------------


def cli_command():  # -> click.Command
    import typer

    from app.cli import app

    return typer.main.get_command(app)


def _is_group(cmd) -> bool:
    return hasattr(cmd, "commands")  # typer vendors click: duck typing, not click's classes


def _unstyle(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _walk(cmd, path: list[str]):  # yields (path, command), the root first, subcommands in alphabetical order
    yield path, cmd
    if _is_group(cmd):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                yield from _walk(sub, [*path, name])


def _default(param) -> str:
    default = param.default
    if default is None or callable(default) or (param.is_flag and default is False) or default == ():
        return ""
    if isinstance(default, list | tuple):
        default = " ".join(map(str, default))
    return f"`{default}`"


def cli_reference() -> str:
    from typer._click.core import Context

    root = cli_command()
    out = ["# Command line", "", GENERATED,
           "Every command, as `ragline COMMAND --help` prints it. Options of `ragline` itself (`--storage`, "
           "`--config`, `--address`, `--set`) go before the command.", ""]
    for path, cmd in _walk(root, ["ragline"]):
        ctx = Context(cmd, info_name=" ".join(path))
        usage = " ".join([" ".join(path), *cmd.collect_usage_pieces(ctx)])
        title = " ".join(path)
        out += [f"## `{title}`", "", "```", usage, "```", ""]
        if cmd.help:
            out += [_unstyle(cmd.help).strip(), ""]
        if _is_group(cmd):
            subs = [(n, c) for n, c in sorted(cmd.commands.items()) if not c.hidden]
            out += ["| command | what |", "|---|---|"]
            out += [f"| [`{title} {n}`](#{'-'.join([*path, n])}) | {_cell(c.get_short_help_str(120))} |"
                    for n, c in subs]
            out.append("")
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        opts = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]
        if args:
            out += ["| argument | type | required |", "|---|---|---|"]
            out += [f"| `{(p.metavar or p.name or '').upper()}`{'…' if p.nargs == -1 else ''} | "
                     f"{_type_name(p.type_descriptor.annotation)} | "
                    f"{'yes' if p.required else 'no'} |" for p in args]
            out.append("")
        if opts:
            out += ["| option | type | default | what |", "|---|---|---|---|"]
            for p in opts:
                names = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                if p.name in ("install_completion", "show_completion"):
                    continue
                kind = "flag" if p.is_flag else _type_name(p.type_descriptor.annotation)
                out.append(f"| {names} | {kind} | {_default(p)} | {_cell(_unstyle(p.help or ''))} |")
            out.append("")
    return "\n".join(out)


# --- the configuration ----------------------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    text = repr(annotation) if typing.get_origin(annotation) else getattr(annotation, "__name__", repr(annotation))
    return text.replace("typing.", "").replace("NoneType", "None")


def _fields(model: type, prefix: str):  # yields (path, field) for every leaf, depth first, in declaration order
    from pydantic import BaseModel

    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        path = f"{prefix}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, f"{path}.")
        else:
            yield path, field


def config_reference() -> str:
    import yaml

    from app.config import AppConfig

    defaults = AppConfig().model_dump(mode="json")

    def value(path: str) -> Any:
        node: Any = defaults
        for part in path.split("."):
            node = node[part]
        return node

    out = ["# Configuration", "", GENERATED,
           "One YAML file (`ragline --config FILE`, or `RAGLINE_CONFIG`), validated by the pydantic models of "
           "`app/config.py`; unknown keys are errors, and `--set PATH=VALUE` overrides any field below. See "
           "[Configuration and hardware](../guides/configuration.md) for how the pieces fit.", ""]
    section = None
    for path, field in _fields(AppConfig, ""):
        top = path.split(".")[0]
        if top != section:
            section = top
            out += ["", f"## `{top}`", "", "| field | type | default | description |", "|---|---|---|---|"]
        default = json.dumps(value(path), ensure_ascii=False)
        out.append(f"| `{path}` | `{_cell(_type_name(field.annotation))}` | `{_cell(default)}` | "
                   f"{_cell(field.description or '')} |")
    out += ["", "## Every default, as YAML", "", "```yaml",
            yaml.safe_dump(defaults, sort_keys=False, allow_unicode=True).rstrip(), "```", ""]
    return "\n".join(out)


# --- the HTTP API ---------------------------------------------------------------------------------------------------


class _Nothing:
    """Stages that are never called: the OpenAPI document only needs the routes."""

    name = "all-MiniLM-L6-v2"

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def openapi() -> dict[str, Any]:
    from app import apikeys
    from app.config import ServeConfig
    from app.rag.flow import RagFlow
    from app.storage import Storage
    from deployments.api import build_api

    cfg = ServeConfig()
    with tempfile.TemporaryDirectory() as tmp:
        guard = build_api(RagFlow(_Nothing(), candidates=0), cfg.api,  # type: ignore[arg-type]
                          apikeys.KeyRing.of(["docs-key-not-used-000"]), generator=cfg.generator.model,
                          max_new_tokens=cfg.generator.max_new_tokens, embedder=_Nothing(),  # type: ignore[arg-type]
                          storage=Storage(tmp))
        return guard.app.openapi()  # type: ignore[attr-defined]


def _schema_type(s: dict[str, Any]) -> str:
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in s:
        return " or ".join(_schema_type(x) for x in s["anyOf"])
    if "enum" in s:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in s["enum"])
    if "const" in s:
        return f"`{json.dumps(s['const'])}`"
    if s.get("type") == "array":
        return f"list of {_schema_type(s.get('items', {}))}"
    if s.get("type") == "object" and "additionalProperties" in s:
        extra = s["additionalProperties"]
        return f"map of {_schema_type(extra) if isinstance(extra, dict) else 'any'}"
    return str(s.get("type", "any"))


def _body(content: dict[str, Any]) -> str:
    kinds = []
    for media, spec in content.items():
        schema = spec.get("schema", {})
        kinds.append(f"{_schema_type(schema) if schema else 'any'} (`{media}`)")
    return "; ".join(kinds)


def api_reference() -> str:
    spec = openapi()
    out = ["# HTTP API", "", GENERATED,
           f"{spec['info']['title']}: {spec['info'].get('summary', '')}. The same document is served at "
           "`/openapi.json` by every deployment. Every route but `/healthz` and the console's page and files needs "
           "`Authorization: Bearer KEY`; errors are `{\"error\": {\"type\", \"message\"}}` (see "
           "[Troubleshooting](../troubleshooting.md)).", "", "## Routes", "",
           "| method | route | what | request body | responses |", "|---|---|---|---|---|"]
    for route, ops in spec["paths"].items():
        for method, op in ops.items():
            what = op.get("summary", "")
            body = _body(op["requestBody"]["content"]) if "requestBody" in op else ""
            params = [f"`{p['name']}` ({p['in']})" for p in op.get("parameters", [])]
            if params:
                body = "; ".join([*params, *([body] if body else [])])
            statuses = ", ".join(f"{code} {_cell(r.get('description', ''))}" for code, r in op["responses"].items())
            out.append(f"| {method.upper()} | `{route}` | {_cell(what)} | {body} | {statuses} |")
    for route, ops in spec["paths"].items():
        for method, op in ops.items():
            out += ["", f"### {method.upper()} `{route}`", ""]
            if op.get("description"):
                out += [op["description"].strip(), ""]
            out += ["| status | body |", "|---|---|"]
            for code, r in op["responses"].items():
                out.append(f"| {code} {_cell(r.get('description', ''))} | {_body(r.get('content', {})) or '–'} |")
    out += ["", "## Bodies", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            out += ["| field | type | required | default | description |", "|---|---|---|---|---|"]
            for field, s in props.items():
                default = f"`{_cell(json.dumps(s['default']))}`" if "default" in s else ""
                out.append(f"| `{field}` | {_schema_type(s)} | {'yes' if field in required else ''} | {default} | "
                           f"{_cell(s.get('description', ''))} |")
        else:
            out.append(f"{_schema_type(schema)}")
        out.append("")
    return "\n".join(out)


# --- metrics --------------------------------------------------------------------------------------------------------


def metrics() -> list[dict[str, Any]]:
    """Each metric the code creates: a `Counter`/`Gauge`/`Histogram` call whose first argument is a string literal
    (collections.Counter never gets one with a `description`)."""
    found = []
    for folder in ("app", "deployments"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                kind = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if kind not in ("Counter", "Gauge", "Histogram") or not node.args:
                    continue
                first = node.args[0]
                keywords = {k.arg: k.value for k in node.keywords if k.arg}
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and "description" in keywords):
                    continue
                tags = keywords.get("tag_keys")
                found.append({"name": first.value, "kind": kind.lower(),
                              "description": ast.literal_eval(keywords["description"]),
                              "tags": list(ast.literal_eval(tags)) if tags is not None else [],
                              "where": f"{path.relative_to(ROOT)}:{node.lineno}"})
    return sorted(found, key=lambda m: m["name"])


def metrics_reference() -> str:
    out = ["# Metrics", "", GENERATED,
           "Ragline's own metrics, made with `ray.util.metrics`: Ray exports them to Prometheus with the prefix "
           "`ray_` (`ragline_index_version` is scraped as `ray_ragline_index_version`) and the dashboard's Metrics "
           "tab shows them. The LLM replicas add vLLM's own (`ray_vllm_*`). See [Operating](../guides/operating.md)"
           " for the Grafana dashboard.", "",
           "| metric | kind | tags | description | defined in |", "|---|---|---|---|---|"]
    out += [f"| `{m['name']}` | {m['kind']} | {', '.join(f'`{t}`' for t in m['tags'])} | {_cell(m['description'])} | "
            f"`{m['where']}` |" for m in metrics()]
    return "\n".join(out) + "\n"


PAGES = {"reference/cli.md": cli_reference, "reference/config.md": config_reference,
         "reference/api.md": api_reference, "reference/metrics.md": metrics_reference}
SCREENSHOTS = ROOT / "tests" / "browser" / "screenshots"


# --- the MkDocs hook ------------------------------------------------------------------------------------------------


def on_files(files, config):  # type: ignore[no-untyped-def]
    from mkdocs.structure.files import File

    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    for png in sorted(SCREENSHOTS.glob("*.png")):
        files.append(File.generated(config, f"img/{png.name}", abs_src_path=str(png)))
    return files


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for uri, make in PAGES.items():
        (target / uri).parent.mkdir(parents=True, exist_ok=True)
        (target / uri).write_text(make())
        print(f"wrote {target / uri}")
