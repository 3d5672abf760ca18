"""A Delta Lake table as an ingest source, on real tables that deltalake writes into tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from app.errors import NotFound, UserError
from app.ingest.delta import DeltaChanges, DeltaConfig, read_changes, table_version

CFG = DeltaConfig()
CDF = {"delta.enableChangeDataFeed": "true"}


def rows(ids: list[int | None], texts: list[str | None], **columns: list[object]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "text": pa.array(texts, pa.string()),
                     **{name: pa.array(values) for name, values in columns.items()}})


def create(path: Path, table: pa.Table, cdf: bool) -> str:
    write_deltalake(path, table, configuration=CDF if cdf else None)
    return str(path)


def texts(changes: DeltaChanges) -> dict[str, str]:
    return {d["doc_id"]: d["text"] for d in changes.upserts}


def history(path: Path, cdf: bool) -> str:
    """v0 1-3 written; v1 4 appended; v2 2 updated; v3 3 deleted; v4 a merge updates 1 and inserts 5; v5 6 appended;
    v6 6 deleted (came and went after v4)."""
    uri = create(path, rows([1, 2, 3], ["one", "two", "three"], title=["A", "B", "C"]), cdf)
    write_deltalake(uri, rows([4], ["four"], title=["D"]), mode="append")
    DeltaTable(uri).update(updates={"text": "'TWO'"}, predicate="id = 2")
    DeltaTable(uri).delete("id = 3")
    source = rows([1, 5], ["ONE", "five"], title=["A", "E"])
    (DeltaTable(uri).merge(source, predicate="s.id = t.id", source_alias="s", target_alias="t")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    write_deltalake(uri, rows([6], ["six"], title=["F"]), mode="append")
    DeltaTable(uri).delete("id = 6")
    return uri


def test_snapshot_reads_every_row_as_a_document(tmp_path):
    uri = create(tmp_path / "t", rows([1, 2], ["one", "two"], title=["A", None], year=[2020, 2021]), cdf=False)
    changes = read_changes(uri, CFG, None)
    assert (changes.version, changes.since, changes.method, changes.deleted, changes.bad_records) == \
        (0, None, "snapshot", [], [])
    by_id = {d["doc_id"]: d for d in changes.upserts}
    assert by_id["1"] == {"doc_id": "1", "source": uri, "title": "A", "text": "one", "parts": [], "unit": "",
                          "metadata": json.dumps({"position": "id 1", "year": 2020}, sort_keys=True)}
    assert by_id["2"]["title"] == ""  # a null title
    assert table_version(uri, CFG) == 0


@pytest.mark.parametrize(("cdf", "method"), [(True, "change_data_feed"), (False, "diff")])
def test_changes_since_a_version_from_the_feed_or_by_comparing(tmp_path, cdf, method):
    uri = history(tmp_path / "t", cdf)
    changes = read_changes(uri, CFG, 0)
    assert (changes.version, changes.since, changes.method) == (6, 0, method)
    assert texts(changes) == {"1": "ONE", "2": "TWO", "4": "four", "5": "five"}
    assert changes.deleted == ["3"] and changes.bad_records == [] and changes.note == ""
    later = read_changes(uri, CFG, 3)
    assert (texts(later), later.deleted, later.method) == ({"1": "ONE", "5": "five"}, [], method)
    assert read_changes(uri, CFG, 4).upserts == [] == read_changes(uri, CFG, 4).deleted  # 6 came and went
    assert {d["doc_id"]: d for d in changes.upserts}["5"] == {d["doc_id"]: d for d in later.upserts}["5"]


@pytest.mark.parametrize(("cdf", "method"), [(True, "change_data_feed"), (False, "diff")])
def test_nothing_changed_since_the_latest_version(tmp_path, cdf, method):
    uri = create(tmp_path / "t", rows([1], ["one"]), cdf)
    write_deltalake(uri, rows([2], ["two"]), mode="append")
    assert read_changes(uri, CFG, 1) == DeltaChanges(uri, 1, 1, [], [], method, [])


def test_a_version_past_the_latest_means_the_table_was_recreated(tmp_path):
    uri = create(tmp_path / "t", rows([1], ["one"]), cdf=True)
    with pytest.raises(UserError, match=r"at version 0, before version 3 synced last: the table was recreated"):
        read_changes(uri, CFG, 3)
    with pytest.raises(UserError, match="not -1"):
        read_changes(uri, CFG, -1)


def test_an_overwrite_in_the_feed_upserts_the_ids_it_keeps(tmp_path):
    uri = create(tmp_path / "t", rows([1, 2], ["one", "two"]), cdf=True)
    write_deltalake(uri, rows([2, 3], ["two", "three"]), mode="overwrite")  # deletes and inserts 2 in one commit
    changes = read_changes(uri, CFG, 0)
    assert (texts(changes), changes.deleted) == ({"2": "two", "3": "three"}, ["1"])


def test_a_feed_enabled_after_the_version_synced_is_not_trusted(tmp_path):
    uri = create(tmp_path / "t", rows([1, 2], ["one", "two"]), cdf=False)
    DeltaTable(uri).delete("id = 1")  # no change data written for it
    DeltaTable(uri).alter.set_table_properties(CDF)
    DeltaTable(uri).update(updates={"text": "'TWO'"}, predicate="id = 2")
    changes = read_changes(uri, CFG, 0)
    assert (changes.method, texts(changes), changes.deleted) == ("diff", {"2": "TWO"}, ["1"])
    assert read_changes(uri, CFG, 2).method == "change_data_feed"


def test_vacuumed_files_of_the_version_synced_mean_a_whole_read(tmp_path):
    uri = create(tmp_path / "t", rows([1, 2], ["one", "two"]), cdf=False)
    DeltaTable(uri).delete("id = 1")
    DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    changes = read_changes(uri, CFG, 0)
    assert (changes.method, changes.since, texts(changes)) == ("snapshot", None, {"2": "two"})
    assert changes.version == table_version(uri, CFG)  # the vacuum's own commits included
    assert "version 0 cannot be read" in changes.note


def test_bad_rows_are_reported_where_they_are(tmp_path):
    uri = create(tmp_path / "t", rows([1, None, 3, 4, 4], ["one", "orphan", None, "four", "again"]), cdf=False)
    changes = read_changes(uri, CFG, None)
    assert sorted(texts(changes)) == ["1", "4"]
    bad = {b["source"]: b["reason"] for b in changes.bad_records}
    assert bad == {
        f"{uri}#version 0, row 1": "version 0, row 1: no id (column id is null or empty)",
        f"{uri}#version 0, id 3": "version 0, id 3: no text field (tried text)",
        f"{uri}#version 0, id 4": "version 0, id 4: another row of this version has this id (the first read was "
                                  "kept)",
    }


@pytest.mark.parametrize("cdf", [True, False])
def test_bad_rows_among_the_changes(tmp_path, cdf):
    """A row made unusable drops its document; a bad row read before is not reported again."""
    uri = create(tmp_path / "t", rows([1, 2, None], ["one", "two", "orphan"]), cdf)
    write_deltalake(uri, rows([None, 5], ["lost", None]), mode="append")
    DeltaTable(uri).update(updates={"text": "NULL"}, predicate="id = 2")
    changes = read_changes(uri, CFG, 0)
    assert (changes.upserts, changes.deleted) == ([], ["2"])
    reasons = sorted(b["reason"].split(": ", 1)[1] for b in changes.bad_records)  # after "version v, id i: "
    assert len(reasons) == 3 and "orphan" not in str(changes.bad_records)
    assert reasons[0].endswith("no id (column id is null or empty)")
    assert reasons[1:] == ["no text field (tried text)"] * 2
    assert {b["reason"].split(": ")[0].split(", ")[1] for b in changes.bad_records} >= {"id 2", "id 5"}
    assert all(b["source"].startswith(f"{uri}#version ") for b in changes.bad_records)


def test_text_that_is_not_a_string_is_a_bad_record(tmp_path):
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": ["a"], "text": [7]}))
    changes = read_changes(uri, CFG, None)
    assert changes.upserts == [] and "text field is int, not a string" in changes.bad_records[0]["reason"]


def test_metadata_columns_and_title(tmp_path):
    uri = create(tmp_path / "t", rows([1], ["one"], title=["A"], lang=["en"], year=[2020]), cdf=False)
    (doc,) = read_changes(uri, DeltaConfig(metadata_columns=["lang"]), None).upserts
    assert (doc["title"], json.loads(doc["metadata"])) == ("A", {"lang": "en", "position": "id 1"})
    (doc,) = read_changes(uri, DeltaConfig(title_column=None), None).upserts
    assert doc["title"] == "" and json.loads(doc["metadata"]) == {"lang": "en", "position": "id 1", "title": "A",
                                                                  "year": 2020}
    (doc,) = read_changes(uri, DeltaConfig(id_column="year", text_column="lang", title_column="none"), None).upserts
    assert (doc["doc_id"], doc["text"], doc["title"]) == ("2020", "en", "")
    DeltaTable(uri).update(updates={"year": "2021"}, predicate="id = 1")  # a column not kept: no change
    assert read_changes(uri, DeltaConfig(metadata_columns=["lang"]), 0).upserts == []
    assert len(read_changes(uri, CFG, 0).upserts) == 1


@pytest.mark.parametrize(("cfg", "column"), [(DeltaConfig(id_column="key"), "key"),
                                             (DeltaConfig(text_column="body"), "body"),
                                             (DeltaConfig(metadata_columns=["lang"]), "lang")])
def test_a_missing_column_names_it_and_the_columns_there_are(tmp_path, cfg, column):
    uri = create(tmp_path / "t", rows([1], ["one"], title=["A"]), cdf=False)
    with pytest.raises(UserError, match=rf"has no column '{column}' .*; its columns: id, text, title"):
        read_changes(uri, cfg, None)


def test_a_path_without_a_table_is_not_found(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "empty", tmp_path / "missing", tmp_path / "file"):
        with pytest.raises(NotFound, match=f"{path} is not a Delta table"):
            read_changes(str(path), CFG, None)
    with pytest.raises(NotFound):
        table_version(str(tmp_path / "missing"), CFG)
