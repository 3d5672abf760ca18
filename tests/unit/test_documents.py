"""Office documents, PDFs, e-mails and images as documents (app.ingest.documents): every file is built here, the
hostile ones too. OCR tests run Tesseract for real (a few small images, well under a second each); they skip only
where Tesseract is not installed."""

from __future__ import annotations

import datetime as dt
import io
import json
import shutil
import struct
import time
from email.message import EmailMessage

import pytest
from PIL import Image

from app.config import DocumentsConfig
from app.errors import NotFound
from app.ingest.documents import DOCUMENT_FORMATS, describe, detect, parse_document
from app.ingest.documents.pdf import fit_scale
from app.ingest.parse import Doc, Unreadable, joined_text
from app.page_view import render_page
from tests.document_files import (
    BILLION_LAUGHS,
    RTF,
    cfb,
    compressed_rtf,
    docx_extras_file,
    docx_file,
    eml,
    encrypted,
    epub_file,
    msg_file,
    msg_rtf_only,
    nested_eml,
    odf_file,
    odp_file,
    ods_file,
    odt_file,
    png,
    png_bomb,
    pptx_chart_file,
    pptx_file,
    rezip,
    table_pdf,
    text_image,
    text_pdf,
    xlsx_file,
    zeros_member,
)

CFG = DocumentsConfig()
needs_tesseract = pytest.mark.skipif(shutil.which("tesseract") is None, reason="Tesseract is not installed")
# Lines long enough (16+ non-space characters: ocr_min_chars) that no page of these PDFs is OCRed
CROSSING = [["The herd gathers on the southern bank,", "waits for the rain, and at last reaches the river and"],
            ["crosses it at dawn, zebras first,", "the wildebeest close behind them."],
            ["Crocodiles wait in the brown water", "for the ones that fall behind."]]
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def meta(doc: Doc) -> dict:
    return json.loads(doc["metadata"])


def only(docs: list[Doc]) -> Doc:
    assert len(docs) == 1
    return docs[0]


# --- detect ---

