"""PDFs with PDFium (pypdfium2): a part per page, its text in reading order, OCRed where the page has no usable
text layer; the section of a page is the outline (bookmark) path in effect on it."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from app.config import DocumentsConfig
from app.ingest.documents.ocr import ocr_text, ocr_unavailable
from app.ingest.parse import SECTION_SEP, Doc, Part, Unreadable

_POINTS_PER_INCH = 72  # PDF user space units
_DEFAULT_MAX_PIXELS = DocumentsConfig().max_image_pixels


@contextmanager
def _open(data: bytes) -> Iterator[pdfium.PdfDocument]:
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        if e.err_code == pdfium_c.FPDF_ERR_PASSWORD:
            raise Unreadable("encrypted PDF (needs a password)") from e
        if e.err_code == pdfium_c.FPDF_ERR_SUCCESS:  # it loaded, but its page tree is empty
            raise Unreadable("PDF without pages") from e
        raise Unreadable(f"broken PDF: {e}") from e
    try:
        yield pdf
    finally:
        pdf.close()


def fit_scale(width: float, height: float, scale: float, max_pixels: int) -> float:
    """`scale`, lowered where needed so that a `width` x `height` (points) page renders to at most `max_pixels`
    pixels (the renderer rounds each side up)."""
    if width <= 0 or height <= 0:
        return scale
    scale = min(scale, math.sqrt(max_pixels / (width * height)))
    while math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        scale *= 0.999
    return scale


def _bookmark_page(pdf: pdfium.PdfDocument, bookmark: pdfium.PdfBookmark) -> int | None:
    """0-based page a bookmark points to: its destination, or that of its GoTo action (writers use either)."""
    if (dest := bookmark.get_dest()) is not None:
        return dest.get_index()
    action = pdfium_c.FPDFBookmark_GetAction(bookmark.raw)
    if not action or pdfium_c.FPDFAction_GetType(action) != pdfium_c.PDFACTION_GOTO:
        return None
    raw_dest = pdfium_c.FPDFAction_GetDest(pdf.raw, action)
    if not raw_dest:
        return None
    index: int = pdfium_c.FPDFDest_GetDestPageIndex(pdf.raw, raw_dest)
    return index if index >= 0 else None


def page_sections(pdf: pdfium.PdfDocument, n_pages: int) -> list[str]:
    """The outline path in effect on each page: that of the last bookmark (in page order, then outline order)
    pointing at or before it. "" before the first bookmark and for a PDF without an outline."""
    path: list[str] = []
    starts: list[tuple[int, int, str]] = []  # (page, outline position, path)
    for position, bookmark in enumerate(pdf.get_toc()):  # get_toc stops at cycles and 15 levels deep
        del path[bookmark.level:]
        path.append(" ".join(bookmark.get_title().split()))
        page = _bookmark_page(pdf, bookmark)
        if page is not None and 0 <= page < n_pages:
            starts.append((page, position, SECTION_SEP.join(path)))
    starts.sort()
    sections, current, i = [], "", 0
    for page in range(n_pages):
        while i < len(starts) and starts[i][0] <= page:
            current = starts[i][2]
            i += 1
        sections.append(current)
    return sections


def _page_text(page: pdfium.PdfPage) -> str:
    textpage = page.get_textpage()
    try:
        # PDFium ends lines with CRLF; a table row's cells come as one line, in reading order
        return textpage.get_text_bounded().replace("\r\n", "\n").replace("\r", "\n").strip()
    finally:
        textpage.close()


def _render_for_ocr(page: pdfium.PdfPage, dpi: int, max_pixels: int) -> pdfium.PdfBitmap:
    width, height = page.get_size()
    return page.render(scale=fit_scale(width, height, dpi / _POINTS_PER_INCH, max_pixels), grayscale=True)


def _non_space(text: str) -> int:
    return sum(not c.isspace() for c in text)


_PDF_DATE = re.compile(r"D:(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?")


def pdf_date(value: str) -> str | None:
    """A PDF date ("D:20210304120000+01'00'") as ISO 8601 ("2021-03-04T12:00:00"; the zone is dropped: a
    filter compares dates, and most PDFs name none), None if it is not one."""
    m = _PDF_DATE.match(value.strip())
    if not m:
        return None
    year, month, day, hour, minute, second = (int(g) if g else d for g, d in zip(m.groups(), (0, 1, 1, 0, 0, 0),
                                                                                 strict=True))
    try:
        return dt.datetime(year, month, day, hour, minute, second).isoformat()
    except ValueError:  # "D:20211399...": not a date
        return None


def pdf_info(pdf: pdfium.PdfDocument) -> dict[str, object]:
    """The document information a filter may use: author, subject, keywords, created and modified dates."""
    info: dict[str, object] = {}
    for key, name in (("Author", "author"), ("Subject", "subject"), ("Keywords", "keywords")):
        if value := " ".join((pdf.get_metadata_value(key) or "").split()):
            info[name] = value
    for key, name in (("CreationDate", "created"), ("ModDate", "modified")):
        if date := pdf_date(pdf.get_metadata_value(key) or ""):
            info[name] = date
    return info


def parse_pdf(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """A PDF as one document with a part per page that has text (`page` 1-based, unit "page")."""
    parts: list[Part] = []
    needs_ocr: list[int] = []
    ocred: list[int] = []
    no_ocr = ocr_unavailable(cfg)
    with _open(data) as pdf:
        n_pages = len(pdf)
        if n_pages > cfg.max_pages:
            raise Unreadable(f"a PDF of {n_pages} pages, more than ingest.documents.max_pages ({cfg.max_pages})")
        title = " ".join((pdf.get_metadata_value("Title") or "").split())
        info = pdf_info(pdf)
        sections = page_sections(pdf, n_pages)
        for index in range(n_pages):
            try:
                page = pdf[index]
            except pdfium.PdfiumError as e:
                raise Unreadable(f"broken PDF: page {index + 1}: {e}") from e
            try:
                text = _page_text(page)
                if _non_space(text) < cfg.ocr_min_chars:
                    if no_ocr:
                        needs_ocr.append(index + 1)
                    else:
                        bitmap = _render_for_ocr(page, cfg.ocr_dpi, cfg.max_image_pixels)
                        ocr = ocr_text(bitmap.to_pil(), cfg)
                        bitmap.close()
                        ocred.append(index + 1)
                        if _non_space(ocr) > _non_space(text):  # OCR reads the text layer's words too, mostly
                            text = ocr
            finally:
                page.close()
            if text:
                parts.append({"text": text, "page": index + 1, "section": sections[index]})
    if needs_ocr and len(needs_ocr) == n_pages:
        raise Unreadable(f"needs OCR: no page has a text layer ({no_ocr})")
    metadata: dict[str, object] = {"format": "pdf", "pages": n_pages, **info}
    if needs_ocr:
        metadata["needs_ocr_pages"] = needs_ocr
        metadata["needs_ocr_reason"] = no_ocr
    if ocred:
        metadata["ocr_pages"] = ocred
    return [{"doc_id": "", "source": source, "title": title, "text": "", "metadata": json.dumps(metadata),
             "parts": parts, "unit": "page"}]
