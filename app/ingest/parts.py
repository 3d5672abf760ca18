"""A structured document's parts (pages, slides, sheets, sections) joined into one text, and where a span of that
text came from, as a chunk's location ("p. 7", "slides 3–4", "sheet Sales", "§ Results › Tables")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from app.ingest.normalize import normalize


class Part(TypedDict):
    """A piece of a document in reading order, with where it is: a PDF page, a slide, a sheet, a heading's
    section. Consecutive parts of one section are joined with a line break, sections with a blank line; chunks
    avoid crossing a section boundary (`app.ingest.chunk`)."""

    text: str
    page: int  # 1-based PDF page or slide number; 0 where the format has none
    section: str  # heading path ("Results › Tables"), sheet name or slide title; "" for none


class Segment(TypedDict):
    """A part of a normalised document: its span (characters) and where it came from (`Part`'s page, section)."""

    start: int
    end: int
    page: int
    section: str


def join_parts(parts: Sequence[Part]) -> tuple[str, list[Segment]]:
    """A structured document's text, each part normalised, and the span of each part in it: parts of one section
    joined with a line break (a PDF page break falls mid-paragraph), sections with a blank line. Empty parts are
    left out."""
    pieces: list[str] = []
    segments: list[Segment] = []
    at = 0  # characters so far
    for part in parts:
        piece = normalize(part["text"])
        if not piece:
            continue
        if segments:
            pieces.append("\n" if part["section"] == segments[-1]["section"] else "\n\n")
            at += len(pieces[-1])
        segments.append({"start": at, "end": at + len(piece), "page": part["page"], "section": part["section"]})
        pieces.append(piece)
        at += len(piece)
    return "".join(pieces), segments


def sections(segments: Sequence[Segment]) -> list[tuple[int, int]]:
    """The (start, end) character spans of the sections: runs of consecutive segments with one section."""
    out: list[tuple[int, int]] = []
    for i, seg in enumerate(segments):
        if i and seg["section"] == segments[i - 1]["section"]:
            out[-1] = (out[-1][0], seg["end"])
        else:
            out.append((seg["start"], seg["end"]))
    return out


def locate(start: int, end: int, segments: Sequence[Segment], unit: str) -> tuple[list[int], str, str]:
    """(pages, section, label) of the span [start, end) of a joined text: the pages or slides of the segments it
    overlaps, and the section of the first."""
    hit = [s for s in segments if s["start"] < end and start < s["end"]]
    pages = sorted({s["page"] for s in hit if s["page"] > 0})
    section = hit[0]["section"] if hit else ""
    return pages, section, label(pages, section, unit)


def label(pages: Sequence[int], section: str, unit: str) -> str:
    if pages and unit in ("page", "slide"):
        lo, hi = pages[0], pages[-1]
        if unit == "page":
            return f"p. {lo}" if lo == hi else f"pp. {lo}–{hi}"
        return f"slide {lo}" if lo == hi else f"slides {lo}–{hi}"
    if section:
        return f"sheet {section}" if unit == "sheet" else f"§ {section}"
    return ""
