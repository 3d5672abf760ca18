import json

import pyarrow.parquet as pq
import pytest

from app import hardware
from app.catalog import Catalog, EmbedderInfo, Manifest, now_iso
from app.dataset import live_documents
from app.errors import Conflict, NotFound
from app.index.build import build_index, load_chunks
from app.index.search import Index, Searcher
from app.indexing import delete, run_ingest
from app.ingest.pipeline import IngestError
from app.ingest.stages import DROP_REASONS
from app.storage import Storage
from tests import document_files as files
from tests.helpers import PLANTED, topic_text


def chunk_ids(storage, version):
    return sorted(load_chunks(storage, Catalog(storage).get("datasets", version)).column("chunk_id").to_pylist())


def test_ingest_counts_idempotence_and_search(ray_cluster, corpus, cfg, tmp_path):
    path, want = corpus
    storage = Storage(str(tmp_path / "store"))
    report = run_ingest([str(path)], cfg, storage)

    docs = report["documents"]
    assert docs["read"] == want["read"] and docs["kept"] == want["kept"]
    assert docs["dropped"] == {k: want[k] for k in DROP_REASONS}
    assert report["reconciled"] and docs["read"] == docs["kept"] + sum(docs["dropped"].values())
    assert report["inputs"] == {"files": want["files"], "unreadable_files": 1, "skipped_files": [],
                                "refused_files": []}
    assert report["chunks"] == report["embeddings"] > docs["kept"]  # the 120-word topics take two chunks
    assert report["decode_replacements"] == {"bytes": 4, "documents": 1}
    # near-copy.txt and doc3 arrive in parallel blocks: whichever reaches the ledger first is kept
    (near,) = report["near_duplicates"]
    if near["doc_id"] == "doc3":
        assert near["source"].endswith("main.jsonl") and len(near["duplicate_of"]) == 24  # near-copy.txt's derived id
    else:
        assert near["source"].endswith("near-copy.txt") and near["duplicate_of"] == "doc3"
    assert set(report["stages"]) == {"parse", "normalize", "exact_dedup", "minhash", "near_dedup", "chunk", "embed"}
    (q,) = report["quarantined"]
    assert q["source"].endswith("corrupt.parquet") and "parquet" in q["reason"]
    assert storage.read_bytes(q["path"]) == (path / "corrupt.parquet").read_bytes()

    catalog = Catalog(storage)
    ds = catalog.get("datasets", report["dataset_version"])
    assert ds.counts == {"documents": want["kept"], "chunks": report["chunks"]} and catalog.verify(ds) == []
    assert ds.embedder.name == "all-MiniLM-L6-v2" and ds.embedder.dim == 384
    assert ds.embedder.precision == hardware.choose_precision("auto", "cpu")  # bf16 where the CPU has it
    assert ds.embedder.runtime == "openvino"  # on CPU, for a mean-pooled model
    drops = pq.read_table(storage.path(f"runs/ingest/{report['run_id']}.drops.parquet")).to_pylist()
    assert len(drops) == sum(docs["dropped"].values())
    ids_v1 = chunk_ids(storage, ds.version)
    assert len(ids_v1) == len(set(ids_v1)) == report["chunks"]

    # the same input again: no file is read (each known by size and mtime), nothing added, no new version
    again = run_ingest([str(path)], cfg, storage)
    assert again["chunks"] == 0 and again["documents"]["read"] == 0
    assert again["files"] == {"new": 0, "changed": 0, "unchanged": want["files"], "deleted": 0, "readmitted": 0,
                              "reread": 0}
    assert [m.version for m in catalog.versions("datasets")] == [ds.version]

    # an incremental ingest of a near copy of a published document adds nothing
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "zebra-again.txt").write_text(PLANTED.replace("every July", "each July"))
    (inc / "new.txt").write_text(topic_text(99))
    third = run_ingest([str(inc)], cfg, storage)
    assert third["documents"]["dropped"]["near_duplicate"] == 1 and third["documents"]["kept"] == 1
    assert third["near_duplicates"][0]["duplicate_of"] == "zebra"
    v2 = catalog.get("datasets", third["dataset_version"])
    assert v2.parent == ds.version and v2.counts["documents"] == want["kept"] + 1
    ids_v2 = chunk_ids(storage, v2.version)
    assert set(ids_v1) < set(ids_v2) and len(ids_v2) == len(set(ids_v2))

    # one precision and one runtime per dataset (its vectors are searched together): another is refused before
    # any work
    other = cfg.model_copy(deep=True)
    other.ingest.embed.precision = "fp32" if ds.embedder.precision == "bf16" else "bf16"
    with pytest.raises(Conflict, match=f"embedded with precision {ds.embedder.precision}"):
        run_ingest([str(inc)], other, storage)
    other = cfg.model_copy(deep=True)
    other.ingest.embed.runtime = "torch"
    with pytest.raises(Conflict, match="embedded with runtime openvino; ingest.embed.runtime is torch"):
        run_ingest([str(inc)], other, storage)
    assert [m.version for m in catalog.versions("datasets")] == [ds.version, v2.version]

    # search: the planted document comes first in every mode; source filters restrict results
    searcher = Searcher(Index.load(storage), cfg.search)
    assert searcher.index.version == third["index_version"]
    for mode in ("dense", "lexical", "hybrid"):
        hits = searcher.search("When do zebras cross the Mara river?", mode=mode, k=3)
        assert hits[0].doc_id == "zebra", mode
        assert PLANTED[hits[0].start_char : hits[0].end_char] == hits[0].text
    only_html = searcher.search("snakes", k=5, sources=["*.html"])
    assert only_html and {h.source.rsplit("/", 1)[1] for h in only_html} == {"page.html"}
    assert searcher.search("snakes", k=5, sources=["*.nothing"]) == []
    sync_edits_deletions_and_deletes(storage, cfg, path, third["index_version"])


