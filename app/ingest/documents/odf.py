"""OpenDocument files (ODT, ODS, ODP) as documents: content.xml and meta.xml read with defusedxml's ElementTree.

An OpenDocument file is a zip whose first member, `mimetype`, names its kind. Its XML is parsed with entity
declarations refused (defusedxml); old OpenOffice files declare a DOCTYPE in their manifest, which is never read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import zipfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app.config import DocumentsConfig
from app.ingest.documents.office import _doc, _one_line, _Rows, check_zip
from app.ingest.parse import SECTION_SEP, Doc, Part, Unreadable, parts_by_section

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

_NS = {"office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
       "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
       "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
       "draw": "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0",
       "presentation": "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0",
       "meta": "urn:oasis:names:tc:opendocument:xmlns:meta:1.0",
       "dc": "http://purl.org/dc/elements/1.1/"}
_MAX_REPEAT = 1000  # a repeated row or cell with content is written out at most this often (ODS pads to 2^20)


def _q(name: str) -> str:
    prefix, local = name.split(":")
    return f"{{{_NS[prefix]}}}{local}"


_H, _P, _LIST, _TABLE, _SECTION = _q("text:h"), _q("text:p"), _q("text:list"), _q("table:table"), _q("text:section")
_S, _TAB, _BR, _NOTE, _NOTE_CITATION = _q("text:s"), _q("text:tab"), _q("text:line-break"), _q("text:note"), \
    _q("text:note-citation")
_ANNOTATION, _ANNOTATION_END = _q("office:annotation"), _q("office:annotation-end")
_ROW, _CELL, _COVERED = _q("table:table-row"), _q("table:table-cell"), _q("table:covered-table-cell")
_FRAME, _NOTES = _q("draw:frame"), _q("presentation:notes")
_CONTAINERS = {_q("text:list-item"), _q("text:list-header"), _q("text:index-body"), _q("text:table-of-content"),
               _q("text:illustration-index"), _q("text:alphabetical-index"), _q("table:table-header-rows"),
               _q("table:table-rows"), _q("table:table-row-group"), _q("draw:text-box"), _q("draw:g")}


def _read(archive: zipfile.ZipFile, name: str) -> Element | None:
    """Member `name` parsed (defusedxml: entity declarations and external references refused), None if absent."""
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring

    try:
        data = archive.read(name)
    except KeyError:
        return None
    try:
        root: Element = fromstring(data)
    except DefusedXmlException as e:
        raise Unreadable(f"XML with entity declarations in {name} (entity expansion or external entities, an "
                         "attack)") from e
    except ParseError as e:
        raise Unreadable(f"broken XML in {name}: {e}") from e
    return root


def _inline(element: Element, annotations: list[str]) -> str:
    """A paragraph's or heading's text: spaces (text:s), tabs and line breaks as written, footnotes in brackets,
    frames (text boxes) as their paragraphs' lines; comments go to `annotations`."""
    out = [element.text or ""]
    for child in element:
        if child.tag == _S:
            count = child.get(_q("text:c"), "1")
            out.append(" " * (min(int(count), 100) if count.isdigit() else 1))
        elif child.tag == _TAB:
            out.append("\t")
        elif child.tag == _BR:
            out.append("\n")
        elif child.tag == _NOTE:
            body = child.find("text:note-body", _NS)
            if body is not None and (note := " ".join(_lines(body, annotations))):
                out.append(f" [{note}]")
        elif child.tag == _ANNOTATION:
            annotations.append(_annotation(child))
        elif child.tag in (_NOTE_CITATION, _ANNOTATION_END):
            pass
        elif child.tag == _FRAME:
            out.append("\n" + "\n".join(_lines(child, annotations)) + "\n")
        else:
            out.append(_inline(child, annotations))
        out.append(child.tail or "")
    return "".join(out)


def _clean(text: str) -> str:
    return "\n".join(line.strip() for line in text.split("\n") if line.strip())


def _annotation(element: Element) -> str:
    author = _one_line("".join(a.itertext()) if (a := element.find("dc:creator", _NS)) is not None else "")
    text = " ".join(_one_line(_inline(p, [])) for p in element.iter(_P))
    return f"{author}: {text}" if author else text


