"""Request filters: a MongoDB-style grammar, validated and compiled to a document mask.

Grammar (``filters`` of a request; every clause of a dict must hold)::

    filter    := {clause, ...}                      all clauses (empty: no filter)
    clause    := field: condition
               | "$and": [filter, ...]  |  "$or": [filter, ...]  |  "$nor": [filter, ...]
               | "$not": filter
    condition := value                              same as {"$eq": value} (a dict without
                                                    "$" keys too: equality of dicts)
               | list / tuple / set / 1-D array ... same as {"$in": values}
               | {operator: operand, ...}           all operators
    operator  := $eq $ne $in $nin $gt $gte $lt $lte $exists | "$not": {operator: operand, ...}

``field`` is a document field (``id``, ``content``, ``title``, ``source``, ``tags``) or a
metadata key (``metadata.<key>`` reaches a key shadowed by a field), or a dotted path into
nested metadata dicts (``author.name``) where no key is spelt so. Semantics follow MongoDB:

- A document's *elements* for a field are its value, or the items of a list value (tags);
  a value (or item) ``None`` or NaN is missing. A condition on a list matches when any element
  does; ``$exists`` asks whether the value is present (an empty list is).
- ``$eq``/``$in`` compare numbers by value (``2000 == 2000.0``), keep booleans, strings and
  numbers apart, and compare dicts (or other values) by their sorted JSON. ``None`` as an
  operand matches a missing field. ``$ne``/``$nin``/``$not`` are negations, so they match
  documents without the field; comparisons (``$gt`` ...) never match them.
- ``$gt``, ``$gte``, ``$lt``, ``$lte`` take a number or a string; every present element of
  the field must be of that kind, else the filter is an error (comparison is impossible).
- Dates, times and timestamps (``datetime``, ``pandas.Timestamp``, ``numpy.datetime64``), as
  values or operands, are strings: their ``str`` (``2020-01-02``, ``2020-01-02 10:00:00``), the
  form a saved table keeps, so ``{"published": {"$gte": "2020-06"}}`` compares ISO text.
- ``$exists`` takes a bool.

Anything else (an unknown field or operator, an operand of the wrong type, a NaN operand, an
empty ``$and``, operators nested deeper than :data:`MAX_DEPTH`, an operand -- or a document's
value -- whose dicts and lists nest deeper than :data:`MAX_DEPTH`) raises :class:`KolmValueError` / :class:`KolmTypeError` naming the field
and the operator. Compilation is vectorised per field: each field's elements are laid out
once per table (:class:`FieldColumn`), each operator is one numpy/pandas operation over them.
A filter evaluates to a :class:`~kolm_search.engine.selection.Selection` (:func:`select_filter`):
equality and membership look their operands up in a per-field index (cost: the operands and
the documents they match, not the table), and a result matching few documents stays a list of
rows, so ids and selective equalities never build a mask over the whole table.
"""

from __future__ import annotations

import datetime
import json
import math
import numbers
import reprlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._params import mapping
from kolm_search.engine.selection import ROWS_SHARE, Selection
from kolm_search.errors import FilterError, KolmTypeError, KolmValueError

__all__ = ["FIELD_OPERATORS", "FieldColumn", "FilterError", "LOGICAL_OPERATORS", "MAX_DEPTH", "compile_filter",
           "date_text", "parse_filter", "select_filter"]

FIELD_OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$not")
LOGICAL_OPERATORS = ("$and", "$or", "$nor", "$not")
_RANGE = {"$gt": np.greater, "$gte": np.greater_equal, "$lt": np.less, "$lte": np.less_equal}
MAX_DEPTH = 64  # nesting of $and / $or / $nor / $not, and of the dicts and lists of one value
_REPR = reprlib.Repr()  # bounded, recursion-free reprs for messages (reprlib's default depth: 6 levels)
_REPR.maxstring = _REPR.maxother = 50


def _short(value: Any) -> str:
    """A short repr of ``value`` for an error message (never recurses into deep nesting)."""
    return _REPR.repr(value)[:60]


