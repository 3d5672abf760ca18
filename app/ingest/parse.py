"""Turn one input file's bytes into document records, by extension.

jsonl (one record per line), parquet (one per row), txt, md and html (one document per file; html text is
extracted with boilerplate — scripts, navigation, headers, footers, asides, forms — stripped). A file that cannot
be parsed at all raises `Unreadable`; a bad line in a jsonl file is reported as one unreadable record and the rest
of the file is kept.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TypedDict

from app.config import ReadConfig
from app.ingest.normalize import decode
from app.ingest.parts import Part

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet", ".txt": "text", ".md": "markdown",
           ".markdown": "markdown", ".html": "html", ".htm": "html"}
_BOILERPLATE = ["script", "style", "noscript", "nav", "header", "footer", "aside", "form", "iframe", "svg",
                "template", "button"]
BINARY_SNIFF_BYTES = 8000
_MD_HEADING = re.compile(r"^\s{0,3}#\s+(.+?)\s*#*\s*$", re.MULTILINE)


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


def _record_doc(record: Mapping[str, object], source: str, where: str, cfg: ReadConfig) -> Doc:
    """`record`: one jsonl object or parquet row, whatever its fields hold (JSON or Arrow values)."""
    text = _first(record, cfg.text_fields)
    if text is None:
        raise ValueError(f"no text field (tried {', '.join(cfg.text_fields)})")
    if not isinstance(text, str):
        raise ValueError(f"text field is {type(text).__name__}, not a string")
    doc_id = _first(record, cfg.id_fields)
    title = _first(record, cfg.title_fields)
    used = {*cfg.text_fields, *cfg.id_fields, *cfg.title_fields}
    metadata = {k: v for k, v in record.items() if k not in used}
    metadata["position"] = where
    return {"doc_id": "" if doc_id is None else str(doc_id), "source": source,
            "title": "" if title is None else str(title), "text": text,
            "metadata": json.dumps(metadata, default=str, sort_keys=True), "parts": [], "unit": ""}


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


def _html(data: bytes, source: str) -> Parsed:
    from bs4 import BeautifulSoup

    text, replaced = decode(data)
    soup = BeautifulSoup(text, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(_BOILERPLATE):
        tag.decompose()
    body = soup.find("main") or soup.find("article") or soup.body or soup
    if not title and (h1 := body.find("h1")):
        title = h1.get_text(" ", strip=True)
    content = body.get_text("\n", strip=True)
    doc: Doc = {"doc_id": "", "source": source, "title": title, "text": content, "metadata": "{}", "parts": [],
                "unit": ""}
    return Parsed(docs=[doc], replaced_bytes=replaced)


def _plain(data: bytes, source: str, markdown: bool) -> Parsed:
    text, replaced = decode(data)
    title = PurePosixPath(source).stem
    if markdown and (m := _MD_HEADING.search(text)):
        title = m.group(1)
    doc: Doc = {"doc_id": "", "source": source, "title": title, "text": text, "metadata": "{}", "parts": [],
                "unit": ""}
    return Parsed(docs=[doc], replaced_bytes=replaced)


def parse_file(source: str, data: bytes, cfg: ReadConfig, fmt: str) -> Parsed:
    """A file of a record or text format (`fmt`, as `app.ingest.documents.detect` knows it) as documents."""
    if fmt == "jsonl":
        return _jsonl(data, source, cfg)
    if fmt == "parquet":
        return _parquet(data, source, cfg)
    assert fmt in ("text", "markdown", "html"), fmt
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:  # as git decides: text never holds NUL; images, archives, PDFs do
        raise Unreadable(f"binary content (a NUL byte in its first {BINARY_SNIFF_BYTES} bytes), not a {fmt} file")
    if fmt == "html":
        return _html(data, source)
    return _plain(data, source, markdown=fmt == "markdown")
