"""One chunk as it travels: a row of an index's chunk table (`ChunkRow`) becomes a `Passage` when a search finds
it, and the same `Passage` goes to the reranker, into the prompt, into a citation and out in /v1/retrieve's hits and
`ragline search --json`. A field a chunk gains (pages, collections, metadata) is added here, to the row and to the
passage, and nowhere else: `deployments/api/views.py` is the one place that maps a passage to the other HTTP bodies
(a citation).

A pydantic model, not a dataclass, so that it is its own HTTP schema; frozen, so a stage that changes it (the
reranker's score) makes a copy the others never see. It pickles across Serve's DeploymentHandles as a dataclass
does."""

from __future__ import annotations

import json
import math
from typing import TypedDict

from pydantic import BaseModel, ConfigDict, Field


class ChunkRow(TypedDict):
    """One row of an index version's `chunks.parquet` (`app.dataset.CHUNK_COLUMNS`), as Arrow's `to_pylist` gives
    it: `Passage`'s chunk fields (the document's `metadata` as JSON text, which the passage carries parsed) plus
    `original`. tests/unit/test_passage.py holds the two to the same names."""

    chunk_id: str
    doc_id: str
    chunk_index: int  # the chunk's position in its document, from 0
    source: str
    title: str
    text: str
    start_char: int  # the chunk's span in its document (characters)
    end_char: int
    pages: list[int]
    section: str
    location: str
    original: str  # where the storage root keeps the original file (PDFs, to show their pages); "" if not kept
    metadata: str  # the document's metadata, a JSON object ("{}" for most files; a record's other fields)


def where(source: str, location: str) -> str:
    """A chunk's place as a reader cites it: "report.pdf p. 7", "deck.pptx slide 3", or the source alone."""
    return f"{source} {location}" if location else source


class ChunkRef(BaseModel):
    """Where a chunk is: its ids, its document's source and title, its span in that document (characters), and
    where in the original file that is (pages or slides, section, and both as a label to print). A passage is a
    chunk with its text and scores; a cited source (/v1/chunks) is one with its whole document."""

    model_config = ConfigDict(frozen=True)

    chunk_id: str
    doc_id: str
    chunk_index: int
    source: str
    title: str
    start_char: int
    end_char: int
    # Defaults: chunks ingested before documents had structure (their files lack these columns).
    pages: list[int] = Field(default_factory=list, description="The 1-based PDF pages (or slides) the chunk spans; "
                                   "empty where the format has none.")
    section: str = Field(default="", description="Heading path ('Results › Tables'), sheet name or slide title.")
    location: str = Field(default="", description="Where the chunk is, to print after its source: 'p. 7', "
                          "'pp. 7–8', 'slide 3', 'sheet Sales', '§ Results › Tables'; '' when nothing is known.")


class Passage(ChunkRef):
    """A retrieved chunk: [n] in an answer cites the n-th passage of its prompt."""

    text: str
    rank: int = 0  # 1 for the retriever's best; 0: not retrieved (a gold passage put in by training)
    score: float = 0.0  # the retriever's
    rerank_score: float | None = None  # the cross-encoder's, once reranked
    metadata: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="The document's metadata (a JSONL or table record's other fields, its "
        "position in its file), the fields a search's metadata filter can name; scalar values only.")

    @classmethod
    def from_row(cls, row: ChunkRow, rank: int = 0, score: float = 0.0) -> Passage:
        """A search hit from its row; the columns a passage does not carry (original) are ignored. Validating costs
        what the dataclass it replaces cost to build (2.9 against 2.8 us; `model_construct` is slower, 8 us), plus
        parsing the metadata (a small JSON object)."""
        return cls.model_validate({**row, "metadata": scalar_metadata(row["metadata"]), "rank": rank, "score": score})


def scalar_metadata(text: str | None) -> dict[str, str | int | float | bool]:
    """A row's metadata JSON as a passage carries it: the fields holding strings, numbers (finite) and booleans;
    nested objects and lists are left out."""
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(v, str | int | bool) or (isinstance(v, float) and math.isfinite(v))}
