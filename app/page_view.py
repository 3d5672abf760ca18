"""A PDF page as a PNG with a passage's text highlighted on it: what the console shows beside a cited passage.

The passage is found on the page line by line: the chunk's text is the page's text layer normalised (whitespace
collapsed), so each of its lines is searched for in the page's text with PDFium's own search, in order: a line's
first match after the previous line's is painted, so a sentence the page repeats elsewhere stays unmarked there. A
line the page does not hold (the part of a passage on the next page) is simply not found.
"""

from __future__ import annotations

import io
import threading
from typing import Any

from app.errors import NotFound

_PDFIUM = threading.Lock()  # PDFium is not thread-safe, and the API serves requests on several threads


MAX_PIXELS = 4_000_000  # a page image's area: a page 1 pt wide and a mile tall must not render a mile of pixels


def render_page(data: bytes, page: int, width_px: int, passage: str, max_pixels: int = MAX_PIXELS) -> bytes:
    """Page `page` (1-based) of the PDF `data`, `width_px` wide (narrower where that would exceed `max_pixels`),
    `passage` highlighted. NotFound if the PDF has no such page."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw

    with _PDFIUM:
        pdf = pdfium.PdfDocument(data)
        try:
            if not 1 <= page <= len(pdf):
                raise NotFound(f"the document has {len(pdf)} pages, not page {page}")
            p = pdf[page - 1]
            width_pt, height_pt = p.get_size()  # PDF points (1/72 inch)
            # PDFium rounds each side up to a whole pixel: one pixel less a side keeps the area within the cap
            short = min(width_pt, height_pt)
            fit = ((max_pixels / (width_pt * height_pt)) ** 0.5 * short - 1) / short
            scale = min(width_px / width_pt, fit)
            image = p.render(scale=scale).to_pil().convert("RGBA")
            boxes = _boxes(p.get_textpage(), passage)
        finally:
            pdf.close()
    overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(overlay)
    for left, bottom, right, top in boxes:  # PDF space: origin bottom left, y up
        draw.rectangle([left * scale, (height_pt - top) * scale, right * scale, (height_pt - bottom) * scale],
                       fill=(255, 214, 0, 110))
    out = io.BytesIO()
    Image.alpha_composite(image, overlay).convert("RGB").save(out, format="PNG", optimize=True)
    return out.getvalue()


def _boxes(textpage: Any, passage: str) -> list[tuple[float, float, float, float]]:
    """The rectangles (PDF points) of the passage's lines found on the page, in order. `textpage`: a pypdfium2
    PdfTextPage (the library ships no type hints)."""
    found: list[tuple[float, float, float, float]] = []
    at = 0  # the page text's character index the next line is looked for from
    for line in filter(None, (line.strip() for line in passage.splitlines())):
        searcher = textpage.search(line, match_case=True)
        while (hit := searcher.get_next()) is not None and hit[0] < at:
            pass
        searcher.close()
        if hit is not None:
            start, count = hit
            found += [textpage.get_rect(i) for i in range(textpage.count_rects(start, count))]
            at = start + count
    return found
