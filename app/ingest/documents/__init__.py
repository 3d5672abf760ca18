"""Office documents, PDFs, e-mails and images as documents: pure functions of a file's bytes, no Ray.

`parse_document` reads one file of a format `detect` named. The caller runs it in a child process capped in time
and memory (`DocumentsConfig`), since these parsers are large C and Python libraries fed untrusted files.

What comes out, per format (every document has `doc_id` "" and `metadata` JSON with at least {"format": ...}):

- pdf: one document, a part per page with text (`page` 1-based, `section` the outline path in effect on it),
  unit "page", title from the PDF's metadata; metadata `pages`, and `ocr_pages` (OCRed: no usable text layer) or
  `needs_ocr_pages` with `needs_ocr_reason` (OCR off or Tesseract missing: those pages keep what little text
  they have).
- docx: one document, a part per heading section (`section` the heading path, `page` 0), unit "", title from
  the core properties else the first Title/Heading 1. Tables come as a line per row, cells joined with " | ";
  text boxes' paragraphs follow the paragraph they are anchored in. Then a part "Headers and footers" (each
  distinct one once, page-number-only lines left out) and a part "Comments" ("Author: text" lines), where any.
- pptx: one document, a part per slide (`page` the slide number, `section` its title, speaker notes last as
  "Notes: ..."), unit "slide", title from the core properties else the first slide's. A chart comes as its
  title ("Chart: ..."), "Categories: ..." and a line per series ("Name: 1, 2, 3").
- odt: as docx (sections by text:h outline level, list items "- ...", tables a line per row), title and
  author, subject, keywords, created, modified from meta.xml; comments last as a part "Comments".
- ods: as xlsx (a part per sheet, rows "Header: value; ..."), `sheets`; odp: as pptx (a part per slide,
  `section` the title frame's text, notes "Notes: ...").
- epub: one document, a part per spine document (chapter) with text in reading order, `section` its label in the
  table of contents (EPUB 3 nav, else the NCX) else its first heading, unit ""; title and author (dc:creator)
  from the package; metadata `chapters`, and subject, language, publisher where given.
- rtf: one document as `text`, no parts, title the \\info group's \title else the file name's stem; metadata
  author, subject, keywords, created, modified from \\info where given.
- xlsx: one document, a part per sheet (`section` the sheet name), each row "Header: value; ..." under the
  sheet's first non-empty row; unit "sheet"; `truncated_at_cells` when `max_cells` stopped it.
- csv: one document as `text` (rows as for xlsx), no parts, title the file name's stem.
- eml, msg: one document as `text` (From/To/Cc/Date/Subject lines, a blank line, the body: plain text, else
  HTML as text, else for msg its compressed RTF as text), no parts, title the subject; metadata the headers,
  `attachments` parsed and `skipped_attachments` ({"name", "type"[, "reason"]}: unsupported, unreadable or
  deeper than `max_attachment_depth`). Then the documents of its attachments (`source`
  "<e-mail>#attachment/<name>", metadata `attached_to` the e-mail's source).
- image: one document, a part per TIFF page (other formats: one part) of OCRed text, unit "page".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import PurePosixPath

from app.config import DocumentsConfig
from app.ingest.documents.detect import describe, detect
from app.ingest.documents.epub import parse_epub
from app.ingest.documents.mail import parse_eml, parse_msg
from app.ingest.documents.ocr import parse_image
from app.ingest.documents.odf import parse_odf
from app.ingest.documents.office import parse_csv, parse_docx, parse_pptx, parse_xlsx
from app.ingest.documents.pdf import parse_pdf
from app.ingest.documents.rtf import parse_rtf
from app.ingest.parse import Doc, parse_text

__all__ = ["DOCUMENT_FORMATS", "describe", "detect", "parse_document"]

_PARSERS: dict[str, Callable[[str, bytes, DocumentsConfig], list[Doc]]] = {
    "pdf": parse_pdf, "docx": parse_docx, "pptx": parse_pptx, "xlsx": parse_xlsx, "csv": parse_csv,
    "image": parse_image, "epub": parse_epub, "rtf": parse_rtf,
    **{fmt: functools.partial(parse_odf, fmt=fmt) for fmt in ("odt", "ods", "odp")}}
_MAIL = {"eml": parse_eml, "msg": parse_msg}
DOCUMENT_FORMATS = frozenset({*_PARSERS, *_MAIL})
_TEXT_FORMATS = {"text", "markdown", "html"}  # parsed here only as attachments; input files: app.ingest.parse


def parse_document(fmt: str, source: str, data: bytes, cfg: DocumentsConfig, depth: int = 0) -> list[Doc]:
    """The documents in one file of format `fmt` (one of DOCUMENT_FORMATS) named `source`: one, or for an e-mail
    the e-mail's and then its attachments'. `depth`: how deep in attachments this file is (0 for an input file).
    Raises Unreadable, with the reason in words, for a file that cannot be read."""
    if fmt in _MAIL:
        def attachment(fmt: str, source: str, data: bytes, depth: int) -> list[Doc]:
            if fmt in _TEXT_FORMATS:
                docs = parse_text(fmt, source, data).docs
                for doc in docs:
                    doc["metadata"] = json.dumps({**json.loads(doc["metadata"]), "format": fmt})
                return docs
            return parse_document(fmt, source, data, cfg, depth)

        return _MAIL[fmt](source, data, cfg, depth, attachment)
    if fmt not in _PARSERS:
        raise ValueError(f"not a document format: {fmt!r} (one of {', '.join(sorted(DOCUMENT_FORMATS))})")
    docs = _PARSERS[fmt](source, data, cfg)
    for doc in docs:  # a file without a title of its own is called by its name, as text files are
        doc["title"] = doc["title"] or PurePosixPath(source).stem
    return docs
