"""E-mails as documents: EML (RFC 822, stdlib `email`) and Outlook MSG (OLE, `olefile`).

An e-mail is a document of its headers (From, To, Cc, Date, Subject) and body; each attachment, and each e-mail
attached to it, becomes documents of its own (`source` "<e-mail>#attachment/<name>"), parsed by the caller's
dispatcher one level deeper. Beyond `max_attachment_depth`, and where an attachment is of a type Ragline does not
read or cannot be read, it is listed in the e-mail's metadata (`skipped_attachments`) instead; it never fails the
e-mail.

The stdlib parser would parse a whole MIME tree at once, recursing per level (a RecursionError at a few hundred
nested e-mails, and quadratic time before that). So each message is parsed here one level at a time: headers
only, multipart bodies split on their boundary by `_split`, attached e-mails kept as bytes until their turn.
"""

from __future__ import annotations

import codecs
import datetime as dt
import email.policy
import io
import json
import mimetypes
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from email.parser import BytesParser, Parser
from email.utils import format_datetime
from typing import TYPE_CHECKING

from app.config import DocumentsConfig
from app.ingest.documents.detect import HEAD_BYTES, OLE_ERRORS, describe, detect
from app.ingest.documents.rtf import decompress_rtf, rtf_text
from app.ingest.normalize import decode
from app.ingest.parse import Doc, Unreadable, html_to_text

if TYPE_CHECKING:
    import olefile

# (format, source, data, depth) → documents; raises Unreadable. Text formats are parsed too (an attached .txt).
Dispatch = Callable[[str, str, bytes, int], list[Doc]]

_POLICY = email.policy.default
_MAX_MIME_DEPTH = 20  # multiparts in one message; real mail nests 3-5 (mixed > related > alternative); each
# level re-reads the text below it
_NOT_ATTACHMENTS = {"jsonl", "parquet"}  # record files: their fields are configured for input files only
_HEADERS = ("From", "To", "Cc", "Date", "Subject")
# what an attachment is by its MIME type, where neither its content nor its name tells (a .txt named "notes")
_BY_MIME_TYPE = {"text/plain": "text", "text/markdown": "markdown", "text/html": "html", "text/csv": "csv",
                 "message/rfc822": "eml", "message/global": "eml"}


# --- shared: the e-mail's document and its attachments ---

def _mail_doc(fmt: str, source: str, headers: dict[str, str], body: str, metadata: dict[str, object]) -> Doc:
    lines = [f"{name}: {headers[name]}" for name in _HEADERS if headers.get(name)]
    text = "\n".join(lines) + ("\n\n" + body if body else "")
    meta = {"format": fmt, **{k.lower(): v for k, v in headers.items() if v}, **metadata}
    return {"doc_id": "", "source": source, "title": headers.get("Subject", ""), "text": text,
            "metadata": json.dumps(meta), "parts": [], "unit": ""}


def _safe_name(name: str) -> str:
    return name.replace("/", "_").replace("\\", "_").strip() or "attachment"


class _Attachments:
    """Parses an e-mail's attachments one level deeper, or records why not."""

    def __init__(self, source: str, depth: int, cfg: DocumentsConfig, dispatch: Dispatch):
        self.source, self.depth, self.cfg, self.dispatch = source, depth, cfg, dispatch
        self.docs: list[Doc] = []
        self.parsed: list[str] = []
        self.skipped: list[dict[str, str]] = []

    def too_deep(self, name: str, kind: str) -> bool:
        """Is this e-mail's attachment beyond the depth limit? Then it is recorded as skipped."""
        if self.depth + 1 <= self.cfg.max_attachment_depth:
            return False
        self.skip(name, kind, f"nested deeper than ingest.documents.max_attachment_depth "
                              f"({self.cfg.max_attachment_depth})")
        return True

    def skip(self, name: str, kind: str, reason: str = "") -> None:
        self.skipped.append({"name": name, "type": kind, **({"reason": reason} if reason else {})})

    def source_of(self, name: str) -> str:
        return f"{self.source}#attachment/{name}"

    def add(self, name: str, data: bytes, fmt: str | None = None) -> None:
        """Attachment `name` (its format detected unless given) parsed, or recorded as skipped."""
        fmt = detect(name, data) or fmt
        if fmt is None:
            self.skip(name, describe(name, data[:HEAD_BYTES]))
        elif fmt in _NOT_ATTACHMENTS:
            self.skip(name, fmt, "record files are read as input files only")
        elif not self.too_deep(name, fmt):
            try:
                self.take(name, self.dispatch(fmt, self.source_of(name), data, self.depth + 1))
            except Unreadable as e:
                self.skip(name, fmt, str(e))

    def take(self, name: str, docs: list[Doc]) -> None:
        """The documents parsed from attachment `name`, each told which e-mail it came with."""
        for doc in docs:
            metadata = json.loads(doc["metadata"])
            metadata.setdefault("attached_to", self.source)  # set deeper down for an attachment's attachments
            doc["metadata"] = json.dumps(metadata)
        self.docs.extend(docs)
        self.parsed.append(name)

    def metadata(self) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.parsed:
            out["attachments"] = self.parsed
        if self.skipped:
            out["skipped_attachments"] = self.skipped
        return out