def sync_edits_deletions_and_deletes(storage, cfg, path, old_index):
    """The corpus changes under its root: a sync brings the index up to date in one version, reusing the vectors
    of unchanged chunks; the version before still holds what it held (rollback); `delete` removes by id and by
    source, and a file removed by source is read again by the next ingest."""
    catalog = Catalog(storage)
    main = path / "main.jsonl"
    before = len([d for d in live_documents(storage, catalog.latest("datasets")) if d["source"] == str(main)])
    records = [json.loads(line) for line in main.read_text().splitlines()[:-1]]
    records[5]["text"] = "Narwhals use their long spiral tusks to sense the salinity of Arctic water."
    main.write_text("".join(json.dumps(r) + "\n" for r in records) + "{this line is not json\n")
    (path / "cafe.txt").write_text("Cafe creme brulee is now served warm in Lyon.")  # derived id: matched by place
    (path / "page.html").unlink()
    (path / "new.txt").write_text("Okapis are shy forest giraffids of the Ituri rainforest.")
    rows = (path / "rows.parquet").read_bytes()
    (path / "rows.parquet").write_bytes(b"PAR1 damaged")  # no longer parses: its documents stay as they were
    report = run_ingest([str(path)], cfg, storage, sync=True)
    assert report["files"] == {"new": 1, "changed": 3, "unchanged": 3, "deleted": 1, "readmitted": 0,
                               "reread": 0}
    assert [q["source"] for q in report["quarantined"]] == [str(path / "rows.parquet")]
    assert report["changes"]["added"] == 1 and report["changes"]["updated"] == 2
    assert report["changes"]["removed"] == 1 and report["changes"]["unchanged"] == before - 1
    assert report["reconciled"] and report["embeddings_reused"] >= 2 * (before - 1)  # two chunks a topic
    v = catalog.get("datasets", report["dataset_version"])
    assert v.counts["documents"] == report["changes"]["live_after"] == len(live_documents(storage, v))
    assert v.counts["chunks"] == len(chunk_ids(storage, v.version)) == len(set(chunk_ids(storage, v.version)))
    searcher = Searcher(Index.load(storage), cfg.search)
    assert searcher.search("snakes", k=5, sources=["*.html"]) == []  # the deleted page is gone
    assert searcher.search("What do narwhals sense with their tusks?", k=1)[0].doc_id == "doc5"
    assert "Lyon" in searcher.search("where is creme brulee served warm?", k=1)[0].text
    assert searcher.search("columnar storage on disk", k=1)[0].doc_id == "pq1"  # kept from the damaged file
    assert sorted(searcher.index.chunks.column("chunk_id")) == chunk_ids(storage, v.version)  # nothing stale
    assert Searcher(Index.load(storage, old_index), cfg.search).search("snakes", k=5, sources=["*.html"])

    deleted = delete(["doc7"], [str(path / "rows.parquet")], cfg, storage)
    assert (deleted.documents, deleted.sources, deleted.not_found) == (3, [str(path / "rows.parquet")], [])
    searcher = Searcher(Index.load(storage), cfg.search)
    assert searcher.index.version == deleted.index_version
    assert {"doc7", "pq1", "pq2"}.isdisjoint(searcher.index.chunks.column("doc_id"))
    with pytest.raises(NotFound, match="no document of dataset version"):
        delete(["doc7"], [], cfg, storage)
    (path / "rows.parquet").write_bytes(rows)  # mended
    back = run_ingest([str(path)], cfg, storage)  # the forgotten file is read again; doc7's file is unchanged
    assert back["files"]["new"] == 1 and back["changes"]["added"] == 2


