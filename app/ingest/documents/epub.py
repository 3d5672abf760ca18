"""EPUB e-books as documents: META-INF/container.xml names the package (OPF), whose spine lists the chapters'
XHTML files in reading order. XML is parsed with defusedxml (an NCX's DOCTYPE is allowed, entity declarations
are not), XHTML with BeautifulSoup's html.parser (which never expands a DTD's entities)."""

from __future__ import annotations

import io
import posixpath
import zipfile
from typing import TYPE_CHECKING
from urllib.parse import unquote, urldefrag

from app.config import DocumentsConfig
from app.ingest.documents.odf import _read
from app.ingest.documents.office import _doc, _one_line, check_zip
from app.ingest.parse import Doc, Part, Unreadable

if TYPE_CHECKING:
    pass

MIMETYPE = "application/epub+zip"
_NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container", "opf": "http://www.idpf.org/2007/opf",
       "dc": "http://purl.org/dc/elements/1.1/", "ncx": "http://www.daisy.org/z3986/2005/ncx/"}
_DROP = ["script", "style", "noscript", "template", "svg", "head"]
_HEADINGS = ["h1", "h2", "h3", "h4", "h5", "h6"]


def _member(archive: zipfile.ZipFile, base: str, href: str) -> str:
    """The zip member an href (relative to the file at `base`, percent-encoded, maybe with a #fragment) names."""
    path = unquote(urldefrag(href)[0])
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), path)).lstrip("/")


def _toc_labels(archive: zipfile.ZipFile, opf_path: str, manifest: dict[str, tuple[str, str, str]],
                toc_id: str) -> dict[str, str]:
    """Chapter file → its first label in the table of contents: the EPUB 3 nav document, else the EPUB 2 NCX."""
    from bs4 import BeautifulSoup

    labels: dict[str, str] = {}
    nav = next((href for href, _, props in manifest.values() if "nav" in props.split()), None)
    if nav is not None:
        nav_path = _member(archive, opf_path, nav)
        try:
            soup = BeautifulSoup(archive.read(nav_path).decode("utf-8", "replace"), "html.parser")
        except KeyError:
            soup = None
        toc = soup and (soup.find("nav", attrs={"epub:type": "toc"}) or soup.find("nav"))
        if toc:
            for a in toc.find_all("a", href=True):
                target = _member(archive, nav_path, str(a["href"]))
                if (label := _one_line(a.get_text(" "))) and target not in labels:
                    labels[target] = label
    if not labels and toc_id in manifest:
        ncx_path = _member(archive, opf_path, manifest[toc_id][0])
        ncx = _read(archive, ncx_path)
        if ncx is not None:
            for point in ncx.iter(f"{{{_NS['ncx']}}}navPoint"):
                text = point.find("ncx:navLabel/ncx:text", _NS)
                content = point.find("ncx:content", _NS)
                if text is not None and content is not None and (label := _one_line(text.text or "")):
                    labels.setdefault(_member(archive, ncx_path, content.get("src", "")), label)
    return labels


def parse_epub(source: str, data: bytes, cfg: DocumentsConfig) -> list[Doc]:
    """An EPUB as one document: a part per spine document with text, in reading order, `section` the chapter's
    table-of-contents label else its first heading; title and author from the package's Dublin Core."""
    from bs4 import BeautifulSoup

    check_zip(data, cfg, refuse_dtd=False)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        container = _read(archive, "META-INF/container.xml")
        rootfile = container.find(".//c:rootfile", _NS) if container is not None else None
        opf_path = rootfile.get("full-path", "") if rootfile is not None else ""
        opf = _read(archive, opf_path) if opf_path else None
        if opf is None:
            raise Unreadable("not a readable EPUB: no package document (META-INF/container.xml's rootfile)")
        manifest: dict[str, tuple[str, str, str]] = {
            item.get("id", ""): (item.get("href", ""), item.get("media-type", ""), item.get("properties", ""))
            for item in opf.iterfind("opf:manifest/opf:item", _NS)}
        spine = opf.find("opf:spine", _NS)
        if spine is None:
            raise Unreadable("not a readable EPUB: its package has no spine")
        itemrefs = [ref.get("idref", "") for ref in spine.iterfind("opf:itemref", _NS)]
        if len(itemrefs) > cfg.max_pages:
            raise Unreadable(f"{len(itemrefs)} spine documents, more than ingest.documents.max_pages "
                             f"({cfg.max_pages})")
        labels = _toc_labels(archive, opf_path, manifest, spine.get("toc", ""))
        parts: list[Part] = []
        missing: list[str] = []
        for idref in itemrefs:
            href, media_type, _ = manifest.get(idref, ("", "", ""))
            if "html" not in media_type:  # a spine may hold other types, with fallbacks: text is in (X)HTML
                continue
            path = _member(archive, opf_path, href)
            try:
                html = archive.read(path)
            except KeyError:
                missing.append(path)
                continue
            soup = BeautifulSoup(html.decode("utf-8", "replace"), "html.parser")
            for tag in soup(_DROP):
                tag.decompose()
            body = soup.body or soup
            heading = body.find(_HEADINGS)
            section = labels.get(path) or (_one_line(heading.get_text(" ")) if heading else "")
            if text := body.get_text("\n", strip=True):
                parts.append({"text": text, "page": 0, "section": section})
        metadata_element = opf.find("opf:metadata", _NS)

    def dc(name: str) -> list[str]:
        if metadata_element is None:
            return []
        return [v for e in metadata_element.iterfind(f"dc:{name}", _NS) if (v := _one_line("".join(e.itertext())))]

    metadata: dict[str, object] = {"format": "epub", "chapters": len(parts)}
    if authors := dc("creator"):
        metadata["author"] = ", ".join(authors)
    for key, name in (("subject", "subject"), ("language", "language"), ("publisher", "publisher")):
        if values := dc(name):
            metadata[key] = ", ".join(values)
    if missing:
        metadata["missing_chapters"] = missing
    return [_doc(source, next(iter(dc("title")), ""), parts, "", metadata)]