# --- EML ---

def _parse_headers(data: bytes) -> EmailMessage:
    message: EmailMessage = BytesParser(policy=_POLICY).parsebytes(data, headersonly=True)
    return message


def _split(part: EmailMessage) -> list[EmailMessage]:
    """A multipart's sub-parts (RFC 2046: delimiter lines "--boundary", the last "--boundary--"), each parsed
    headers only."""
    boundary = part.get_boundary()
    body = part.get_payload()
    if not boundary or not isinstance(body, str):
        return []
    delimiter = "--" + boundary
    chunks: list[list[str]] = []
    current: list[str] | None = None  # None: in the preamble or the epilogue
    for line in body.split("\n"):
        if line.startswith(delimiter) and line[len(delimiter):].rstrip() in ("", "--"):
            if current is not None:
                chunks.append(current)
            if line[len(delimiter):].rstrip() == "--":
                current = None
                break
            current = []
        elif current is not None:
            current.append(line)
    if current is not None:  # no closing delimiter: the last part runs to the end
        chunks.append(current)
    for chunk in chunks:  # the line break before a delimiter belongs to the delimiter: CRLF's CR too
        if chunk and chunk[-1].endswith("\r"):
            chunk[-1] = chunk[-1][:-1]
    parser = Parser(policy=_POLICY)
    return [parser.parsestr("\n".join(c), headersonly=True) for c in chunks]


def _leaves(message: EmailMessage) -> tuple[list[EmailMessage], bool]:
    """The message's non-multipart parts in order (an attached e-mail is one), and whether multiparts were nested
    deeper than `_MAX_MIME_DEPTH` (those are left out)."""
    leaves: list[EmailMessage] = []
    too_deep = False
    stack: list[tuple[EmailMessage, int]] = [(message, 0)]
    while stack:
        part, depth = stack.pop()
        if part.get_content_maintype() != "multipart":
            leaves.append(part)
        elif depth >= _MAX_MIME_DEPTH:
            too_deep = True
        else:
            stack.extend((sub, depth + 1) for sub in reversed(_split(part)))
    return leaves, too_deep


def _is_body(part: EmailMessage) -> bool:
    return (part.get_content_type() in ("text/plain", "text/html") and part.get_filename() is None
            and part.get_content_disposition() != "attachment")


def _text(part: EmailMessage) -> str:
    data = part.get_payload(decode=True)
    assert isinstance(data, bytes)  # a leaf's payload, its transfer encoding undone
    charset = part.get_content_charset() or "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:  # a charset Python does not know: read as UTF-8, bad bytes replaced
        return decode(data)[0].replace("\r\n", "\n")
    return data.decode(charset, errors="replace").replace("\r\n", "\n")


def _body(parts: list[EmailMessage]) -> str:
    """The inline text/plain parts; without any, the inline text/html parts as text."""
    plain = [_text(p) for p in parts if p.get_content_type() == "text/plain"]
    if plain:
        return "\n\n".join(t.strip() for t in plain if t.strip())
    return "\n\n".join(html_to_text(_text(p)) for p in parts)


def _attachment_name(part: EmailMessage, index: int) -> str:
    if name := part.get_filename():
        return name
    extension = mimetypes.guess_extension(part.get_content_type()) or ".bin"
    return f"attachment-{index}{extension}"