def test_too_many_unreadable_files_fail_and_publish_nothing(ray_cluster, tmp_path, cfg):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "ok.txt").write_text("A perfectly fine document about rivers.")
    (d / "a.parquet").write_bytes(b"not parquet")
    (d / "b.jsonl").write_text("{nope\n")
    storage = Storage(str(tmp_path / "store"))
    cfg.ingest.read.max_error_fraction = 0.5
    with pytest.raises(IngestError, match=r"2 of 3 input files are unreadable.*a\.parquet.*b\.jsonl"):
        run_ingest([str(d)], cfg, storage)
    assert Catalog(storage).versions("datasets") == []


def test_a_hostile_corpus_is_ingested_around_its_bad_files(ray_cluster, tmp_path, cfg):
    """Each hostile file is dropped or quarantined with its reason; the good ones are kept; counts reconcile."""
    d, outside = tmp_path / "hostile", tmp_path / "private"
    (d / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "id_rsa.txt").write_text("-----BEGIN PRIVATE KEY----- not for the index")
    good = {"good.txt": "Glaciers carve U-shaped valleys as they move downhill.",
            "odd name #1 [x] 100% ü.md": "# Odd names\nFiles may have spaces, brackets and accents in their names.",
            "sub/nested.html": "<html><body><p>Lighthouses guide ships along rocky coasts.</p></body></html>"}
    for name, text in good.items():
        (d / name).write_text(text)
    (d / "malformed.html").write_text("<html><body><p>Release notes</p><![ </body></html>")  # bs4 rejects it
    (d / "deep.jsonl").write_text(json.dumps({"id": "flat", "text": "A flat record survives its deep neighbour."})
                                  + "\n" + "[" * 100_000 + "\n")
    (d / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 8)
    (d / "huge.txt").write_text("word " * 50_000)  # 250 kB
    (d / "empty.md").write_text("")
    docs_dir = d / "docs"  # real documents, good and hostile; each hostile one within the sandbox's limits
    docs_dir.mkdir()
    pdf = files.text_pdf([["Lighthouse keepers log every ship that passes the cape."],
                          ["Their log books since 1850 are kept in the harbour museum."]])
    for name, data in {
        "report.pdf": pdf, "notes.docx": files.docx_file(), "deck.pptx": files.pptx_file(),
        "herds.xlsx": files.xlsx_file(), "scan.png": files.png(files.text_image(["Beavers build dams"])),
        "mail.eml": files.eml("Survey results", "The owl survey is attached.", [
            ("survey.pdf", "application/pdf", files.text_pdf([["Barn owls nest in the old mill every spring."]]))]),
        "locked.pdf": files.encrypted(pdf), "broken.pdf": pdf[:400],
        "bomb.docx": files.zeros_member(files.docx_file(), "word/media/zeros.bin", 200 << 20),
        "laughs.docx": files.rezip(files.docx_file(), {"word/document.xml": files.BILLION_LAUGHS}),
        "deep.eml": files.nested_eml(1000), "tool.bin": b"\x7fELF\x02\x01\x01" + bytes(64),
    }.items():
        (docs_dir / name).write_bytes(data)
    (d / "leak.txt").symlink_to(outside / "id_rsa.txt")
    (d / "sub" / "loop").symlink_to(d, target_is_directory=True)  # walking it would never end
    cfg.ingest.read.max_file_bytes = 245_000  # deep.jsonl (100 kB) and bomb.docx (241 kB) are read, huge.txt not
    cfg.ingest.read.max_error_fraction = 0.5
    storage = Storage(str(tmp_path / "store"))

    report = run_ingest([str(d)], cfg, storage)

    docs = report["documents"]
    assert report["reconciled"] and docs["read"] == docs["kept"] + sum(docs["dropped"].values())
    # the three good files and the flat record; the pdf, docx, pptx, xlsx, png, the e-mail and its attachment; the
    # deep e-mail and the 5 levels of it parsed (ingest.documents.max_attachment_depth)
    assert docs["kept"] == 4 + 7 + 6, report
    assert {k: v for k, v in docs["dropped"].items() if v} == {"unreadable": 7, "too_large": 1,
                                                                "outside_roots": 1, "empty": 1}
    quarantined = {q["source"].rsplit("/", 1)[1]: q for q in report["quarantined"]}
    assert {name: q["reason"].split(":")[0] for name, q in quarantined.items() if name != "malformed.html"} == {
        "image.txt": "not a readable image",  # a PNG by its content, whatever its name says
        "locked.pdf": "encrypted PDF (needs a password)", "broken.pdf": "broken PDF",
        "bomb.docx": "decompression bomb", "laughs.docx": "XML with a DOCTYPE in word/document.xml"}
    assert quarantined["malformed.html"]["error"] == "ParserRejectedMarkup"
    assert report["inputs"]["skipped_files"] == [{"source": str(docs_dir / "tool.bin"), "type": "ELF executable"}]
    refused = {r["source"].rsplit("/", 1)[1]: r for r in report["inputs"]["refused_files"]}
    assert refused["huge.txt"]["reason"] == "too_large" and "250,000 bytes" in refused["huge.txt"]["detail"]
    assert refused["leak.txt"]["reason"] == "outside_roots" and "id_rsa" in refused["leak.txt"]["detail"]
    drops = pq.read_table(storage.path(f"runs/ingest/{report['run_id']}.drops.parquet")).to_pylist()
    assert any(x["source"].endswith("deep.jsonl:2") and "nested too deeply" in x["detail"] for x in drops)
    searcher = Searcher(Index.load(storage), cfg.search)
    assert {h.source.rsplit("/", 1)[1] for h in searcher.search("files with odd names", k=10)} >= {
        "odd name #1 [x] 100% ü.md", "good.txt"}
    assert all("id_rsa" not in h.source for h in searcher.search("PRIVATE KEY", mode="lexical", k=10))
    # each document cited where it is: pages, slides, sheets, attachments, OCR
    top = {q: searcher.search(q, k=1)[0] for q in ("log books harbour museum", "zebras lead the herd",
                                                   "rain late this year", "barn owls nest", "beavers dams")}
    assert (top["log books harbour museum"].source, top["log books harbour museum"].location) == (
        str(docs_dir / "report.pdf"), "pp. 1–2")  # two short pages: one chunk
    assert top["zebras lead the herd"].location.startswith("slide")
    assert (top["rain late this year"].source, top["rain late this year"].location) == (
        str(docs_dir / "herds.xlsx"), "sheet Herds")  # both sheets fit one chunk: it is labelled by its first
    assert top["barn owls nest"].source == f"{docs_dir / 'mail.eml'}#attachment/survey.pdf"
    assert top["beavers dams"].source == str(docs_dir / "scan.png") and top["beavers dams"].pages == [1]
    row = next(r for r in Index.load(storage).chunks if r["chunk_id"] == top["log books harbour museum"].chunk_id)
    assert storage.read_bytes(row["original"]) == pdf  # kept for the console's page view


