"""Office Open XML documents (DOCX, PPTX, XLSX) and CSV/TSV files as documents.

Every zip-based file is checked before a library opens it (`check_zip`): decompression bombs, members that unpack
to more than they declare, and XML parts with a DOCTYPE (the only way to entity-expansion and external-entity
attacks; Office never writes one) are refused. A password-protected Office file is an OLE container, not a zip.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import io
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from xml.etree.ElementTree import ParseError

from lxml.etree import XMLSyntaxError

from app.config import DocumentsConfig
from app.ingest.documents.detect import OLE_ERRORS, OLE_MAGIC
from app.ingest.normalize import decode
from app.ingest.parse import SECTION_SEP, Doc, Part, Unreadable, parts_by_section

if TYPE_CHECKING:
    from docx.document import Document as DocxDocument
    from docx.styles.style import BaseStyle
    from docx.table import Table
    from pptx.shapes.base import BaseShape

_BOMB_RATIO = 1000  # deflate tops out near 1032:1, reached only by runs of one byte: zeros, not documents
_BOMB_MIN_BYTES = 1 << 20  # below this a member's ratio does not matter: it cannot hurt
_XML_HEAD_BYTES = 64 << 10  # a DOCTYPE must come before the root element, at the start of the part
_CHUNK = 1 << 20  # members are inflated this many bytes at a time when their size is verified
_UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40  # zip flag bits: encrypted, compressed patch data, strong encryption
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, 22 bytes of fields, name length, extra length
_HEADING = re.compile(r"Heading ([1-9])")
_CSV_SNIFF_CHARS = 64 << 10
_EXCEL_ROWS = 1 << 20  # a worksheet's last row (1,048,576)


def _refuse_ole(data: bytes) -> None:
    """An OLE compound file where an Office Open XML file was expected: encrypted, or a legacy binary file."""
    import olefile

    try:  # a file object: olefile takes bytes shorter than 1536 for a path to open
        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            encrypted = ole.exists("EncryptedPackage")
    except OLE_ERRORS as e:
        raise Unreadable(f"broken OLE (legacy Office) file: {e}") from e
    if encrypted:
        raise Unreadable("password-protected Office file")
    raise Unreadable("legacy Word/Excel/PowerPoint (OLE) file, not Office Open XML: save it as .docx/.xlsx/.pptx")


def _declares_dtd(head: bytes) -> bool:
    # NULs removed so that UTF-16 and UTF-32 encoded parts are searched too
    ascii_head = head.replace(b"\x00", b"")
    return b"<!DOCTYPE" in ascii_head or b"<!ENTITY" in ascii_head


def _inflate(data: memoryview, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """A member's content, a chunk at a time, read from the raw bytes: zipfile itself inflates a whole member in
    one call, which a member lying about its size would turn into one huge allocation."""
    if not 0 <= info.header_offset <= len(data) - _LOCAL_HEADER.size:
        raise Unreadable(f"broken zip: {info.filename} lies outside the file")
    signature, name_len, extra_len = _LOCAL_HEADER.unpack_from(data, info.header_offset)
    if signature != b"PK\x03\x04":
        raise Unreadable(f"broken zip: no local header for {info.filename}")
    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    raw = data[start:start + info.compress_size]
    if info.compress_type == zipfile.ZIP_STORED:
        for at in range(0, len(raw), _CHUNK):
            yield bytes(raw[at:at + _CHUNK])
        return
    if info.compress_type != zipfile.ZIP_DEFLATED:
        raise Unreadable(f"zip member {info.filename} uses compression method {info.compress_type}, which Office "
                         "files never use")
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate: zip members have no zlib header
    pending: bytes | memoryview = raw
    while pending:
        yield inflater.decompress(pending, _CHUNK)
        pending = inflater.unconsumed_tail
    yield inflater.flush()


def check_zip(data: bytes, cfg: DocumentsConfig, refuse_dtd: bool = True) -> None:
    """Raise Unreadable for an Office file no library should open: not a zip (an encrypted or legacy OLE file, a
    broken zip), a decompression bomb, or (with `refuse_dtd`) an XML part that declares a DOCTYPE. Formats whose
    XML may carry a DOCTYPE (EPUB's NCX, old OpenDocument manifests) pass False and parse with defusedxml."""
    if data.startswith(OLE_MAGIC):
        _refuse_ole(data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, NotImplementedError) as e:  # the latter: a zip format version it does not know
        raise Unreadable(f"broken zip: {e}") from e
    with archive:
        infos = archive.infolist()
    total = sum(i.file_size for i in infos)
    if total > cfg.max_unzipped_bytes:
        raise Unreadable(f"decompression bomb: its {len(infos)} members unpack to {total:,} bytes, more than "
                         f"ingest.documents.max_unzipped_bytes ({cfg.max_unzipped_bytes:,})")
    for info in infos:
        if info.file_size > _BOMB_MIN_BYTES and info.file_size > _BOMB_RATIO * max(info.compress_size, 1):
            raise Unreadable(f"decompression bomb: {info.filename} unpacks {info.compress_size:,} bytes to "
                             f"{info.file_size:,}")
    view = memoryview(data)
    for info in infos:
        if info.flag_bits & _UNREADABLE_FLAGS:
            raise Unreadable(f"zip member {info.filename} is encrypted or patch data (flags {info.flag_bits:#x}): "
                             "Office files never are")
        size, head = 0, b""
        try:
            for chunk in _inflate(view, info):
                size += len(chunk)
                if size > info.file_size:
                    raise Unreadable(f"decompression bomb: {info.filename} unpacks to more than the "
                                     f"{info.file_size:,} bytes it declares")
                if len(head) < _XML_HEAD_BYTES:
                    head += chunk[:_XML_HEAD_BYTES - len(head)]
        except zlib.error as e:
            raise Unreadable(f"broken zip member {info.filename}: {e}") from e
        if refuse_dtd and info.filename.endswith((".xml", ".rels")) and _declares_dtd(head):
            raise Unreadable(f"XML with a DOCTYPE in {info.filename}: Office files have none (entity expansion "
                             "or external entities, an attack)")


def core(props: Any) -> dict[str, object]:
    """An Office file's core properties a filter may use: author, subject, keywords, category, created and
    modified (ISO 8601). `props`: python-docx's, python-pptx's or openpyxl's properties."""
    out: dict[str, object] = {}
    for name in ("author", "subject", "keywords", "category"):
        if value := _one_line(getattr(props, name, None) or ""):  # openpyxl's lack author and category
            out[name] = value
    for name in ("created", "modified"):
        if when := getattr(props, name, None):
            out[name] = when.replace(tzinfo=None).isoformat()
    return out


def _doc(source: str, title: str, parts: list[Part], unit: str, metadata: dict[str, object]) -> Doc:
    return {"doc_id": "", "source": source, "title": title, "text": "", "metadata": json.dumps(metadata),
            "parts": parts, "unit": unit}


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- DOCX ---

def _style_level(style: BaseStyle | None) -> int | None:
    """0 for a Title, N for a Heading N, by the style's name or that of a style it is based on; None for body."""
    from docx.styles.style import ParagraphStyle

    for _ in range(10):  # a based-on chain; cycles are possible in a hostile file
        if style is None:
            return None
        if style.name == "Title":
            return 0
        if m := _HEADING.fullmatch(style.name or ""):
            return int(m.group(1))
        style = style.base_style if isinstance(style, ParagraphStyle) else None
    return None


def _heading_levels(document: DocxDocument) -> dict[str | None, int]:
    """Heading level by paragraph style id (None: a paragraph without one, in the default style). Computed once:
    python-docx's `Paragraph.style` scans every style for the default on each call (quadratic in a long file)."""
    from docx.enum.style import WD_STYLE_TYPE

    levels: dict[str | None, int] = {}
    for style in document.styles:
        if style.type == WD_STYLE_TYPE.PARAGRAPH and (level := _style_level(style)) is not None:
            levels[style.style_id] = level
    if (level := _style_level(document.styles.default(WD_STYLE_TYPE.PARAGRAPH))) is not None:
        levels[None] = level
    return levels


def _docx_table(table: Table) -> str:
    """One line per row, cells joined with " | ". A merged cell is listed once per row it spans, not per column."""
    lines = []
    for row in table.rows:
        cells: list[object] = []
        texts: list[str] = []
        for cell in row.cells:
            if cells and cell is cells[-1]:  # python-docx repeats a horizontally merged cell for each grid column
                continue
            cells.append(cell)
            texts.append(_one_line(cell.text))
        if any(texts):
            lines.append(" | ".join(texts))
    return "\n".join(lines)


_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
# a header or footer line that says nothing but where the page is: "3", "Page 3", "Page 3 of 10", "- 3 -", "3/10"
_PAGE_NUMBER = re.compile(r"[\W_]*(?:page|seite|page\s+no\.?)?[\W_]*\d*[\W_]*(?:(?:of|/|von)[\W_]*\d+)?[\W_]*",
                          re.IGNORECASE)


@contextlib.contextmanager
def _malformed(fmt: str, *errors: type[Exception]) -> Iterator[None]:
    """What a library raises on a file whose XML is well-formed but not what it expects (a missing element or
    attribute, a value out of range, a reference to a part that is not there), and its own `errors`, as
    Unreadable("malformed docx: ...")."""
    caught: tuple[type[Exception], ...] = (AttributeError, KeyError, IndexError, TypeError, ValueError, *errors)
    try:
        yield
    except caught as e:
        raise Unreadable(f"malformed {fmt}: {type(e).__name__}: {e}") from e


def _text_boxes(paragraph: Any) -> list[str]:
    """The paragraphs of the text boxes anchored in a paragraph (w:txbxContent), in order: a box drawn both ways
    (DrawingML, and VML as mc:Fallback for old readers) once; a box inside a box after it."""
    from docx.text.paragraph import Paragraph

    lines = []
    for box in paragraph._p.iterdescendants(f"{{{_W}}}txbxContent"):
        if any(a.tag == f"{{{_MC}}}Fallback" for a in box.iterancestors()):
            continue
        for p in box.iterchildren(f"{{{_W}}}p"):
            if text := Paragraph(p, paragraph._parent).text.strip():
                lines.append(text)
    return lines


def _headers_and_footers(document: DocxDocument) -> list[str]:
    """The text of every distinct header and footer (default, first-page, even-page) of every section, in order;
    lines that only number the page left out."""
    seen: list[str] = []
    for section in document.sections:
        for part in (section.first_page_header, section.header, section.even_page_header, section.first_page_footer,
                     section.footer, section.even_page_footer):
            if part.is_linked_to_previous:  # none of its own (asking for its text would add one)
                continue
            lines = [p.text.strip() for p in part.paragraphs]
            lines += [_docx_table(t) for t in part.tables]
            text = "\n".join(line for line in lines if line and not _PAGE_NUMBER.fullmatch(line))
            if text and text not in seen:
                seen.append(text)
    return seen


def _comments(document: DocxDocument) -> list[str]:
    """Comments (word/comments.xml) as "Author: text" lines, in the order they were written."""
    lines = []
    for comment in document.comments:
        text = _one_line(comment.text)
        if text:
            lines.append(f"{_one_line(comment.author)}: {text}" if comment.author else text)
    return lines


def parse_docx(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """A DOCX as one document: paragraphs (their text boxes after them) and tables in document order, a part per
    heading section; then headers and footers, then comments, a part each."""
    import docx
    from docx.exceptions import InvalidXmlError
    from docx.opc.exceptions import PackageNotFoundError
    from docx.oxml.exceptions import XmlchemyError
    from docx.table import Table

    check_zip(data, cfg)
    try:
        document = docx.Document(io.BytesIO(data))
    except ValueError as e:  # python-docx's word for a package of another kind, an XLSX say
        kind = m.group(1) if (m := re.search(r"content type is '([^']*)'", str(e))) else "unknown"
        raise Unreadable(f"not a Word document (its main part is {kind})") from e
    except (PackageNotFoundError, KeyError, XMLSyntaxError, zipfile.BadZipFile) as e:
        # not a package, a missing part, broken XML, a member whose CRC or names disagree
        raise Unreadable(f"not a readable DOCX: {e}") from e
    except (AttributeError, IndexError, TypeError, InvalidXmlError, XmlchemyError) as e:  # XML not as expected
        raise Unreadable(f"malformed docx: {type(e).__name__}: {e}") from e
    path: list[tuple[int, str]] = []  # (level, heading) from the top
    blocks: list[tuple[str, str]] = []
    first_heading = ""
    with _malformed("docx", InvalidXmlError, XmlchemyError):  # the XML is read as it is walked: errors in it come here
        levels = _heading_levels(document)
        for block in document.iter_inner_content():
            if isinstance(block, Table):
                text = _docx_table(block)
            else:
                text = block.text.strip()
                level = levels.get(block._p.style)  # the style id in the XML (w:pStyle), None without one
                if level is not None and text:
                    path = [(lv, h) for lv, h in path if lv < level] + [(level, _one_line(text))]
                    if not first_heading and level <= 1:
                        first_heading = _one_line(text)
                text = "\n".join(line for line in [text, *_text_boxes(block)] if line)
            if text:
                blocks.append((SECTION_SEP.join(h for _, h in path), text))
        extra = [("Headers and footers", "\n".join(_headers_and_footers(document))),
                 ("Comments", "\n".join(_comments(document)))]
        title = _one_line(document.core_properties.title or "") or first_heading
        metadata = {"format": "docx", **core(document.core_properties)}
    parts = parts_by_section(blocks) + [{"text": text, "page": 0, "section": name} for name, text in extra if text]
    return [_doc(source, title, parts, "", metadata)]


# --- PPTX ---

def _shapes(shapes: list[BaseShape]) -> Iterator[BaseShape]:
    """Shapes in order, those inside groups where the group stands."""
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    stack = list(reversed(shapes))
    while stack:
        shape = stack.pop()
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            stack.extend(reversed(list(shape.shapes)))  # type: ignore[attr-defined]
        else:
            yield shape


def _frame_text(text: str) -> str:
    # a line break inside a paragraph is a vertical tab in python-pptx's text
    return "\n".join(line.strip() for line in text.replace("\x0b", "\n").split("\n") if line.strip())


def _chart_lines(chart: Any) -> list[str]:
    """A chart as text: its title, its categories and a line per series, "Name: 1, 2, 3"."""
    lines = []
    if chart.has_title and chart.chart_title.has_text_frame and (title := _one_line(chart.chart_title.text_frame.text)):
        lines.append(f"Chart: {title}")
    for plot in chart.plots:
        try:
            categories = [_cell(c) for c in plot.categories]
        except (KeyError, IndexError, ValueError):  # an XY or bubble plot has none
            categories = []
        if categories and any(categories):
            lines.append(f"Categories: {', '.join(categories)}")
        for series in plot.series:
            values = ", ".join("–" if v is None else _cell(v) for v in series.values)  # – : no data point
            lines.append(f"{_one_line(series.name or '') or 'Series'}: {values}")
    return lines


def _slide_lines(slide_shapes: list[BaseShape]) -> list[str]:
    lines = []
    for shape in _shapes(slide_shapes):
        if shape.has_text_frame and (text := _frame_text(shape.text_frame.text)):  # type: ignore[attr-defined]
            lines.append(text)
        elif shape.has_table:
            for row in shape.table.rows:  # type: ignore[attr-defined]
                cells = [_one_line(cell.text) for cell in row.cells]
                if any(cells):
                    lines.append(" | ".join(cells))
        elif shape.has_chart:
            lines.extend(_chart_lines(shape.chart))  # type: ignore[attr-defined]
    return lines


def parse_pptx(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """A PPTX as one document with a part per slide (`page` = slide number, `section` = slide title)."""
    from pptx import Presentation
    from pptx.exc import InvalidXmlError, PackageNotFoundError

    check_zip(data, cfg)
    try:
        presentation = Presentation(io.BytesIO(data))
    except (PackageNotFoundError, ValueError, KeyError, XMLSyntaxError, zipfile.BadZipFile) as e:
        # not a package or not a presentation, a missing part, broken XML, a member whose CRC or names disagree
        raise Unreadable(f"not a readable PPTX: {e}") from e
    except (AttributeError, IndexError, TypeError, InvalidXmlError) as e:  # well-formed XML, not as expected
        raise Unreadable(f"malformed pptx: {type(e).__name__}: {e}") from e
    with _malformed("pptx", InvalidXmlError):  # the XML is read as it is walked: errors in it come here
        slides = presentation.slides
        if len(slides) > cfg.max_pages:
            raise Unreadable(f"{len(slides)} slides, more than ingest.documents.max_pages ({cfg.max_pages})")
        parts: list[Part] = []
        for number, slide in enumerate(slides, start=1):
            title_shape = slide.shapes.title
            title = _one_line(title_shape.text_frame.text) if title_shape is not None else ""
            lines = _slide_lines(list(slide.shapes))
            frame = slide.notes_slide.notes_text_frame if slide.has_notes_slide else None
            if frame is not None and (notes := _frame_text(frame.text)):
                lines.append(f"Notes: {notes}")
            if lines:
                parts.append({"text": "\n".join(lines), "page": number, "section": title})
        title = _one_line(presentation.core_properties.title or "") or next((p["section"] for p in parts), "")
        metadata = {"format": "pptx", "slides": len(slides), **core(presentation.core_properties)}
    return [_doc(source, title, parts, "slide", metadata)]


# --- XLSX and CSV: rows with their header ---

def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime) and value.time() == dt.time():
        return value.date().isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return _one_line(str(value))


class _Rows:
    """Rows of one table (a sheet, a CSV file) as lines: the first non-empty row is the header, each later row
    "Header: value; Header2: value" (a column without a header is named by its letter, empty cells left out)."""

    def __init__(self) -> None:
        self.header: list[str] | None = None
        self.lines: list[str] = []

    def add(self, values: list[str]) -> None:
        if not any(values):
            return
        if self.header is None:
            self.header = values
            return
        named = (f"{self._name(i)}: {v}" for i, v in enumerate(values) if v)
        self.lines.append("; ".join(named))

    def _name(self, column: int) -> str:
        from openpyxl.utils import get_column_letter

        assert self.header is not None
        return self.header[column] if column < len(self.header) and self.header[column] else \
            get_column_letter(column + 1)

    def text(self) -> str:
        if not self.lines and self.header:  # a table that is only a header row still says something
            return " | ".join(v for v in self.header if v)
        return "\n".join(self.lines)


def parse_xlsx(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """An XLSX as one document with a part per sheet (`section` = sheet name, unit "sheet"), read row by row up to
    `cfg.max_cells` cells in all."""
    import openpyxl
    from openpyxl.utils.exceptions import InvalidFileException

    check_zip(data, cfg)
    try:
        workbook = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (InvalidFileException, KeyError, ValueError, XMLSyntaxError, ParseError, zipfile.BadZipFile) as e:
        # not a workbook, a missing part, broken XML (lxml's or, in sheets, ElementTree's), a member whose CRC or
        # names disagree; defusedxml's refusals and malformed values are ValueErrors
        raise Unreadable(f"not a readable XLSX: {e}") from e
    except (AttributeError, IndexError, TypeError) as e:  # well-formed XML, not as expected
        raise Unreadable(f"malformed xlsx: {type(e).__name__}: {e}") from e
    parts: list[Part] = []
    cells = 0
    truncated = False
    past_last_row: list[str] = []
    try:
        for sheet in workbook.worksheets:
            # The used range a file claims ("A1:XFD1048576") would pad every row to its width and add rows up to
            # its height; without it rows are as long as their last cell and iterated lazily.
            sheet.reset_dimensions()
            rows = _Rows()
            for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
                # Each row up to the last one a sheet names comes out, empty ones as (): a sheet naming row 10^11
                # after row 1 stops at Excel's last row, and an empty row counts as a cell.
                if number > _EXCEL_ROWS:
                    past_last_row.append(sheet.title)
                    break
                cells += max(len(row), 1)
                if cells > cfg.max_cells:
                    truncated = True
                    break
                rows.add([_cell(v) for v in row])
            if text := rows.text():
                parts.append({"text": text, "page": 0, "section": sheet.title})
            if truncated:
                break
    except (ValueError, ParseError, zipfile.BadZipFile) as e:  # sheets are read lazily: errors come while iterating
        raise Unreadable(f"not a readable XLSX: {e}") from e
    finally:
        workbook.close()
    props = workbook.properties  # openpyxl names the author `creator`
    metadata: dict[str, object] = {"format": "xlsx", "sheets": len(workbook.worksheets),
                                   **core(props), **({"author": _one_line(props.creator)} if props.creator else {})}
    if truncated:
        metadata["truncated_at_cells"] = cfg.max_cells
    if past_last_row:
        metadata["rows_past_excel_limit_ignored"] = past_last_row
    title = _one_line(workbook.properties.title or "")
    return [_doc(source, title, parts, "sheet", metadata)]


def parse_csv(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """A CSV or TSV file (dialect sniffed; UTF-8, bad bytes replaced) as one document of rows with their header."""
    if b"\x00" in data[:8192]:
        raise Unreadable("binary content (a NUL byte in its first 8192 bytes), not a CSV file")
    text, replaced = decode(data)
    dialect: type[csv.Dialect] = csv.excel
    if source.lower().endswith(".tsv"):
        dialect = csv.excel_tab
    else:
        sample = text[:_CSV_SNIFF_CHARS]
        sample = sample[:sample.rfind("\n") + 1] or sample  # whole lines: a cut line misleads the sniffer
        with contextlib.suppress(csv.Error):  # one column, or too irregular to tell: the standard dialect
            dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    rows = _Rows()
    cells = 0
    truncated = False
    try:
        for row in csv.reader(io.StringIO(text, newline=""), dialect):
            cells += max(len(row), 1)  # as in XLSX: an empty line counts as a cell
            if cells > cfg.max_cells:
                truncated = True
                break
            rows.add([_one_line(v) for v in row])
    except csv.Error as e:  # a field over csv.field_size_limit, a quote left open at the end
        raise Unreadable(f"not a readable CSV: {e}") from e
    metadata: dict[str, object] = {"format": "csv", "rows": len(rows.lines)}
    if truncated:
        metadata["truncated_at_cells"] = cfg.max_cells
    if replaced:
        metadata["replaced_bytes"] = replaced
    return [{"doc_id": "", "source": source, "title": PurePosixPath(source).stem, "text": rows.text(),
             "metadata": json.dumps(metadata), "parts": [], "unit": ""}]
