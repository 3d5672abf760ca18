"""A Delta Lake table as an ingest source: its rows as documents, whole or as the changes since a version synced.

A row is one document: its id, text and title from the columns `DeltaConfig` names, its other columns (or those
named) as metadata, `"position": "id <id>"` among them, as `app.ingest.parse.record_doc` makes them of any record.
`read_changes(uri, cfg, None)` reads the latest snapshot; `read_changes(uri, cfg, since)` what changed after
version `since`: from the table's change data feed where it was on all along (`delta.enableChangeDataFeed`), else
by comparing the documents of the two versions. Where version `since` can no longer be read (its files vacuumed,
its log cleaned up), the whole snapshot is read again (`since` None in the answer: the caller replaces what it
holds). The ids of a table name its rows: a row with no id, or with an id another row of the version holds, is a
bad record, never a document.

Rows are read with deltalake's own (DataFusion) reader, `DeltaTable.scan` and `load_cdf`, never through
`to_pyarrow_table`, whose PyArrow dataset over deltalake's Python file system aborts the interpreter at exit now and
then ("terminate called without an active exception", delta-io/delta-rs#2184). Pure logic: no Ray.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from app.config import DeltaConfig
from app.errors import NotFound, UserError
from app.ingest.parse import Doc, record_doc

if TYPE_CHECKING:
    from deltalake import DeltaTable

CDF_PROPERTY = "delta.enableChangeDataFeed"
_CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")  # what load_cdf adds to a table's columns
Method = Literal["snapshot", "change_data_feed", "diff"]


@dataclass
class DeltaChanges:
    """What changed in a table after version `since`, read up to `version`. Applying `deleted` then `upserts` to
    the documents read at `since` gives those of `version`; with `since` None, `upserts` are all of them."""

    table_uri: str
    version: int  # the version read up to: the `since` of the next read
    since: int | None  # the version synced before; None: the whole snapshot was read
    upserts: list[Doc]  # documents new or changed after `since` (every usable row when `since` is None)
    deleted: list[str]  # ids gone after `since` (or whose row is no longer usable); [] on a snapshot read
    method: Method
    bad_records: list[dict[str, str]] = field(default_factory=list)  # {"source", "reason"}, as in app.ingest.parse
    note: str = ""  # why a changes read became another method ("" when it did not)


def _open(table_uri: str, cfg: DeltaConfig, version: int | None = None) -> DeltaTable:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        return DeltaTable(table_uri, version=version, storage_options=cfg.storage_options or None)
    except DeltaError as e:
        if version is not None or _is_table(table_uri, cfg):
            raise
        reason = str(e).split("\n")[0]
        raise NotFound(f"{table_uri} is not a Delta table (no readable _delta_log: {reason})") from e


def _is_table(table_uri: str, cfg: DeltaConfig) -> bool:
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError

    try:
        return DeltaTable.is_deltatable(table_uri, storage_options=cfg.storage_options or None)
    except (OSError, DeltaError):  # a path through a file, an unreachable store: no table to be read either way
        return False


def table_version(table_uri: str, cfg: DeltaConfig) -> int:
    """The table's latest version (`NotFound` where `table_uri` holds no Delta table)."""
    return _open(table_uri, cfg).version()


def _columns_of(dt: DeltaTable) -> list[str]:
    return [f.name for f in dt.schema().fields]


def _projection(table_uri: str, columns: list[str], cfg: DeltaConfig) -> list[str] | None:
    """The columns to read (None: all), checked against the table's `columns`: a missing id, text or metadata
    column is a `UserError`."""
    wanted = [("id_column", cfg.id_column), ("text_column", cfg.text_column)]
    wanted += [("metadata_columns", c) for c in cfg.metadata_columns or []]
    for setting, column in wanted:
        if column not in columns:
            raise UserError(f"{table_uri} has no column {column!r} (ingest.delta.{setting}); its columns: "
                            f"{', '.join(columns)}")
    if cfg.metadata_columns is None:
        return None
    named = [cfg.id_column, cfg.text_column, *cfg.metadata_columns]
    if cfg.title_column in columns:
        named.append(cfg.title_column)
    return list(dict.fromkeys(named))


