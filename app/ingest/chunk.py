"""Chunking by the embedder's tokens, with overlap and character offsets back into the normalised text."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Span:
    start_char: int
    end_char: int
    n_tokens: int


def token_spans(offsets: list[tuple[int, int]], text_len: int, chunk_tokens: int, overlap: int) -> list[Span]:
    """Windows of `chunk_tokens` tokens stepping by `chunk_tokens - overlap`, as character spans.

    `offsets` are the tokenizer's (start, end) character offsets of each token (no special tokens). A window
    runs from its first token's start to its last token's end, so chunks never cut a token in half."""
    assert 0 <= overlap < chunk_tokens
    if not offsets:
        return [Span(0, text_len, 0)]
    step = chunk_tokens - overlap
    spans = []
    for first in range(0, len(offsets), step):
        last = min(first + chunk_tokens, len(offsets)) - 1
        spans.append(Span(offsets[first][0], offsets[last][1], last - first + 1))
        if last == len(offsets) - 1:
            break
    return spans


def chunk_text(text: str, tokenizer: Any, chunk_tokens: int, overlap: int) -> list[Span]:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, return_attention_mask=False)
    return token_spans([tuple(o) for o in enc["offset_mapping"]], len(text), chunk_tokens, overlap)


def chunk_id(doc_id: str, index: int, embedder_name: str, embedder_revision: str) -> str:
    """Deterministic: the same document, position and embedder always give the same id."""
    key = f"{doc_id}\x00{index}\x00{embedder_name}\x00{embedder_revision}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]
