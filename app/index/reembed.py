"""An index version's vectors from an embedder other than its dataset's: a trained embedder (`ragline train
embedder`) serves with the index it re-embedded, so the two always swap together.

The chunks are embedded on Ray Data by a pool of `Reembed` actors (one per free core, or `ingest.embed.concurrency`;
on a cluster, spread over its nodes). A chunk the previous index version already holds under the same embedder
keeps that vector: after the first re-embedding, an ingest that adds documents embeds only their chunks.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import ray

from app import hardware
from app.catalog import EmbedderInfo
from app.models import embedder

if TYPE_CHECKING:
    import faiss

    from app.config import EmbedConfig

# CPUs left beside the embedding actors when sizing their pool (the driver collecting the vectors, Ray's own)
LIGHT_CPUS = 0.25
ACTORS_START_S = 300  # the most the pool's actors may take to start (a model download, an OpenVINO conversion)


class Reembed:
    """map_batches callable: chunk rows {chunk_id, title, text} → {chunk_id, embedding}: the embedder loaded once
    per actor; normalised float32 vectors."""

    def __init__(self, info: EmbedderInfo, include_title: bool, encode_batch_size: int, device: str, threads: int):
        self.encoder = embedder.Encoder(embedder.weights(info), info.precision, device, info.runtime, threads)
        self.include_title, self.encode_batch_size = include_title, encode_batch_size

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = [embedder.embed_text(t, x, self.include_title) for t, x in
                 zip(batch.column("title").to_pylist(), batch.column("text").to_pylist(), strict=True)]
        vectors = self.encoder.encode(texts, self.encode_batch_size)  # (rows, dim)
        flat = pa.array(vectors.reshape(-1), pa.float32())
        node = ray.get_runtime_context().get_node_id()
        return pa.table({"chunk_id": batch.column("chunk_id"),
                         "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]),
                         "node": pa.array([node] * batch.num_rows, pa.string())})


def known_vectors(dense: faiss.Index, chunk_ids: list[str]) -> dict[str, np.ndarray]:
    """chunk id → its vector in an index version's dense index (row i is chunk i of its chunk table)."""
    vectors = dense.reconstruct_n(0, dense.ntotal)  # (ntotal, dim); an IVF index needs its direct map made
    return dict(zip(chunk_ids, vectors, strict=True))


class Reembedded(NamedTuple):
    vectors: np.ndarray  # (rows, dim) float32, in the table's row order
    embedded: int  # chunks embedded now (the rest were known)
    embed_s: float
    rows_by_node: dict[str, int]  # Ray node id → chunks its actors embedded
    actors: int  # the pool's size


def embed_chunks(table: pa.Table, info: EmbedderInfo, include_title: bool, ec: EmbedConfig,
                 known: dict[str, np.ndarray]) -> Reembedded:
    """`table`'s chunks embedded under `info`, `known` vectors reused. Needs a connected Ray when any chunk is
    new."""
    import ray.data

    ids = table.column("chunk_id").to_pylist()
    todo = [i for i, c in enumerate(ids) if c not in known]
    by_id = dict(known)
    by_node: Counter[str] = Counter()
    t0 = time.perf_counter()
    actors = embedder.pool_size(ec, LIGHT_CPUS) if todo else 0
    if todo:
        rows = table.select(["chunk_id", "title", "text"]).take(todo)
        # a block per batch: one block would go to one actor, however many the pool has
        ds: ray.data.Dataset = ray.data.from_arrow([rows.slice(i, ec.batch_size)
                                                    for i in range(0, rows.num_rows, ec.batch_size)])
        ds = ds.map_batches(Reembed, batch_size=ec.batch_size, batch_format="pyarrow",
                            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
                            num_cpus=ec.num_cpus, num_gpus=ec.num_gpus or None,
                            fn_constructor_kwargs={"info": info, "include_title": include_title,
                                                   "encode_batch_size": ec.encode_batch_size,
                                                   "device": embedder.device_for(ec),
                                                   "threads": hardware.threads(ec.num_cpus)})
        # every actor up before the first block goes out: the first one ready would otherwise embed a small
        # corpus alone while the others load (the pool is sized to free cores, so they do start)
        ds.context.wait_for_min_actors_s = ACTORS_START_S
        for batch in ds.iter_batches(batch_format="numpy", batch_size=None):  # embedding: (rows, dim)
            by_id.update(zip((str(c) for c in batch["chunk_id"]), batch["embedding"], strict=True))
            by_node.update(str(n) for n in batch["node"])
    assert len(by_id) >= len(ids), "a chunk came back without its vector"
    return Reembedded(np.stack([by_id[c] for c in ids]).astype(np.float32), len(todo), time.perf_counter() - t0,
                      dict(by_node), actors)
