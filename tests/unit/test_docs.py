"""The documentation: the site builds offline with `mkdocs build --strict` (warnings are errors: broken internal links
and anchors, pages outside the nav), it loads nothing from a CDN, and every `ragline ...` command line in the README's
and the docs' ```bash blocks names a real command and real options (parsed against the click command tree, never
run)."""

import re
import shlex
import subprocess
import sys

import pytest

from docs import gen
from tests.helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_site_builds_strictly_and_offline(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env={"NO_MKDOCS_2_WARNING": "1",
                                                                         "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    for page in ("reference/cli", "reference/config", "reference/api", "reference/metrics", "benchmarks"):
        assert (site / page / "index.html").is_file(), page
    assert "ragline_stage_latency_ms" in (site / "reference/metrics/index.html").read_text()
    assert "/v1/chat/completions" in (site / "reference/api/index.html").read_text()
    for html in site.rglob("*.html"):  # nothing fetched from elsewhere: no fonts, scripts or styles off the site
        text = html.read_text()
        remote = re.findall(r"""<(?:script|link|img)\b[^>]*?(?:src|href)=["']((?:https?:)?//[^"']+)""", text)
        assert not [u for u in remote if not u.endswith(("/", ".html"))], (html, remote)
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html


def bash_lines(text: str):
    """Each command line of the ```bash blocks (continuations joined)."""
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        yield from block.replace("\\\n", " ").splitlines()


def ragline_invocations(line: str) -> list[list[str]]:
    """The argument lists of each `ragline` command in a shell line: after `&&`, `|`, `;` and `$(` too."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    found: list[list[str]] = []
    current: list[str] | None = None
    for token in lex:
        if token in ("&&", "||", "|", ";", "(", ")", "&", "$("):
            current = None
        elif current is not None:
            current.append(token)
        elif token == "ragline":
            current = []
            found.append(current)
    return found


def _option(cmd, token: str):
    name = token.split("=", 1)[0]
    for p in cmd.params:
        if p.param_type_name == "option" and name in [*p.opts, *p.secondary_opts]:
            return p
    return None


def check(args: list[str], cmd, path: str) -> None:
    """Raises AssertionError where `args` name a command or an option `cmd` does not have."""
    i = 0
    while i < len(args):
        token = args[i]
        if token.startswith("-") and token != "-":
            p = _option(cmd, token)
            if p is None and cmd.context_settings.get("ignore_unknown_options"):
                i += 1
                continue
            assert p is not None, f"`{path}` has no option {token}"
            i += 1 if (p.is_flag or "=" in token) else 2
            continue
        if hasattr(cmd, "commands"):
            assert token in cmd.commands, f"`{path}` has no command {token!r}"
            sub = cmd.commands[token]
            if path == "ragline submit":  # the job runs `ragline <token> ARGS...`: check those against that command
                rest, job = args[i + 1:], []
                while rest:  # submit's own options (--working-dir DIR, --no-wait, ...) out, the job's kept
                    p = _option(sub, rest[0])
                    skip = 0 if p is None else 1 if (p.is_flag or "=" in rest[0]) else 2
                    job += rest[:1] if not skip else []
                    rest = rest[max(skip, 1):]
                return check(job, ROOT_COMMAND.commands[token], f"ragline {token}")
            return check(args[i + 1:], sub, f"{path} {token}")
        i += 1  # an argument
    assert not hasattr(cmd, "commands") or cmd.invoke_without_command, f"`{path}` needs a command"


ROOT_COMMAND = gen.cli_command()
LINES = [(page, line) for page in PAGES for line in bash_lines(page.read_text())
         if ragline_invocations(line)]


def test_the_docs_show_ragline_commands():
    assert len(LINES) > 20 and {p.name for p, _ in LINES} >= {"README.md", "collections.md", "clusters.md"}


@pytest.mark.parametrize(("page", "line"), LINES, ids=[f"{p.relative_to(ROOT)}:{i}" for i, (p, _) in enumerate(LINES)])
def test_every_ragline_command_line_in_the_docs_is_real(page, line):
    for args in ragline_invocations(line):
        check(args, ROOT_COMMAND, "ragline")


def test_the_checker_catches_a_wrong_command_or_option():
    with pytest.raises(AssertionError, match="no command 'ingets'"):
        check(["ingets", "x"], ROOT_COMMAND, "ragline")
    with pytest.raises(AssertionError, match="no option --colection"):
        check(["ingest", "--colection", "hr", "x"], ROOT_COMMAND, "ragline")
    with pytest.raises(AssertionError, match="no option --set"):  # a root option after the command
        check(["ingest", "--set", "a=b", "x"], ROOT_COMMAND, "ragline")
    check(["--set", "a=b", "ingest", "--collection", "hr", "x", "--sync"], ROOT_COMMAND, "ragline")
    with pytest.raises(AssertionError, match="`ragline train sft` has no option --strategy"):
        check(["submit", "train", "sft", "--strategy", "x"], ROOT_COMMAND, "ragline")
