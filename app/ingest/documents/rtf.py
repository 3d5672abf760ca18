"""RTF documents (striprtf), and Outlook's compressed RTF (MS-OXRTFCP) that MSG bodies may come as."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import PurePosixPath

from app.config import DocumentsConfig
from app.ingest.parse import Doc, Unreadable

_CODEPAGE = re.compile(rb"\\ansicpg(\d+)")
_INFO_TEXT = {"title": re.compile(rb"\{\\title\s?((?:[^{}\\]|\\[^{}])*)\}"),
              "author": re.compile(rb"\{\\author\s?((?:[^{}\\]|\\[^{}])*)\}"),
              "subject": re.compile(rb"\{\\subject\s?((?:[^{}\\]|\\[^{}])*)\}"),
              "keywords": re.compile(rb"\{\\keywords\s?((?:[^{}\\]|\\[^{}])*)\}")}
_INFO_TIME = {"created": re.compile(rb"\{\\creatim((?:\\[a-z]+\d+\s?)*)\}"),
              "modified": re.compile(rb"\{\\revtim((?:\\[a-z]+\d+\s?)*)\}")}
_TIME_PART = re.compile(rb"\\(yr|mo|dy|hr|min|sec)(\d+)")
_INFO_WITHIN = 64 << 10  # the \info group comes in the header, before the text


def _encoding(data: bytes) -> str:
    """The code page \\ansicpg names (RTF's 8-bit text and \\'xx escapes), cp1252 when none or one Python lacks."""
    import codecs

    if m := _CODEPAGE.search(data[:_INFO_WITHIN]):
        try:
            return codecs.lookup(f"cp{int(m.group(1))}").name
        except LookupError:
            pass
    return "cp1252"


def rtf_text(data: bytes) -> str:
    """The text of an RTF document: groups of fonts, styles, pictures and other destinations left out."""
    from striprtf.striprtf import rtf_to_text

    encoding = _encoding(data)
    try:
        text: str = rtf_to_text(data.decode("latin-1"), encoding=encoding, errors="replace")
    except (ValueError, IndexError, OverflowError) as e:  # a \u or \'xx escape with a value out of range
        raise Unreadable(f"malformed rtf: {e}") from e
    return "\n".join(line.strip() for line in text.splitlines()).strip()


def _info(data: bytes, encoding: str) -> dict[str, object]:
    from striprtf.striprtf import rtf_to_text

    head = data[:_INFO_WITHIN]
    out: dict[str, object] = {}
    for key, pattern in _INFO_TEXT.items():
        if m := pattern.search(head):
            try:
                value = " ".join(rtf_to_text(m.group(1).decode("latin-1"), encoding=encoding, errors="replace")
                                 .split())
            except (ValueError, IndexError, OverflowError):
                continue
            if value:
                out[key] = value
    for key, pattern in _INFO_TIME.items():
        if m := pattern.search(head):
            parts = {k.decode(): int(v) for k, v in _TIME_PART.findall(m.group(1))}
            try:
                when = dt.datetime(parts["yr"], parts.get("mo", 1), parts.get("dy", 1), parts.get("hr", 0),
                                   parts.get("min", 0), parts.get("sec", 0))
            except (KeyError, ValueError, OverflowError):
                continue
            out[key] = when.isoformat()
    return out


def parse_rtf(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """An RTF file as one document of text, title the \\info group's \\title else the file name's stem."""
    if data[:1024].lstrip()[:5] != b"{\\rtf":
        raise Unreadable("not an RTF document (it does not start with {\\rtf)")
    info = _info(data, _encoding(data))
    title = str(info.pop("title", "")) or PurePosixPath(source).stem
    return [{"doc_id": "", "source": source, "title": title, "text": rtf_text(data),
             "metadata": json.dumps({"format": "rtf", **info}), "parts": [], "unit": ""}]


def decompress_rtf(data: bytes) -> bytes:
    """Outlook's compressed RTF (MS-OXRTFCP, an MSG's PR_RTF_COMPRESSED body) undone by `compressed-rtf`. It checks
    the body's CRC and raises a bare Exception for anything it cannot undo: said here as Unreadable."""
    from compressed_rtf import decompress

    try:
        out: bytes = decompress(data)
    except Exception as e:  # the library's only error type: a short, unknown or corrupt body
        raise Unreadable(f"malformed compressed RTF: {e}") from e
    return out
