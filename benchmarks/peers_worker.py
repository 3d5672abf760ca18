"""The child processes of benchmarks/peers_bench.py, each run by the Python that has its framework: LlamaIndex and
Haystack from the benchmark's own environment (benchmarks/.venv-peers), Ragline's search from Ragline's. Only the
standard library is imported at the top, so every environment can run this file.

    python peers_worker.py llamaindex|haystack CORPUS_JSONL SETTINGS_JSON QUERIES_JSON OUT_JSON
    python peers_worker.py ragline-search STORAGE SETTINGS_JSON QUERIES_JSON OUT_JSON

A peer ingests the corpus the way its documentation shows (see INGEST below), prints the line
`PEERS-INGESTED {"t": <epoch seconds>}` the moment its store is searchable (the parent stops that side's ingest clock
there), then answers every query with each of its retrievers, one query at a time, and writes OUT_JSON: its phases'
seconds, its chunk count, and per retriever the chunks' document ids in rank order and each query's latency.
`ragline-search` does the last part for a published Ragline index, with Ragline's Searcher in this process.

SETTINGS_JSON: {"model_dir", "chunk_tokens", "overlap_tokens", "split_words", "split_overlap_words",
"llamaindex_workers", "chunks_per_query", "warmup", "overrides"}.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STARTED = time.time()  # epoch: the parent compares it with when it spawned this process
MARKER = "PEERS-INGESTED"

Retrieve = Callable[[str], list[str]]  # a query -> the document id of each chunk retrieved, best first


def read_corpus(path: Path) -> list[tuple[str, str, str]]:
    """(id, title, text) of each record of a BEIR corpus.jsonl."""
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                out.append((str(rec["_id"]), rec.get("title") or "", rec.get("text") or ""))
    return out


def ingested(phases: dict[str, float]) -> None:
    """Tells the parent that the store is searchable now (its clock stops at this line)."""
    phases["ingested_at"] = time.time()
    print(f"{MARKER} {json.dumps({'t': phases['ingested_at']})}", flush=True)


def measure(retrieve: Retrieve, queries: dict[str, str], warmup: int) -> dict[str, Any]:
    """Each query once, in order, one at a time; the first `warmup` queries are asked once more beforehand,
    untimed (first-call costs: lazy imports, allocator growth)."""
    qids = list(queries)
    for q in qids[:warmup]:
        retrieve(queries[q])
    rankings: dict[str, list[str]] = {}
    latency_ms: list[float] = []
    for q in qids:
        t0 = time.perf_counter()
        ranked = retrieve(queries[q])
        latency_ms.append((time.perf_counter() - t0) * 1e3)
        rankings[q] = ranked
    return {"rankings": rankings, "latency_ms": [round(x, 3) for x in latency_ms],
            "p50_ms": round(statistics.median(latency_ms), 3)}


# -- LlamaIndex ------------------------------------------------------------------------------------------------------


def llamaindex(corpus: Path, s: dict[str, Any], queries: dict[str, str]) -> dict[str, Any]:
    """IngestionPipeline([SentenceSplitter, HuggingFaceEmbedding]).run(num_workers=...) into a VectorStoreIndex;
    retrieval: the index's retriever (dense), and BM25Retriever (llama-index-retrievers-bm25) over the same nodes."""
    phases: dict[str, float] = {"started_at": STARTED}
    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from transformers import AutoTokenizer

    phases["imported_at"] = time.time()
    embed_model = HuggingFaceEmbedding(model_name=s["model_dir"], device="cpu")
    Settings.embed_model = embed_model  # never the OpenAI default
    # the splitter counts the embedder's own tokens (its default, tiktoken's cl100k, is another model's)
    tokenizer = AutoTokenizer.from_pretrained(s["model_dir"])
    tokenizer.model_max_length = 1 << 30  # measuring a whole document is not feeding it to the model
    phases["model_loaded_at"] = time.time()
    documents = [Document(id_=doc_id, text=text, metadata={"title": title})
                 for doc_id, title, text in read_corpus(corpus)]
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=s["chunk_tokens"], chunk_overlap=s["overlap_tokens"],
                                          tokenizer=tokenizer.tokenize), embed_model],
        disable_cache=True)  # as LlamaIndex's parallel-ingestion example does when it measures speed
    workers = s["llamaindex_workers"]
    nodes = pipeline.run(documents=documents, num_workers=workers if workers > 1 else None)
    index = VectorStoreIndex(nodes=list(nodes), embed_model=embed_model)  # the nodes carry their embeddings
    ingested(phases)
    k = s["chunks_per_query"]
    dense = index.as_retriever(similarity_top_k=k)
    retrieval = {"dense": measure(lambda q: [str(n.node.ref_doc_id) for n in dense.retrieve(q)], queries,
                                  s["warmup"])}
    notes: dict[str, Any] = {}
    try:
        from llama_index.retrievers.bm25 import BM25Retriever

        t0 = time.perf_counter()
        bm25 = BM25Retriever.from_defaults(nodes=list(nodes), similarity_top_k=k)
        notes["bm25_build_s"] = round(time.perf_counter() - t0, 3)
        retrieval["bm25"] = measure(lambda q: [str(n.node.ref_doc_id) for n in bm25.retrieve(q)], queries,
                                    s["warmup"])
    except Exception as e:  # optional: its package may not install or run; dense is the default
        notes["bm25_error"] = f"{type(e).__name__}: {e}"[:500]
    return {"phases": phases, "documents": len(documents), "chunks": len(nodes), "retrieval": retrieval,
            "settings": {"num_workers": workers, "embed_batch_size": embed_model.embed_batch_size,
                         "chunk_size": s["chunk_tokens"], "chunk_overlap": s["overlap_tokens"]}, **notes}


