"""The one passage type: a chunk table's row and the passage made from it name the same fields, so a field added to
chunks is added in app/passage.py and reaches every stage and the wire."""

import pickle

import pyarrow as pa

from app.dataset import CHUNK_COLUMNS
from app.index.search import ChunkTable
from app.passage import ChunkRef, ChunkRow, Passage

ROW: ChunkRow = {"chunk_id": "c1", "doc_id": "zebra", "chunk_index": 2, "source": "/d/z.txt", "title": "Zebras",
                 "text": "Zebras cross the Mara river in July.", "start_char": 40, "end_char": 76, "pages": [3, 4],
                 "section": "Migration", "location": "pp. 3–4", "original": "originals/ab.pdf",
                 "metadata": '{"lang": "en", "year": 2021, "score": 0.5, "public": true, "tags": ["a"], "x": {"y": 1}}'}
ROW_ONLY = {"original"}  # what a row keeps that a passage does not carry
METADATA = {"lang": "en", "year": 2021, "score": 0.5, "public": True}  # the row's, parsed: scalars only
PASSAGE_ONLY = {"rank", "score", "rerank_score"}  # what a search adds to a row


def test_a_row_and_a_passage_name_the_same_chunk_fields():
    assert list(ChunkRow.__annotations__) == CHUNK_COLUMNS  # the parquet columns, in order
    assert set(Passage.model_fields) - PASSAGE_ONLY == set(CHUNK_COLUMNS) - ROW_ONLY


def test_a_cited_source_is_a_chunk_with_its_document():
    from app.rag.protocol import Source

    assert set(Source.model_fields) - {"collection", "index_version", "document", "original"} == set(
        ChunkRef.model_fields)
    assert set(ChunkRef.model_fields) < set(Passage.model_fields)


def test_a_search_hit_is_its_row_with_its_rank_and_score():
    table = ChunkTable(pa.Table.from_pylist([ROW]))
    p = Passage.from_row(table.rows([0])[0], rank=1, score=0.5)
    assert p.model_dump() == {**{k: v for k, v in ROW.items() if k not in ROW_ONLY}, "metadata": METADATA,
                              "rank": 1, "score": 0.5, "rerank_score": None}
    assert type(p.metadata["public"]) is bool and type(p.metadata["year"]) is int  # JSON's types kept
    reranked = p.model_copy(update={"rerank_score": 2.5})  # frozen: the reranker's copy, the retriever's unchanged
    assert (p.rerank_score, reranked.rerank_score) == (None, 2.5)


def test_a_passage_crosses_a_deployment_handle_as_it_is():
    p = Passage.from_row(ROW, rank=3, score=0.25)
    assert pickle.loads(pickle.dumps(p)) == p


def test_a_passage_carries_its_documents_metadata_to_the_wire():
    assert Passage.from_row({**ROW, "metadata": "{}"}).metadata == {}
    assert Passage.from_row({**ROW, "metadata": "[1, 2]"}).metadata == {}  # not an object: nothing to carry
    wire = Passage.from_row(ROW).model_dump_json()
    assert Passage.model_validate_json(wire).metadata == METADATA
    assert Passage.model_fields["metadata"].description
