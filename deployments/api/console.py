"""The web console: its page (`GET /`, shipped in `deployments/console/`, nothing from a CDN) and the two read-only
views it needs beyond the rest of the API: a cited chunk in its document, and what runs and is published."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import fastapi
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, Response

from app import collections
from app.catalog import Catalog
from app.errors import NotFound
from app.overview import Overview, overview
from app.page_view import render_page
from app.rag.protocol import Source
from app.storage import Storage
from deployments.api.access import Access
from deployments.api.edge import Edge
from deployments.api.errors import responses
from deployments.api.views import CollectionInfo, CollectionList
from deployments.guard import caller_of, record_read

PAGE = Path(__file__).resolve().parents[1] / "console"
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}  # what /console/<name> serves
# served without a key: static files that hold no data (everything they show comes from the keyed API)
OPEN_PATHS = frozenset({"/", *(f"/console/{name}" for name in ASSETS)})
CHUNK_ID_CHARS = 128  # chunk ids are 32 hex characters
MAX_PAGE_WIDTH = 2000  # pixels: a page image costs its area in memory and time
CollectionParam = Annotated[str, fastapi.Query(max_length=64, description="The collection the chunk is in.")]


def router(edge: Edge, storage: Storage) -> APIRouter:
    r = APIRouter()

    @r.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE / "index.html", media_type="text/html")

    @r.get("/console/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise NotFound(f"/console/{name} is not a file of the console")
        return FileResponse(PAGE / name, media_type=ASSETS[name])

    async def source(request: Request, chunk_id: str, collection: str) -> Source:
        s = await edge.flow.source(chunk_id, edge.access.open(request, collection))
        record_read(request, collection, [chunk_id])
        return s

    @r.get("/v1/chunks/{chunk_id}", response_model=Source, responses=responses(401, 404, 422, 500, 503, 504))
    async def chunk(request: Request, chunk_id: Annotated[str, fastapi.Path(max_length=CHUNK_ID_CHARS)],
                    collection: CollectionParam = collections.DEFAULT) -> Source:
        """A chunk of a collection's served index in its document: `document[start_char:end_char]` is the
        chunk. A chunk id of another collection is not found."""
        return await source(request, chunk_id, collection)

    @r.get("/v1/chunks/{chunk_id}/pages/{page}", response_class=Response,
           responses={200: {"content": {"image/png": {}}, "description": "The page as a PNG image."},
                      **responses(401, 404, 422, 500, 503, 504)})
    async def chunk_page(request: Request, chunk_id: Annotated[str, fastapi.Path(max_length=CHUNK_ID_CHARS)],
                         page: Annotated[int, fastapi.Path(ge=1, le=1_000_000)],
                         width: Annotated[int, fastapi.Query(ge=200, le=MAX_PAGE_WIDTH)] = 900,
                         collection: CollectionParam = collections.DEFAULT) -> Response:
        """Page `page` of a cited chunk's original PDF as a PNG `width` pixels wide, the chunk highlighted on it."""
        s = await source(request, chunk_id, collection)
        if not s.original:
            raise NotFound(f"chunk {chunk_id} comes from {s.source}, which has no kept original to show pages of "
                           "(PDFs ingested with ingest.documents.keep_originals have)")
        png = await asyncio.to_thread(_page, storage, s, page, width)
        return Response(png, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})

    @r.get("/v1/collections", response_model=CollectionList, responses=responses(401, 500))
    async def list_collections(request: Request) -> CollectionList:
        """The collections this API key may read, with their served index version and counts."""
        names = edge.access.readable(caller_of(request))
        return CollectionList(data=await asyncio.to_thread(lambda: [_info(storage, n) for n in names]))

    @r.get("/v1/status", response_model=Overview, responses=responses(401, 403, 500))
    async def status(request: Request) -> Overview:
        """Ingest runs, dataset / index / model versions, training runs by step, the latest evaluations (admin
        keys only: it spans every collection)."""
        Access.admin(request)
        return await asyncio.to_thread(overview, storage)

    return r


def _info(root: Storage, name: str) -> CollectionInfo:
    latest = Catalog(collections.storage_of(root, name)).latest("indexes")
    counts = latest.counts if latest else {}
    return CollectionInfo(name=name, index_version=latest.version if latest else None,
                          documents=counts.get("documents", 0), chunks=counts.get("chunks", 0))


def _page(root: Storage, s: Source, page: int, width: int) -> bytes:
    """`s.original` is kept in its collection's storage root (ingest writes it there)."""
    original = collections.storage_of(root, s.collection).read_bytes(s.original)
    return render_page(original, page, width, s.document[s.start_char : s.end_char])
