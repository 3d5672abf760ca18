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
    idx.remove("old")  # its file is read again in the run: its new self is no duplicate of its old self
    assert idx.check_exact("old", "h-old") is None
    assert idx.check_near("old", signature(text, 128, 5)) is None


def test_the_run_ledger_is_replay_safe():
    """A batch reported twice (Ray Data re-running a task whose node died) changes nothing: its documents keep the
    decisions made the first time instead of becoming duplicates of themselves, and no count doubles."""

    from app.config import IngestConfig
    from app.dataset import DOCUMENTS_FILE_SCHEMA
    from app.ingest.pipeline import reconcile
    from app.ingest.stages import RunLedger, batch_key

    seed = DOCUMENTS_FILE_SCHEMA.empty_table().select(["doc_id", "content_hash", "minhash"])
    ledger = RunLedger("run", IngestConfig().model_dump(), seed)
    texts = {"a.jsonl#line 1": "zebras cross the mara river every july " * 3,
             "a.jsonl#line 2": "zebras cross the mara river every july " * 3,  # an exact copy of line 1
             "b.txt": "okapis are shy forest giraffids of the ituri rainforest " * 3}
    keys = list(texts)
    rows = [{"key": k, "doc_id": k, "source": k.split("#")[0], "title": "", "content_hash": str(hash(t)),
             "minhash": signature(t, 128, 5).tolist(), "n_chars": len(t)} for k, t in texts.items()]
    for _ in range(2):  # the second time is the replay
        ledger.parsed(batch_key(["a.jsonl", "b.txt", "c.html", "d.md"]), 4, 4, 0, 0,
                      [{"source": "c.html", "reason": "rejected", "error": "E", "path": "q/c.html"}], [],
                      {"a.jsonl": "ha", "b.txt": "hb"})
        ledger.dropped([{"reason": "empty", "key": "d.md", "source": "d.md", "doc_id": "d", "duplicate_of": "",
                         "detail": ""}])
        exact = ledger.check_exact(keys, keys, [r["content_hash"] for r in rows], [r["source"] for r in rows])
        assert exact == [True, False, True]
        kept = [r for r, keep in zip(rows, exact, strict=True) if keep]
        assert ledger.check_near(kept) == [True, True]
        ledger.stage("near_dedup", batch_key(keys), 3, 2, 0.1)
    snap = ledger.snapshot(full=True)
    assert snap["kept"] == 2 and snap["dropped"]["exact_duplicate"] == 1 and snap["dropped"]["unreadable"] == 1
    assert snap["dropped"]["empty"] == 1 and snap["files"] == {"read": 3, "unreadable": 1}
    assert snap["stages"]["near_dedup"]["rows_in"] == 3 and len(snap["quarantined"]) == 1
    assert snap["documents_read"] == 5 and len(snap["drops"]) == 3 and reconcile(snap)
    assert snap["hashes"] == {"a.jsonl": "ha", "b.txt": "hb"}
