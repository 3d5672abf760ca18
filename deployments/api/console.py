"""The web console: its page (`GET /`, shipped in `deployments/console/`, nothing from a CDN) and the two read-only
views it needs beyond the rest of the API: a cited chunk in its document, and what runs and is published."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import fastapi
from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.errors import NotFound
from app.overview import Overview, overview
from app.rag.protocol import Source
from app.storage import Storage
from deployments.api.edge import Edge
from deployments.api.errors import responses

PAGE = Path(__file__).resolve().parents[1] / "console"
ASSETS = {"console.js": "text/javascript", "console.css": "text/css"}  # what /console/<name> serves
# served without a key: static files that hold no data (everything they show comes from the keyed API)
OPEN_PATHS = frozenset({"/", *(f"/console/{name}" for name in ASSETS)})
CHUNK_ID_CHARS = 128  # chunk ids are 32 hex characters


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

    @r.get("/v1/chunks/{chunk_id}", response_model=Source, responses=responses(401, 404, 422, 500, 503, 504))
    async def chunk(chunk_id: Annotated[str, fastapi.Path(max_length=CHUNK_ID_CHARS)]) -> Source:
        """A chunk of the served index in its document: `document[start_char:end_char]` is the chunk."""
        return await edge.flow.source(chunk_id)

    @r.get("/v1/status", response_model=Overview, responses=responses(401, 500))
    async def status() -> Overview:
        """Ingest runs, dataset / index / model versions, training runs by step, the latest evaluations."""
        return await asyncio.to_thread(overview, storage)

    return r
