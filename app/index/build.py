"""Build an index version from a dataset version: FAISS (dense) + BM25 (bm25s) + the chunk table they point into.

Row i of `chunks.parquet` is vector i of `dense.faiss` and document i of the BM25 index; rows are sorted by
chunk id so the same dataset always gives the same index.
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Literal

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from app.catalog import Catalog, EmbedderInfo, Manifest, now_iso
from app.config import AppConfig, IndexConfig
from app.dataset import CHUNK_COLUMNS, load_chunks
from app.index import lexical
from app.models.embedder import embed_text
from app.storage import Storage


class DenseParams(BaseModel):
    """How the dense index was built (the manifest's `extra.dense`), and what a search passes FAISS."""

    type: Literal["flat", "hnsw", "ivf"]
    m: int | None = None  # hnsw
    ef_construction: int | None = None  # hnsw
    ef_search: int | None = None  # hnsw
    nlist: int | None = None  # ivf
    nprobe: int | None = None  # ivf


def dense_kind(n: int, cfg: IndexConfig) -> Literal["flat", "hnsw", "ivf"]:
    """Which dense index `n` vectors get: exact up to `exact_max_vectors`, then `ann`; `auto` is HNSW up to
    `hnsw_max_vectors` and IVF beyond (benchmarks/scale_bench.py: HNSW's recall@10 falls at a million vectors
    where IVF's holds)."""
    if n <= cfg.exact_max_vectors:
        return "flat"
    if cfg.ann == "auto":
        return "hnsw" if n <= cfg.hnsw_max_vectors else "ivf"
    return cfg.ann


def dense_index(vectors: np.ndarray, cfg: IndexConfig) -> tuple[faiss.Index, DenseParams]:
    """Exact inner product (vectors are normalised: cosine), HNSW or IVF, by `dense_kind`."""
    n, dim = vectors.shape
    kind = dense_kind(n, cfg)
    if kind == "flat":
        index: faiss.Index = faiss.IndexFlatIP(dim)
        params = DenseParams(type="flat")
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = cfg.hnsw_ef_construction
        params = DenseParams(type="hnsw", m=cfg.hnsw_m, ef_construction=cfg.hnsw_ef_construction,
                             ef_search=cfg.hnsw_ef_search)
    else:
        nlist = cfg.ivf_nlist or max(1, int(4 * math.sqrt(n)))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        params = DenseParams(type="ivf", nlist=nlist, nprobe=cfg.ivf_nprobe)
    index.add(vectors)
    return index, params


def write_index_files(table: pa.Table, cfg: IndexConfig, include_title: bool, directory: Path) -> DenseParams:
    """An index version's files in `directory` from its chunk rows (`CHUNK_COLUMNS` plus `embedding`, sorted):
    `dense.faiss`, `bm25/` and `chunks.parquet`, row i of each the same chunk."""
    import bm25s

    n = table.num_rows
    vectors = np.asarray(table.column("embedding").combine_chunks().flatten().to_numpy(zero_copy_only=False),
                         dtype=np.float32).reshape(n, -1)
    index, dense_params = dense_index(vectors, cfg)
    texts = [embed_text(t, x, include_title) for t, x in
             zip(table.column("title").to_pylist(), table.column("text").to_pylist(), strict=True)]
    bm25 = bm25s.BM25(k1=cfg.bm25_k1, b=cfg.bm25_b)
    bm25.index(lexical.tokenize(texts, cfg.stopwords, cfg.stemmer), show_progress=False)
    faiss.write_index(index, str(directory / "dense.faiss"))
    bm25.save(str(directory / "bm25"), show_progress=False)
    pq.write_table(table.select(CHUNK_COLUMNS), directory / "chunks.parquet")
    return dense_params


def build_index(storage: Storage, cfg: AppConfig, dataset_version: int | None = None,
                embedder: EmbedderInfo | None = None) -> Manifest:
    """An index version of a dataset version (latest: None), its vectors from `embedder` (`app.models.embedder.
    target`). None: the embedder of the latest index version, so that an embedder once swapped in stays through
    later ingests; the dataset's own vectors when there is none. Re-embedding needs a connected Ray."""
    return Catalog(storage).publish(stage_index(storage, cfg, dataset_version, embedder))


def stage_index(storage: Storage, cfg: AppConfig, dataset_version: int | None = None,
                embedder: EmbedderInfo | None = None) -> Manifest:
    """`build_index`'s files written under `indexes/staging-*`, and the manifest that `Catalog.publish` makes a
    version of (`Index.open` reads it before: a candidate judged first). `discard` removes one not published."""
    catalog = Catalog(storage)
    dataset = catalog.resolve("datasets", dataset_version)
    latest = catalog.latest("indexes")
    t0 = time.perf_counter()
    table = load_chunks(storage, dataset)
    n = table.num_rows
    assert n > 0, f"dataset version {dataset.version} has no chunks"
    embed = dataset.config.get("embed", {})  # the dataset's IngestConfig.embed, as a dict
    include_title = bool(embed.get("include_title", True)) if isinstance(embed, dict) else True
    target = embedder or (latest.embedder if latest is not None else dataset.embedder)
    extra: dict[str, object] = {}
    if _same(target, dataset.embedder):
        target = dataset.embedder
    else:
        table, target, extra["reembedded"] = _reembed(storage, table, target, latest, include_title, cfg)
    staging = f"indexes/staging-{dataset.version}-{time.time_ns()}"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        dense_params = write_index_files(table, cfg.index, include_title, d)
        build_s = time.perf_counter() - t0
        written = storage.upload_dir(d, staging)
    manifest = Manifest(
        kind="indexes", version=0, created_at=now_iso(), parent=dataset.version, inputs=dataset.inputs,
        embedder=target,
        counts={"chunks": n, "documents": len(set(table.column("doc_id").to_pylist()))},
        files=[catalog.file_entry(f) for f in written],
        config=cfg.index.model_dump(),
        extra={"dense": dense_params.model_dump(exclude_none=True), "include_title": include_title,
               "build_s": round(build_s, 3), "dir": staging, **extra},
    )
    return manifest


def discard(storage: Storage, staged: Manifest) -> None:
    storage.delete_dir(str(staged.extra["dir"]))


def _same(a: EmbedderInfo, b: EmbedderInfo) -> bool:
    return (a.name, a.revision) == (b.name, b.revision)


def _reembed(storage: Storage, table: pa.Table, target: EmbedderInfo, latest: Manifest | None, include_title: bool,
             cfg: AppConfig) -> tuple[pa.Table, EmbedderInfo, dict[str, object]]:
    """`table` with its `embedding` column from `target` (vectors of the latest index version reused where it has
    the same embedder), `target` with its dimension, and what was done (the manifest's `extra.reembedded`)."""
    from app.index.reembed import embed_chunks, known_vectors
    from app.index.search import Index

    known = {}
    if latest is not None and _same(latest.embedder, target):
        previous = Index.load(storage, latest.version, verify=False)
        known = known_vectors(previous.dense, previous.chunks.column("chunk_id"))
    done = embed_chunks(table, target, include_title, cfg.ingest.embed, known)
    dim = done.vectors.shape[1]
    column = pa.FixedSizeListArray.from_arrays(pa.array(done.vectors.reshape(-1), pa.float32()), dim)
    table = table.set_column(table.column_names.index("embedding"), "embedding", column)
    return table, target.model_copy(update={"dim": dim}), {
        "embedded": done.embedded, "reused": table.num_rows - done.embedded, "embed_s": round(done.embed_s, 3),
        "rows_by_node": done.rows_by_node, "actors": done.actors}
