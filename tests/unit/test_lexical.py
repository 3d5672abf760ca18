"""BM25 terms (app/index/lexical.py): stemmed the same way when a version is built and when it is searched, so
a query's word finds its other forms; a version built before stemming keeps exact terms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from app.catalog import EmbedderInfo, Manifest
from app.config import IndexConfig, load_config
from app.dataset import CHUNK_SCHEMA
from app.errors import UserError
from app.index.build import write_index_files
from app.index.search import Index

TEXTS = ["Stem cells divide in the marrow", "A single cell divided once", "Bone density after fractures"]


def build(tmp_path: Path, cfg: IndexConfig, config: dict[str, object] | None = None) -> Index:
    rows = [{"chunk_id": f"c{i}", "doc_id": f"d{i}", "chunk_index": 0, "source": f"/d/{i}", "title": "",
             "text": t, "start_char": 0, "end_char": len(t), "n_tokens": 6, "pages": [], "section": "",
             "location": "", "original": "", "metadata": json.dumps({})} for i, t in enumerate(TEXTS)]
    vectors = np.eye(len(TEXTS), 4, dtype=np.float32)
    table = pa.Table.from_pylist(rows, schema=CHUNK_SCHEMA).append_column(
        "embedding", pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4))
    params = write_index_files(table, cfg, False, tmp_path)
    manifest = Manifest(kind="indexes", version=1, created_at="", embedder=EmbedderInfo(name="x", revision="x", dim=4),
                        config=cfg.model_dump() if config is None else config,
                        extra={"dense": params.model_dump(exclude_none=True)})
    return Index(manifest, tmp_path)


def found(index: Index, query: str) -> list[str]:
    return [index.chunks.table.column("chunk_id")[i].as_py() for i, _ in index.lexical_search(query, 3, None)]


def test_a_word_finds_its_other_forms_by_default(tmp_path):
    index = build(tmp_path, IndexConfig())
    assert IndexConfig().stemmer == "english"
    assert sorted(found(index, "cell")) == ["c0", "c1"]  # "cells" and "cell"
    assert found(index, "dividing") == found(index, "divides") and sorted(found(index, "divides")) == ["c0", "c1"]
    assert found(index, "fracture") == ["c2"]
    assert found(index, "the of") == []  # stopwords only


def test_without_a_stemmer_terms_match_exactly(tmp_path):
    assert found(build(tmp_path, IndexConfig(stemmer=None)), "cell") == ["c1"]


def test_a_version_built_before_stemming_is_searched_with_exact_terms(tmp_path):
    old = {k: v for k, v in IndexConfig(stemmer=None).model_dump().items() if k != "stemmer"}  # its manifest's config
    index = build(tmp_path, IndexConfig(stemmer=None), config=old)
    assert index.stemmer is None and found(index, "cell") == ["c1"]


def test_an_unknown_stemmer_is_refused_naming_the_field_and_the_choices():
    with pytest.raises(UserError, match=r"index.*stemmer 'klingon' is not one of PyStemmer's: .*english"):
        load_config(None, ["index.stemmer=klingon"])
