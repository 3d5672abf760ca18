"""Turn one input file's bytes into document records, by extension.

jsonl (one record per line), parquet (one per row), txt, md and html (one document per file; html text is
extracted with boilerplate — scripts, navigation, headers, footers, asides, forms — stripped; md and html with
headings come as parts, one per heading section). Office documents, PDFs, e-mails and images:
`app.ingest.documents`. A file that cannot be parsed at all raises `Unreadable`; a bad line in a jsonl file is
reported as one unreadable record and the rest of the file is kept.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, TypedDict

from app.config import ReadConfig
from app.ingest.normalize import decode
from app.ingest.parts import Part, join_parts

if TYPE_CHECKING:
    from bs4 import BeautifulSoup, Tag

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".txt": "text", ".md": "markdown",
           ".markdown": "markdown", ".html": "html", ".htm": "html"}
_BOILERPLATE = ["script", "style", "noscript", "nav", "header", "footer", "aside", "form", "iframe", "svg",
                "template", "button"]
BINARY_SNIFF_BYTES = 8000
# ATX headings (CommonMark): 1-6 '#', then a space or the line's end; an optional closing run of '#'
_MD_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_MD_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)$")  # a fenced code block's opening or closing line
_HTML_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
SECTION_SEP = " › "  # between the headings of a section path


class Unreadable(Exception):
    """The whole file is unusable; the message says why."""


class Doc(TypedDict):
    """One document as parsed: `doc_id` "" when the input names none (derived later from source and content),
    `metadata` the record's other fields and its position in the file, as JSON. A document with structure comes as
    `parts` (and `text` ""); one without as `text` (and `parts` [])."""

    doc_id: str
    source: str
    title: str
    text: str
    metadata: str
    parts: list[Part]
    unit: str  # what a part's `page` counts ("page", "slide") or what sections are ("sheet"); "" for neither


@dataclass
class Parsed:
    docs: list[Doc] = field(default_factory=list)
    bad_records: list[dict[str, str]] = field(default_factory=list)  # {"source", "reason"}
    replaced_bytes: int = 0


def file_format(path: str) -> str | None:
    return FORMATS.get(PurePosixPath(path).suffix.lower())


def _first(record: Mapping[str, object], names: list[str]) -> object:
    for n in names:
        if record.get(n) not in (None, ""):
            return record[n]
    return None


def record_doc(record: Mapping[str, object], source: str, where: str, *, ids: list[str], texts: list[str],
               titles: list[str], metadata: Collection[str] | None = None) -> Doc:
    """One record as a document: `record` a jsonl object, parquet or Delta table row, whatever its fields hold
    (JSON or Arrow values). Its id, text and title are the first of the fields named in `ids`, `texts`, `titles`
    that it holds (neither null nor ""); its metadata the fields named in `metadata` (None: every field not among
    those) and `where`, its position, as JSON. A record without text, or with text not a string: ValueError."""
    text = _first(record, texts)
    if text is None:
        raise ValueError(f"no text field (tried {', '.join(texts)})")
    if not isinstance(text, str):
        raise ValueError(f"text field is {type(text).__name__}, not a string")
    doc_id = _first(record, ids)
    title = _first(record, titles)
    used = {*texts, *ids, *titles}
    kept = {k: v for k, v in record.items() if (k not in used if metadata is None else k in metadata)}
    kept["position"] = where
    return {"doc_id": "" if doc_id is None else str(doc_id), "source": source,
            "title": "" if title is None else str(title), "text": text,
            "metadata": json.dumps(kept, default=str, sort_keys=True), "parts": [], "unit": ""}


def _record_doc(record: Mapping[str, object], source: str, where: str, cfg: ReadConfig) -> Doc:
    return record_doc(record, source, where, ids=cfg.id_fields, texts=cfg.text_fields, titles=cfg.title_fields)


def _jsonl(data: bytes, source: str, cfg: ReadConfig) -> Parsed:
    text, replaced = decode(data)
    out = Parsed(replaced_bytes=replaced)
    lines = [(i, line) for i, line in enumerate(text.split("\n"), start=1) if line.strip()]
    for lineno, line in lines:
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
            out.docs.append(_record_doc(record, source, f"line {lineno}", cfg))
        except (ValueError, RecursionError) as e:  # json.JSONDecodeError is a ValueError; deep nesting recurses
            why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
            out.bad_records.append({"source": f"{source}:{lineno}", "reason": f"line {lineno}: {why}"})
    if lines and not out.docs:
        raise Unreadable(f"none of its {len(lines)} lines is a usable record ({out.bad_records[0]['reason']})")
    return out


def _parquet(data: bytes, source: str, cfg: ReadConfig) -> Parsed:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as e:  # pyarrow raises several types for corrupt files; all mean the same here
        raise Unreadable(f"not a readable parquet file: {e}") from e
    if not any(n in table.column_names for n in cfg.text_fields):
        raise Unreadable(f"no text column (tried {', '.join(cfg.text_fields)}; has {', '.join(table.column_names)})")
    out = Parsed()
    for i, record in enumerate(table.to_pylist()):
        try:
            out.docs.append(_record_doc(record, source, f"row {i}", cfg))
        except ValueError as e:
            out.bad_records.append({"source": f"{source}:{i}", "reason": f"row {i}: {e}"})
    return out


def parts_by_section(blocks: list[tuple[str, str]]) -> list[Part]:
    """(section, text) blocks in reading order → a part per run of blocks of one section (`page` 0)."""
    runs: list[tuple[str, list[str]]] = []  # joined once at the end: += on a growing part would be quadratic
    for section, text in blocks:
        if runs and runs[-1][0] == section:
            runs[-1][1].append(text)
        else:
            runs.append((section, [text]))
    return [{"text": "\n".join(texts), "page": 0, "section": section} for section, texts in runs]


def _under(path: list[tuple[int, str]], level: int, heading: str) -> list[tuple[int, str]]:
    """The heading path once a heading of `level` (1 = top) starts: it replaces its level and those below."""
    return [(lv, h) for lv, h in path if lv < level] + [(level, heading)]


def _section(path: list[tuple[int, str]]) -> str:
    return SECTION_SEP.join(h for _, h in path if h)


def _doc(source: str, title: str, blocks: list[tuple[str, str]], headings: bool) -> Doc:
    """A document of text blocks: parts by heading section where it has headings, else plain text."""
    if headings:
        return {"doc_id": "", "source": source, "title": title, "text": "", "metadata": "{}",
                "parts": parts_by_section(blocks), "unit": ""}
    return {"doc_id": "", "source": source, "title": title, "text": "\n".join(t for _, t in blocks),
            "metadata": "{}", "parts": [], "unit": ""}


def _html_body(text: str) -> tuple[str, Tag | BeautifulSoup]:
    """The page's <title> and the element holding its content, boilerplate removed."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(text, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(_BOILERPLATE):
        tag.decompose()
    body = soup.find("main") or soup.find("article") or soup.body or soup
    return title, body


