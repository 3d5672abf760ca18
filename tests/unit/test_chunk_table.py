import pyarrow as pa

from app.config import IndexConfig
from app.index.build import dense_kind
from app.index.search import ChunkTable, document_text, rows_by_value


def table(n: int) -> pa.Table:
    return pa.table({"chunk_id": [f"c{i}" for i in range(n)], "doc_id": [f"d{i // 2}" for i in range(n)],
                     "chunk_index": pa.array([i % 2 for i in range(n)], pa.int32()),
                     "source": [f"s{i % 3}" for i in range(n)]})


def test_rows_are_dicts_on_demand_and_iteration_crosses_batches():
    chunks = ChunkTable(pa.concat_tables([table(5), table(5)]))  # two Arrow chunks per column
    chunks.BATCH = 3
    assert len(chunks) == 10
    assert chunks[7] == {"chunk_id": "c2", "doc_id": "d1", "chunk_index": 0, "source": "s2"}
    rows = list(chunks)
    assert len(rows) == 10 and rows[7] == chunks[7] and [r["chunk_id"] for r in rows[:5]] == [f"c{i}" for i in range(5)]
    assert chunks.column("doc_id")[4] == "d2"
    assert chunks.rows([7, 0, 7]) == [chunks[7], chunks[0], chunks[7]]  # in the order asked, across Arrow chunks
    assert chunks.rows([]) == []  # a search with no hits


def test_rows_by_value_groups_every_row_once_in_order():
    groups = rows_by_value(table(10).column("source"))
    assert {k: v.tolist() for k, v in groups.items()} == {"s0": [0, 3, 6, 9], "s1": [1, 4, 7], "s2": [2, 5, 8]}
    assert all(v.dtype.name == "int64" for v in groups.values())


def test_a_document_is_rebuilt_from_its_chunks_so_their_offsets_index_into_it():
    text = "Zebras cross the Mara river every July, and wildebeest follow them."
    w = text.index("wildebeest")
    spans = [(0, 27, text[0:27]), (17, w - 1, text[17:w - 1]), (w, len(text), text[w:])]  # overlap, then a gap
    rebuilt = document_text(reversed(spans))  # in any order
    assert rebuilt == text
    assert all(rebuilt[start:end] == piece for start, end, piece in spans)
    assert document_text([(4, 9, "cross")]) == "    cross"  # a gap before the first chunk keeps the offsets too
    assert document_text([]) == ""


def test_the_dense_index_kind_follows_the_number_of_vectors():
    cfg = IndexConfig(exact_max_vectors=100, hnsw_max_vectors=1000)
    assert [dense_kind(n, cfg) for n in (1, 100, 101, 1000, 1001)] == ["flat", "flat", "hnsw", "hnsw", "ivf"]
    assert dense_kind(5000, cfg.model_copy(update={"ann": "hnsw"})) == "hnsw"  # a chosen ann holds at any size
    assert dense_kind(101, cfg.model_copy(update={"ann": "ivf"})) == "ivf"
