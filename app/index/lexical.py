"""BM25 terms, the same way when an index version is built and when it is searched: bm25s's tokenizer with the
version's stopword list and Snowball stemmer (IndexConfig.stopwords, IndexConfig.stemmer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def tokenize(texts: Sequence[str], stopwords: str | None, stemmer: str | None) -> Any:
    """bm25s `Tokenized` ids and vocabulary of `texts`. A new Stemmer per call: a PyStemmer object is not
    thread-safe, and the Retriever searches from many threads (making one costs microseconds)."""
    import bm25s

    stem = None
    if stemmer is not None:
        import Stemmer

        stem = Stemmer.Stemmer(stemmer)
    return bm25s.tokenize(list(texts), stopwords=stopwords, stemmer=stem, show_progress=False)
