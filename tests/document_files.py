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