def parse_eml(source: str, data: bytes, cfg: DocumentsConfig, depth: int, dispatch: Dispatch) -> list[Doc]:
    """An RFC 822 e-mail: its document, then its attachments' documents."""
    message = _parse_headers(data)
    headers = {name: " ".join(str(message[name]).split()) for name in _HEADERS if message[name] is not None}
    leaves, mime_too_deep = _leaves(message)
    attachments = _Attachments(source, depth, cfg, dispatch)
    bodies = []
    for index, part in enumerate(leaves, start=1):
        if _is_body(part):
            bodies.append(part)
            continue
        name = _safe_name(_attachment_name(part, index))
        if part.get_content_maintype() == "image" and part["Content-ID"] and \
                part.get_content_disposition() != "attachment":
            attachments.skip(name, part.get_content_type(), "an image shown in the body (a logo, a signature)")
            continue
        content = part.get_payload(decode=True)
        assert isinstance(content, bytes)  # a leaf's payload, its transfer encoding undone
        attachments.add(name, content, _BY_MIME_TYPE.get(part.get_content_type()))
    metadata = attachments.metadata()
    if mime_too_deep:
        metadata["mime_too_deep"] = f"multiparts nested more than {_MAX_MIME_DEPTH} deep were left out"
    return [_mail_doc("eml", source, headers, _body(bodies), metadata), *attachments.docs]


# --- MSG (MS-OXMSG: properties as streams "__substg1.0_<id><type>", attachments as storages) ---

_UNICODE, _STRING8, _BINARY = "001F", "001E", "0102"
_SUBJECT, _BODY, _HTML, _RTF_COMPRESSED = "0037", "1000", "1013", "1009"
_SENDER_NAME, _SENDER_EMAIL, _DISPLAY_TO, _DISPLAY_CC = "0C1A", "0C1F", "0E04", "0E03"
_ATTACH_DATA, _ATTACH_LONG_NAME, _ATTACH_NAME = "3701", "3707", "3704"
_EMBEDDED_MESSAGE = "__substg1.0_3701000D"  # an attached e-mail: a storage, a message of its own
_PROPERTIES = "__properties_version1.0"
_PROPERTY = struct.Struct("<IIQ")  # tag (type | id << 16), flags, value (fixed-size types) — 16 bytes
_SUBMIT_TIME, _DELIVERY_TIME, _CODEPAGE = 0x00390040, 0x0E060040, 0x3FFD0003  # (id << 16) | type
_FILETIME_EPOCH = dt.datetime(1601, 1, 1, tzinfo=dt.UTC)


@contextmanager
def _ole_errors() -> Iterator[None]:
    """olefile's errors on a broken container, turned into Unreadable."""
    try:
        yield
    except OLE_ERRORS as e:
        raise Unreadable(f"not a readable MSG file: {e}") from e


