"""Metadata filters: which chunks a search may return, by their document's metadata (the `metadata` column of an
index's chunk table: JSON text, one object per document).

The language is MongoDB's (and Chroma's) query subset, which users already know:

    {"department": "hr"}                                   equality
    {"year": {"$gte": 2020, "$lt": 2024}}                  several operators on one field: all must hold
    {"department": {"$in": ["hr", "legal"]}}               $eq $ne $in $nin $gt $gte $lt $lte
    {"$or": [{"department": "hr"}, {"year": 2021}]}        $and / $or of filters; several keys in one object: and
    {"published": {"$gte": "2021-01-01"}}                  ranges on numbers, and on ISO dates

Values are strings, numbers and booleans. `$eq`/`$in` compare strings as text, numbers as numbers (1 and 1.0 are
equal) and booleans as booleans; a value never equals one of another type (the string "2021" is not the number
2021). Ranges compare numbers, or ISO dates (`2021-03-04`, `2021-03-04T10:00:00Z`; a date is its midnight, a time
without an offset is UTC) with a field's values that are ISO dates. `$ne` and `$nin` are the negation of `$eq` and
`$in`: as in MongoDB they also match documents that lack the field. A field named in a filter must exist in some
document of the index, and hold some value of the type compared with, else the filter is a `UserError` (a typo, or
`{"year": "2021"}` against numbers, would otherwise silently find nothing).

`parse_filter` turns the JSON into a `Filter` tree (bounded: it arrives over HTTP); `Metadata` evaluates one against
an index's chunks, vectorised over the distinct documents, and gives the row ids a search may return.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import math
import re
import threading
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.errors import UserError

Scalar = str | int | float | bool
Op = Literal["$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte"]
RANGE_OPS = ("$gt", "$gte", "$lt", "$lte")
OPS: tuple[Op, ...] = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte")
MAX_DEPTH = 8  # nested $and/$or
MAX_CONDITIONS = 64  # field conditions in one filter
MAX_IN = 1024  # values of one $in/$nin
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")  # a key of the metadata object, dots included literally
# an ISO date, optionally with a time and offset; what follows the date is left to datetime.fromisoformat
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}.*)?")

# What an HTTP request model declares for a filter: the JSON object, parsed by `parse_filter` in a validator.
FilterJSON = dict[str, object]
FILTER_DOC = (
    "Only chunks whose document's metadata matches, MongoDB-style: {\"department\": \"hr\"}, "
    "{\"year\": {\"$gte\": 2020, \"$lt\": 2024}}, {\"department\": {\"$in\": [\"hr\", \"legal\"]}}, "
    "{\"$or\": [{...}, {...}]}. Operators $eq $ne $in $nin $gt $gte $lt $lte $and $or; several keys in one object "
    "must all hold. Values: strings, numbers, booleans; ranges compare numbers or ISO dates (\"2021-03-04\"). $ne and "
    "$nin also match documents without the field. A field no document has is an error. The top k come from the "
    f"matching chunks. At most {MAX_CONDITIONS} conditions, {MAX_DEPTH} levels of $and/$or, {MAX_IN} values in a $in."
)


@dataclass(frozen=True)
class Cond:
    """`field` `op` `values` (one value, or the list of `$in`/`$nin`); `path` says where it was in the filter, for
    errors found when it is evaluated (an unknown field)."""

    field: str
    op: Op
    values: tuple[Scalar, ...]
    path: str = dataclasses.field(default="filter", compare=False)


@dataclass(frozen=True)
class And:
    parts: tuple[Filter, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Filter, ...]


Filter = Cond | And | Or


def parse_filter(obj: object, where: str = "filter") -> Filter:
    """The filter tree of a JSON filter, or a UserError naming the path of its bad part (`filter.$or[1].year`)."""
    return _Parser(where).node(obj, where, 0)


class _Parser:
    def __init__(self, where: str):
        self.where = where
        self.conditions = 0

    def node(self, obj: object, path: str, depth: int) -> Filter:
        if depth > MAX_DEPTH:
            raise UserError(f"{path}: $and/$or nested deeper than {MAX_DEPTH} levels")
        if not isinstance(obj, dict) or not obj:
            raise UserError(f"{path}: a filter is a non-empty JSON object, got {_show(obj)}")
        parts: list[Filter] = []
        for key, value in obj.items():
            at = f"{path}.{key}"
            if key in ("$and", "$or"):
                if not isinstance(value, list) or not value:
                    raise UserError(f"{at}: needs a non-empty list of filters, got {_show(value)}")
                subs = tuple(self.node(v, f"{at}[{i}]", depth + 1) for i, v in enumerate(value))
                parts.append(And(subs) if key == "$and" else Or(subs))
            elif isinstance(key, str) and key.startswith("$"):
                raise UserError(f"{path}: unknown operator {_show(key)} (of filters: $and $or; of a field's values: "
                                f"{' '.join(OPS)})")
            elif not isinstance(key, str) or not FIELD_NAME.fullmatch(key):
                raise UserError(f"{path}: {_show(key)} is not a field name (letters, digits, _ . -; at most 64, "
                                "not starting with a digit)")
            else:
                parts += self.field(key, value, at)
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def field(self, name: str, value: object, path: str) -> list[Filter]:
        if not isinstance(value, dict):
            return [self.cond(name, "$eq", value, path)]
        if not value:
            raise UserError(f"{path}: an empty object; give a value or operators ({' '.join(OPS)})")
        out: list[Filter] = []
        for op, v in value.items():
            if op not in OPS:
                raise UserError(f"{path}: unknown operator {_show(op)} (one of {' '.join(OPS)})")
            out.append(self.cond(name, op, v, path))
        return out

    def cond(self, name: str, op: Op, value: object, path: str) -> Cond:
        """`path`: the field's; messages name the operator."""
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise UserError(f"{self.where}: more than {MAX_CONDITIONS} conditions")
        if op in ("$in", "$nin"):
            if not isinstance(value, list) or not value:
                raise UserError(f"{path}: {op} needs a non-empty list of values, got {_show(value)}")
            if len(value) > MAX_IN:
                raise UserError(f"{path}: {op} has more than {MAX_IN} values ({len(value)})")
            return Cond(name, op, tuple(_scalar(v, f"{path}.{op}[{i}]") for i, v in enumerate(value)), path)
        if op in RANGE_OPS:
            if _is_number(value) or (isinstance(value, str) and _iso_date(value) is not None):
                return Cond(name, op, (value,), path)  # type: ignore[arg-type]  # a number or a str, just checked
            raise UserError(f"{path}: {op} needs a number or an ISO date, got {_show(value)}")
        return Cond(name, op, (_scalar(value, path),), path)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _scalar(v: object, path: str) -> Scalar:
    if isinstance(v, str | bool) or _is_number(v):
        return v  # type: ignore[return-value]  # str, bool or a finite number, just checked
    if isinstance(v, list):
        raise UserError(f"{path}: a list; to match any of several values use {{\"$in\": [...]}}")
    raise UserError(f"{path}: values are strings, numbers or booleans, got {_show(v)}")


