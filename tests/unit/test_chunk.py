import itertools

import pytest

from app.ingest.chunk import Span, chunk_id, chunk_text, token_spans
from app.ingest.parts import join_parts, label, locate, sections
from app.models.embedder import load_tokenizer


def test_windows_overlap_and_cover_every_token():
    offsets = [(i * 2, i * 2 + 1) for i in range(10)]  # tokens "a" at even offsets
    spans = token_spans(offsets, 20, chunk_tokens=4, overlap=1)
    # windows start at tokens 0, 3, 6; the last one reaches token 9 and stops
    assert spans == [Span(0, 7, 4), Span(6, 13, 4), Span(12, 19, 4)]


def test_short_text_is_one_chunk_and_empty_tokens_cover_text():
    assert token_spans([(0, 3)], 3, 8, 2) == [Span(0, 3, 1)]
    assert token_spans([], 5, 8, 2) == [Span(0, 5, 0)]


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("all-MiniLM-L6-v2")


def test_offsets_point_back_into_the_text(tokenizer):
    text = " ".join(f"word{i}" for i in range(300))  # "word12" is several word pieces: windows must not cut it
    spans = chunk_text(text, tokenizer, chunk_tokens=50, overlap=10)
    assert len(spans) > 3
    assert spans[0].start_char == 0 and spans[-1].end_char == len(text)
    for a, b in itertools.pairwise(spans):
        assert b.start_char < a.end_char  # overlap
    for s in spans:
        assert 40 <= s.n_tokens <= 50 or s is spans[-1]
        piece = text[s.start_char : s.end_char]
        assert piece == piece.strip() and len(tokenizer.encode(piece, add_special_tokens=False).ids) == s.n_tokens


def test_chunk_ids_are_deterministic_and_depend_on_embedder():
    a = chunk_id("doc", 0, "m", "r1")
    assert a == chunk_id("doc", 0, "m", "r1")
    assert len({a, chunk_id("doc", 1, "m", "r1"), chunk_id("doc", 0, "m", "r2"), chunk_id("doc2", 0, "m", "r1")}) == 4


def test_every_token_is_in_some_chunk_even_without_overlap():
    # pieces glued into 3-token words: a window of 4 would cut words; without overlap nothing may be lost
    offsets = []
    for w in range(6):
        base = w * 7
        offsets += [(base, base + 2), (base + 2, base + 4), (base + 4, base + 6)]
    spans = token_spans(offsets, 41, chunk_tokens=4, overlap=0)
    covered = set()
    for s in spans:
        covered.update(i for i, (a, b) in enumerate(offsets) if s.start_char <= a and b <= s.end_char)
        assert s.start_char % 7 == 0 and s.end_char % 7 == 6  # whole words only
    assert covered == set(range(len(offsets)))


def test_a_chunk_is_bounded_in_characters_too(tokenizer):
    """One 20,000-character "word" is a single [UNK] token to MiniLM: split by characters, it makes several chunks
    of bounded size instead of one that holds it all."""
    from app.ingest.chunk import MAX_TOKEN_CHARS

    text = "Intro words here. " + "x" * 20_000 + " and the end."
    spans = chunk_text(text, tokenizer, 32, 4)
    assert 5 < len(spans) < 20 and max(s.end_char - s.start_char for s in spans) <= 32 * MAX_TOKEN_CHARS
    covered = {i for s in spans for i in range(s.start_char, s.end_char)}
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())  # nothing falls between chunks


def test_pages_join_into_one_text_with_each_part_located():
    parts = [{"text": "  The answer runs\nacross ", "page": 1, "section": ""},
             {"text": "", "page": 2, "section": ""},  # a blank page leaves no segment
             {"text": "the page break.", "page": 3, "section": ""}]
    text, segments = join_parts(parts)
    assert text == "The answer runs\nacross\nthe page break."
    assert [(s["page"], text[s["start"]:s["end"]]) for s in segments] == [
        (1, "The answer runs\nacross"), (3, "the page break.")]
    assert locate(4, 30, segments, "page") == ([1, 3], "", "pp. 1–3")
    assert locate(0, 5, segments, "page")[2] == "p. 1"
    assert label([2, 3], "Intro", "slide") == "slides 2–3"
    assert label([], "Sales", "sheet") == "sheet Sales"
    assert label([], "Results › Tables", "") == "§ Results › Tables"
    assert label([], "", "") == ""


def test_chunks_keep_to_sections_and_pack_small_ones(tokenizer):
    def section(name, words):
        return {"text": " ".join(f"{name}{i}" for i in range(words)), "page": 0, "section": name}

    # two small sections pack into one chunk; a long one is windowed alone and no window crosses into it
    text, segments = join_parts([section("alpha", 5), section("beta", 5), section("gamma", 120),
                                 section("delta", 5)])
    spans = chunk_text(text, tokenizer, chunk_tokens=64, overlap=8, sections=sections(segments))
    located = [[seg["section"] for seg in segments if seg["start"] < s.end_char and s.start_char < seg["end"]]
               for s in spans]
    assert located[0] == ["alpha", "beta"]
    assert all(sec == ["gamma"] for sec in located[1:-1]) and len(located) > 3
    assert located[-1] == ["delta"] and locate(spans[-1].start_char, spans[-1].end_char, segments, "")[2] == "§ delta"
    assert spans[0].start_char == 0 and spans[-1].end_char == len(text)