def _too_deep(value: Any) -> bool:
    """Whether ``value``'s dicts, lists, tuples and sets nest deeper than :data:`MAX_DEPTH`
    (walked with a stack, not recursion; a container holding itself counts as too deep)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        else:
            continue
        if depth >= MAX_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _is_values(value: Any) -> bool:
    """A list, tuple, set, 1-D array, Series ...: any collection but a string, bytes or dict."""
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    return isinstance(value, Collection) and not isinstance(value, (str, bytes, bytearray, Mapping, pd.DataFrame))


_BOOL, _NUM, _STR, _JSON = 0, 1, 2, 3
_KIND_NAMES = ("bool", "number", "string", "other")
_EXACT = 2.0**53  # integers below this compare exactly as float64

Canon = tuple[int, Any]
Node = tuple[Any, ...]


# -- values ----------------------------------------------------------------------------
def _missing(value: Any) -> bool:
    return (value is None or value is pd.NaT or (isinstance(value, (float, np.floating)) and math.isnan(value))
            or (isinstance(value, np.datetime64) and bool(np.isnat(value))))


def date_text(value: Any) -> str | None:
    """The text of a date, time or timestamp (``datetime``, ``pandas.Timestamp``,
    ``numpy.datetime64``) as ``str`` writes it (``2020-01-02``, ``2020-01-02 10:00:00``): how
    filters compare them and how a saved table stores them; None for anything else."""
    if _missing(value):
        return None
    if isinstance(value, np.datetime64):
        value = pd.Timestamp(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return str(value)
    return None


def _canon(value: Any) -> Canon:
    """``(kind, comparable value)``: numbers as Python int/float, bools apart, dates as their
    text (:func:`date_text`), the rest as sorted JSON."""
    text = date_text(value)
    if text is not None:
        return _STR, text
    if isinstance(value, (bool, np.bool_)):
        return _BOOL, bool(value)
    if isinstance(value, numbers.Integral):
        return _NUM, int(value)
    if isinstance(value, numbers.Real):
        return _NUM, float(value)
    if isinstance(value, str):
        return _STR, str(value)
    try:
        return _JSON, json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    except (TypeError, ValueError):  # keys JSON cannot sort: compare by text
        return _JSON, str(value)


def _elements(value: Any) -> list[Any]:
    """A field value's elements: the items of a list value, else the value; missing dropped."""
    if _missing(value):
        return []
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [v for v in value if not _missing(v)]
    return [value]


# -- parsing -----------------------------------------------------------------------------
def _where(field: str, op: str) -> str:
    return f"filter on field {field!r}, operator {op!r}"


