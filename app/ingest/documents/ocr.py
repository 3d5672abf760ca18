"""OCR with Tesseract: image files (PNG, JPEG, TIFF, BMP, GIF, WebP) as documents, and the text of rendered PDF
pages (`app.ingest.documents.pdf`)."""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from PIL import Image

from app.config import DocumentsConfig
from app.ingest.parse import Doc, Part, Unreadable


def ocr_unavailable(cfg: DocumentsConfig) -> str | None:
    """Why pages cannot be OCRed here, in words for the user; None when they can."""
    if not cfg.ocr:
        return "ingest.documents.ocr is off"
    if shutil.which("tesseract") is None:
        return "tesseract is not installed"
    return None


@contextmanager
def _one_thread() -> Iterator[None]:
    """Tesseract's OpenMP would start a thread per core for each page; the parallelism is Ray's (a task per file),
    so each OCR subprocess gets one. pytesseract passes this process's environment to its subprocess."""
    before = os.environ.get("OMP_THREAD_LIMIT")
    os.environ["OMP_THREAD_LIMIT"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["OMP_THREAD_LIMIT"]
        else:
            os.environ["OMP_THREAD_LIMIT"] = before


def ocr_text(image: Image.Image, cfg: DocumentsConfig) -> str:
    """The text Tesseract reads in `image` (languages `cfg.ocr_languages`)."""
    import pytesseract

    if image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info:
        # Transparent pixels are black underneath; Tesseract sees what they are on a white page.
        rgba = image.convert("RGBA")
        image = Image.new("RGB", rgba.size, "white")
        image.paste(rgba, mask=rgba.getchannel("A"))
    elif image.mode not in ("1", "L", "RGB"):  # palette and colour spaces to RGB; 16-bit and float grey to L
        image = image.convert("RGB" if image.mode in ("P", "CMYK", "YCbCr", "LAB", "HSV") else "L")
    try:
        with _one_thread():
            text: str = pytesseract.image_to_string(image, lang=cfg.ocr_languages)
    except pytesseract.TesseractError as e:  # a language not installed, an image it cannot take
        raise Unreadable(f"OCR failed: {e.message.strip()}") from e
    return text.strip()


def _check_pixels(image: Image.Image, cfg: DocumentsConfig) -> None:
    if image.width * image.height > cfg.max_image_pixels:
        raise Unreadable(f"decompression bomb: a {image.width}x{image.height} image, more pixels than "
                         f"ingest.documents.max_image_pixels ({cfg.max_image_pixels:,})")


def parse_image(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """An image file as one document of OCRed text: a part per TIFF page (frames of other formats are animation,
    only the first is read)."""
    # Pillow warns (DecompressionBombWarning) past this many pixels and refuses past twice as many
    # (DecompressionBombError); here both are errors. The limit is process-wide, right in the parse sandbox.
    Image.MAX_IMAGE_PIXELS = cfg.max_image_pixels
    parts: list[Part] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                kind = image.format or "unknown"
                frames = getattr(image, "n_frames", 1) if kind == "TIFF" else 1
                if frames > cfg.max_pages:
                    raise Unreadable(f"a TIFF of {frames} pages, more than ingest.documents.max_pages "
                                     f"({cfg.max_pages})")
                for frame in range(frames):
                    image.seek(frame)
                    _check_pixels(image, cfg)  # a TIFF's later pages are not checked on open
                    if why := ocr_unavailable(cfg):  # a bomb or a broken image is said first
                        raise Unreadable(f"needs OCR: {why}")
                    if text := ocr_text(image, cfg):
                        parts.append({"text": text, "page": frame + 1, "section": ""})
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise Unreadable(f"decompression bomb: {e} (ingest.documents.max_image_pixels is "
                         f"{cfg.max_image_pixels:,})") from e
    except Image.UnidentifiedImageError as e:  # its message names the BytesIO object, which says nothing
        raise Unreadable("not a readable image: no image format recognises its content") from e
    except OSError as e:  # a truncated or corrupt image
        raise Unreadable(f"not a readable image: {e}") from e
    metadata = {"format": "image", "image_format": kind, "pages": frames}
    return [{"doc_id": "", "source": source, "title": "", "text": "", "metadata": json.dumps(metadata),
             "parts": parts, "unit": "page"}]
