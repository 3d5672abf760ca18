"""Chunking by the embedder's tokens, with overlap and character offsets back into the normalised text."""

from __future__ import annotations

import bisect
import hashlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer


@dataclass(frozen=True)
class Span:
    start_char: int
    end_char: int
    n_tokens: int


def token_spans(offsets: list[tuple[int, int]], text_len: int, chunk_tokens: int, overlap: int) -> list[Span]:
    """Windows of at most `chunk_tokens` tokens stepping by `chunk_tokens - overlap`, as character spans.

    `offsets` are the tokenizer's (start, end) character offsets of each token (no special tokens). Windows are
    snapped to word boundaries (a token glued to its neighbour, like "##ing", belongs to the same word): a
    window starts at the beginning of the word its first token is in, and ends before a word its last token
    would cut, so a chunk never holds half a word and re-tokenises to the same tokens."""
    assert 0 <= overlap < chunk_tokens
    if not offsets:
        return [Span(0, text_len, 0)]

    def glued(i: int) -> bool:  # token i continues the word of token i-1
        return 0 < i < len(offsets) and offsets[i][0] == offsets[i - 1][1]

    n = len(offsets)
    spans = []
    first = 0
    while True:
        end = min(first + chunk_tokens, n) - 1
        last = end
        while glued(last + 1) and last > first:
            last -= 1
        cut = glued(last + 1)
        if cut:  # one word fills the whole window: cut it rather than emit a sliver
            last = end
        spans.append(Span(offsets[first][0], offsets[last][1], last - first + 1))
        if last == n - 1:
            return spans
        # Next window: `overlap` tokens back from this one's end, moved back to its word's start (inside a word
        # longer than a window there is none to go back to). A window that would not start later than this one
        # (a short window before a long word) starts after it instead: one token forward per window would make a
        # long word quadratic.
        nxt = last + 1 - overlap
        while not cut and glued(nxt) and nxt > first + 1:
            nxt -= 1
        first = nxt if nxt > first else last + 1


MAX_TOKEN_CHARS = 64  # a longer "token" is an [UNK] for a run of junk (base64, a hash, a URL): split it


def chunk_text(text: str, tokenizer: Tokenizer, chunk_tokens: int, overlap: int,
               sections: Sequence[tuple[int, int]] = ()) -> list[Span]:
    """Spans of at most `chunk_tokens` tokens and `chunk_tokens * MAX_TOKEN_CHARS` characters: a token longer
    than MAX_TOKEN_CHARS counts as one per MAX_TOKEN_CHARS characters, so a 100 kB word is many chunks, not one.

    `sections`: the (start, end) character spans of the document's sections, in order. A chunk does not cross a
    section boundary, except to pack whole sections too small for a chunk of their own into one (slides, short
    headed paragraphs); a section longer than a chunk is windowed on its own."""
    offsets: list[tuple[int, int]] = []
    for start, end in tokenizer.encode(text, add_special_tokens=False).offsets:
        while end - start > MAX_TOKEN_CHARS:
            offsets.append((start, start + MAX_TOKEN_CHARS))
            start += MAX_TOKEN_CHARS
        offsets.append((start, end))
    if len(sections) < 2:
        return token_spans(offsets, len(text), chunk_tokens, overlap)
    starts = [o[0] for o in offsets]
    spans: list[Span] = []
    for lo, hi in _packed(sections, starts, chunk_tokens):
        spans += token_spans(offsets[lo:hi], len(text), chunk_tokens, overlap) if hi > lo else []
    return spans or [Span(0, len(text), 0)]


def _packed(sections: Sequence[tuple[int, int]], starts: list[int], chunk_tokens: int) -> list[tuple[int, int]]:
    """Token ranges [lo, hi) of consecutive sections, packed while they fit one chunk together. `starts`: each
    token's first character, ascending."""
    cuts = [0, *(bisect.bisect_left(starts, start) for start, _ in sections[1:]), len(starts)]
    packed: list[tuple[int, int]] = []
    for lo, hi in itertools.pairwise(cuts):
        if hi == lo:
            continue
        if packed and hi - packed[-1][0] <= chunk_tokens:
            packed[-1] = (packed[-1][0], hi)
        else:
            packed.append((lo, hi))
    return packed


def chunk_id(doc_id: str, index: int, embedder_name: str, embedder_revision: str) -> str:
    """Deterministic: the same document, position and embedder always give the same id."""
    key = f"{doc_id}\x00{index}\x00{embedder_name}\x00{embedder_revision}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]
