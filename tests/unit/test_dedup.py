import random

from app.ingest.dedup import DedupIndex, shingles, signature

random.seed(7)
VOCAB = [f"w{i}" for i in range(5000)]


def doc(n=200):
    return " ".join(random.choice(VOCAB) for _ in range(n))


def test_shingles_are_word_5grams():
    assert shingles("a b c d e f", 5) == {b"a b c d e", b"b c d e f"}
    assert shingles("Short Text", 5) == {b"short text"}


def test_exact_duplicates_and_repeated_ids():
    idx = DedupIndex(threshold=0.8, num_perm=128)
    assert idx.check_exact("a", "h1") is None
    assert idx.check_exact("b", "h1") == ("exact_duplicate", "a")
    assert idx.check_exact("a", "h2") == ("duplicate_id", "a")


def test_planted_near_copies_are_found_and_distinct_docs_are_not():
    idx = DedupIndex(threshold=0.8, num_perm=128)
    originals = [doc() for _ in range(50)]
    for i, text in enumerate(originals):
        assert idx.check_near(f"o{i}", signature(text, 128, 5)) is None
    words = originals[7].split()
    words[100] = "CHANGED"  # one word of 200: Jaccard of 5-shingles ≈ 0.95
    assert idx.check_near("copy", signature(" ".join(words), 128, 5)) == "o7"
    assert idx.check_near("new", signature(doc(), 128, 5)) is None


def test_preloaded_documents_are_compared_against():
    text = doc()
    idx = DedupIndex(threshold=0.8, num_perm=128)
    idx.add("old", "h-old", signature(text, 128, 5))
    assert idx.check_exact("x", "h-old") == ("exact_duplicate", "old")
    assert idx.check_near("again", signature(text + " tail", 128, 5)) == "old"