def test_missing_input_is_a_clear_error(ray_cluster, tmp_path, cfg):
    with pytest.raises(ValueError, match="input path .*nowhere does not exist"):
        run_ingest([str(tmp_path / "nowhere")], cfg, Storage(str(tmp_path / "s")))


def test_index_build_from_a_dataset_version(ray_cluster, corpus, cfg, tmp_path):
    path, _ = corpus
    storage = Storage(str(tmp_path / "store"))
    report = run_ingest([str(path)], cfg, storage, build_index=False)
    assert "index_version" not in report and Catalog(storage).versions("indexes") == []
    cfg.index.exact_max_vectors = 5  # force the approximate index on this small corpus
    m = build_index(storage, cfg, report["dataset_version"])
    assert m.extra["dense"]["type"] == "hnsw" and m.parent == report["dataset_version"]
    hits = Searcher(Index.load(storage, m.version), cfg.search).search("zebra migration", mode="dense", k=1)
    assert hits[0].doc_id == "zebra"
    with pytest.raises(ValueError, match="dataset version 42 does not exist"):
        build_index(storage, cfg, 42)


def test_a_run_never_publishes_over_a_version_it_did_not_deduplicate_against(ray_cluster, corpus, cfg, tmp_path):
    path, _ = corpus
    storage = Storage(str(tmp_path / "store"))
    catalog = Catalog(storage)

    def someone_else_publishes(_ledger):  # called once the run has read the latest version (none yet)
        other = Manifest(kind="datasets", version=0, created_at=now_iso(),
                         embedder=EmbedderInfo(name="all-MiniLM-L6-v2", revision="x", dim=384))
        assert catalog.publish(other).version == 1

    with pytest.raises(IngestError, match="another run published dataset version 1 .* run the ingest again"):
        run_ingest([str(path)], cfg, storage, on_start=someone_else_publishes)
    assert [m.version for m in catalog.versions("datasets")] == [1]