def _operand(field: str, op: str, value: Any) -> Canon | None:
    """One equality operand (``None`` means "missing")."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if value is None:
        return None
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        raise KolmValueError(f"{_where(field, op)}: NaN never equals anything; use $exists for missing values")
    if _is_values(value) or not (isinstance(value, (str, numbers.Real, bool, np.bool_, Mapping))
                                 or date_text(value) is not None):
        raise KolmTypeError(f"{_where(field, op)}: expected a single value (str, number, bool, date, None or dict), "
                            f"got {type(value).__name__} {_short(value)}")
    if isinstance(value, Mapping) and _too_deep(value):
        raise KolmValueError(f"{_where(field, op)}: the operand is nested deeper than {MAX_DEPTH} levels")
    return _canon(value)


def _operands(field: str, op: str, value: Any) -> frozenset[Canon | None]:
    if not _is_values(value):
        raise KolmTypeError(f"{_where(field, op)}: expected a list, tuple, set or array of values, "
                            f"got {type(value).__name__} {_short(value)}")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise KolmValueError(f"{_where(field, op)}: expected a 1-D array, got shape {value.shape}")
    items = value.tolist() if isinstance(value, (np.ndarray, pd.Series, pd.Index)) else list(value)
    return frozenset(_operand(field, op, v) for v in items)


def _condition(field: str, cond: Any, depth: int = 0) -> Node:
    """The node of ``field: cond``."""
    if depth > MAX_DEPTH:
        raise KolmValueError(f"filter on field {field!r} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond):
        bad = [k for k in cond if not (isinstance(k, str) and k.startswith("$"))]
        if bad:
            raise KolmValueError(f"filter on field {field!r} mixes operators and plain keys {bad!r}; "
                                 f"write an equality on a dict as {{'$eq': {{...}}}}")
        return ("and", tuple(_operator(field, op, arg, depth) for op, arg in cond.items()))
    if isinstance(cond, Mapping) and not cond:
        raise KolmValueError(f"filter on field {field!r} has an empty condition {{}}")
    if _is_values(cond):
        return ("in", field, _operands(field, "$in", cond))
    return ("eq", field, _operand(field, "$eq", cond))


def _operator(field: str, op: str, arg: Any, depth: int) -> Node:
    if op in ("$eq", "$ne"):
        node: Node = ("eq", field, _operand(field, op, arg))
        return ("not", node) if op == "$ne" else node
    if op in ("$in", "$nin"):
        node = ("in", field, _operands(field, op, arg))
        return ("not", node) if op == "$nin" else node
    if op in _RANGE:
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            arg = arg.item()
        if isinstance(arg, (bool, np.bool_)) or not (isinstance(arg, (str, numbers.Real)) or date_text(arg) is not None):
            raise KolmTypeError(f"{_where(field, op)}: expected a number or a string (or a date), "
                                f"got {type(arg).__name__} {_short(arg)}")
        kind, value = _canon(arg)
        if kind == _NUM and math.isnan(value):
            raise KolmValueError(f"{_where(field, op)}: NaN cannot be compared")
        return ("cmp", field, op, kind, value)
    if op == "$exists":
        if not isinstance(arg, (bool, np.bool_)):
            raise KolmTypeError(f"{_where(field, op)}: expected true or false, got {type(arg).__name__} {_short(arg)}")
        return ("exists", field, bool(arg))
    if op == "$not":
        if not isinstance(arg, Mapping) or not arg or not all(isinstance(k, str) and k.startswith("$") for k in arg):
            raise KolmTypeError(f"{_where(field, op)}: expected a dict of operators such as {{'$gt': 1}}, got {_short(arg)}")
        return ("not", _condition(field, arg, depth + 1))
    raise KolmValueError(f"{_where(field, op)}: unknown operator; supported: {', '.join(FIELD_OPERATORS)}")


def parse_filter(filters: Mapping[str, Any], depth: int = 0) -> Node:
    """Validate ``filters`` and return its hashable syntax tree (table-independent checks).

    Raises
    ------
    KolmValueError, KolmTypeError
        Naming the field and operator: unknown operator, operand of the wrong type, NaN,
        nesting deeper than :data:`MAX_DEPTH`.
    """
    if depth > MAX_DEPTH:
        raise KolmValueError(f"filter is nested deeper than {MAX_DEPTH} levels")
    mapping("a filter", filters)
    nodes: list[Node] = []
    for key, cond in filters.items():
        if not isinstance(key, str):
            raise KolmTypeError(f"filter field names must be strings, got {type(key).__name__} {_short(key)}")
        if key in ("$and", "$or", "$nor"):
            if not _is_values(cond) or len(cond) == 0:
                raise KolmTypeError(f"filter operator {key!r} takes a non-empty list of filters, got {_short(cond)}")
            items: list[Any] = list(cond)
            parts = tuple(parse_filter(c, depth + 1) for c in items)
            node: Node = ("and", parts) if key == "$and" else ("or", parts)
            nodes.append(("not", node) if key == "$nor" else node)
        elif key == "$not":
            nodes.append(("not", parse_filter(cond, depth + 1)))
        elif key.startswith("$"):
            raise KolmValueError(f"unknown filter operator {key!r}; at the top level: {', '.join(LOGICAL_OPERATORS)}")
        else:
            nodes.append(_condition(key, cond, depth + 1))
    if not nodes:
        return ("all",)
    return nodes[0] if len(nodes) == 1 else ("and", tuple(nodes))


# -- columns ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Part:
    """The elements of one kind: their documents, values, (numbers whose float64 form is
    exact) a float64 copy, and a lookup built on first use: the distinct values (a unique
    hash index) with, for each, its elements (``order[ptr[c]:ptr[c + 1]]``)."""

    owner: npt.NDArray[np.int64]
    values: npt.NDArray[np.object_]
    f64: npt.NDArray[np.float64] | None
    _lookup: list[Any]

    def rows_equal(self, targets: list[Any]) -> npt.NDArray[np.int64]:
        """Documents (with repeats, unsorted) holding an element equal to one of ``targets``."""
        if not self._lookup:  # built once; a whole-list assignment, so a racing thread sees all or nothing
            codes, uniques = pd.factorize(self.values)  # Python equality and hash: 2000 == 2000.0
            order = np.argsort(codes, kind="stable")
            ptr = np.zeros(len(uniques) + 1, np.int64)
            np.cumsum(np.bincount(codes, minlength=len(uniques)), out=ptr[1:])
            self._lookup[:] = [dict(zip(uniques.tolist(), range(len(uniques)), strict=True)), order, ptr]
        code_of, order, ptr = self._lookup
        found = np.fromiter((c for t in targets if (c := code_of.get(t, -1)) >= 0), np.int64)
        lengths = ptr[found + 1] - ptr[found]
        starts = np.repeat(ptr[found] - np.cumsum(lengths) + lengths, lengths)  # each run's start, minus its offset
        return self.owner[order[starts + np.arange(int(lengths.sum()))]]


@dataclass(frozen=True)
class FieldColumn:
    """One field's elements over a table of ``n`` documents (built once per table and field).

    Attributes
    ----------
    name : str
    present : bool (n,)
        Documents that have the field (not ``None``/NaN; an empty list is present).
    parts : dict kind -> _Part
        The elements of each kind (bool, number, string, other): owner int64 (e,) and values
        object (e,).
    ids : object (n,)
        Document ids, to name a document in an error.
    """

    name: str
    present: npt.NDArray[np.bool_]
    parts: dict[int, _Part]
    ids: npt.NDArray[np.object_]

    @classmethod
    def build(cls, name: str, values: Sequence[Any], ids: npt.NDArray[np.object_]) -> FieldColumn:
        """From one value per document."""
        owners: dict[int, list[int]] = {}
        vals: dict[int, list[Any]] = {}
        present = np.zeros(len(values), bool)
        for i, value in enumerate(values):
            present[i] = not _missing(value)
            for item in _elements(value):
                if isinstance(item, (Mapping, list, tuple, set, frozenset)) and _too_deep(item):
                    raise KolmValueError(f"filter on field {name!r}: document {ids[i]!r} has a value nested deeper "
                                         f"than {MAX_DEPTH} levels")
                kind, canon = _canon(item)
                owners.setdefault(kind, []).append(i)
                vals.setdefault(kind, []).append(canon)
        parts = {}
        for kind, items in vals.items():
            arr = np.empty(len(items), dtype=object)
            arr[:] = items
            exact = kind == _NUM and all(isinstance(v, float) or abs(v) < _EXACT for v in items)
            parts[kind] = _Part(np.asarray(owners[kind], np.int64), arr, arr.astype(np.float64) if exact else None, [])
        return cls(name, present, parts, ids)

    def _docs(self, owner: npt.NDArray[np.int64], hit: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        out = np.zeros(len(self.present), bool)
        out[owner[hit]] = True
        return out

    def equal(self, wanted: frozenset[Canon | None]) -> Selection:
        """Documents with an element equal to one of ``wanted`` (``None``: the field is missing),
        found by lookup: the cost grows with the operands and their matches."""
        n = len(self.present)
        found = [part.rows_equal(targets) for kind, part in self.parts.items()
                 if (targets := [c[1] for c in wanted if c is not None and c[0] == kind])]
        rows = np.concatenate(found) if found else np.zeros(0, np.int64)
        if len(rows) <= n * ROWS_SHARE:  # few: sorted rows
            out = Selection(n, rows=np.unique(rows))
        else:  # many: straight to a mask (no sort)
            mask = np.zeros(n, bool)
            mask[rows] = True
            out = Selection.of_mask(mask)
        return out.union(Selection.of_mask(~self.present)) if None in wanted else out

    def compare(self, op: str, kind: int, value: Any) -> npt.NDArray[np.bool_]:
        """Documents with an element ``element <op> value``; every element must be of ``kind``."""
        for other, part in self.parts.items():
            if other != kind:
                raise KolmTypeError(
                    f"{_where(self.name, op)}: cannot compare {_KIND_NAMES[other]} values with the "
                    f"{_KIND_NAMES[kind]} {_short(value)}; document {self.ids[part.owner[0]]!r} has "
                    f"{_short(part.values[0])}")
        if kind not in self.parts:
            return np.zeros(len(self.present), bool)
        part = self.parts[kind]
        if part.f64 is not None and (isinstance(value, float) or abs(value) < _EXACT):
            hit = _RANGE[op](part.f64, float(value))
        else:  # strings, or integers beyond float64's exact range: Python's exact comparisons
            hit = np.asarray(_RANGE[op](part.values, value), dtype=bool)
        return self._docs(part.owner, hit)


def compile_filter(node: Node, column: Callable[[str], FieldColumn], n_docs: int) -> npt.NDArray[np.bool_]:
    """The boolean mask (n_docs,) of a tree from :func:`parse_filter`; ``column(name)`` gives a
    field's :class:`FieldColumn` (raising for an unknown field)."""
    return select_filter(node, column, n_docs).as_mask()


def select_filter(node: Node, column: Callable[[str], FieldColumn], n_docs: int) -> Selection:
    """The :class:`~kolm_search.engine.selection.Selection` of a tree from :func:`parse_filter` (rows
    when few documents match, else a mask); ``column(name)`` as for :func:`compile_filter`.
    Every clause is evaluated (and so validated), whatever the others select."""
    tag = node[0]
    if tag == "all":
        return Selection.everything(n_docs)
    if tag in ("and", "or"):
        out = select_filter(node[1][0], column, n_docs)
        for part in node[1][1:]:
            other = select_filter(part, column, n_docs)
            out = out.intersect(other) if tag == "and" else out.union(other)
        return out
    if tag == "not":
        return select_filter(node[1], column, n_docs).invert()
    col: FieldColumn = column(node[1])
    if tag == "eq":
        return col.equal(frozenset([node[2]]))
    if tag == "in":
        return col.equal(node[2])
    if tag == "cmp":
        return Selection.of_mask(col.compare(node[2], node[3], node[4]))
    if tag == "exists":
        return Selection.of_mask(col.present.copy() if node[2] else ~col.present)
    raise AssertionError(f"unknown filter node {tag!r}")  # pragma: no cover