@pytest.mark.parametrize(("name", "data", "fmt"), [
    ("a.bin", b"junk before the header %PDF-1.7\n", "pdf"),  # within the first KiB
    ("a.pdf", b"not a pdf at all", "pdf"),  # extension second: its parser says what is wrong
    ("scan", b"\x89PNG\r\n\x1a\n" + bytes(8), "image"),
    ("scan", b"\xff\xd8\xff\xe0", "image"),
    ("scan", b"II*\x00" + bytes(8), "image"),
    ("scan", b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image"),
    ("scan", b"BM\x36\x00\x0c\x00\x00\x00\x00\x00\x36\x00" + bytes(14), "image"),
    ("t.data", b"PAR1" + bytes(8), "parquet"),
    ("mail", b"Received: from mx.example.org\r\n\tby example.org\r\nFrom: a@example.org\r\nSubject: Hi\r\n\r\nHello",
     "eml"),
    ("notes.txt", b"Return-Path: <a@example.org>\nFrom: a@example.org\nDate: Mon, 1 Jul 2024\n\nbody", "eml"),
    ("notes.txt", b"From: the desk of Ann\nI wrote this.\n", "text"),  # not a header block
    ("a.eml", b"anything", "eml"),
    ("a.msg", cfb({"x": b"1"}), "msg"),
    ("attachment", cfb({"__substg1.0_0037001F": "Hi".encode("utf-16-le")}), "msg"),
    ("old.doc", cfb({"WordDocument": b"1"}), None),
    ("locked.xlsx", cfb({"EncryptedPackage": b"1"}), "xlsx"),  # its parser says "password-protected"
    ("a.csv", b"a,b\n1,2\n", "csv"),
    ("a.TSV", b"a\tb\n", "csv"),
    ("a.jsonl", b"{}\n", "jsonl"),
    ("a.md", b"# Hi", "markdown"),
    ("a.htm", b"<p>hi</p>", "html"),
    ("a.txt", b"hello", "text"),
    ("notes.txt", b"{\\rtf1\\ansi hello}", "rtf"),  # by its magic
    ("notes", b"\r\n {\\rtf1 hello}", "rtf"),
    ("a.rtf", b"plain words", "rtf"),  # extension second: its parser says what is wrong
    ("a.xyz", b"hello", None),
    ("a.xyz", b"\x00\x01\x02", None),
])
def test_detect_by_content_then_extension(name, data, fmt):
    assert detect(name, data) == fmt


def test_detect_office_zips_whole_or_by_their_head():
    for build, fmt in ((docx_file, "docx"), (pptx_file, "pptx"), (xlsx_file, "xlsx"), (odt_file, "odt"),
                       (ods_file, "ods"), (odp_file, "odp"), (epub_file, "epub")):
        data = build()
        assert detect("upload", data) == fmt  # the central directory, whatever the name
        assert detect("upload", data[:8192]) == fmt  # only the head: the local headers' member names
    plain = io.BytesIO()
    import zipfile
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert detect("bundle.zip", plain.getvalue()) is None
    assert detect("report.docx", plain.getvalue()[:10]) == "docx"  # no member name in the head: the extension
    assert detect("book.epub", plain.getvalue()[:10]) == "epub"
    # a mimetype that is not first (or compressed) is read from the central directory
    late = io.BytesIO()
    with zipfile.ZipFile(late, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("content.xml", "<x/>")
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
    assert detect("upload", late.getvalue()) == "ods"
    drawing = odf_file("drawing", "")  # OpenDocument, but not a kind Ragline reads
    assert detect("upload", drawing) is None and describe("upload", drawing[:8192]) == "OpenDocument file"


@pytest.mark.parametrize(("head", "what"), [
    (cfb({"WordDocument": b"1"}), "legacy Word/Excel/PowerPoint (OLE) file"),
    (cfb({"EncryptedPackage": b"1"}), "password-protected Office file"),
    (b"PK\x03\x04" + bytes(26), "zip archive"),
    (b"PK\x03\x04" + bytes(26) + b"mimetypeapplication/vnd.oasis.opendocument.text", "OpenDocument file"),
    (b"\x7fELF\x02\x01", "ELF executable"),
    (b"MZ\x90\x00", "Windows executable"),
    (b"\x89PNG\r\n\x1a\n", "PNG image"),
    (b"\x1f\x8b\x08\x00", "gzip archive"),
    (b"\x00\x01\xfe", "unknown binary"),
])
def test_describe_names_unsupported_types(head, what):
    assert describe("file.bin", head) == what


def test_describe_unknown_text_names_its_extension():
    assert describe("data.xyz", b"plain words") == "unknown text (.xyz)"
    assert describe("Makefile", b"all:") == "unknown text (no extension)"


def test_document_formats():
    assert set(DOCUMENT_FORMATS) == {"pdf", "docx", "pptx", "xlsx", "odt", "ods", "odp", "epub", "rtf", "csv", "eml",
                                     "msg", "image"}
    with pytest.raises(ValueError, match="not a document format"):
        parse_document("markdown", "a.md", b"# hi", CFG)


# --- PDF ---

def test_pdf_a_part_per_page_in_reading_order_with_lines_kept():
    doc = only(parse_document("pdf", "s3://b/crossing.pdf", text_pdf(CROSSING, title="The Crossing"), CFG))
    assert (doc["title"], doc["unit"], doc["text"], doc["doc_id"]) == ("The Crossing", "page", "", "")
    info = meta(doc)
    # the document information reportlab writes, for metadata filters: dates as ISO 8601
    assert info.items() >= {"format": "pdf", "pages": 3, "author": "anonymous"}.items()
    assert dt.datetime.fromisoformat(info["created"]).year >= 2026
    assert [(p["page"], p["section"]) for p in doc["parts"]] == [(1, ""), (2, ""), (3, "")]
    # the sentence crosses the page break: it ends one part and starts the next, its lines kept
    assert doc["parts"][0]["text"].endswith("waits for the rain, and at last reaches the river and")
    assert doc["parts"][1]["text"].startswith("crosses it at dawn, zebras first,\nthe wildebeest")
    assert "reaches the river and\ncrosses it at dawn" in joined_text(doc)


def test_pdf_sections_follow_the_outline():
    outline = [("Arrival", 0, 0), ("Crossing", 1, 1), ("Danger", 0, 2)]
    doc = only(parse_document("pdf", "o.pdf", text_pdf(CROSSING, outline=outline), CFG))
    assert doc["title"] == "o"  # no metadata title: the file's name
    assert [p["section"] for p in doc["parts"]] == ["Arrival", "Arrival › Crossing", "Danger"]


def test_pdf_table_rows_stay_rows():
    doc = only(parse_document("pdf", "t.pdf", table_pdf(), CFG))
    lines = doc["parts"][0]["text"].split("\n")
    assert "Year Zebras Wildebeest" in lines and "2023 200000 1300000" in lines and "2024 210000 1250000" in lines


@needs_tesseract
def test_pdf_page_without_text_layer_is_ocred():
    pdf = text_pdf([CROSSING[0], []], images={1: text_image(["Zebras cross", "the river"])})
    doc = only(parse_document("pdf", "scan.pdf", pdf, CFG))
    assert [p["page"] for p in doc["parts"]] == [1, 2]
    assert "zebras cross" in doc["parts"][1]["text"].lower() and "river" in doc["parts"][1]["text"].lower()
    assert meta(doc)["ocr_pages"] == [2]


def test_pdf_without_ocr_keeps_text_pages_and_lists_the_others():
    pdf = text_pdf([CROSSING[0], []], images={1: text_image(["Zebras cross"])})
    doc = only(parse_document("pdf", "scan.pdf", pdf, DocumentsConfig(ocr=False)))
    assert [p["page"] for p in doc["parts"]] == [1]
    assert meta(doc)["needs_ocr_pages"] == [2] and meta(doc)["needs_ocr_reason"] == "ingest.documents.ocr is off"
    image_only = text_pdf([[]], images={0: text_image(["Zebras cross"])})
    with pytest.raises(Unreadable, match=r"needs OCR: .*ingest.documents.ocr is off"):
        parse_document("pdf", "scan.pdf", image_only, DocumentsConfig(ocr=False))


def test_pdf_needs_ocr_when_tesseract_is_missing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(Unreadable, match="needs OCR: .*tesseract is not installed"):
        parse_document("pdf", "scan.pdf", text_pdf([[]], images={0: text_image(["Zebras"])}), CFG)


def test_pdf_encrypted_broken_and_too_long():
    with pytest.raises(Unreadable, match=r"encrypted PDF \(needs a password\)"):
        parse_document("pdf", "e.pdf", encrypted(text_pdf(CROSSING)), CFG)
    pdf = text_pdf(CROSSING)
    for broken in (pdf[: len(pdf) // 2], b"%PDF-1.7\n" + bytes(range(256)) * 4):
        with pytest.raises(Unreadable, match="broken PDF: .*Data format error"):
            parse_document("pdf", "b.pdf", broken, CFG)
    with pytest.raises(Unreadable, match=r"a PDF of 3 pages, more than ingest.documents.max_pages \(2\)"):
        parse_document("pdf", "l.pdf", pdf, DocumentsConfig(max_pages=2))


def test_render_page_is_a_png_within_the_pixel_limit():
    pdf = text_pdf(CROSSING)
    page = Image.open(io.BytesIO(render_page(pdf, 2, 595, "")))
    assert page.format == "PNG" and page.size == (595, 842)  # A4 in points, one pixel each
    small = Image.open(io.BytesIO(render_page(pdf, 1, 2000, "", max_pixels=10_000)))
    assert small.width * small.height <= 10_000
    with pytest.raises(NotFound):
        render_page(pdf, 4, 595, "")


def test_fit_scale_lowers_the_scale_never_raises_it():
    assert fit_scale(100, 100, 2.0, 1_000_000) == 2.0
    scale = fit_scale(595, 842, 600 / 72, 1_000_000)  # A4 at 600 dpi would be 35 Mpx
    assert scale < 600 / 72 and -(-595 * scale // 1) * -(-842 * scale // 1) <= 1_000_000


# --- Office ---

def test_docx_heading_sections_tables_in_order():
    doc = only(parse_document("docx", "d.docx", docx_file(), CFG))
    assert (doc["title"], doc["unit"]) == ("Great Migrations", "")
    # the core properties python-docx's template carries, for metadata filters
    assert meta(doc) == {"format": "docx", "author": "python-docx", "created": "2013-12-23T23:15:00",
                         "modified": "2013-12-23T23:15:00"}
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [
        ("Great Migrations", "Great Migrations\nAn overview for rangers."),
        ("Great Migrations › Zebras", "Zebras\nZebras cross the Mara river every July."),
        ("Great Migrations › Zebras › Numbers", "Numbers\nHerd | Note\n2023 | 200000 | dry year\n"
         "2024 | 210000 | wet year\nAfter the table, still in Numbers."),
        ("Great Migrations › Predators", "Predators\nCrocodiles wait in the river."),
    ]


def test_docx_custom_style_based_on_a_heading_is_a_heading():
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    document.core_properties.title = "Field Notes"
    style = document.styles.add_style("Chapter Head", WD_STYLE_TYPE.PARAGRAPH)
    style.base_style = document.styles["Heading 2"]
    document.add_paragraph("Before any heading.")
    document.add_paragraph("Rivers", style="Chapter Head")
    document.add_paragraph("Deep water.")
    out = io.BytesIO()
    document.save(out)
    doc = only(parse_document("docx", "n.docx", out.getvalue(), CFG))
    assert doc["title"] == "Field Notes"  # the core properties' title first
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [("", "Before any heading."),
                                                                  ("Rivers", "Rivers\nDeep water.")]


def test_docx_text_boxes_headers_footers_and_comments():
    doc = only(parse_document("docx", "n.docx", docx_extras_file(), CFG))
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [
        # the text box after its paragraph, once (not again from its VML fallback)
        ("", "Zebras cross at dawn.\nSee the box.\nBoxed: 210000 zebras\ncounted from the air\nCrocodiles wait.\n"
             "Second section."),
        # the second section's header repeats the first's; "Page 1 of 2" only numbers the page
        ("Headers and footers", "Ranger Handbook\nDraft, do not share"),
        ("Comments", "Bob: Which river?"),
    ]


def test_docx_malformed_xml_is_unreadable_with_a_reason():
    import zipfile
    data = docx_file()
    xml = zipfile.ZipFile(io.BytesIO(data)).read("word/document.xml")
    for broken, error in ((xml.replace(b'<w:pStyle w:val="Heading1"/>', b"<w:pStyle/>"), "InvalidXmlError"),
                          (xml.replace(b"<w:tcW", b"<w:vMerge/><w:tcW", 1), "ValueError: no tr above topmost tr"),
                          (xml.replace(b'<w:gridSpan w:val="2"/>', b'<w:gridSpan w:val="x"/>'), "ValueError")):
        with pytest.raises(Unreadable, match=f"^malformed docx: {error}"):
            parse_document("docx", "d.docx", rezip(data, {"word/document.xml": broken}), CFG)


def test_pptx_chart_title_categories_and_a_line_per_series():
    doc = only(parse_document("pptx", "c.pptx", pptx_chart_file(), CFG))
    assert [p["text"] for p in doc["parts"]] == [
        "Herds\nChart: Herd sizes\nCategories: 2023, 2024\nZebras: 200000, 210000.5\nGnus: 1300000, –"]


def test_odt_sections_lists_tables_notes_boxes_comments_and_meta():
    doc = only(parse_document("odt", "o.odt", odt_file(), CFG))
    assert (doc["title"], doc["unit"]) == ("Great Migrations", "")
    assert meta(doc) == {"format": "odt", "author": "Ranger Ann", "subject": "Herds", "keywords": "zebra, river",
                         "created": "2024-07-01T09:30:00.123000", "modified": "2024-07-02T10:00:00"}
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [
        ("Zebras", "Zebras\nZebras  cross\tthe river. [Every July.]\n- Stripes\n- Hooves\n- Hard"),
        ("Zebras › Numbers", "Numbers\nHerd | Note\n2024 | 210000 | wet\nBoxed fact."),
        ("Predators", "Predators\nCrocodiles wait."),  # inside a text:section
        ("Comments", "Bob: Check the month."),
    ]
    untitled = only(parse_document("odt", "u.odt", odf_file("text", '<text:h text:outline-level="1">Rivers</text:h>',
                                                                     meta="<x/>"), CFG))
    assert (untitled["title"], meta(untitled)) == ("Rivers", {"format": "odt"})


def test_ods_a_part_per_sheet_padding_not_expanded_and_odp_a_part_per_slide():
    t0 = time.perf_counter()
    sheet = only(parse_document("ods", "s.ods", ods_file(), CFG))
    assert time.perf_counter() - t0 < 1.0  # a million padding rows and 16k padding columns: never written out
    assert (sheet["unit"], meta(sheet)["sheets"]) == ("sheet", 2)
    assert [(p["section"], p["text"]) for p in sheet["parts"]] == [
        ("Herds", "Year: 2023; Place: Mara\nYear: 2024; Zebras: 210000\nYear: 2024; Zebras: 210000")]
    capped = only(parse_document("ods", "s.ods", ods_file(), DocumentsConfig(max_cells=6)))
    assert meta(capped)["truncated_at_cells"] == 6 and capped["parts"][0]["text"] == "Year: 2023; Place: Mara"
    slides = only(parse_document("odp", "p.odp", odp_file(), CFG))
    assert slides["unit"] == "slide"
    assert [(p["page"], p["section"], p["text"]) for p in slides["parts"]] == [
        (1, "Migration", "Migration\nZebras lead\nGnus follow\nNotes: Mention the river."),
        (2, "Questions", "Questions"),
    ]


def test_odf_broken_and_hostile():
    with pytest.raises(Unreadable, match="XML with entity declarations in content.xml"):
        parse_document("odt", "lol.odt", rezip(odt_file(), {"content.xml": BILLION_LAUGHS}), CFG)
    with pytest.raises(Unreadable, match="broken XML in content.xml"):
        parse_document("odt", "bad.odt", rezip(odt_file(), {"content.xml": b"<office:document-content>"}), CFG)
    with pytest.raises(Unreadable, match="not a readable ODS: no office:spreadsheet"):
        parse_document("ods", "text.ods", odt_file(), CFG)
    with pytest.raises(Unreadable, match="broken zip"):
        parse_document("odt", "cut.odt", odt_file()[:200], CFG)


@pytest.mark.parametrize("version", [3, 2])
def test_epub_a_part_per_spine_chapter_in_order(version):
    doc = only(parse_document("epub", "b.epub", epub_file(version), CFG))
    assert (doc["title"], doc["unit"]) == ("Great Migrations", "")
    assert meta(doc) == {"format": "epub", "chapters": 2, "author": "Ranger Ann, Bob", "language": "en"}
    # spine order; the cover (no text) and a stylesheet in the spine left out; the section the table of
    # contents' label (nav or NCX), else the chapter's first heading
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [
        ("1. The Crossing", "Crossing\nThe herd crosses at dawn.\nZebras first."),
        ("Waiting", "Waiting\nCrocodiles wait."),
    ]


def test_epub_broken_and_hostile():
    with pytest.raises(Unreadable, match="no package document"):
        parse_document("epub", "b.epub", rezip(epub_file(), {"META-INF/container.xml": b"<container/>"}), CFG)
    with pytest.raises(Unreadable, match="XML with entity declarations in OEBPS/book.opf"):
        parse_document("epub", "b.epub", rezip(epub_file(), {"OEBPS/book.opf": BILLION_LAUGHS}), CFG)
    with pytest.raises(Unreadable, match="more than ingest.documents.max_pages"):
        parse_document("epub", "b.epub", epub_file(), DocumentsConfig(max_pages=3))


def test_rtf_text_title_and_info():
    doc = only(parse_document("rtf", "notes.rtf", RTF, CFG))
    assert (doc["title"], doc["parts"]) == ("Great Migrations", [])  # the \info group's title
    assert doc["text"] == "Zebras cross the river in July.\nCafé by the Mara, € 5."  # fonts, colours, generator out
    assert meta(doc) == {"format": "rtf", "author": "Ranger Ann", "created": "2024-07-01T09:30:00"}
    plain = only(parse_document("rtf", "dir/notes.rtf", b"{\\rtf1\\ansi Hello\\par}", CFG))
    assert (plain["title"], plain["text"]) == ("notes", "Hello")
    with pytest.raises(Unreadable, match="not an RTF document"):
        parse_document("rtf", "a.rtf", b"plain words", CFG)


def test_pptx_a_part_per_slide_with_tables_and_notes():
    doc = only(parse_document("pptx", "p.pptx", pptx_file(), CFG))
    assert (doc["title"], doc["unit"]) == ("Migration", "slide")
    assert meta(doc).items() >= {"format": "pptx", "slides": 3, "created": "2013-01-27T09:14:16"}.items()
    assert [(p["page"], p["section"], p["text"]) for p in doc["parts"]] == [
        (1, "Migration", "Migration\nZebras lead the herd\nWildebeest follow\nNotes: Mention the river crossing."),
        (2, "Numbers", "Numbers\nYear | Zebras\n2024 | 210000"),
        (3, "Questions", "Questions"),
    ]


def test_xlsx_a_part_per_sheet_rows_with_their_header():
    doc = only(parse_document("xlsx", "x.xlsx", xlsx_file(), CFG))
    assert doc["unit"] == "sheet"
    assert meta(doc).items() >= {"format": "xlsx", "sheets": 2, "author": "openpyxl"}.items()
    assert [(p["section"], p["text"]) for p in doc["parts"]] == [
        ("Herds", "Year: 2023; Zebras: 200000; Place: Mara\nYear: 2024; Zebras: 210000"),
        ("Notes", "Topic: Rain; Note: Late this year"),
    ]


def test_xlsx_claimed_used_range_is_not_materialised_and_cells_are_capped():
    data = xlsx_file()
    import zipfile
    sheet = zipfile.ZipFile(io.BytesIO(data)).read("xl/worksheets/sheet1.xml")
    assert b'<dimension ref="A1:C4"/>' in sheet
    lying = rezip(data, {"xl/worksheets/sheet1.xml": sheet.replace(b"A1:C4", b"A1:XFD1048576")})
    t0 = time.perf_counter()
    doc = only(parse_document("xlsx", "x.xlsx", lying, CFG))
    assert time.perf_counter() - t0 < 1.0  # 17 billion claimed cells: none of them padded in
    assert doc["parts"][0]["text"] == "Year: 2023; Zebras: 200000; Place: Mara\nYear: 2024; Zebras: 210000"
    far = sheet.replace(b"</sheetData>", b'<row r="99999999999"><c r="A99999999999"><v>1</v></c></row></sheetData>')
    t0 = time.perf_counter()
    doc = only(parse_document("xlsx", "x.xlsx", rezip(data, {"xl/worksheets/sheet1.xml": far}), CFG))
    assert time.perf_counter() - t0 < 2.0  # the empty rows before it come out one by one: up to Excel's last row
    assert meta(doc)["rows_past_excel_limit_ignored"] == ["Herds"]
    capped = only(parse_document("xlsx", "x.xlsx", data, DocumentsConfig(max_cells=7)))
    assert meta(capped)["truncated_at_cells"] == 7
    assert [p["text"] for p in capped["parts"]] == ["Year: 2023; Zebras: 200000; Place: Mara"]


def test_csv_and_tsv_rows_with_their_header():
    doc = only(parse_document("csv", "s3://b/herds.csv", b"year;zebras;place\n2023;200000;Mara\n2024;;\n", CFG))
    assert (doc["title"], doc["parts"], doc["unit"]) == ("herds", [], "")
    assert doc["text"] == "year: 2023; zebras: 200000; place: Mara\nyear: 2024"
    assert meta(doc) == {"format": "csv", "rows": 2}
    tsv = only(parse_document("csv", "h.tsv", "year\tplace\n2023\tMara, Kenya\n2024\tCaf\xe9\n".encode("latin-1"), CFG))
    assert tsv["text"] == "year: 2023; place: Mara, Kenya\nyear: 2024; place: Caf\ufffd"
    assert meta(tsv)["replaced_bytes"] == 1
    with pytest.raises(Unreadable, match="not a readable CSV: field larger than field limit"):
        parse_document("csv", "big.csv", b'a,b\n"' + b"x" * 200_000 + b'",1\n', CFG)


def _declare_size(zip_data: bytes, member: str, size: int) -> bytes:
    """The zip with `member`'s uncompressed size in the central directory rewritten (a lie)."""
    at = zip_data.rfind(b"PK\x01\x02", 0, zip_data.rfind(member.encode()))
    return zip_data[:at + 24] + struct.pack("<I", size) + zip_data[at + 28:]


def test_zip_bombs_are_refused_before_anything_unpacks():
    data = docx_file()
    t0 = time.perf_counter()
    bomb = zeros_member(data, "word/media/zeros.bin", 200 << 20)  # 200 MiB of zeros in ~200 KB
    with pytest.raises(Unreadable, match=r"decompression bomb: word/media/zeros.bin unpacks [\d,]+ bytes to "
                                         r"209,715,200"):
        parse_document("docx", "bomb.docx", bomb, CFG)
    declared = _declare_size(data, "word/document.xml", 2_000_000_000)  # 2 GB declared
    with pytest.raises(Unreadable, match=r"decompression bomb: its \d+ members unpack to 2,0[\d,]+ bytes, more "
                                         r"than ingest.documents.max_unzipped_bytes"):
        parse_document("docx", "bomb.docx", declared, CFG)
    # a member that declares little and unpacks to much: inflated a chunk at a time, stopped past its word
    liar = _declare_size(zeros_member(data, "word/media/big.bin", 4 << 20), "word/media/big.bin", 4096)
    with pytest.raises(Unreadable, match="decompression bomb: word/media/big.bin unpacks to more than the 4,096"):
        parse_document("docx", "liar.docx", liar, CFG)
    assert time.perf_counter() - t0 < 2.0


def test_billion_laughs_is_refused_unexpanded():
    for fmt, build, member in (("docx", docx_file, "word/document.xml"), ("xlsx", xlsx_file, "xl/workbook.xml"),
                               ("pptx", pptx_file, "ppt/slides/slide1.xml")):
        with pytest.raises(Unreadable, match=f"XML with a DOCTYPE in {member}"):
            parse_document(fmt, f"lol.{fmt}", rezip(build(), {member: BILLION_LAUGHS}), CFG)


def test_office_files_that_are_not_what_they_say():
    with pytest.raises(Unreadable, match="^password-protected Office file$"):
        parse_document("docx", "locked.docx", cfb({"EncryptionInfo": bytes(64), "EncryptedPackage": bytes(5000)}),
                       CFG)
    with pytest.raises(Unreadable, match=r"legacy Word/Excel/PowerPoint \(OLE\) file"):
        parse_document("xlsx", "old.xlsx", cfb({"Workbook": bytes(5000)}), CFG)
    with pytest.raises(Unreadable, match="not a Word document .*spreadsheetml"):
        parse_document("docx", "sheet.docx", xlsx_file(), CFG)
    with pytest.raises(Unreadable, match="broken zip"):
        parse_document("pptx", "cut.pptx", pptx_file()[:5000], CFG)
    with pytest.raises(Unreadable, match="not a readable XLSX"):
        parse_document("xlsx", "bad.xlsx", rezip(xlsx_file(), {"xl/worksheets/sheet1.xml": b"<worksheet><oops>"}),
                       CFG)


# --- e-mail ---

def test_eml_headers_body_and_attachments_as_documents():
    pdf = text_pdf(CROSSING)
    data = eml("Zebra count", "See the attached report.\n", [
        ("report.pdf", "application/pdf", pdf), ("notes.docx", DOCX, docx_file()),
        ("setup.exe", "application/octet-stream", b"MZ\x90\x00" + bytes(64)),
        ("broken.pdf", "application/pdf", pdf[:300])], html="<p>See the <b>attached</b> report.</p>")
    mail, report, notes = parse_document("eml", "s3://b/m.eml", data, CFG)
    assert mail["title"] == "Zebra count" and mail["parts"] == [] and mail["unit"] == ""
    assert mail["text"] == ("From: Ranger Ann <ann@example.org>\nTo: Bob <bob@example.org>\n"
                            "Date: Mon, 01 Jul 2024 09:30:00 +0000\nSubject: Zebra count\n\nSee the attached report.")
    m = meta(mail)
    assert m["format"] == "eml" and m["attachments"] == ["report.pdf", "notes.docx"]
    assert m["skipped_attachments"][0] == {"name": "setup.exe", "type": "Windows executable"}
    assert m["skipped_attachments"][1]["name"] == "broken.pdf" and "broken PDF" in m["skipped_attachments"][1]["reason"]
    assert report["source"] == "s3://b/m.eml#attachment/report.pdf" and len(report["parts"]) == 3
    assert meta(report).items() >= {"format": "pdf", "pages": 3, "attached_to": "s3://b/m.eml"}.items()
    assert notes["source"] == "s3://b/m.eml#attachment/notes.docx" and notes["title"] == "Great Migrations"


def test_eml_html_only_body_and_text_attachments():
    message = eml("Notice", "placeholder", [("readme.md", "text/markdown", b"# Read me\nThe river is high.")])
    message = message.replace(b"Content-Type: text/plain; charset=\"utf-8\"", b"Content-Type: text/html")
    message = message.replace(b"placeholder", b"<html><body><nav>Menu</nav><p>The <b>river</b> is high.</p>")
    mail, readme = parse_document("eml", "n.eml", message, CFG)
    assert mail["text"].endswith("Subject: Notice\n\nThe\nriver\nis high.")
    assert readme["source"] == "n.eml#attachment/readme.md" and joined_text(readme).endswith("The river is high.")
    assert meta(readme) == {"format": "markdown", "attached_to": "n.eml"}


def test_eml_inline_images_are_not_attachments_and_mime_types_name_the_rest():
    message = EmailMessage()
    message["From"], message["Subject"] = "a@example.org", "Newsletter"
    message.set_content("<p>Rivers are high.</p><img src='cid:logo'>", subtype="html")
    message.add_related(png(text_image(["LOGO"])), maintype="image", subtype="png", cid="<logo>")
    message.add_attachment("Bring boots.", filename="packing-list")  # text/plain without an extension
    mail, packing = parse_document("eml", "n.eml", message.as_bytes(), CFG)
    assert mail["text"].endswith("Subject: Newsletter\n\nRivers are high.")
    assert meta(mail)["skipped_attachments"] == [{"name": "attachment-2.png", "type": "image/png",
                                                  "reason": "an image shown in the body (a logo, a signature)"}]
    assert packing["source"] == "n.eml#attachment/packing-list" and packing["text"].strip() == "Bring boots."


def test_eml_nested_a_thousand_deep_stops_at_the_depth_limit_fast():
    t0 = time.perf_counter()
    docs = parse_document("eml", "deep.eml", nested_eml(1000), CFG)
    assert time.perf_counter() - t0 < 2.0
    assert [d["title"] for d in docs] == [f"level {n}" for n in range(1000, 994, -1)]  # the file and 5 below
    assert docs[-1]["source"] == "deep.eml" + "#attachment/attachment-2.eml" * 5
    assert "level 995 text" in docs[-1]["text"]
    (skipped,) = meta(docs[-1])["skipped_attachments"]
    assert skipped["reason"] == "nested deeper than ingest.documents.max_attachment_depth (5)"
    assert meta(docs[1])["attached_to"] == "deep.eml" and meta(docs[2])["attached_to"] == docs[1]["source"]
    flat = parse_document("eml", "deep.eml", nested_eml(3), DocumentsConfig(max_attachment_depth=0))
    assert len(flat) == 1 and "max_attachment_depth (0)" in meta(flat[0])["skipped_attachments"][0]["reason"]


def test_eml_multiparts_nested_too_deep_are_left_out():
    body = b"Content-Type: text/plain\r\n\r\nthe middle"
    for level in range(1000):
        body = (b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n--b%d\r\n%s\r\n--b%d--\r\n"
                % (level, level, body, level))
    t0 = time.perf_counter()
    (mail,) = parse_document("eml", "m.eml", b"From: a@example.org\r\nSubject: Deep\r\n" + body, CFG)
    assert time.perf_counter() - t0 < 2.0
    assert meta(mail)["mime_too_deep"] == "multiparts nested more than 20 deep were left out"
    shallow = body.split(b"--b20\r\n", 1)[1]  # b19 … b0: 20 multiparts around the text, all read
    (mail,) = parse_document("eml", "m.eml", b"From: a@example.org\r\nSubject: Deep\r\n" + shallow, CFG)
    assert mail["text"].endswith("Subject: Deep\n\nthe middle") and "mime_too_deep" not in meta(mail)


def test_msg_properties_body_and_attachments():
    sent = dt.datetime(2024, 7, 1, 9, 30, tzinfo=dt.UTC)
    data = msg_file("Zebra count", "See the attached report.", [("report.pdf", text_pdf(CROSSING)),
                                                                ("tool.exe", b"MZ\x90\x00" + bytes(64))], sent)
    assert detect("inbox-item", data) == "msg"
    mail, report = parse_document("msg", "m.msg", data, CFG)
    assert mail["title"] == "Zebra count"
    assert mail["text"] == ("From: Ranger Ann <ann@example.org>\nTo: Bob\nDate: Mon, 01 Jul 2024 09:30:00 +0000\n"
                            "Subject: Zebra count\n\nSee the attached report.")
    assert meta(mail)["skipped_attachments"] == [{"name": "tool.exe", "type": "Windows executable"}]
    assert report["source"] == "m.msg#attachment/report.pdf" and [p["page"] for p in report["parts"]] == [1, 2, 3]
    with pytest.raises(Unreadable, match="not a readable MSG file"):
        parse_document("msg", "m.msg", data[:1000], CFG)
    with pytest.raises(Unreadable, match="not an Outlook message"):
        parse_document("msg", "m.msg", cfb({"WordDocument": bytes(100)}), CFG)


def test_msg_rtf_only_body_is_decompressed_and_read():
    mail = only(parse_document("msg", "m.msg", msg_rtf_only("Rich text", RTF), CFG))
    assert mail["text"] == "Subject: Rich text\n\nZebras cross the river in July.\nCafé by the Mara, € 5."
    # the compressed stream refers into MS-OXRTFCP's initial dictionary ("{\rtf1\ansi" and more)
    assert len(compressed_rtf(RTF)) < len(RTF) + 16
    broken = msg_rtf_only("Broken", RTF)
    broken = broken.replace(compressed_rtf(RTF)[8:12], b"XXXX")  # an unknown compression type
    assert only(parse_document("msg", "m.msg", broken, CFG))["text"] == "Subject: Broken"


# --- images ---

@needs_tesseract
def test_image_ocr_png_and_a_page_per_tiff_frame():
    doc = only(parse_document("image", "sign.png", png(text_image(["Zebras cross", "the river"])), CFG))
    assert doc["unit"] == "page" and doc["parts"][0]["page"] == 1
    assert "zebras cross" in doc["parts"][0]["text"].lower()
    tiff = io.BytesIO()
    first, second = text_image(["Zebras"]), text_image(["Crocodiles"])
    first.save(tiff, format="TIFF", save_all=True, append_images=[second])
    doc = only(parse_document("image", "scan.tiff", tiff.getvalue(), CFG))
    assert [p["page"] for p in doc["parts"]] == [1, 2] and meta(doc)["pages"] == 2
    assert "Crocodiles" in doc["parts"][1]["text"]


def test_image_bombs_broken_images_and_no_ocr():
    with pytest.raises(Unreadable, match="decompression bomb: .*2500000000 pixels"):
        parse_document("image", "bomb.png", png_bomb(), CFG)
    with pytest.raises(Unreadable, match="decompression bomb: .*exceeds limit of 1000000 pixels"):
        parse_document("image", "big.png", png_bomb(1500, 1000), DocumentsConfig(max_image_pixels=1_000_000))
    with pytest.raises(Unreadable, match="not a readable image"):
        parse_document("image", "x.png", b"\x89PNG\r\n\x1a\n" + bytes(40), CFG)
    with pytest.raises(Unreadable, match="^needs OCR: ingest.documents.ocr is off$"):
        parse_document("image", "sign.png", png(text_image(["Zebras"])), DocumentsConfig(ocr=False))


def test_odt_nested_too_deep_is_unreadable():
    deep = "<text:p>" + "<text:span>" * 20_000 + "deep" + "</text:span>" * 20_000 + "</text:p>"
    with pytest.raises(Unreadable, match="malformed odt: elements nested too deep"):
        parse_document("odt", "deep.odt", odf_file("text", deep), CFG)
