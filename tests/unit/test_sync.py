"""What a sync reads, replaces and removes (`app.ingest.sync`), on real files: the pipeline runs it in
tests/integration/test_ingest.py."""

from __future__ import annotations

import hashlib
import os

from app.config import load_config
from app.ingest.inputs import expand
from app.ingest.sync import Plan, changes, file_of, plan, plan_delta, reader_of, readmit, under


def _record(path, **kw):
    st = os.stat(path)
    rec = {"source": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "status": "read",
           "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "duplicate_of": [], "run_id": "r1"}
    return {**rec, **kw}


def _doc(source, doc_id, key=None, content_hash="h", run_id="r1"):
    return {"doc_id": doc_id, "source": str(source), "key": key or str(source), "content_hash": content_hash,
            "run_id": run_id}


def test_a_sync_reads_new_and_changed_files_deletes_gone_ones_and_readmits_duplicates(tmp_path):
    root, other = tmp_path / "docs", tmp_path / "elsewhere"
    root.mkdir()
    other.mkdir()
    same, touched, edited, dup = (root / n for n in ("same.txt", "touched.txt", "edited.txt", "dup.txt"))
    for p in (same, touched, edited, dup):
        p.write_text(f"text of {p.name}")
    records = {str(same): _record(same), str(edited): _record(edited, sha256="0" * 64, size=1),
               str(dup): _record(dup, duplicate_of=["gone-doc"]),
               str(touched): _record(touched, mtime_ns=1),  # same bytes, another mtime: hashed, not read
               str(root / "gone.txt"): _record(same, source=str(root / "gone.txt")),
               str(other / "kept.txt"): _record(same, source=str(other / "kept.txt"))}
    live = [_doc(same, "s"), _doc(edited, "e"), _doc(root / "gone.txt", "gone-doc"), _doc(other / "kept.txt", "k"),
            _doc(f"{root}/mail.eml#attachment/a.pdf", "att")]  # an e-mail ingested before, now gone
    (root / "new.txt").write_text("a new file")
    inputs = expand([str(root)])
    p = plan(inputs, live, records, sync=True)
    assert sorted(p.read) == sorted(str(x) for x in (edited, root / "new.txt"))
    assert p.replacing == {str(edited)}  # the new file replaces nothing
    assert p.deleted == {str(root / "gone.txt"), f"{root}/mail.eml"}  # the other root's file is not touched
    assert set(p.touched) == {str(touched)} and p.touched[str(touched)]["mtime_ns"] == os.stat(touched).st_mtime_ns
    assert p.files.model_dump() == {"new": 1, "changed": 1, "unchanged": 3, "deleted": 2, "readmitted": 0,
                                    "reread": 0}
    # once the first wave ran: dup.txt's documents duplicated the deleted gone-doc, so it is read again
    assert readmit(p, inputs, live, records, kept=[], unreadable=set()) == {str(dup): str(dup)}
    assert p.files.model_dump() == {"new": 1, "changed": 1, "unchanged": 2, "deleted": 2, "readmitted": 1,
                                    "reread": 0}
    assert str(dup) in p.read and str(dup) in p.replacing
    assert readmit(p, inputs, live, records, kept=[], unreadable=set()) == {}  # each file once
    # without sync nothing is deleted, and nothing is readmitted for a deletion that does not happen
    p = plan(inputs, live, records, sync=False)
    assert p.deleted == set() and readmit(p, inputs, live, records, kept=[], unreadable=set()) == {}


def test_a_new_chunking_config_reads_every_known_file_again_once(tmp_path):
    """Files read under another reader (chunking, normalisation, OCR, added metadata) are read again, unchanged or
    not; records from before readers were kept are taken as read by this one. Limits and dedup are not readers."""
    base = load_config(None).ingest
    assert reader_of(base) == reader_of(load_config(None, ["ingest.documents.timeout_s=5",
                                                           "ingest.dedup.near=false"]).ingest)
    for override in ("ingest.chunk.chunk_tokens=128", "ingest.normalize.min_chars=5", "ingest.documents.ocr=false",
                     "ingest.metadata={team: hr}"):
        assert reader_of(load_config(None, [override]).ingest) != reader_of(base), override
    a, b, c = (tmp_path / n for n in ("a.txt", "b.txt", "c.txt"))
    for p in (a, b, c):
        p.write_text(f"text of {p.name}")
    old, new = "0" * 16, reader_of(base)
    records = {str(a): _record(a, reader=old), str(b): _record(b, reader=new), str(c): _record(c)}
    p = plan(expand([str(tmp_path)]), [_doc(x, x.name) for x in (a, b, c)], records, sync=True, reader=new)
    assert p.read == [str(a)] and p.replacing == {str(a)}
    assert p.files.model_dump() == {"new": 0, "changed": 0, "unchanged": 2, "deleted": 0, "readmitted": 0,
                                    "reread": 1}


def test_changes_match_new_documents_to_old_by_id_then_place_and_reconcile(tmp_path):
    live = [_doc("a.jsonl", "1", "a.jsonl#line 1", "h1"), _doc("a.jsonl", "2", "a.jsonl#line 2", "h2"),
            _doc("a.jsonl", "x", "a.jsonl#line 3", "h3"), _doc("b.txt", "b-old", "b.txt", "hb"),
            _doc("c.txt", "c", "c.txt", "hc"), _doc("bad.pdf", "bad", "bad.pdf", "hp")]
    kept = [_doc("a.jsonl", "1", "a.jsonl#line 2", "h1", "r2"),  # moved a line down: matched by id, unchanged
            _doc("a.jsonl", "2", "a.jsonl#line 1", "h2-edited", "r2"),  # edited under its id
            _doc("a.jsonl", "new", "a.jsonl#line 4", "h4", "r2"),  # added; id "x" is gone
            _doc("b.txt", "b-new", "b.txt", "hb2", "r2"),  # a derived id changes with the text: matched by place
            _doc("n.txt", "n", "n.txt", "hn", "r2")]
    p = Plan(read=[], stat={}, replacing={"a.jsonl", "b.txt", "bad.pdf"}, deleted={"c.txt"}, touched={})
    removals, counts = changes(p, live, kept, unreadable={"bad.pdf"})
    assert counts.model_dump() == {"added": 2, "updated": 2, "unchanged": 1, "removed": 2, "live_before": 6,
                                   "live_after": 6}
    assert counts.reconciled
    assert sorted((r.doc_id, r.reason) for r in removals) == [
        ("1", "updated"), ("2", "updated"), ("b-old", "updated"), ("c", "deleted"), ("x", "deleted")]
    # the unparseable file keeps its documents


def test_sources_and_roots():
    assert file_of("/d/mail.eml#attachment/report.pdf") == "/d/mail.eml" and file_of("/d/a.txt") == "/d/a.txt"
    assert under("/d/x/a.txt", ["/d/x"]) and not under("/d/xy/a.txt", ["/d/x"])
    assert under("/d/x/a.md", ["/d/*/*.md"]) and under("s3://b/p/a.txt", ["s3://b/p/"])


def test_a_delta_table_is_read_by_its_log_never_file_by_file(tmp_path):
    import pyarrow as pa
    import pytest
    from deltalake import write_deltalake

    from app.errors import UserError

    table = tmp_path / "data" / "articles"
    write_deltalake(str(table), pa.table({"id": [1], "text": ["Sea otters use stones as tools."]}))
    (tmp_path / "data" / "notes.txt").write_text("a note")
    inputs = expand([str(table)])
    assert (inputs.delta, inputs.files) == (str(table), [])
    walked = expand([str(tmp_path / "data")])  # met in a walk: skipped, its data files unread
    assert walked.files == [str(tmp_path / "data" / "notes.txt")]
    assert walked.skipped == [{"source": str(table), "type": "a Delta table (ingest it by its own path)"}]
    with pytest.raises(UserError, match="is a Delta table: ingest it on its own"):
        expand([str(table), str(tmp_path / "data" / "notes.txt")])
    p = plan_delta(str(table), ["1"], ["2"], whole=False, live=[_doc(table, "1"), _doc(table, "2")])
    assert p.replaces(_doc(table, "2")) and not p.replaces(_doc(table, "3")) and p.files.changed == 1