def test_a_delta_table_and_an_s3_bucket_sync_into_a_store_on_s3(ray_cluster, s3_bucket, cfg, tmp_path):
    """A Delta table (change data feed on) synced into a storage root on a real S3-protocol server: inserts,
    updates and deletes reach the next index version, which loads from the bucket; then files in the bucket are
    ingested, and a sync after an object is deleted removes its documents."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = str(tmp_path / "articles")
    write_deltalake(table, pa.table({"id": [1, 2, 3], "title": ["Otters", "Herons", "Moles"], "author": ["a", "b", "c"],
                                     "text": ["Sea otters crack shellfish open on their bellies with stones.",
                                              "Grey herons stand motionless in shallow water waiting for fish.",
                                              "Moles dig tunnels with broad forepaws and eat earthworms."]}),
                    configuration={"delta.enableChangeDataFeed": "true"})
    storage = Storage(s3_bucket.fresh_uri())
    first = run_ingest([table], cfg, storage)
    assert first["files"]["new"] == 1 and first["changes"]["added"] == 3 and first["reconciled"]
    write_deltalake(table, pa.table({"id": [4], "title": ["Bats"], "author": ["d"],
                                     "text": ["Bats find moths in the dark by the echoes of their calls."]}),
                    mode="append")
    DeltaTable(table).update(updates={"text": "'Grey herons nest together in tall trees called heronries.'"},
                             predicate="id = 2")
    DeltaTable(table).delete("id = 3")
    second = run_ingest([table], cfg, storage)
    assert second["changes"] == {"added": 1, "updated": 1, "unchanged": 0, "removed": 1, "live_before": 3,
                                 "live_after": 3}
    assert second["documents"]["read"] == 2  # only the changed rows
    assert run_ingest([table], cfg, storage)["files"]["unchanged"] == 1  # nothing new in the table
    searcher = Searcher(Index.load(storage), cfg.search)  # the index, read from the bucket
    assert searcher.index.version == second["index_version"]
    assert sorted(searcher.index.chunks.column("doc_id")) == ["1", "2", "4"]
    hit = searcher.search("where do herons nest?", k=1)[0]
    assert hit.doc_id == "2" and "heronries" in hit.text

    client = s3_bucket.client()
    corpus = storage.uri.replace("s3://", "").split("/", 1)[1] + "-corpus"
    texts = {"a.txt": "Lichens are fungi living with algae.", "b.md": "# Ferns\nFerns spread by spores."}
    for name, text in texts.items():
        client.put_object(Bucket=s3_bucket.bucket, Key=f"{corpus}/{name}", Body=text.encode())
    files = run_ingest([s3_bucket.uri(corpus)], cfg, storage)
    assert files["files"]["new"] == 2 and files["changes"]["live_after"] == 5
    client.delete_object(Bucket=s3_bucket.bucket, Key=f"{corpus}/a.txt")
    # synced under another reader (added metadata): b.md has not changed, and is read again all the same
    shelved = cfg.model_copy(update={"ingest": cfg.ingest.model_copy(update={"metadata": {"shelf": "botany"}})})
    synced = run_ingest([s3_bucket.uri(corpus)], shelved, storage, sync=True)
    assert synced["files"] == {"new": 0, "changed": 0, "unchanged": 0, "deleted": 1, "readmitted": 0,
                               "reread": 1}
    assert (synced["changes"]["removed"], synced["changes"]["unchanged"], synced["changes"]["live_after"]) == (1, 1, 4)
    index = Index.load(storage)
    assert not [s for s in index.chunks.column("source") if s.endswith("/a.txt")]
    assert [json.loads(m).get("shelf") for s, m in zip(index.chunks.column("source"), index.chunks.column("metadata"),
                                                         strict=True) if s.endswith("/b.md")] == ["botany"]