def _rows(stream: Any) -> Iterator[dict[str, Any]]:
    """The rows of an Arrow stream (deltalake answers arro3 readers; PyArrow takes them by the C stream
    interface), batch by batch."""
    import pyarrow as pa

    for batch in pa.RecordBatchReader.from_stream(stream):
        yield from batch.to_pylist()


def _doc_id(value: object) -> str | None:
    if value is None or isinstance(value, list | dict):
        return None
    return str(value) if str(value).strip() else None


def _row_doc(row: dict[str, Any], table_uri: str, cfg: DeltaConfig) -> Doc:
    doc_id = _doc_id(row.get(cfg.id_column))
    if doc_id is None:
        raise ValueError(f"no id (column {cfg.id_column} is null or empty)")
    return record_doc(row, table_uri, f"id {doc_id}", ids=[cfg.id_column], texts=[cfg.text_column],
                      titles=[cfg.title_column] if cfg.title_column else [], metadata=cfg.metadata_columns)


def _where(row: dict[str, Any], cfg: DeltaConfig, version: int, index: int) -> str:
    doc_id = _doc_id(row.get(cfg.id_column))
    return f"version {version}, id {doc_id}" if doc_id is not None else f"version {version}, row {index}"


def _bad(table_uri: str, where: str, reason: str) -> dict[str, str]:
    return {"source": f"{table_uri}#{where}", "reason": f"{where}: {reason}"}


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _doc_digest(doc: Doc) -> str:
    return _digest([doc["title"], doc["text"], doc["metadata"]])


@dataclass
class _Read:
    """One version's usable documents by id (the first row of each id), and its bad rows."""

    docs: dict[str, Doc] = field(default_factory=dict)
    bad: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (the row's digest, its bad record)


def _read(dt: DeltaTable, table_uri: str, cfg: DeltaConfig, columns: list[str] | None) -> _Read:
    version = dt.version()
    out = _Read()
    for i, row in enumerate(_rows(dt.scan(columns=columns))):
        try:
            doc = _row_doc(row, table_uri, cfg)
        except ValueError as e:
            out.bad.append((_digest(row), _bad(table_uri, _where(row, cfg, version, i), str(e))))
            continue
        if doc["doc_id"] in out.docs:
            reason = "another row of this version has this id (the first read was kept)"
            out.bad.append((_digest(row), _bad(table_uri, _where(row, cfg, version, i), reason)))
        else:
            out.docs[doc["doc_id"]] = doc
    return out


def _snapshot(dt: DeltaTable, table_uri: str, cfg: DeltaConfig, columns: list[str] | None,
              note: str = "") -> DeltaChanges:
    read = _read(dt, table_uri, cfg, columns)
    return DeltaChanges(table_uri, dt.version(), None, list(read.docs.values()), [], "snapshot",
                        [bad for _, bad in read.bad], note)


def _diff(old: DeltaTable, new: DeltaTable, table_uri: str, cfg: DeltaConfig, columns: list[str] | None,
          old_columns: list[str] | None) -> DeltaChanges:
    """The documents of `new` unlike those of `old` by id and content; a bad row is reported unless `old` held it
    as it is."""
    before, after = _read(old, table_uri, cfg, old_columns), _read(new, table_uri, cfg, columns)
    digests = {doc_id: _doc_digest(doc) for doc_id, doc in before.docs.items()}
    upserts = [doc for doc_id, doc in after.docs.items() if digests.get(doc_id) != _doc_digest(doc)]
    old_bad = {digest for digest, _ in before.bad}
    return DeltaChanges(table_uri, new.version(), old.version(), upserts, sorted(digests.keys() - after.docs.keys()),
                        "diff", [bad for digest, bad in after.bad if digest not in old_bad])


def _change_data_feed(dt: DeltaTable, table_uri: str, cfg: DeltaConfig, columns: list[str] | None,
                      since: int) -> DeltaChanges:
    """Per id its last change after `since` (by commit version; in one commit an insert or update after a delete,
    as an overwrite writes them): a delete → deleted, an insert or update → upserted. An id whose first change is
    its insert and whose last its delete came and went in between: neither."""
    latest = dt.version()
    feed_columns = None if columns is None else [*columns, "_change_type", "_commit_version"]
    first: dict[str, tuple[tuple[int, int], str]] = {}  # id → (rank, change type) of its first change
    last: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}  # id → (rank, row) of its last change
    bad: list[dict[str, str]] = []
    stream = dt.load_cdf(starting_version=since + 1, ending_version=latest, columns=feed_columns)
    for i, change in enumerate(_rows(stream)):  # in no particular order
        kind, commit = str(change["_change_type"]), int(change["_commit_version"])
        row = {k: v for k, v in change.items() if k not in _CDF_COLUMNS}
        doc_id = _doc_id(row.get(cfg.id_column))
        if doc_id is None:
            if kind in ("insert", "update_postimage"):  # a row without an id was never a document
                bad.append(_bad(table_uri, _where(row, cfg, commit, i),
                                f"{kind}: no id (column {cfg.id_column} is null or empty)"))
            continue
        rank = (commit, 0 if kind in ("delete", "update_preimage") else 1)  # the row is gone (0) or there (1)
        if doc_id not in first or rank < first[doc_id][0]:
            first[doc_id] = (rank, kind)
        if doc_id not in last or rank >= last[doc_id][0]:
            last[doc_id] = (rank, row)
    upserts: list[Doc] = []
    deleted: list[str] = []
    for doc_id, ((commit, kept), row) in last.items():
        existed = first[doc_id][1] != "insert"  # at `since`: it was deleted or updated before anything else
        if not kept:  # deleted
            if existed:
                deleted.append(doc_id)
            continue
        try:
            upserts.append(_row_doc(row, table_uri, cfg))
        except ValueError as e:  # its new row is unusable: the copy read before goes
            bad.append(_bad(table_uri, f"version {commit}, id {doc_id}", str(e)))
            if existed:
                deleted.append(doc_id)
    return DeltaChanges(table_uri, latest, since, upserts, sorted(deleted), "change_data_feed", bad)


