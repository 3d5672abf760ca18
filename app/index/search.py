"""Search an index version: dense (FAISS), lexical (BM25) or hybrid (weighted reciprocal rank fusion),
top-k, optionally restricted to sources matching glob patterns and to documents whose metadata matches a filter
(app/filters.py). A restriction is applied inside each search, not to its results: a filtered query's top k
come from the matching chunks however far down the unfiltered ranking they are."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.catalog import Catalog, Manifest
from app.config import SearchConfig
from app.errors import Conflict, UserError
from app.filters import Filter, Metadata
from app.fusion import rrf
from app.index import lexical
from app.index.subsets import EXACT_FRACTION, Subsets
from app.passage import ChunkRow, Passage
from app.storage import Storage

Mode = Literal["dense", "lexical", "hybrid"]


class ChunkTable(Sequence[ChunkRow]):
    """An index's chunks as the Arrow table read from its `chunks.parquet`: a row becomes a dict only when asked
    for (a hit, a training example). A million chunks cost their Arrow columns (about the text's own bytes), not a
    million dicts (about 1.5x that again in Python objects: benchmarks/scale_bench.py)."""

    BATCH = 4096  # rows per Arrow → Python conversion when iterating

    def __init__(self, table: pa.Table):
        self.table = table

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __getitem__(self, row: int) -> ChunkRow:  # type: ignore[override]  # rows only, no slices
        assert 0 <= row < self.table.num_rows, (row, self.table.num_rows)
        return self.table.slice(row, 1).to_pylist()[0]

    def rows(self, rows: list[int]) -> list[ChunkRow]:
        """Several rows in one Arrow conversion (a search's hits)."""
        return self.table.take(pa.array(rows, pa.int64())).to_pylist()  # typed: [] would be a null array

    def __iter__(self) -> Iterator[ChunkRow]:
        for batch in self.table.to_batches(self.BATCH):
            yield from batch.to_pylist()

    def column(self, name: str) -> list[Any]:
        return self.table.column(name).to_pylist()


def rows_by_value(column: pa.ChunkedArray) -> dict[str, np.ndarray]:
    """Each distinct value → the rows holding it (ascending int64), without a Python loop over the rows."""
    codes = column.dictionary_encode().combine_chunks()
    ids = codes.indices.to_numpy(zero_copy_only=False)
    order = np.argsort(ids, kind="stable")  # rows grouped by value, ascending within each
    bounds = np.searchsorted(ids[order], np.arange(len(codes.dictionary) + 1))
    return {value: order[bounds[i]:bounds[i + 1]].astype(np.int64)
            for i, value in enumerate(codes.dictionary.to_pylist())}


def document_text(spans: Iterable[tuple[int, int, str]]) -> str:
    """A document's text from its chunks, given as (start_char, end_char, text): overlaps kept once, gaps (the
    whitespace between two chunks) as spaces, so every chunk's offsets index into the result."""
    text = ""
    for start, end, piece in sorted(spans):
        if end > len(text):
            text = text.ljust(start) + piece[max(len(text) - start, 0):]
    return text


@functools.lru_cache(maxsize=256)
def _source_matcher(patterns: tuple[str, ...]) -> Callable[[str], re.Match[str] | None]:
    """One compiled regex for a set of globs (compiling 16 long globs costs tens of ms: a repeated filter pays once)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)).match


class Index:
    """A loaded index version. Thread-safe for concurrent searches (FAISS and bm25s only read)."""

    def __init__(self, manifest: Manifest, directory: Path):
        import bm25s

        self.manifest = manifest
        self.version = manifest.version
        self.dense = faiss.read_index(str(directory / "dense.faiss"))
        self.bm25 = bm25s.BM25.load(str(directory / "bm25"), show_progress=False)
        self.chunks = ChunkTable(pq.read_table(directory / "chunks.parquet"))
        # a source filter matches each distinct source once (a file has many chunks), not every chunk
        self.rows_of_source = rows_by_value(self.chunks.table.column("source"))
        # the BM25 terms as built (IndexConfig): a bm25s stopword list name and a stemmer, or None; versions from
        # before stemming have none
        self.stopwords: str | None = manifest.config.get("stopwords", "en")  # type: ignore[assignment]
        self.stemmer: str | None = manifest.config.get("stemmer")  # type: ignore[assignment]
        dense = manifest.extra.get("dense")  # app.index.build.DenseParams, as a dict
        dense_params = dense if isinstance(dense, dict) else {}
        # untyped JSON, passed on to FAISS as it is: an int for the index type that uses it, else absent (None)
        self.ef_search: Any = dense_params.get("ef_search")  # hnsw indexes
        self.nprobe: Any = dense_params.get("nprobe")  # ivf indexes
        assert self.dense.ntotal == len(self.chunks), "index files disagree on the number of chunks"
        if isinstance(self.dense, faiss.IndexIVF):
            self.dense.make_direct_map()  # rows → list entries (8 bytes a vector), so that subsets can reconstruct
        self.subsets = Subsets(self.dense)  # exact search of small allowed sets (a selective filter)

    @classmethod
    def load(cls, storage: Storage, version: int | None = None, verify: bool = True) -> Index:
        """Latest (or given) index version; remote storage is mirrored to a local cache first."""
        catalog = Catalog(storage)
        manifest = catalog.resolve("indexes", version)
        if verify and (bad := catalog.verify(manifest)):
            raise Conflict(f"index version {manifest.version} is damaged: {'; '.join(bad)}")
        return cls.open(storage, manifest)

    @classmethod
    def open(cls, storage: Storage, manifest: Manifest) -> Index:
        """The index `manifest` describes, published or staged (`app.index.build.stage_index`)."""
        rel = str(manifest.extra["dir"])  # root-relative directory of the index files
        if storage.is_local:
            return cls(manifest, storage.local_path(rel))
        key = hashlib.sha256(f"{storage.uri}/{rel}".encode()).hexdigest()[:16]
        cache = Path(tempfile.gettempdir()) / "ragline-index-cache" / key
        if not (cache / "chunks.parquet").exists():
            storage.download_dir(rel, cache)
        return cls(manifest, cache)

    @functools.cached_property
    def metadata(self) -> Metadata:
        """The chunks' metadata, parsed the first time a search is filtered by it (a second of CPU at 100,000
        documents, which an unfiltered index never pays). Building it twice at once wastes one build, nothing else.
        It caches each filter's rows: living on this object, that cache is per index version (and per collection)
        by construction, and goes when a newer version replaces this one."""
        return Metadata(self.chunks.table.column("metadata"))

    def allowed(self, sources: list[str] | None, where: Filter | None = None) -> np.ndarray | None:
        """Row ids (ascending) whose source matches any glob pattern and whose document matches `where` (None: no
        restriction)."""
        by_source = self._source_rows(sources) if sources else None
        by_filter = self.metadata.rows(where) if where is not None else None
        if by_source is None or by_filter is None:
            return by_filter if by_source is None else by_source
        return np.intersect1d(by_source, by_filter, assume_unique=True)

    def _source_rows(self, sources: list[str]) -> np.ndarray:
        match = _source_matcher(tuple(sorted(set(sources))))
        rows = [r for s, r in self.rows_of_source.items() if match(s)]
        return np.sort(np.concatenate(rows)) if rows else np.empty(0, dtype=np.int64)

    def dense_search(self, vector: np.ndarray, k: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        k = min(k, len(self.chunks) if allowed is None else len(allowed))
        if k <= 0:
            return []
        query = vector.reshape(1, -1).astype(np.float32)
        if allowed is not None and self.subsets.fits(allowed):
            return self.subsets.search(query[0], k, allowed)  # exact: an ANN index loses the few allowed rows
        sel, share = None, 1.0
        if allowed is not None:
            # a packed bitmap over all rows: 3.7 against 4.1 ms per query with IDSelectorBatch (a hash set it
            # builds per query) on a flat index of 100,000 at 10% selectivity, 0.25 against 0.36 ms at 1%
            bitmap = np.zeros(len(self.chunks), dtype=bool)
            bitmap[allowed] = True
            # faiss: bit i&7 of byte i>>3; its Python wrapper takes the array (the stubs know only the C signature)
            sel = faiss.IDSelectorBitmap(np.packbits(bitmap, bitorder="little"))  # type: ignore[call-arg,arg-type]
            share = max(len(allowed), 1) / len(self.chunks)
        if isinstance(self.dense, faiss.IndexHNSW):
            # HNSW with a selector kept its recall down to EXACT_FRACTION allowed; a smaller set is here only when
            # too large to copy (big vectors): widen the beam by what is missing, up to 8x
            ef = int(max(self.ef_search, k) * min(8.0, max(1.0, EXACT_FRACTION / share)))
            # faiss's bundled stubs lack the search-parameter classes and their SWIG keyword arguments
            params: Any = faiss.SearchParametersHNSW(sel=sel, efSearch=ef)  # type: ignore[attr-defined]
        elif isinstance(self.dense, faiss.IndexIVF):
            # probe 1/share as many lists (up to 8x), so that about as many allowed rows are scored as an unfiltered
            # search scores rows (rows outside the selector are skipped before their distance is computed)
            nprobe = min(self.dense.nlist, int(self.nprobe * min(8.0, 1.0 / share)))
            params = faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)  # type: ignore[call-arg]
        else:
            params = faiss.SearchParameters(sel=sel)  # type: ignore[call-arg]
        scores, ids = self.dense.search(query, k, params=params)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def lexical_search(self, query: str, k: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
        k = min(k, len(self.chunks) if allowed is None else len(allowed))
        tokens = lexical.tokenize([query], self.stopwords, self.stemmer)
        if k <= 0 or not tokens.ids[0]:  # a query of only stopwords matches nothing lexically
            return []
        mask = None
        if allowed is not None:
            mask = np.zeros(len(self.chunks), dtype=np.float32)
            mask[allowed] = 1.0
        # n_threads=0: in this thread (1 starts a thread pool of one per call: 0.88 against 0.43 ms CPU per hybrid
        # search on the demo index)
        ids, scores = self.bm25.retrieve(tokens, k=k, show_progress=False, weight_mask=mask, n_threads=0)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if s > 0]

    def search(self, query: str, vector: np.ndarray | None, mode: Mode, k: int, cfg: SearchConfig,
               sources: list[str] | None = None, where: Filter | None = None) -> list[Passage]:
        """`vector` is the query's normalised embedding (needed for dense and hybrid); `sources` (globs) and
        `where` (a parsed metadata filter) restrict the chunks searched."""
        allowed = self.allowed(sources, where)
        if mode == "lexical":
            ranked = self.lexical_search(query, k, allowed)
        else:
            assert vector is not None, f"{mode} search needs the query embedding"
            if mode == "dense":
                ranked = self.dense_search(vector, k, allowed)
            else:
                n = max(k, cfg.candidates)
                dense = [i for i, _ in self.dense_search(vector, n, allowed)]
                lexical = [i for i, _ in self.lexical_search(query, n, allowed)]
                ranked = rrf([dense, lexical], [cfg.dense_weight, cfg.lexical_weight], cfg.rrf_k)[:k]
        ranked = ranked[:k]
        rows = self.chunks.rows([i for i, _ in ranked])
        return [Passage.from_row(c, rank, score)
                for rank, ((_, score), c) in enumerate(zip(ranked, rows, strict=True), start=1)]

    def in_document(self, chunk_id: str) -> tuple[ChunkRow, str] | None:
        """A chunk and the text of its document as this index's chunks cover it (the chunk's `start_char` and
        `end_char` index into it); None if no chunk has that id. Chunks overlap or meet at whitespace, so the text
        is the normalised document's, with any whitespace between two chunks as spaces."""
        table = self.chunks.table
        row = pc.index(table.column("chunk_id"), chunk_id).as_py()  # a vectorised scan: ms at a million chunks
        if row < 0:
            return None
        chunk = self.chunks[row]
        siblings = table.filter(pc.equal(table.column("doc_id"), chunk["doc_id"]))
        spans = zip(*(siblings.column(c).to_pylist() for c in ("start_char", "end_char", "text")), strict=True)
        return chunk, document_text(spans)


class Searcher:
    """An index plus the embedder it was built with: question in, hits out."""

    def __init__(self, index: Index, cfg: SearchConfig):
        from app.models import embedder

        self.index, self.cfg = index, cfg
        self.encoder = embedder.for_index(index.manifest.embedder)

    def embed(self, queries: list[str]) -> np.ndarray:
        """(len(queries), dim) normalised float32, at the precision the index was built with."""
        return self.encoder.encode(queries)

    def search(self, query: str, mode: Mode | None = None, k: int | None = None,
               sources: list[str] | None = None, where: Filter | None = None) -> list[Passage]:
        if not query.strip():
            raise UserError("the question is empty")
        mode = mode or self.cfg.mode
        vector = None if mode == "lexical" else self.embed([query])[0]
        return self.index.search(query, vector, mode, k or self.cfg.top_k, self.cfg, sources, where)