def html_to_text(html: str) -> str:
    """The text of an HTML page or fragment (an e-mail body), boilerplate stripped, a line per text node."""
    return _html_body(html)[1].get_text("\n", strip=True)


def _html(data: bytes, source: str) -> Parsed:
    from bs4 import CData, NavigableString, Tag

    text, replaced = decode(data)
    title, body = _html_body(text)
    if not title and (h1 := body.find("h1")):
        title = h1.get_text(" ", strip=True)
    path: list[tuple[int, str]] = []
    blocks: list[tuple[str, str]] = []
    headings = False
    for node in body.descendants:
        if isinstance(node, Tag) and node.name in _HTML_HEADINGS:
            path = _under(path, int(node.name[1]), node.get_text(" ", strip=True))
            headings = True
        elif isinstance(node, NavigableString) and type(node) in (NavigableString, CData) and node.strip():
            blocks.append((_section(path), node.strip()))  # the strings get_text() keeps: not comments, doctypes
    return Parsed(docs=[_doc(source, title, blocks, headings)], replaced_bytes=replaced)


def _trimmed(lines: list[str]) -> str:
    """Lines joined, blank lines at both ends left out (the joins between parts stand for them: Part)."""
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), -1)
    return "\n".join(lines[first:last + 1])


def _markdown_blocks(text: str) -> tuple[str, list[tuple[str, str]], bool]:
    """(title, (section, text) blocks, whether it has headings): ATX headings ("## Results") outside fenced code
    blocks start sections; the title is the first level-1 heading."""
    title = ""
    fence = ""  # the open code fence's marker
    path: list[tuple[int, str]] = []
    blocks: list[tuple[str, str]] = []
    lines: list[str] = []
    headings = False
    for line in text.split("\n"):
        bare = line.rstrip("\r")
        if fence:
            m = _MD_FENCE.match(bare)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = ""
        elif (m := _MD_FENCE.match(bare)) and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
        elif m := _MD_HEADING.match(bare):
            if section_text := _trimmed(lines):
                blocks.append((_section(path), section_text))
            lines = []
            heading = (m.group(2) or "").strip()
            path = _under(path, len(m.group(1)), heading)
            headings = True
            if not title and len(m.group(1)) == 1:
                title = heading
        lines.append(line)
    if section_text := _trimmed(lines):
        blocks.append((_section(path), section_text))
    return title, blocks, headings


def _plain(data: bytes, source: str, markdown: bool) -> Parsed:
    text, replaced = decode(data)
    title = PurePosixPath(source).stem
    if not markdown:
        doc: Doc = {"doc_id": "", "source": source, "title": title, "text": text, "metadata": "{}", "parts": [],
                    "unit": ""}
        return Parsed(docs=[doc], replaced_bytes=replaced)
    heading, blocks, headings = _markdown_blocks(text)
    if not headings:
        blocks = [("", text)]  # kept as it is
    return Parsed(docs=[_doc(source, heading or title, blocks, headings)], replaced_bytes=replaced)


def parse_text(fmt: str, source: str, data: bytes) -> Parsed:
    """A text, markdown or html file (`fmt`) as one document."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:  # as git decides: text never holds NUL; images, archives, PDFs do
        raise Unreadable(f"binary content (a NUL byte in its first {BINARY_SNIFF_BYTES} bytes), not a {fmt} file")
    if fmt == "html":
        return _html(data, source)
    return _plain(data, source, markdown=fmt == "markdown")


def joined_text(doc: Doc) -> str:
    """A document's text in one string, as the pipeline's normalize stage makes it: its `text`, or its parts
    joined (`app.ingest.parts.join_parts`)."""
    return join_parts(doc["parts"])[0] if doc["parts"] else doc["text"]


def parse_file(source: str, data: bytes, cfg: ReadConfig, fmt: str) -> Parsed:
    """A file of a record or text format (`fmt`, as `app.ingest.documents.detect` knows it) as documents."""
    if fmt == "jsonl":
        return _jsonl(data, source, cfg)
    if fmt == "parquet":
        return _parquet(data, source, cfg)
    return parse_text(fmt, source, data)
