"""Exact and near-duplicate detection (MinHash LSH from datasketch). Pure logic: the pipeline runs one
`DedupIndex` inside a single Ray actor so every document of a run meets every other one."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from datasketch import MinHash

# datasketch is imported where it is used: its package imports scipy.integrate (0.5 s), which every ingest
# process that imports the stages module (the run's ledger, parsers, embedding actors) would pay for nothing

_WORD = re.compile(r"\w+", re.UNICODE)
# Signatures are stored with each dataset version and compared across runs: pin the hashing scheme.
SCHEME = "affine32"


def shingles(text: str, n: int) -> set[bytes]:
    """Word n-grams of lower-cased text (a text shorter than n words is one shingle)."""
    words = _WORD.findall(text.lower())
    if len(words) <= n:
        return {" ".join(words).encode()}
    return {" ".join(words[i : i + n]).encode() for i in range(len(words) - n + 1)}


def signature(text: str, num_perm: int, shingle_words: int) -> np.ndarray:
    """MinHash signature, shape (num_perm,), uint64."""
    from datasketch import MinHash

    m = MinHash(num_perm=num_perm, scheme=SCHEME)
    m.update_batch(list(shingles(text, shingle_words)))
    return m.hashvalues.astype(np.uint64)


@dataclass
class DedupIndex:
    """Exact keys and an LSH over kept documents. `check_*` return, per document, None (keep) or the id of the
    document it duplicates; kept documents are added, so later calls see them."""

    threshold: float
    num_perm: int
    hashes: dict[str, str] = field(default_factory=dict)  # content hash -> doc id
    ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        from datasketch import MinHashLSH

        self.lsh = MinHashLSH(threshold=self.threshold, num_perm=self.num_perm)
        self.signatures: dict[str, np.ndarray] = {}

    def add(self, doc_id: str, content_hash: str, sig: np.ndarray | None) -> None:
        self.ids.add(doc_id)
        self.hashes.setdefault(content_hash, doc_id)
        if sig is not None and doc_id not in self.signatures:
            self.signatures[doc_id] = sig
            self.lsh.insert(doc_id, _minhash(self.num_perm, sig))

    def remove(self, doc_id: str) -> None:
        """Forget a document (its file is read again in the same run: it must not be a duplicate of itself)."""
        self.ids.discard(doc_id)
        for h in [h for h, d in self.hashes.items() if d == doc_id]:
            del self.hashes[h]
        if self.signatures.pop(doc_id, None) is not None:
            self.lsh.remove(doc_id)

    def check_exact(self, doc_id: str, content_hash: str) -> tuple[str, str] | None:
        """(reason, duplicate of) for a repeated content hash or document id, else None (and remembers it)."""
        if content_hash in self.hashes:
            return "exact_duplicate", self.hashes[content_hash]
        if doc_id in self.ids:
            return "duplicate_id", doc_id
        self.hashes[content_hash] = doc_id
        self.ids.add(doc_id)
        return None

    def check_near(self, doc_id: str, sig: np.ndarray) -> str | None:
        """The id of the most similar kept document above threshold, else None (and indexes this one)."""
        m = _minhash(self.num_perm, sig)
        candidates = [c for c in self.lsh.query(m) if c != doc_id]
        if candidates:
            # LSH returns candidates in no order; report the closest by estimated Jaccard.
            return max(candidates, key=lambda c: (float(np.mean(self.signatures[c] == sig)), c))
        self.signatures[doc_id] = sig
        self.lsh.insert(doc_id, m)
        return None


def _minhash(num_perm: int, sig: np.ndarray) -> MinHash:
    """The datasketch MinHash of a stored signature."""
    from datasketch import MinHash

    return MinHash(num_perm=num_perm, hashvalues=sig, scheme=SCHEME)
