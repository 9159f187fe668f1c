"""Id columns to dense integer codes and back, through pandas only.

Ids stay what they are wherever users see them (strings, ints, categoricals); inside, tables
speak ``int64`` codes. :func:`encode` gives several columns one shared set of codes:

- a categorical column hands over its own codes, no hashing at all (what :func:`read_run`,
  :func:`read_qrels` and :func:`load_beir` return);
- all other columns are joined and hashed once by ``pandas.factorize``;
- when several sets of distinct values result, they are unified by a factorize of the distinct
  values rather than of the rows, and each column's codes remapped with one ``take``.

:func:`decode` maps codes back to ids (``Index.take``, or a categorical over the uniques).
:func:`lookup` finds ids in a small table (pyarrow's ``index_in``), and
:func:`codes_within_groups` codes ids that only need to be told apart inside their query.
Values that pandas keeps apart stay apart (``1`` and ``"1"``, ``b"x"`` and ``"x"``) unless
``as_str`` asks for ids compared as strings, as trec_eval compares them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError

__all__ = ["as_strings", "codes_within_groups", "column_codes", "decode", "encode", "lookup"]

I64 = npt.NDArray[np.int64]


def _uniques_index(uniques: Any) -> pd.Index:
    """An Index of ``pd.factorize``'s uniques; object arrays stay object (pandas would infer an
    Arrow string dtype, which cannot hold every Python string)."""
    if isinstance(uniques, np.ndarray) and uniques.dtype == object:
        return pd.Index(uniques, dtype=object)
    return pd.Index(uniques)


def column_codes(values: Any, *, name: str = "ids") -> tuple[I64, pd.Index]:
    """Codes ``int64 (n,)`` of one id column and its distinct values (``codes`` index them).

    A categorical column gives its own codes and categories; anything else goes through
    ``pandas.factorize`` (codes in order of first appearance).

    Raises
    ------
    FrameValidationError
        A missing id (None, NaN, NA), naming ``name`` and the row.
    """
    dtype = getattr(values, "dtype", None)
    if isinstance(dtype, pd.CategoricalDtype):
        cat = values.cat if isinstance(values, pd.Series) else pd.Categorical(values)
        codes, uniques = np.asarray(cat.codes, dtype=np.int64), pd.Index(cat.categories)
    else:
        try:
            raw_codes, raw_uniques = pd.factorize(values, use_na_sentinel=True)
        except TypeError as exc:  # unhashable ids (lists, dicts)
            raise FrameValidationError(f"{name} holds values that cannot be ids: {exc}") from exc
        codes, uniques = np.asarray(raw_codes, dtype=np.int64), _uniques_index(raw_uniques)
    if codes.size and codes.min() < 0:
        row = int(np.flatnonzero(codes < 0)[0])
        raise FrameValidationError(f"{name} has a missing value at row {row}")
    return codes, uniques


def _as_str(uniques: pd.Index) -> pd.Index:
    """The distinct values as strings (``str(v)``); a string column is kept as it is."""
    if isinstance(uniques.dtype, pd.StringDtype):
        return uniques
    if uniques.dtype == object and pd.api.types.infer_dtype(uniques, skipna=False) == "string":
        return uniques
    return pd.Index([v if isinstance(v, str) else str(v) for v in uniques], dtype=object)


def _as_series(values: Any) -> pd.Series:
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True)
    if isinstance(values, pd.Index):
        return pd.Series(values.array)
    arr = np.asarray(values) if not isinstance(values, np.ndarray) else values
    return pd.Series(arr, dtype=object if arr.dtype == object else None)


def encode(columns: Sequence[Any], *, names: Sequence[str] | None = None, sort: bool = False,
           as_str: bool = False) -> tuple[list[I64], pd.Index]:
    """One set of codes for several id columns.

    Non-categorical columns are joined and hashed in one ``pandas.factorize`` (one pass over
    their rows); categorical columns give their own codes. When more than one set of distinct
    values results (categoricals, or ``as_str`` merging ``10`` and ``"10"``), the sets are
    unified by a factorize of the distinct values and the codes remapped.

    Parameters
    ----------
    columns : sequence of Series, Index, array or list
        The id columns (for example the ``doc_id`` column of every run).
    names : sequence of str, optional
        Column names for error messages.
    sort : bool
        Codes in sorted order of the ids (as strings under ``as_str``) instead of first
        appearance.
    as_str : bool
        Compare ids as strings: ``10`` and ``"10"`` get one code.

    Returns
    -------
    codes : list of int64 arrays, one per column
    uniques : Index
        ``uniques[codes[i]]`` are column i's ids (as strings under ``as_str``).
    """
    names = list(names) if names is not None else [f"ids[{i}]" for i in range(len(columns))]
    if len(names) != len(columns):
        raise ValueError("one name per column")
    codes: list[I64 | None] = [None] * len(columns)
    sets: list[tuple[list[int], pd.Index]] = []  # (columns, their distinct values)
    plain = [i for i, c in enumerate(columns) if not isinstance(getattr(c, "dtype", None), pd.CategoricalDtype)]
    if plain:
        parts = [_as_series(columns[i]) for i in plain]
        joined = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
        try:
            joint, uniques = column_codes(joined, name=names[plain[0]])
        except FrameValidationError:
            for i, part in zip(plain, parts, strict=True):  # name the column and row of the missing id
                column_codes(part, name=names[i])
            raise
        start = 0
        for i, part in zip(plain, parts, strict=True):
            codes[i] = joint[start:start + len(part)]
            start += len(part)
        sets.append((plain, uniques))
    for i, column in enumerate(columns):
        if i not in plain:
            codes[i], categories = column_codes(column, name=names[i])
            sets.append(([i], categories))
    converted = False
    if as_str:
        as_strings = [(cols, _as_str(u)) for cols, u in sets]
        converted = any(new is not old for (_, new), (_, old) in zip(as_strings, sets, strict=True))
        sets = as_strings
    if len(sets) == 1 and not sort and not converted:  # converted strings may coincide ("10", 10)
        return [c for c in codes if c is not None], sets[0][1]
    joint_uniques = sets[0][1].append([u for _, u in sets[1:]]) if len(sets) > 1 else sets[0][1]
    try:
        joint_codes, merged = pd.factorize(joint_uniques, sort=sort)
    except TypeError as exc:  # ids of types that do not order (sort=True)
        raise FrameValidationError(f"ids of mixed types cannot be sorted: {exc}") from exc
    joint_codes = np.asarray(joint_codes, dtype=np.int64)
    start = 0
    for cols, u in sets:
        remap = joint_codes[start:start + len(u)]
        for i in cols:
            codes[i] = remap[codes[i]]
        start += len(u)
    return [c for c in codes if c is not None], _uniques_index(merged)


def decode(uniques: pd.Index, codes: npt.ArrayLike, *, categorical: bool = False) -> Any:
    """The ids of ``codes`` (an array for a DataFrame column); ``categorical`` gives a
    ``pandas.Categorical`` over ``uniques`` instead (no id is copied)."""
    codes = np.asarray(codes, dtype=np.int64)
    if categorical:
        return pd.Categorical.from_codes(codes, categories=uniques)
    return uniques.take(codes).array


_BLOCK_ROWS = 1 << 15


def _strings(values: Any) -> Any:
    """``values`` as a pyarrow string array (ids compared as strings), or None when pyarrow
    cannot hold them (lone surrogates)."""
    import pyarrow as pa

    try:
        if isinstance(values, (pd.Series, pd.Index)) and isinstance(values.dtype, pd.StringDtype):
            return pa.array(values.array)
        arr = np.asarray(values, dtype=object)
        if pd.isna(arr).any():  # missing ids stay missing: the caller reports them
            return None
        if pd.api.types.infer_dtype(arr, skipna=False) != "string":
            arr = np.array([v if isinstance(v, str) else str(v) for v in arr], dtype=object)
        return pa.array(arr, type=pa.large_string())
    except (pa.ArrowException, UnicodeError):
        return None


def as_strings(values: Any) -> pd.Series:
    """An id column as a Series of Arrow strings (one conversion, then every later hash or
    lookup reads Arrow buffers); categoricals, and ids pyarrow cannot hold, are returned as
    they are (a Series with a fresh index)."""
    series = _as_series(values)
    if isinstance(series.dtype, (pd.CategoricalDtype, pd.StringDtype)):
        return series
    arr = _strings(series)
    return series if arr is None else pd.Series(pd.arrays.ArrowStringArray(arr), copy=False)


def lookup(values: Any, table: pd.Index) -> I64:
    """Position of each of ``values`` in ``table`` (distinct strings), -1 where absent; ids are
    compared as strings. Meant for a small ``table`` (say the judged documents) and a long
    ``values`` column: pyarrow's ``index_in`` hashes the table once and each value once.

    A categorical column is looked up by its categories only.
    """
    import pyarrow.compute as pc

    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        cat = values.cat if isinstance(values, pd.Series) else pd.Categorical(values)
        per_category = lookup(pd.Index(cat.categories), table)
        codes = np.asarray(cat.codes, dtype=np.int64)
        return np.where(codes >= 0, per_category[codes], -1) if len(per_category) else np.full(len(codes), -1)
    arr, keys = _strings(values), _strings(table)
    if arr is None or keys is None:  # strings pyarrow cannot hold: pandas' object hashing
        objects = pd.Index([v if isinstance(v, str) else str(v) for v in table], dtype=object)
        return np.asarray(objects.get_indexer(pd.Index(np.asarray(values, dtype=object), dtype=object).map(str)),
                          dtype=np.int64)
    found = pc.index_in(arr, value_set=keys.cast(arr.type))
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def codes_within_groups(values: Any, groups: I64, *, name: str = "ids") -> tuple[I64, int]:
    """Codes that tell ``values`` apart inside each group (a query), and their bound.

    Equal ids of one group get one code and different ids different codes; codes of different
    groups may coincide or not. When each group's rows are contiguous (runs are written query
    by query) the ids are hashed in blocks of whole groups, so every hash table stays small
    and in cache; otherwise, and for categoricals, the codes are global.
    """
    groups = np.asarray(groups, dtype=np.int64)
    n = len(groups)
    changes = np.flatnonzero(groups[1:] != groups[:-1]) + 1
    categorical = isinstance(getattr(values, "dtype", None), pd.CategoricalDtype)
    if categorical or n <= _BLOCK_ROWS or len(changes) + 1 != len(np.unique(groups)):
        codes, uniques = column_codes(values, name=name)
        return codes, len(uniques)
    series = _as_series(values)
    na = series.isna().to_numpy()
    if na.any():
        raise FrameValidationError(f"{name} has a missing value at row {int(np.flatnonzero(na)[0])}")
    starts = np.concatenate([[0], changes])
    cuts = np.unique(np.concatenate([starts[np.searchsorted(starts, np.arange(0, n, _BLOCK_ROWS), side="right") - 1],
                                     [n]]))
    codes = np.empty(n, np.int64)
    offset = 0
    for a, b in itertools.pairwise(cuts):
        block, uniques = pd.factorize(series.iloc[a:b])
        codes[a:b] = np.asarray(block, dtype=np.int64) + offset
        offset += len(uniques)
    return codes, offset