def _show(v: object) -> str:
    text = json.dumps(v, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _iso_date(s: str) -> np.datetime64 | None:
    """An ISO date or datetime as UTC microseconds (a date: its midnight; no offset: UTC), else None."""
    if not ISO_DATE.fullmatch(s):
        return None
    try:  # the one way to know whether the standard library reads it
        d = dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if d.tzinfo is not None:
        d = d.astimezone(dt.UTC).replace(tzinfo=None)
    return np.datetime64(d, "us")


def to_json(f: Filter) -> object:
    """The filter as JSON again, in one form per meaning of each condition (operators spelled out)."""
    if isinstance(f, Cond):
        return {f.field: {f.op: list(f.values) if f.op in ("$in", "$nin") else f.values[0]}}
    return {"$and" if isinstance(f, And) else "$or": [to_json(p) for p in f.parts]}


def canonical(f: Filter) -> str:
    """The cache key of a filter: its JSON with sorted keys and no spaces."""
    return json.dumps(to_json(f), sort_keys=True, separators=(",", ":"))


@dataclass
class _Column:
    """One field over the distinct documents (shape (docs,) each), a column per type of value it holds; None where
    no document holds that type. Absent values are NaN, NaT, -1 and null: they compare False."""

    number: np.ndarray | None  # float64 (ints above 2**53 lose precision)
    date: np.ndarray | None  # datetime64[us], UTC: the strings that are ISO dates
    boolean: np.ndarray | None  # int8: 0, 1, -1 absent
    string: pa.Array | None  # every string value, as text (ISO dates too)

    def kinds(self) -> list[str]:
        return [k for k in ("number", "date", "boolean", "string") if getattr(self, k) is not None]


class Metadata:
    """An index's document metadata, ready to filter: each distinct metadata string (a document's: many chunks
    share it) is parsed once into typed per-field columns, and a filter is evaluated over those with numpy and
    Arrow compute, then mapped back to chunk rows. Built once per `Index` (lazily), so it and its cache of results
    belong to one index version of one collection."""

    CACHE = 64  # filters whose rows are kept (by canonical JSON)
    FIELDS_SHOWN = 20

    def __init__(self, column: pa.ChunkedArray):
        encoded = pc.fill_null(column, "{}").dictionary_encode().combine_chunks()
        self.codes = encoded.indices.to_numpy(zero_copy_only=False)  # (rows,): each row's distinct document
        docs = [json.loads(s or "{}") for s in encoded.dictionary.to_pylist()]
        self.n_docs = len(docs)
        # a metadata string that is not an object (none written by ingest is) has no fields
        self.columns = _columns([d if isinstance(d, dict) else {} for d in docs])
        self._cache: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()

    def rows(self, f: Filter) -> np.ndarray:
        """The chunk rows whose document matches (ascending int64, read-only: shared by every search with `f`)."""
        key = canonical(f)
        with self._lock:
            if (hit := self._cache.get(key)) is not None:
                self._cache.move_to_end(key)
                return hit
        rows = np.flatnonzero(self.mask(f)[self.codes]).astype(np.int64)
        rows.flags.writeable = False
        with self._lock:
            self._cache[key] = rows
            if len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        return rows

    def mask(self, f: Filter) -> np.ndarray:
        """(docs,) bool: which distinct documents match."""
        if isinstance(f, And):
            return np.logical_and.reduce([self.mask(p) for p in f.parts])
        if isinstance(f, Or):
            return np.logical_or.reduce([self.mask(p) for p in f.parts])
        col = self.columns.get(f.field)
        if col is None:
            names = list(self.columns)
            shown = ", ".join(names[: self.FIELDS_SHOWN]) + (f" and {len(names) - self.FIELDS_SHOWN} more"
                                                            if len(names) > self.FIELDS_SHOWN else "")
            raise UserError(f"{f.path}: no document has a field {f.field!r}; "
                            + (f"the fields are {shown}" if names else "no document has metadata"))
        if f.op in RANGE_OPS:
            return self._range(col, f)
        hit = np.zeros(self.n_docs, dtype=bool)
        found = False  # some value's type occurs in the field
        for kind, values in _by_kind(f.values).items():
            data = getattr(col, kind)
            if data is None:
                continue
            found = True
            if kind == "string":
                hit |= pc.fill_null(pc.is_in(data, pa.array(values, pa.string())), False).to_numpy(
                    zero_copy_only=False)
            else:
                hit |= np.isin(data, np.asarray(values, dtype=data.dtype))
        if not found:
            raise UserError(f"{f.path}: {f.field} holds {' and '.join(col.kinds())} values, never "
                            f"{' or '.join(_by_kind(f.values))}")
        return ~hit if f.op in ("$ne", "$nin") else hit

    def _range(self, col: _Column, f: Cond) -> np.ndarray:
        value = f.values[0]
        data: np.ndarray | None
        bound: np.generic | None
        if isinstance(value, str):
            data, bound, kind = col.date, _iso_date(value), "ISO dates"
        else:
            data, bound, kind = col.number, np.float64(value), "numbers"
        assert bound is not None, f"parse_filter let {value!r} through"
        if data is None:
            raise UserError(f"{f.path}: {f.op} compares {kind}, but {f.field} holds {' and '.join(col.kinds())} "
                            "values")
        compare = {"$gt": np.greater, "$gte": np.greater_equal, "$lt": np.less, "$lte": np.less_equal}[f.op]
        return np.asarray(compare(data, bound))  # NaN and NaT (absent, other types) compare False


def _by_kind(values: tuple[Scalar, ...]) -> dict[str, list[Scalar]]:
    out: dict[str, list[Scalar]] = {}
    for v in values:
        kind = "boolean" if isinstance(v, bool) else "string" if isinstance(v, str) else "number"
        out.setdefault(kind, []).append(int(v) if kind == "boolean" else v)
    return out


def _columns(docs: list[dict[str, object]]) -> dict[str, _Column]:
    """Every field over the documents: one pass over the values (not fields x documents: sparse fields are common),
    each into the column of its type; objects and lists are not filterable and left out."""
    values: dict[str, list[tuple[int, object]]] = {}
    for i, d in enumerate(docs):
        for name, v in d.items():
            values.setdefault(name, []).append((i, v))
    columns = {name: _column(len(docs), values[name]) for name in sorted(values)}
    return {name: c for name, c in columns.items() if c.kinds()}  # a field of only lists or objects: not one


def _column(n: int, values: list[tuple[int, object]]) -> _Column:
    number, date = np.full(n, np.nan), np.full(n, np.datetime64("NaT"), dtype="datetime64[us]")
    boolean = np.full(n, -1, dtype=np.int8)
    strings: list[str | None] = [None] * n
    has = {"number": False, "date": False, "boolean": False, "string": False}
    for i, v in values:
        if isinstance(v, bool):
            boolean[i], has["boolean"] = v, True
        elif isinstance(v, int | float):
            number[i], has["number"] = v, True
        elif isinstance(v, str):
            strings[i], has["string"] = v, True
            if (when := _iso_date(v)) is not None:
                date[i], has["date"] = when, True
    return _Column(number=number if has["number"] else None, date=date if has["date"] else None,
                   boolean=boolean if has["boolean"] else None,
                   string=pa.array(strings, pa.string()) if has["string"] else None)