# -- Haystack --------------------------------------------------------------------------------------------------------


def haystack(corpus: Path, s: dict[str, Any], queries: dict[str, str]) -> dict[str, Any]:
    """An indexing Pipeline: DocumentSplitter -> SentenceTransformersDocumentEmbedder -> DocumentWriter into an
    InMemoryDocumentStore; retrieval: a query Pipeline (SentenceTransformersTextEmbedder ->
    InMemoryEmbeddingRetriever), and InMemoryBM25Retriever."""
    phases: dict[str, float] = {"started_at": STARTED}
    from haystack import Document, Pipeline
    from haystack.components.preprocessors import DocumentSplitter
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
        SentenceTransformersTextEmbedder,
    )

    phases["imported_at"] = time.time()
    store = InMemoryDocumentStore()
    indexing = Pipeline()
    indexing.add_component("splitter", DocumentSplitter(split_by="word", split_length=s["split_words"],
                                                        split_overlap=s["split_overlap_words"]))
    indexing.add_component("embedder", SentenceTransformersDocumentEmbedder(
        model=s["model_dir"], meta_fields_to_embed=["title"], progress_bar=False))
    indexing.add_component("writer", DocumentWriter(document_store=store))
    indexing.connect("splitter", "embedder")
    indexing.connect("embedder", "writer")
    indexing.warm_up()  # loads the model
    phases["model_loaded_at"] = time.time()
    documents = [Document(content=text, meta={"title": title, "doc_id": doc_id})
                 for doc_id, title, text in read_corpus(corpus)]
    indexing.run({"splitter": {"documents": documents}})
    ingested(phases)
    k = s["chunks_per_query"]
    query = Pipeline()
    query.add_component("embedder", SentenceTransformersTextEmbedder(model=s["model_dir"], progress_bar=False))
    query.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=k))
    query.connect("embedder.embedding", "retriever.query_embedding")
    query.warm_up()
    lexical = Pipeline()
    lexical.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=k))

    def ids(out: dict[str, Any]) -> list[str]:
        return [str(d.meta["doc_id"]) for d in out["retriever"]["documents"]]

    retrieval = {"dense": measure(lambda q: ids(query.run({"embedder": {"text": q}})), queries, s["warmup"]),
                 "bm25": measure(lambda q: ids(lexical.run({"retriever": {"query": q}})), queries, s["warmup"])}
    return {"phases": phases, "documents": len(documents), "chunks": store.count_documents(),
            "retrieval": retrieval,
            "settings": {"split_by": "word", "split_length": s["split_words"],
                         "split_overlap": s["split_overlap_words"], "meta_fields_to_embed": ["title"],
                         "batch_size": 32, "bm25_algorithm": "BM25L (the store's default)"}}


# -- Ragline's search --------------------------------------------------------------------------------------------------


def ragline_search(storage: Path, s: dict[str, Any], queries: dict[str, str]) -> dict[str, Any]:
    """The published index's Searcher (the Retriever deployment's own), in this process: dense, BM25, hybrid."""
    t0 = time.perf_counter()
    from app.config import load_config
    from app.index.search import Index, Searcher
    from app.storage import Storage

    cfg = load_config(None, s.get("overrides") or [])
    index = Index.load(Storage(str(storage)))
    searcher = Searcher(index, cfg.search)
    load_s = time.perf_counter() - t0
    k = s["chunks_per_query"]
    retrieval = {mode: measure(lambda q, m=mode: [p.doc_id for p in searcher.search(q, m, k)],  # type: ignore[misc]
                               queries, s["warmup"])
                 for mode in ("dense", "lexical", "hybrid")}
    return {"load_s": round(load_s, 3), "chunks": len(index.chunks), "index_version": index.version,
            "embedder": index.manifest.embedder.model_dump(), "retrieval": retrieval}


SIDES: dict[str, Callable[[Path, dict[str, Any], dict[str, str]], dict[str, Any]]] = {
    "llamaindex": llamaindex, "haystack": haystack, "ragline-search": ragline_search}


def main(argv: list[str]) -> int:
    side, source, settings, queries_file, out = argv
    s = json.loads(Path(settings).read_text())
    queries = json.loads(Path(queries_file).read_text())
    result = SIDES[side](Path(source), s, queries)
    result["threads"] = {"torch": _torch_threads(), "cpus": os.cpu_count()}
    Path(out).write_text(json.dumps(result))
    return 0


def _torch_threads() -> int | None:
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:
        return None


if __name__ == "__main__":  # LlamaIndex's workers are spawned: they import this file as __mp_main__
    sys.exit(main(sys.argv[1:]))
