"""Documents built in tests: PDFs (reportlab), Office files (python-docx, python-pptx, openpyxl), e-mails, images,
OLE compound files (a minimal MS-CFB writer: olefile only reads) for Outlook MSG, and hostile variants of each."""

from __future__ import annotations

import datetime as dt
import io
import struct
import zipfile
import zlib
from collections.abc import Sequence
from email.message import EmailMessage
from typing import Any

from PIL import Image, ImageDraw, ImageFont

# --- images and PDFs ---


def text_image(lines: list[str], size: int = 64) -> Image.Image:
    """Black text on white, large enough that Tesseract reads it without doubt."""
    font = ImageFont.load_default(size=size)
    image = Image.new("L", (60 + size * max(len(line) for line in lines) * 3 // 5, 60 + len(lines) * size * 3 // 2),
                      255)
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((30, 30 + i * size * 3 // 2), line, font=font, fill=0)
    return image


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def png_bomb(width: int = 50_000, height: int = 50_000) -> bytes:
    """A PNG header declaring `width` x `height` pixels (and no pixel data)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + \
        chunk(b"IEND", b"")


def text_pdf(pages: list[list[str]], title: str = "", outline: Sequence[tuple[str, int, int]] = (),
             images: dict[int, Image.Image] | None = None) -> bytes:
    """A PDF with a page per item of `pages` (lines of text), metadata title `title`, outline entries
    (title, level, 0-based page) and, on page i, `images[i]` drawn instead of text."""
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.utils import ImageReader
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=A4)
    pdf.setTitle(title)  # reportlab's default is "untitled"
    width, height = A4
    for i, lines in enumerate(pages):
        pdf.bookmarkPage(f"p{i}")
        for title_, level, page in outline:
            if page == i:
                pdf.addOutlineEntry(title_, f"p{i}", level=level)
        if images and i in images:
            image = images[i]
            shown = width - 100
            pdf.drawImage(ImageReader(image), 50, height - 50 - shown * image.height / image.width, shown,
                          shown * image.height / image.width)
        for j, line in enumerate(lines):
            pdf.drawString(72, height - 72 - 16 * j, line)
        pdf.showPage()
    pdf.save()
    return out.getvalue()


def table_pdf() -> bytes:
    """A PDF with a heading, a paragraph and a 3-row table (reportlab platypus)."""
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Table

    styles = getSampleStyleSheet()
    out = io.BytesIO()
    SimpleDocTemplate(out).build([
        Paragraph("Herd sizes", styles["Heading1"]), Paragraph("Counted from the air each July.", styles["BodyText"]),
        Table([["Year", "Zebras", "Wildebeest"], ["2023", "200000", "1300000"], ["2024", "210000", "1250000"]])])
    return out.getvalue()


def encrypted(pdf: bytes, password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=password, owner_password=password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# --- Office ---


def docx_file() -> bytes:
    """Title, headings two levels deep, paragraphs and a table with a merged header cell, in that order."""
    import docx

    document = docx.Document()
    document.core_properties.title = ""
    document.add_paragraph("Great Migrations", style="Title")
    document.add_paragraph("An overview for rangers.")
    document.add_heading("Zebras", level=1)
    document.add_paragraph("Zebras cross the Mara river every July.")
    document.add_heading("Numbers", level=2)
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Herd"
    table.cell(0, 2).text = "Note"
    for r, row in enumerate([["2023", "200000", "dry year"], ["2024", "210000", "wet year"]], start=1):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("After the table, still in Numbers.")
    document.add_heading("Predators", level=1)
    document.add_paragraph("Crocodiles wait in the river.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_extras_file() -> bytes:
    """A paragraph with a text box drawn both ways (DrawingML, VML fallback), a header, a footer that only numbers
    the page, a second section repeating the header, a first-page footer, and a comment."""
    import docx
    from docx.enum.section import WD_SECTION
    from docx.oxml import parse_xml

    document = docx.Document()
    document.core_properties.title = "Field Notes"
    document.add_paragraph("Zebras cross at dawn.")
    anchor = document.add_paragraph("See the box.")
    box = ('<w:txbxContent><w:p><w:r><w:t>Boxed: 210000 zebras</w:t></w:r></w:p>'
           '<w:p><w:r><w:t>counted from the air</w:t></w:r></w:p></w:txbxContent>')
    anchor._p.append(parse_xml(
        '<w:r xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
        'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
        'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
        'xmlns:v="urn:schemas-microsoft-com:vml"><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing>'
        f'<wps:wsp><wps:txbx>{box}</wps:txbx></wps:wsp></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape>'
        f'<v:textbox>{box}</v:textbox></v:shape></w:pict></mc:Fallback></mc:AlternateContent></w:r>'))
    comment_on = document.add_paragraph("Crocodiles wait.")
    document.add_comment(comment_on.runs, text="Which river?", author="Bob")
    section = document.sections[0]
    section.header.paragraphs[0].text = "Ranger Handbook"
    section.footer.paragraphs[0].text = "Page 1 of 2"
    section.different_first_page_header_footer = True
    section.first_page_footer.paragraphs[0].text = "Draft, do not share"
    second = document.add_section(WD_SECTION.NEW_PAGE)
    second.header.is_linked_to_previous = False
    second.header.paragraphs[0].text = "Ranger Handbook"  # the same as the first section's: once
    document.add_paragraph("Second section.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def pptx_file() -> bytes:
    """Three slides: bullets with notes, a table, a title only."""
    from pptx import Presentation
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])  # title and content
    slide.shapes.title.text = "Migration"
    slide.placeholders[1].text_frame.text = "Zebras lead the herd"
    slide.placeholders[1].text_frame.add_paragraph().text = "Wildebeest follow"
    slide.notes_slide.notes_text_frame.text = "Mention the river crossing."
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = "Numbers"
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    for r, row in enumerate([["Year", "Zebras"], ["2024", "210000"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Questions"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def pptx_chart_file() -> bytes:
    """A slide with a titled column chart of two series over two years."""
    from pptx import Presentation
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    presentation = Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])
    slide.shapes.title.text = "Herds"
    data = CategoryChartData()
    data.categories = ["2023", "2024"]
    data.add_series("Zebras", (200000, 210000.5))
    data.add_series("Gnus", (1300000, None))
    chart = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(2), Inches(6), Inches(4),
                                   data).chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Herd sizes"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def xlsx_file() -> bytes:
    """Two sheets: Herds (a header row, two data rows, an empty row between them) and Notes."""
    import openpyxl

    workbook = openpyxl.Workbook()
    herds = workbook.active
    herds.title = "Herds"
    herds.append(["Year", "Zebras", "Place"])
    herds.append([2023, 200000, "Mara"])
    herds.append([])
    herds.append([2024, 210000.0, None])
    notes = workbook.create_sheet("Notes")
    notes.append(["Topic", "Note"])
    notes.append(["Rain", "Late this year"])
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def rezip(data: bytes, replace: dict[str, bytes]) -> bytes:
    """A copy of zip `data` with members replaced (or added)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, replace.get(info.filename, src.read(info)))
        for name in replace.keys() - set(src.namelist()):
            dst.writestr(name, replace[name])
    return out.getvalue()


def zeros_member(data: bytes, name: str, size: int) -> bytes:
    """Zip `data` with a member of `size` zero bytes added, written in 1 MiB pieces (memory stays small)."""
    out = io.BytesIO(data)
    with zipfile.ZipFile(out, "a", zipfile.ZIP_DEFLATED) as archive, archive.open(name, "w", force_zip64=True) as f:
        piece = bytes(1 << 20)
        for _ in range(size >> 20):
            f.write(piece)
    return out.getvalue()


BILLION_LAUGHS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<!DOCTYPE w:document [\n'
                  '<!ENTITY lol0 "lollollollollollollollollollol">\n'
                  + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">\n' for i in range(1, 10))
                  + ']>\n<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
                  '<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>').encode()


# --- e-mail ---


def eml(subject: str, body: str, attachments: Sequence[tuple[str, str, bytes]] = (), html: str = "") -> bytes:
    """An e-mail with a plain (and optionally html) body and (filename, mime type, data) attachments."""
    message = EmailMessage()
    message["From"] = "Ranger Ann <ann@example.org>"
    message["To"] = "Bob <bob@example.org>"
    message["Date"] = "Mon, 01 Jul 2024 09:30:00 +0000"
    message["Subject"] = subject
    message.set_content(body)
    if html:
        message.add_alternative(html, subtype="html")
    for name, mime, data in attachments:
        maintype, subtype = mime.split("/")
        message.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return message.as_bytes()


def nested_eml(depth: int) -> bytes:
    """An e-mail `depth` levels deep: each level a multipart with a line of text and the level below attached as
    message/rfc822. Built as bytes, level by level (the email package would recurse)."""
    data = b"From: a@example.org\r\nSubject: level 0\r\n\r\nthe innermost e-mail\r\n"
    for level in range(1, depth + 1):
        boundary = f"b{level}".encode()
        data = (b"From: a@example.org\r\nSubject: level %d\r\nMIME-Version: 1.0\r\n"
                b"Content-Type: multipart/mixed; boundary=\"%s\"\r\n\r\n--%s\r\nContent-Type: text/plain\r\n\r\n"
                b"level %d text\r\n--%s\r\nContent-Type: message/rfc822\r\n\r\n%s\r\n--%s--\r\n"
                % (level, boundary, boundary, level, boundary, data, boundary))
    return data


# --- OLE compound files (MS-CFB version 3) and Outlook MSG ---

_SECTOR, _MINI, _CUTOFF = 512, 64, 4096
_FREE, _END, _FATSECT, _NOSTREAM = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD, 0xFFFFFFFF


def cfb(streams: dict[str, bytes]) -> bytes:
    """A compound file holding `streams` ("storage/…/stream" paths → data); storages are made as needed."""
    entries: list[dict[str, Any]] = [{"name": "Root Entry", "type": 5, "children": [], "data": b""}]
    index: dict[str, int] = {"": 0}
    for path, data in streams.items():
        parent = ""
        for depth, name in enumerate(names := path.split("/")):
            key = "/".join(names[:depth + 1])
            if key not in index:
                index[key] = len(entries)
                entries[index[parent]]["children"].append(len(entries))
                entries.append({"name": name, "type": 2 if depth == len(names) - 1 else 1, "children": [],
                                "data": data if depth == len(names) - 1 else b""})
            parent = key
    # small streams live in the mini stream (64-byte sectors), big ones in regular sectors
    mini, minifat, big = bytearray(), [], []
    for entry in entries[1:]:
        data = entry["data"]
        if entry["type"] != 2 or not data:
            entry["start"] = _END if entry["type"] == 2 else 0
        elif len(data) < _CUTOFF:
            entry["start"] = len(mini) // _MINI
            n = -(-len(data) // _MINI)
            minifat += [entry["start"] + i + 1 for i in range(n - 1)] + [_END]
            mini += data.ljust(n * _MINI, b"\x00")
        else:
            big.append(entry)
    # the directory: 128-byte entries, each storage's children as a binary search tree (CFB name order)
    for entry in entries:
        kids = sorted(entry["children"], key=lambda k: (len(entries[k]["name"]), entries[k]["name"].upper()))

        def tree(ids: list[int]) -> int:
            if not ids:
                return _NOSTREAM
            mid = len(ids) // 2
            entries[ids[mid]]["left"], entries[ids[mid]]["right"] = tree(ids[:mid]), tree(ids[mid + 1:])
            return ids[mid]

        entry["child"] = tree(kids)
    regions: list[tuple[str, bytes]] = [("dir", b""), ("minifat", b""), ("mini", bytes(mini))]
    regions += [(f"big{i}", e["data"]) for i, e in enumerate(big)]
    directory_size = -(-len(entries) // 4) * _SECTOR
    regions[0] = ("dir", bytes(directory_size))
    regions[1] = ("minifat", b"".join(struct.pack("<I", v) for v in minifat))
    sizes = [-(-len(data) // _SECTOR) for _, data in regions]
    n_fat = 1
    while n_fat * 128 < n_fat + sum(sizes):
        n_fat += 1
    starts, fat, at = {}, [_FATSECT] * n_fat, n_fat
    for (name, _), n in zip(regions, sizes, strict=True):
        starts[name] = at if n else _END
        fat += [at + i + 1 for i in range(n - 1)] + ([_END] if n else [])
        at += n
    fat += [_FREE] * (n_fat * 128 - len(fat))
    entries[0]["start"], entries[0]["size"] = starts["mini"], len(mini)
    for i, entry in enumerate(big):
        entry["start"] = starts[f"big{i}"]
    directory = b""
    for entry in entries:
        name = entry["name"].encode("utf-16-le") + b"\x00\x00"
        directory += struct.pack("<64sHBBIII16sIQQIQ", name, len(name), entry["type"], 1, entry.get("left", _NOSTREAM),
                                 entry.get("right", _NOSTREAM), entry["child"], b"", 0, 0, 0, entry["start"],
                                 entry.get("size", len(entry["data"])))
    empty = struct.pack("<64sHBBIII16sIQQIQ", b"", 0, 0, 0, _NOSTREAM, _NOSTREAM, _NOSTREAM, b"", 0, 0, 0, 0, 0)
    directory = directory.ljust(directory_size, b"\x00")
    directory = b"".join(directory[i:i + 128] if i < len(entries) * 128 else empty
                         for i in range(0, directory_size, 128))
    regions[0] = ("dir", directory)
    difat = [*range(n_fat), *[_FREE] * (109 - n_fat)]
    header = struct.pack("<8s16sHHHHH6sIIIIIIIII109I", bytes.fromhex("D0CF11E0A1B11AE1"), b"", 0x3E, 3, 0xFFFE, 9,
                         6, b"", 0, n_fat, starts["dir"], 0, _CUTOFF, starts["minifat"] if minifat else _END,
                         -(-len(minifat) * 4 // _SECTOR), _END, 0, *difat)
    body = b"".join(struct.pack("<I", v) for v in fat)
    body += b"".join(data.ljust(n * _SECTOR, b"\x00") for (_, data), n in zip(regions, sizes, strict=True))
    return header + body


def _filetime(when: dt.datetime) -> int:
    return int((when - dt.datetime(1601, 1, 1, tzinfo=dt.UTC)).total_seconds() * 10_000_000)


def msg_file(subject: str, body: str, attachments: Sequence[tuple[str, bytes]] = (),
             sent: dt.datetime | None = None) -> bytes:
    """An Outlook MSG: subject, plain body, sender, To, submit time and attachments (by value)."""
    def utf16(text: str) -> bytes:
        return text.encode("utf-16-le")

    properties = bytes(32)  # the top-level message's header: reserved, next ids, counts
    if sent is not None:
        properties += struct.pack("<IIQ", 0x00390040, 0, _filetime(sent))  # PR_CLIENT_SUBMIT_TIME
    streams = {"__properties_version1.0": properties, "__substg1.0_0037001F": utf16(subject),
               "__substg1.0_1000001F": utf16(body), "__substg1.0_0C1A001F": utf16("Ranger Ann"),
               "__substg1.0_0C1F001F": utf16("ann@example.org"), "__substg1.0_0E04001F": utf16("Bob")}
    for i, (name, data) in enumerate(attachments):
        storage = f"__attach_version1.0_#{i:08X}"
        streams[f"{storage}/__properties_version1.0"] = bytes(8)
        streams[f"{storage}/__substg1.0_3707001F"] = utf16(name)
        streams[f"{storage}/__substg1.0_37010102"] = data
    return cfb(streams)


# --- OpenDocument, EPUB, RTF (zips and text built by hand) ---

ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
          'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
          'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
          'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
          'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" xmlns:dc="http://purl.org/dc/elements/1.1/"')
ODF_META = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-meta {ODF_NS}><office:meta>'
            '<dc:title>Great Migrations</dc:title><dc:creator>Ranger Ann</dc:creator><dc:subject>Herds</dc:subject>'
            '<meta:keyword>zebra</meta:keyword><meta:keyword>river</meta:keyword>'
            '<meta:creation-date>2024-07-01T09:30:00.123</meta:creation-date><dc:date>2024-07-02T10:00:00Z</dc:date>'
            '</office:meta></office:document-meta>')


def zip_file(members: dict[str, str | bytes], mimetype: str | None = None) -> bytes:
    """A zip with `mimetype` first and stored (as OpenDocument and EPUB have it), then `members` deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        if mimetype is not None:
            archive.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def odf_file(kind: str, body: str, meta: str = ODF_META) -> bytes:
    """An OpenDocument file of `kind` ("text", "spreadsheet", "presentation") whose office:body holds `body`."""
    content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF_NS} office:version="1.3">'
               f'<office:body><office:{kind}>{body}</office:{kind}></office:body></office:document-content>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE manifest:manifest PUBLIC "-//OpenOffice.org//DTD '
                'Manifest 1.0//EN" "Manifest.dtd"><manifest:manifest '
                'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"/>')  # as OpenOffice 2 wrote it
    return zip_file({"content.xml": content, "meta.xml": meta, "META-INF/manifest.xml": manifest},
                    f"application/vnd.oasis.opendocument.{kind}")


def odt_file() -> bytes:
    """Headings two levels deep, a paragraph with spaces, a tab, a footnote and a comment, a list, a table with a
    merged cell and a text box."""
    return odf_file("text", (
        '<text:h text:outline-level="1">Zebras</text:h>'
        '<text:p>Zebras<text:s text:c="2"/>cross<text:tab/>the river.<text:note text:note-class="footnote">'
        '<text:note-citation>1</text:note-citation><text:note-body><text:p>Every July.</text:p></text:note-body>'
        '</text:note><office:annotation><dc:creator>Bob</dc:creator><text:p>Check the month.</text:p>'
        '</office:annotation></text:p>'
        '<text:list><text:list-item><text:p>Stripes</text:p></text:list-item>'
        '<text:list-item><text:p>Hooves</text:p><text:list><text:list-item><text:p>Hard</text:p></text:list-item>'
        '</text:list></text:list-item></text:list>'
        '<text:h text:outline-level="2">Numbers</text:h>'
        '<table:table table:name="Herds"><table:table-header-rows><table:table-row>'
        '<table:table-cell table:number-columns-spanned="2"><text:p>Herd</text:p></table:table-cell>'
        '<table:covered-table-cell/><table:table-cell><text:p>Note</text:p></table:table-cell></table:table-row>'
        '</table:table-header-rows><table:table-row><table:table-cell><text:p>2024</text:p></table:table-cell>'
        '<table:table-cell><text:p>210000</text:p></table:table-cell><table:table-cell><text:p>wet</text:p>'
        '</table:table-cell></table:table-row></table:table>'
        '<text:p><draw:frame><draw:text-box><text:p>Boxed fact.</text:p></draw:text-box></draw:frame></text:p>'
        '<text:section><text:h text:outline-level="1">Predators</text:h><text:p>Crocodiles wait.</text:p>'
        '</text:section>'))


def ods_file() -> bytes:
    """Two sheets: Herds (a header, a row with an empty cell in the middle, rows repeated and padded as
    LibreOffice writes them) and an empty one."""
    def cell(value: str = "", repeat: int = 1) -> str:
        attr = f' table:number-columns-repeated="{repeat}"' if repeat > 1 else ""
        return f"<table:table-cell{attr}><text:p>{value}</text:p></table:table-cell>" if value else \
            f"<table:table-cell{attr}/>"

    def row(*cells: str, repeat: int = 1) -> str:
        attr = f' table:number-rows-repeated="{repeat}"' if repeat > 1 else ""
        return f"<table:table-row{attr}>{''.join(cells)}</table:table-row>"

    return odf_file("spreadsheet", (
        '<table:table table:name="Herds">'
        + row(cell("Year"), cell("Zebras"), cell("Place"), cell(repeat=16381))
        + row(cell("2023"), cell(), cell("Mara"), cell(repeat=16381))
        + row(cell("2024"), cell("210000"), cell(repeat=16382), repeat=2)
        + row(cell(repeat=16384), repeat=1048572)
        + '</table:table><table:table table:name="Empty">' + row(cell(repeat=1024), repeat=1048576)
        + "</table:table>"))


def odp_file() -> bytes:
    """Two slides: a title, bullets and notes; a title only."""
    def frame(cls: str, *paragraphs: str) -> str:
        return (f'<draw:frame presentation:class="{cls}"><draw:text-box>'
                + "".join(f"<text:p>{p}</text:p>" for p in paragraphs) + "</draw:text-box></draw:frame>")

    return odf_file("presentation", (
        '<draw:page draw:name="page1">' + frame("title", "Migration") + frame("outline", "Zebras lead", "Gnus follow")
        + '<presentation:notes><draw:frame><draw:text-box><text:p>Mention the river.</text:p></draw:text-box>'
        '</draw:frame></presentation:notes></draw:page>'
        '<draw:page draw:name="page2">' + frame("title", "Questions") + "</draw:page>"))


def epub_file(version: int = 3) -> bytes:
    """An EPUB (3 with a nav document, or 2 with an NCX): a cover without text, two chapters whose spine order is
    not their manifest order, one of them in a folder with a space in its name."""
    chapter = ('<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE html><html xmlns="http://www.w3.org/1999/xhtml">'
               '<head><title>{title}</title><style>p {{ color: red }}</style></head><body>{body}</body></html>')
    members: dict[str, str | bytes] = {
        "META-INF/container.xml": '<?xml version="1.0"?><container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OEBPS/book.opf" '
        'media-type="application/oebps-package+xml"/></rootfiles></container>',
        "OEBPS/cover.xhtml": chapter.format(title="Cover", body='<img src="cover.png" alt=""/>'),
        "OEBPS/text one/c1.xhtml": chapter.format(title="One", body="<section><header><h1>Crossing</h1></header>"
                                                 "<p>The herd crosses at dawn.</p><p>Zebras first.</p></section>"),
        "OEBPS/c2.xhtml": chapter.format(title="Two", body="<h2>Waiting</h2><p>Crocodiles wait.</p>"),
    }
    toc = ""
    nav_item = ""
    if version == 3:
        members["OEBPS/nav.xhtml"] = chapter.format(title="Contents", body=(
            '<nav epub:type="toc" xmlns:epub="http://www.idpf.org/2007/ops"><ol>'
            '<li><a href="text%20one/c1.xhtml#start">1. The Crossing</a></li></ol></nav>'))
        nav_item = '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    else:
        members["OEBPS/toc.ncx"] = (
            '<?xml version="1.0"?><!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" '
            '"http://www.daisy.org/z3986/2005/ncx-2005-1.dtd"><ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" '
            'version="2005-1"><navMap><navPoint id="n1" playOrder="1"><navLabel><text>1. The Crossing</text>'
            '</navLabel><content src="text%20one/c1.xhtml"/></navPoint></navMap></ncx>')
        nav_item = '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        toc = ' toc="ncx"'
    members["OEBPS/book.opf"] = (
        f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="{version}.0">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Great Migrations</dc:title>'
        '<dc:creator>Ranger Ann</dc:creator><dc:creator>Bob</dc:creator><dc:language>en</dc:language></metadata>'
        f'<manifest>{nav_item}<item id="c2" href="c2.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="c1" href="text%20one/c1.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="cover" href="cover.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="css" href="style.css" media-type="text/css"/></manifest>'
        f'<spine{toc}><itemref idref="cover"/><itemref idref="c1"/><itemref idref="css"/><itemref idref="c2"/>'
        '</spine></package>')
    return zip_file(members, "application/epub+zip")


RTF = (rb"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0 Arial;}}{\colortbl;\red255\green0\blue0;}"
       rb"{\info{\title Great Migrations}{\author Ranger Ann}{\creatim\yr2024\mo7\dy1\hr9\min30}}"
       rb"{\*\generator Riched20;}\f0\fs24 Zebras cross the river in July.\par" b"\r\n"
       rb"Caf\'e9 by the \b Mara\b0 , \u8364? 5.\par}")

def compressed_rtf(rtf: bytes) -> bytes:
    """`rtf` as Outlook's compressed RTF (MS-OXRTFCP), as an MSG keeps a rich-text body."""
    from compressed_rtf import compress

    return bytes(compress(rtf, compressed=True))


def msg_rtf_only(subject: str, rtf: bytes) -> bytes:
    """An Outlook MSG whose only body is compressed RTF (PR_RTF_COMPRESSED), as for a message written in rich
    text."""
    return cfb({"__properties_version1.0": bytes(32), "__substg1.0_0037001F": subject.encode("utf-16-le"),
                "__substg1.0_10090102": compressed_rtf(rtf)})