def _cdf_on(dt: DeltaTable) -> bool:
    return dt.metadata().configuration.get(CDF_PROPERTY, "").strip().lower() == "true"


def read_changes(table_uri: str, cfg: DeltaConfig, since: int | None) -> DeltaChanges:
    """The table's documents at its latest version (`since` None), or what changed after version `since`: see the
    module's docstring. `NotFound` where `table_uri` holds no Delta table; `UserError` where it lacks the id, text or
    a metadata column, or where `since` is past its latest version (the table was recreated)."""
    import pyarrow as pa
    from deltalake.exceptions import DeltaError

    dt = _open(table_uri, cfg)
    latest = dt.version()
    columns = _projection(table_uri, _columns_of(dt), cfg)
    if since is None:
        return _snapshot(dt, table_uri, cfg, columns)
    if since < 0:
        raise UserError(f"since must be a table version (0 or more), not {since}")
    if since > latest:
        raise UserError(f"{table_uri} is at version {latest}, before version {since} synced last: the table was "
                        "recreated or restored from elsewhere; read it whole again (since None)")
    cdf = _cdf_on(dt)
    if since == latest:
        return DeltaChanges(table_uri, latest, since, [], [], "change_data_feed" if cdf else "diff", [])
    unreadable = (DeltaError, OSError, pa.ArrowException)  # files vacuumed, commits cleaned up: missing objects
    try:
        old = _open(table_uri, cfg, since)
    except unreadable as e:
        return _snapshot(dt, table_uri, cfg, columns, f"version {since} cannot be loaded ({e}): read it whole")
    note = ""
    if cdf and _cdf_on(old):
        try:
            return _change_data_feed(dt, table_uri, cfg, columns, since)
        except unreadable as e:
            note = f"the change data feed after version {since} cannot be read ({e}); "
    old_names = _columns_of(old)
    if cfg.id_column not in old_names or cfg.text_column not in old_names:
        return _snapshot(dt, table_uri, cfg, columns, f"{note}version {since} lacks the id or text column: read it "
                         "whole")
    old_columns = None if columns is None else [c for c in columns if c in old_names]
    try:
        changes = _diff(old, dt, table_uri, cfg, columns, old_columns)
    except unreadable as e:
        return _snapshot(dt, table_uri, cfg, columns, f"{note}version {since} cannot be read ({e}): read it whole")
    if note:
        changes.note = f"{note}compared versions {since} and {latest}"
    return changes