def _table_rows(table: Element, keep_columns: bool = False) -> Iterator[list[str]]:
    """A table's rows as cell texts, repeated rows and cells written out (up to `_MAX_REPEAT` times; an empty one
    only where a later cell needs its column: a sheet pads its rows and columns to the sheet's end). A merged
    cell is listed once, or with `keep_columns` followed by an empty cell per column it covers."""
    def rows(element: Element) -> Iterator[Element]:
        for child in element:
            if child.tag == _ROW:
                yield child
            elif child.tag in _CONTAINERS:
                yield from rows(child)

    for row in rows(table):
        cells: list[str] = []
        empty = 0  # empty cells not yet written: only a later cell with text writes them
        for cell in row:
            repeat = _repeat(cell, "table:number-columns-repeated")
            if cell.tag == _CELL:
                text = _one_line(" ".join(_lines(cell, [])))
            elif cell.tag == _COVERED and keep_columns:
                text = ""
            else:
                continue
            if not text:
                empty += repeat
                continue
            cells.extend([""] * min(empty, _MAX_REPEAT))
            cells.extend([text] * min(repeat, _MAX_REPEAT))
            empty = 0
        if cells:
            yield from [cells] * min(_repeat(row, "table:number-rows-repeated"), _MAX_REPEAT)
        else:
            yield []


def _repeat(element: Element, attribute: str) -> int:
    value = element.get(_q(attribute), "1")
    return max(int(value), 1) if value.isdigit() else 1


def _lines(element: Element, annotations: list[str]) -> list[str]:
    """The text of a block container (a frame, a note body, a cell) as lines, headings as any paragraph."""
    return [text for _, _, text in _blocks(element, annotations) if text]


def _blocks(element: Element, annotations: list[str]) -> Iterator[tuple[int | None, str, str]]:
    """(heading level or None, kind, text) for each block in reading order: headings, paragraphs, list items
    ("- " before their first line), tables (a line per row, cells " | ")."""
    for child in element:
        if child.tag in (_H, _P):
            text = _clean(_inline(child, annotations))
            level = None
            if child.tag == _H:
                value = child.get(_q("text:outline-level"), "1")
                level = min(max(int(value), 1), 10) if value.isdigit() else 1
            yield level, "p", text
        elif child.tag == _LIST:
            for item in child:
                first = True
                for level, kind, text in _blocks(item, annotations):
                    if text and first and kind == "p" and not text.startswith("- "):
                        text, first = f"- {text}", False
                    yield (level, kind, text)
        elif child.tag == _TABLE:
            yield None, "table", "\n".join(" | ".join(cells) for cells in _table_rows(child) if cells)
        elif child.tag == _FRAME or child.tag in _CONTAINERS or child.tag == _SECTION:
            yield from _blocks(child, annotations)


def _metadata(archive: zipfile.ZipFile, fmt: str) -> tuple[str, dict[str, object]]:
    """meta.xml's title, and author, subject, keywords, created and modified (ISO 8601) as for Office files."""
    out: dict[str, object] = {"format": fmt}
    root = _read(archive, "meta.xml")
    meta = root.find("office:meta", _NS) if root is not None else None
    if meta is None:
        return "", out

    def text(path: str) -> str:
        return _one_line(" ".join(e.text or "" for e in meta.findall(path, _NS)))

    if author := text("dc:creator") or text("meta:initial-creator"):
        out["author"] = author
    if subject := text("dc:subject"):
        out["subject"] = subject
    if keywords := ", ".join(k for e in meta.findall("meta:keyword", _NS) if (k := _one_line(e.text or ""))):
        out["keywords"] = keywords
    for key, path in (("created", "meta:creation-date"), ("modified", "dc:date")):
        if value := text(path):
            with contextlib.suppress(ValueError):  # not a date: left out, as a filter could not compare it
                out[key] = dt.datetime.fromisoformat(value).replace(tzinfo=None).isoformat()
    return text("dc:title"), out


