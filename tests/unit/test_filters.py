"""Metadata filters: the language (app/filters.py), its evaluation over an index's metadata column, and
searches that apply it inside FAISS and BM25 (app/index/search.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from app.catalog import EmbedderInfo, Manifest
from app.config import IndexConfig, SearchConfig
from app.dataset import CHUNK_SCHEMA
from app.errors import UserError
from app.filters import MAX_CONDITIONS, MAX_DEPTH, And, Cond, Metadata, Or, canonical, parse_filter
from app.index.build import write_index_files
from app.index.search import Index

DOCS = [
    {"department": "hr", "year": 2021, "published": "2021-03-04", "score": 0.5, "public": True},
    {"department": "legal", "year": 2019, "published": "2019-12-31T23:30:00-01:00", "public": False},  # 2020 UTC
    {"department": "hr", "year": "unknown", "published": "2023-07-01T08:00:00Z"},  # a mixed-type year
    {"department": "sales", "year": 2024.0, "tags": ["a", "b"], "nested": {"x": 1}},
    {},
]


def metadata(docs: list[dict[str, object]] = DOCS, copies: int = 1) -> Metadata:
    """A metadata column of `copies` chunks per document (chunk rows doc 0 .. doc n, then again)."""
    return Metadata(pa.chunked_array([[json.dumps(d) for d in docs] * copies, [None]]))  # a null row: no metadata


def rows(f: object, m: Metadata | None = None) -> list[int]:
    return (m or metadata()).rows(parse_filter(f)).tolist()


@pytest.mark.parametrize(("f", "expected"), [
    ({"department": "hr"}, [0, 2]),
    ({"department": {"$eq": "hr"}}, [0, 2]),
    ({"department": {"$ne": "hr"}}, [1, 3, 4, 5]),  # as in MongoDB: documents without the field too
    ({"department": {"$in": ["hr", "legal"]}}, [0, 1, 2]),
    ({"department": {"$nin": ["hr", "legal"]}}, [3, 4, 5]),
    ({"year": 2021}, [0]),
    ({"year": 2024}, [3]),  # 2024.0: one number type
    ({"year": {"$gt": 2019}}, [0, 3]),
    ({"year": {"$gte": 2019}}, [0, 1, 3]),
    ({"year": {"$lt": 2021}}, [1]),
    ({"year": {"$lte": 2021}}, [0, 1]),
    ({"year": {"$gte": 2020, "$lt": 2024}}, [0]),  # several operators: all hold
    ({"year": "unknown"}, [2]),  # the string in a mixed field compares with strings only
    ({"year": {"$in": [2019, "unknown"]}}, [1, 2]),
    ({"score": 0.5}, [0]),
    ({"public": True}, [0]),
    ({"public": False}, [1]),
    ({"department": "hr", "year": 2021}, [0]),  # several keys: and
    ({"$and": [{"department": "hr"}, {"published": {"$gte": "2022-01-01"}}]}, [2]),
    ({"$or": [{"department": "legal"}, {"public": True}]}, [0, 1]),
    ({"$or": [{"$and": [{"department": "hr"}, {"year": {"$lt": 2022}}]}, {"department": "sales"}]}, [0, 3]),
])
def test_each_operator_and_their_combinations(f, expected):
    assert rows(f) == expected


@pytest.mark.parametrize(("f", "expected"), [
    ({"published": {"$gte": "2020-01-01"}}, [0, 1, 2]),  # 2019-12-31T23:30-01:00 is 2020-01-01T00:30 UTC
    ({"published": {"$lt": "2020-01-01T00:30:00Z"}}, []),
    ({"published": {"$lte": "2020-01-01T00:30:00"}}, [1]),  # no offset: UTC
    ({"published": {"$gt": "2021-03-04"}}, [1, 2][1:]),  # a date is its midnight: 2021-03-04 itself is not after it
    ({"published": {"$gte": "2021-03-04", "$lt": "2023-07-01T09:00:00+01:00"}}, [0]),  # 08:00Z is not before 08:00Z
    ({"published": "2021-03-04"}, [0]),  # equality is the text's
])
def test_ranges_on_iso_dates_compare_as_dates(f, expected):
    assert rows(f) == expected


def test_rows_map_each_distinct_document_back_to_its_chunks():
    m = metadata(copies=3)  # rows 0-4, 5-9, 10-14 the same five documents, row 15 null
    assert m.n_docs == len(DOCS) + 1 - 1  # {} and the null row are one document: "{}"
    got = m.rows(parse_filter({"department": "hr"}))
    assert got.tolist() == [0, 2, 5, 7, 10, 12] and got.dtype == np.int64
    assert rows({"department": {"$ne": "hr"}}, m)[-1] == 15


def test_a_field_no_document_has_is_an_error_listing_those_that_exist():
    with pytest.raises(UserError, match=r"filter\.\$or\[1\]\.deparment: no document has a field 'deparment'; "
                       "the fields are department, public, published, score, year$"):  # lists, objects: not
        rows({"$or": [{"year": 1}, {"deparment": "hr"}]})
    many = Metadata(pa.chunked_array([[json.dumps({f"f{i:02d}": i for i in range(30)})]]))
    with pytest.raises(UserError, match="f19 and 10 more"):
        rows({"other": 1}, many)
    with pytest.raises(UserError, match="no document has metadata"):
        rows({"other": 1}, Metadata(pa.chunked_array([["{}"]])))


@pytest.mark.parametrize(("f", "message"), [
    ({"department": {"$gt": 3}}, r"filter\.department: \$gt compares numbers, but department holds string values"),
    ({"year": {"$gt": "2020-01-01"}}, r"filter\.year: \$gt compares ISO dates, but year holds number and string"),
    ({"year": True}, r"filter\.year: year holds number and string values, never boolean"),
    ({"public": {"$in": ["yes", 1]}}, r"public holds boolean values, never string or number"),
    ({"tags": "a"}, r"filter\.tags: no document has a field 'tags'"),  # lists are not filterable
])
def test_comparing_with_a_type_the_field_never_holds_is_an_error(f, message):
    if f == {"tags": "a"}:  # a field holding only lists or objects has no filterable values
        m = metadata([{"tags": ["a"]}, {"department": "hr"}])
        with pytest.raises(UserError, match=message):
            rows(f, m)
        return
    with pytest.raises(UserError, match=message):
        rows(f)


@pytest.mark.parametrize(("f", "message"), [
    ({"$or": [{"year": 1}, {"year": {"$gte": "soon"}}]},
     r"^filter\.\$or\[1\]\.year: \$gte needs a number or an ISO date, got \"soon\"$"),
    ({"year": {"$gte": True}}, r"filter\.year: \$gte needs a number or an ISO date, got true"),
    ({"year": {"$between": [1, 2]}}, r"filter\.year: unknown operator \"\$between\" \(one of \$eq"),
    ({"$not": {"year": 1}}, r"^filter: unknown operator \"\$not\" \(of filters: \$and \$or; of a field's values: \$eq"),
    ({"$and": []}, r"filter\.\$and: needs a non-empty list of filters, got \[\]"),
    ({"$or": {"a": 1}}, r"filter\.\$or: needs a non-empty list of filters"),
    ({"$and": [{"a": 1}, "b"]}, r"filter\.\$and\[1\]: a filter is a non-empty JSON object, got \"b\""),
    ({}, r"^filter: a filter is a non-empty JSON object, got \{\}"),
    ([{"a": 1}], r"^filter: a filter is a non-empty JSON object"),
    ({"a": {"$in": []}}, r"filter\.a: \$in needs a non-empty list of values, got \[\]"),
    ({"a": {"$nin": "x"}}, r"filter\.a: \$nin needs a non-empty list of values, got \"x\""),
    ({"a": {"$in": ["x", None]}}, r"filter\.a\.\$in\[1\]: values are strings, numbers or booleans, got null"),
    ({"a": {"$in": list(range(1025))}}, r"filter\.a: \$in has more than 1024 values"),
    ({"a": None}, r"filter\.a: values are strings, numbers or booleans, got null"),
    ({"a": {"b": 1}}, r"filter\.a: unknown operator \"b\""),
    ({"$" + "x" * 10_000: 1}, r"^filter: unknown operator \"\$x{55}\.\.\. \(of filters"),  # shortened
    ({"a": {}}, r"filter\.a: an empty object"),
    ({"a": [1, 2]}, r"filter\.a: a list; to match any of several values use \{\"\$in\": \[...\]\}"),
    ({"a": float("nan")}, r"filter\.a: values are strings, numbers or booleans, got NaN"),
    ({"9lives": 1}, r"filter: \"9lives\" is not a field name"),
    ({"x" * 65: 1}, r"is not a field name"),
])
def test_a_bad_filter_names_the_path_of_its_bad_part(f, message):
    with pytest.raises(UserError, match=message):
        parse_filter(f)


def test_filters_from_http_are_bounded():
    deep: object = {"a": 1}
    for _ in range(MAX_DEPTH):
        deep = {"$and": [deep]}
    parse_filter(deep)  # exactly MAX_DEPTH levels
    with pytest.raises(UserError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_filter({"$or": [deep]})
    parse_filter({f"f{i}": i for i in range(MAX_CONDITIONS)})
    with pytest.raises(UserError, match=f"^body.where: more than {MAX_CONDITIONS} conditions"):
        parse_filter({"$or": [{f"f{i}": {"$gt": i, "$lt": i + 2}} for i in range(MAX_CONDITIONS // 2 + 1)]},
                     where="body.where")


def test_a_filter_is_a_typed_tree_with_one_canonical_form():
    f = parse_filter({"year": {"$gte": 2020, "$lt": 2024}, "$or": [{"d": "hr"}, {"d": {"$in": ["a", "b"]}}]})
    assert f == And((Cond("year", "$gte", (2020,)), Cond("year", "$lt", (2024,)),
                     Or((Cond("d", "$eq", ("hr",)), Cond("d", "$in", ("a", "b"))))))
    same = parse_filter({"$or": [{"d": {"$eq": "hr"}}, {"d": {"$in": ["a", "b"]}}],
                         "year": {"$gte": 2020, "$lt": 2024}})
    assert canonical(parse_filter({"d": "hr"})) == canonical(parse_filter({"d": {"$eq": "hr"}})) == '{"d":{"$eq":"hr"}}'
    assert canonical(f) != canonical(same)  # the order of parts is kept; both mean the same
    assert canonical(parse_filter({"d": True})) != canonical(parse_filter({"d": 1}))


def test_each_filters_rows_are_computed_once_and_kept_read_only(monkeypatch):
    m = metadata()
    calls = []
    mask = m.mask
    monkeypatch.setattr(m, "mask", lambda f: calls.append(f) or mask(f))
    first = m.rows(parse_filter({"department": "hr"}))
    again = m.rows(parse_filter({"department": {"$eq": "hr"}}))  # the same canonical form
    assert again is first and len(calls) == 1 and not first.flags.writeable
    for year in range(m.CACHE):  # the least recently used goes first
        m.rows(parse_filter({"year": year}))
    m.rows(parse_filter({"department": "hr"}))
    assert len(calls) == 2 + m.CACHE and len(m._cache) == m.CACHE


# A tiny real index: 60 chunks, two departments. The "sales" half is what the query is about (vectors near it, the
# query word three times); the "hr" half barely (vectors far, the word once), so no hr chunk is in the unfiltered
# top k of any mode, and a filter to hr must find them inside the search.
N, DIM, K = 60, 16, 5


def chunk_table(rng: np.random.Generator, query: np.ndarray) -> pa.Table:
    vectors = rng.normal(size=(N, DIM)).astype(np.float32)
    vectors[: N // 2] += 4 * query  # sales: near the query
    vectors[N // 2:] -= 2 * query  # hr: away from it
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    filler = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
    rows = []
    for i in range(N):
        sales = i < N // 2
        words = [filler[(i + j) % len(filler)] for j in range(12)] + ["zebra"] * (3 if sales else 1)
        rows.append({"chunk_id": f"c{i:03d}", "doc_id": f"d{i // 2}", "chunk_index": i % 2, "source": f"/d/{i // 2}",
                     "title": "", "text": " ".join(words), "start_char": 0, "end_char": 10, "n_tokens": 10,
                     "pages": [], "section": "", "location": "", "original": "",
                     "metadata": json.dumps({"department": "sales" if sales else "hr", "year": 2000 + i // 2})})
    table = pa.Table.from_pylist(rows, schema=CHUNK_SCHEMA)
    return table.append_column("embedding", pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM))


@pytest.fixture(params=["flat", "hnsw"])
def index(request, tmp_path: Path) -> tuple[Index, np.ndarray]:
    rng = np.random.default_rng(7)
    query = rng.normal(size=DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    cfg = IndexConfig() if request.param == "flat" else IndexConfig(exact_max_vectors=1, ann="hnsw")
    params = write_index_files(chunk_table(rng, query), cfg, True, tmp_path)
    assert params.type == request.param
    embedder = EmbedderInfo(name="x", revision="x", dim=DIM)
    manifest = Manifest(kind="indexes", version=1, created_at="", embedder=embedder, config=cfg.model_dump(),
                        extra={"dense": params.model_dump(exclude_none=True)})
    return Index(manifest, tmp_path), query


@pytest.mark.parametrize("mode", ["dense", "lexical", "hybrid"])
def test_a_filtered_search_returns_k_matching_chunks_from_beyond_the_unfiltered_top_k(index, mode):
    idx, query = index
    cfg = SearchConfig(candidates=10)
    unfiltered = idx.search("zebra", query, mode, K, cfg)
    assert len(unfiltered) == K and {h.metadata["department"] for h in unfiltered} == {"sales"}
    hr = idx.search("zebra", query, mode, K, cfg, where=parse_filter({"department": "hr"}))
    assert len(hr) == K and {h.metadata["department"] for h in hr} == {"hr"}
    assert [h.rank for h in hr] == list(range(1, K + 1))
    if mode == "dense":  # the exact top k of the hr chunks
        table = idx.chunks.table
        vectors = np.stack([idx.dense.reconstruct(i) for i in range(N // 2, N)])
        best = np.argsort(-(vectors @ query))[:K] + N // 2
        assert [h.chunk_id for h in hr] == [table.column("chunk_id")[int(i)].as_py() for i in best]
    few = idx.search("zebra", query, mode, K, cfg, where=parse_filter({"department": "hr", "year": {"$lt": 2017}}))
    assert sorted(h.metadata["year"] for h in few) == [2015, 2015, 2016, 2016]  # fewer match than k: all of them


def test_a_filter_and_source_globs_intersect(index):
    idx, query = index
    where = parse_filter({"year": {"$gte": 2010, "$lte": 2012}})  # chunks 20-25
    hits = idx.search("zebra", query, "hybrid", 10, SearchConfig(), sources=["/d/1?"], where=where)
    assert sorted(h.source for h in hits) == ["/d/10", "/d/10", "/d/11", "/d/11", "/d/12", "/d/12"]
    assert idx.allowed(["/d/3?"], where).tolist() == []
    assert idx.allowed(None) is None
    with pytest.raises(UserError, match="no document has a field 'dept'"):
        idx.search("zebra", query, "dense", K, SearchConfig(), where=parse_filter({"dept": "hr"}))
