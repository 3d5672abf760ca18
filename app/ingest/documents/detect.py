"""Which format a file is: by its content (magic bytes) first, its extension second.

`data` is either the whole file or only its head (the input walker sniffs the first `HEAD_BYTES`), so nothing here
needs more than the head: a zip's members are read from the whole file when it is there, else from the local
headers in the head; an OLE file's stream names are found as UTF-16 text in whatever bytes there are.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from pathlib import PurePosixPath

from app.ingest.parse import FORMATS

HEAD_BYTES = 8192
OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# What olefile raises for a broken container: OSErrors mostly; ValueError and OverflowError (fuzzing found) from
# sizes and sector numbers out of any range.
OLE_ERRORS = (OSError, ValueError, OverflowError)
ZIP_MAGIC = b"PK\x03\x04"
_PDF_WITHIN = 1024  # readers accept "%PDF-" anywhere in the first KiB (some files start with junk)
_OFFICE_DIRS = {"word/": "docx", "ppt/": "pptx", "xl/": "xlsx"}
_EXTENSIONS = {
    **FORMATS, ".csv": "csv", ".tsv": "csv", ".pdf": "pdf", ".docx": "docx", ".docm": "docx", ".pptx": "pptx",
    ".pptm": "pptx", ".xlsx": "xlsx", ".xlsm": "xlsx", ".eml": "eml", ".msg": "msg", ".odt": "odt", ".ott": "odt",
    ".ods": "ods", ".ots": "ods", ".odp": "odp", ".otp": "odp", ".epub": "epub", ".rtf": "rtf",
    **dict.fromkeys([".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp"], "image"),
}
_OFFICE = {"docx", "pptx", "xlsx"}
_ZIPPED = {*_OFFICE, "odt", "ods", "odp", "epub"}
# A zip's `mimetype` member (OpenDocument, EPUB: the first member, stored uncompressed) → its format
_MIMETYPES = {"application/vnd.oasis.opendocument.text": "odt",
              "application/vnd.oasis.opendocument.text-template": "odt",
              "application/vnd.oasis.opendocument.spreadsheet": "ods",
              "application/vnd.oasis.opendocument.spreadsheet-template": "ods",
              "application/vnd.oasis.opendocument.presentation": "odp",
              "application/vnd.oasis.opendocument.presentation-template": "odp",
              "application/epub+zip": "epub"}
_MIMETYPE_MAX = 128  # bytes: the longest of those, with room
_FIRST_MEMBER = struct.Struct("<8xH8xI4xHH")  # a local header's method, compressed size, name and extra lengths
# Magic bytes, matched at the start: images are supported ("image"), the rest are named in skip reports only.
_IMAGES = [(rb"\x89PNG\r\n\x1a\n", "PNG image"), (rb"\xff\xd8\xff", "JPEG image"),
           (rb"II\*\x00|MM\x00\*", "TIFF image"), (rb"GIF8[79]a", "GIF image"), (rb"RIFF....WEBP", "WebP image")]
_OTHERS = [(rb"\x7fELF", "ELF executable"), (rb"MZ", "Windows executable"),
           (rb"\xcf\xfa\xed\xfe", "Mach-O executable"), (rb"\xca\xfe\xba\xbe", "Mach-O or Java class file"),
           (rb"\x1f\x8b", "gzip archive"), (rb"BZh", "bzip2 archive"), (rb"\xfd7zXZ\x00", "xz archive"),
           (rb"\x28\xb5\x2f\xfd", "zstd archive"), (rb"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
           (rb"Rar!\x1a\x07", "RAR archive"), (rb".{257}ustar", "tar archive"), (rb"%!PS", "PostScript file"),
           (rb"\{\\rtf", "RTF document"), (rb"SQLite format 3\x00", "SQLite database"),
           (rb"....ftyp", "MP4/QuickTime media"), (rb"OggS", "Ogg media"), (rb"ID3", "MP3 audio"),
           (rb"fLaC", "FLAC audio"), (rb"RIFF....WAVE", "WAV audio"), (rb"RIFF....AVI ", "AVI video"),
           (rb"\x1aE\xdf\xa3", "Matroska/WebM video"), (rb"wOFF", "WOFF font"), (rb"\x00asm", "WebAssembly module"),
           (rb"<\?xml", "XML file")]
# A header block opens with one of these (what mail clients and servers write first) ...
_MAIL_FIRST = {"received", "from", "return-path", "mime-version", "delivered-to", "message-id", "date", "subject",
               "to", "x-mailer", "reply-to", "sender", "x-original-to", "dkim-signature", "arc-seal",
               "authentication-results", "x-received"}
_HEADER_LINE = re.compile(rb"^([!-9;-~]+):")  # RFC 5322 field name: printable ASCII but ':'
_MAIL_SNIFF_LINES = 100


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def _zip_members(data: bytes) -> list[str]:
    """Member names: from the central directory when `data` is the whole file, else from the local headers in the
    head (each is 'PK\\x03\\x04', 26 bytes of fields with the name's length at offset 26, then the name)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, NotImplementedError):  # only a head (the central directory is at the end), a
        pass  # broken zip or one of a zip format version zipfile does not know: the local headers
    names = []
    for m in re.finditer(re.escape(ZIP_MAGIC), data):
        start = m.start() + 30
        if start > len(data):
            break
        (name_len,) = struct.unpack_from("<H", data, m.start() + 26)
        names.append(data[start:start + name_len].decode("utf-8", "replace"))
    return names


def _zip_mimetype(data: bytes) -> str | None:
    """The format a zip's `mimetype` member names: read from the first local header (where OpenDocument and EPUB
    put it, stored), else from the whole file when it is there."""
    if len(data) >= 30:
        method, size, name_len, extra_len = _FIRST_MEMBER.unpack_from(data)
        if data[30:30 + name_len] == b"mimetype" and method == zipfile.ZIP_STORED and size <= _MIMETYPE_MAX:
            start = 30 + name_len + extra_len
            return _MIMETYPES.get(data[start:start + size].decode("ascii", "replace").strip())
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            info = zf.getinfo("mimetype")
            if info.file_size > _MIMETYPE_MAX:
                return None
            return _MIMETYPES.get(zf.read(info).decode("ascii", "replace").strip())
    except (zipfile.BadZipFile, NotImplementedError, KeyError, RuntimeError, ValueError, EOFError, OSError,
            zlib.error):
        return None


def _office_kind(names: list[str]) -> str | None:
    for name in names:
        for prefix, fmt in _OFFICE_DIRS.items():
            if name.startswith(prefix):
                return fmt
    return None


def _utf16(name: str) -> bytes:
    return name.encode("utf-16-le")


def _is_mail(data: bytes) -> bool:
    """Does the text start with an RFC 822 header block: header lines (or their folded continuations) up to a blank
    line or the end of the head, opening with a field mail software writes first, holding From: and Subject: or
    Date:?"""
    names: list[str] = []
    for line in data.split(b"\n", _MAIL_SNIFF_LINES)[:_MAIL_SNIFF_LINES]:
        line = line.rstrip(b"\r")
        if not line:
            break
        if line[:1] in (b" ", b"\t") and names:
            continue
        m = _HEADER_LINE.match(line)
        if not m:
            return False
        names.append(m.group(1).decode("ascii").lower())
    return bool(names) and names[0] in _MAIL_FIRST and "from" in names and ("subject" in names or "date" in names)


def _magic(data: bytes, table: list[tuple[bytes, str]]) -> str | None:
    for magic, what in table:
        if re.match(magic, data, re.DOTALL):
            return what
    return None


def _is_bmp(data: bytes) -> bool:
    # "BM", file size, then two reserved 16-bit fields that writers leave 0: two letters alone would match text.
    return data[:2] == b"BM" and data[6:10] == b"\x00\x00\x00\x00" and len(data) >= 26


def detect(name: str, data: bytes) -> str | None:
    """The format of a file named `name` whose content (or its first `HEAD_BYTES`) is `data`: one of "pdf",
    "docx", "pptx", "xlsx", "odt", "ods", "odp", "epub", "rtf", "csv", "eml", "msg", "image", "jsonl", "parquet",
    "text", "markdown", "html", or None for a type Ragline does not read."""
    ext = _suffix(name)
    by_ext = _EXTENSIONS.get(ext)
    if b"%PDF-" in data[:_PDF_WITHIN]:
        return "pdf"
    if data.startswith(ZIP_MAGIC):
        kind = _zip_mimetype(data) or _office_kind(_zip_members(data))
        return kind or (by_ext if by_ext in _ZIPPED else None)
    if data.startswith(OLE_MAGIC):
        if ext == ".msg" or _utf16("__substg1.0_") in data:
            return "msg"
        # An encrypted .docx/.xlsx/.pptx is an OLE file too: its parser says "password-protected".
        return by_ext if by_ext in _OFFICE else None
    if _magic(data, _IMAGES) or _is_bmp(data):
        return "image"
    if data.startswith(b"PAR1"):
        return "parquet"
    if data[:HEAD_BYTES].lstrip()[:5] == b"{\\rtf":
        return "rtf"
    if b"\x00" not in data and _is_mail(data):
        return "eml"
    if b"\x00" in data[:HEAD_BYTES] and _magic(data, _OTHERS):
        return None  # a known binary type under a text format's name (text never holds NUL: "MZ" could start one)
    return by_ext


def describe(name: str, head: bytes) -> str:
    """A short human name of a file's type, for the report of files skipped as unsupported."""
    if head.startswith(OLE_MAGIC):
        if _utf16("EncryptedPackage") in head:
            return "password-protected Office file"
        return "legacy Word/Excel/PowerPoint (OLE) file"
    if head.startswith(ZIP_MAGIC):
        # OpenDocument stores its "mimetype" member first and uncompressed, so the type is readable in the head
        # (text, spreadsheets and presentations are read: this names the others, drawings, formulas, ...).
        return "OpenDocument file" if b"mimetypeapplication/vnd.oasis.opendocument" in head[:200] else "zip archive"
    if head.startswith(b"%PDF-") or b"%PDF-" in head[:_PDF_WITHIN]:
        return "PDF document"
    if what := _magic(head, _IMAGES) or _magic(head, _OTHERS):
        return what
    if _is_bmp(head):
        return "BMP image"
    if b"\x00" in head:
        return "unknown binary"
    return f"unknown text ({_suffix(name) or 'no extension'})"