def _open(data: bytes, cfg: DocumentsConfig, fmt: str) -> tuple[zipfile.ZipFile, Element]:
    check_zip(data, cfg, refuse_dtd=False)
    archive = zipfile.ZipFile(io.BytesIO(data))
    root = _read(archive, "content.xml")
    body = root.find("office:body", _NS) if root is not None else None
    if body is None:
        raise Unreadable(f"not a readable {fmt.upper()}: no content.xml with an office:body")
    return archive, body


def parse_odf(source: str, data: bytes, cfg: DocumentsConfig, fmt: str) -> list[Doc]:
    """An ODT (a part per heading section, as DOCX), ODS (a part per sheet, as XLSX) or ODP (a part per slide, as
    PPTX) as one document; comments (annotations) last as a part "Comments"."""
    archive, body = _open(data, cfg, fmt)
    with archive:
        title, metadata = _metadata(archive, fmt)
    annotations: list[str] = []
    unit = ""
    try:  # elements are walked recursively: a hostile file nests them thousands deep
        if fmt == "odt":
            parts, first_heading = _text_parts(body.find("office:text", _NS), annotations)
            title = title or first_heading
        elif fmt == "ods":
            parts, unit = _sheet_parts(body.find("office:spreadsheet", _NS), cfg, metadata), "sheet"
        else:
            parts, unit = _slide_parts(body.find("office:presentation", _NS), cfg, annotations), "slide"
            title = title or next((p["section"] for p in parts), "")
    except RecursionError as e:
        raise Unreadable(f"malformed {fmt}: elements nested too deep to read") from e
    if comments := [a for a in annotations if a]:
        parts.append({"text": "\n".join(comments), "page": 0, "section": "Comments"})
    return [_doc(source, _one_line(title), parts, unit, metadata)]


def _text_parts(text: Element | None, annotations: list[str]) -> tuple[list[Part], str]:
    if text is None:
        raise Unreadable("not a readable ODT: no office:text in its content")
    path: list[tuple[int, str]] = []
    blocks: list[tuple[str, str]] = []
    first_heading = ""
    for level, _, block in _blocks(text, annotations):
        if level is not None and block:
            path = [(lv, h) for lv, h in path if lv < level] + [(level, _one_line(block))]
            first_heading = first_heading or (_one_line(block) if level == 1 else "")
        if block:
            blocks.append((SECTION_SEP.join(h for _, h in path), block))
    return parts_by_section(blocks), first_heading


def _sheet_parts(spreadsheet: Element | None, cfg: DocumentsConfig, metadata: dict[str, object]) -> list[Part]:
    if spreadsheet is None:
        raise Unreadable("not a readable ODS: no office:spreadsheet in its content")
    parts: list[Part] = []
    cells = 0
    sheets = spreadsheet.findall("table:table", _NS)
    metadata["sheets"] = len(sheets)
    for sheet in sheets:
        rows = _Rows()
        for row in _table_rows(sheet, keep_columns=True):
            cells += max(len(row), 1)
            if cells > cfg.max_cells:
                metadata["truncated_at_cells"] = cfg.max_cells
                break
            rows.add(row)
        if text := rows.text():
            parts.append({"text": text, "page": 0, "section": sheet.get(_q("table:name"), "")})
        if "truncated_at_cells" in metadata:
            break
    return parts


def _slide_parts(presentation: Element | None, cfg: DocumentsConfig, annotations: list[str]) -> list[Part]:
    if presentation is None:
        raise Unreadable("not a readable ODP: no office:presentation in its content")
    slides = presentation.findall("draw:page", _NS)
    if len(slides) > cfg.max_pages:
        raise Unreadable(f"{len(slides)} slides, more than ingest.documents.max_pages ({cfg.max_pages})")
    parts: list[Part] = []
    for number, slide in enumerate(slides, start=1):
        title = ""
        lines: list[str] = []
        for child in slide:
            if child.tag == _NOTES:
                if notes := " ".join(_lines(child, annotations)):
                    lines.append(f"Notes: {notes}")
                continue
            frame_lines = _lines(child, annotations) if child.tag in (_FRAME, _q("draw:g")) else []
            if child.get(_q("presentation:class")) == "title" and frame_lines and not title:
                title = _one_line(" ".join(frame_lines))
            lines.extend(frame_lines)
        if lines:
            parts.append({"text": "\n".join(lines), "page": number, "section": title})
    return parts
