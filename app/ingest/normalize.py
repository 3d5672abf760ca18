"""Text normalisation and decoding, pure functions shared by the pipeline and its tests."""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Control characters (Unicode category C*) except the whitespace we keep structure with.
_KEEP = {"\n", "\t"}
_HSPACE = re.compile(r"[^\S\n]+")  # whitespace other than newlines
_BLANK_LINES = re.compile(r"\n\s*\n+")  # two or more line breaks, possibly with spaces between


def decode(data: bytes) -> tuple[str, int]:
    """UTF-8 decode; invalid bytes become U+FFFD. Returns (text, number of invalid bytes replaced)."""
    text = data.decode("utf-8", errors="surrogateescape")
    bad = sum(1 for ch in text if "\udc80" <= ch <= "\udcff")
    if bad:
        text = "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in text)
    return text.removeprefix("\ufeff"), bad


def normalize(text: str) -> str:
    """NFC, control characters removed, horizontal whitespace collapsed to one space, at most one blank line
    between paragraphs (so chunk offsets still land on readable paragraph breaks), stripped."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(ch for ch in text if ch in _KEEP or unicodedata.category(ch)[0] != "C")
    text = _HSPACE.sub(" ", text)
    text = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", text).strip()


def content_hash(text: str) -> str:
    """Hash of normalised text: the exact-duplicate key."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def derived_doc_id(source: str, text: str) -> str:
    """Stable id for documents that come without one: same source and content, same id."""
    return hashlib.sha256(f"{source}\x00{text}".encode()).hexdigest()[:24]