class _Msg:
    """One message in an MSG file: the root's, or an attached e-mail's storage (`prefix`)."""

    def __init__(self, ole: olefile.OleFileIO, prefix: list[str], top: bool):
        self.ole, self.prefix = ole, prefix
        # the properties stream's header: 32 bytes for the file's message, 24 for an attached one
        self.properties = self._fixed_properties(32 if top else 24)
        self.codepage = f"cp{self.properties.get(_CODEPAGE, 1252) & 0xFFFFFFFF}"  # a PT_LONG: the low 4 bytes
        try:
            codecs.lookup(self.codepage)
        except LookupError:  # a code page Python does not know: Western, the most common
            self.codepage = "cp1252"

    def exists(self, path: list[str]) -> bool:
        with _ole_errors():
            found: bool = self.ole.exists("/".join(path))
        return found

    def stream(self, name: str, path: list[str] | None = None) -> bytes | None:
        full = [*(self.prefix if path is None else path), name]
        if not self.exists(full):
            return None
        with _ole_errors():
            data: bytes = self.ole.openstream(full).read()
        return data

    def _fixed_properties(self, header: int) -> dict[int, int]:
        data = self.stream(_PROPERTIES) or b""
        return {tag: value for tag, _, value in
                (_PROPERTY.unpack_from(data, offset) for offset in range(header, len(data) - 15, 16))}

    def string(self, prop: str, path: list[str] | None = None) -> str:
        if (data := self.stream(f"__substg1.0_{prop}{_UNICODE}", path)) is not None:
            return data.decode("utf-16-le", errors="replace").rstrip("\x00")
        if (data := self.stream(f"__substg1.0_{prop}{_STRING8}", path)) is not None:
            return data.decode(self.codepage, errors="replace").rstrip("\x00")
        return ""

    def date(self) -> str:
        filetime = self.properties.get(_SUBMIT_TIME) or self.properties.get(_DELIVERY_TIME)
        if not filetime:
            return ""
        try:
            return format_datetime(_FILETIME_EPOCH + dt.timedelta(microseconds=filetime // 10))  # 100 ns units
        except OverflowError:  # past the year 9999: not a date
            return ""

    def body(self) -> str:
        """The plain-text body; without one the HTML body as text; without that the compressed RTF body's text
        (Outlook keeps only that for a message written in rich text)."""
        if text := self.string(_BODY):
            return text.strip()
        html = self.stream(f"__substg1.0_{_HTML}{_BINARY}")
        if text := html_to_text(decode(html)[0] if html is not None else self.string(_HTML)):
            return text
        rtf = self.stream(f"__substg1.0_{_RTF_COMPRESSED}{_BINARY}")
        try:
            return rtf_text(decompress_rtf(rtf)) if rtf else ""
        except Unreadable:  # a broken body: the headers and attachments are still worth having
            return ""

    def attachment_storages(self) -> list[list[str]]:
        n = len(self.prefix)
        with _ole_errors():
            paths = self.ole.listdir(streams=False, storages=True)
        return sorted(path for path in paths if len(path) == n + 1 and path[:n] == self.prefix
                      and path[n].startswith("__attach_version1.0_#"))


def _msg_docs(message: _Msg, source: str, cfg: DocumentsConfig, depth: int, dispatch: Dispatch) -> list[Doc]:
    sender = message.string(_SENDER_NAME)
    if address := message.string(_SENDER_EMAIL):
        sender = f"{sender} <{address}>" if sender else address
    headers = {"From": sender, "To": message.string(_DISPLAY_TO), "Cc": message.string(_DISPLAY_CC),
               "Date": message.date(), "Subject": message.string(_SUBJECT)}
    headers = {k: " ".join(v.split()) for k, v in headers.items() if v.strip()}
    attachments = _Attachments(source, depth, cfg, dispatch)
    for index, storage in enumerate(message.attachment_storages(), start=1):
        name = message.string(_ATTACH_LONG_NAME, storage) or message.string(_ATTACH_NAME, storage)
        data = message.stream(f"__substg1.0_{_ATTACH_DATA}{_BINARY}", storage)
        if data is not None:
            attachments.add(_safe_name(name or f"attachment-{index}.bin"), data)
        elif message.exists([*storage, _EMBEDDED_MESSAGE]):  # an e-mail attached as an item
            name = _safe_name(name or f"message-{index}.msg")
            if not attachments.too_deep(name, "msg"):
                inner = _Msg(message.ole, [*storage, _EMBEDDED_MESSAGE], top=False)
                attachments.take(name, _msg_docs(inner, attachments.source_of(name), cfg, depth + 1, dispatch))
        else:  # an OLE object or a reference to a file elsewhere: no bytes to parse
            attachments.skip(_safe_name(name or f"attachment-{index}"), "embedded object or link")
    return [_mail_doc("msg", source, headers, message.body(), attachments.metadata()), *attachments.docs]


def parse_msg(source: str, data: bytes, cfg: DocumentsConfig, depth: int, dispatch: Dispatch) -> list[Doc]:
    """An Outlook MSG e-mail: its document, then its attachments' documents."""
    import olefile

    with _ole_errors():  # a file object: olefile takes bytes shorter than 1536 for a path to open
        ole = olefile.OleFileIO(io.BytesIO(data))
    with ole:
        message = _Msg(ole, [], top=True)
        if not message.exists([f"__substg1.0_{_SUBJECT}{_UNICODE}"]) and not message.exists([_PROPERTIES]):
            raise Unreadable("an OLE file, but not an Outlook message (no message properties)")
        return _msg_docs(message, source, cfg, depth, dispatch)
