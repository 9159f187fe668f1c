"""Id columns to dense integer codes and back, through pandas only.

Ids stay what they are wherever users see them (strings, ints, categoricals); inside, tables
speak ``int64`` codes. :func:`encode` gives several columns one shared set of codes:

- a categorical column hands over its own codes, no hashing at all (what :func:`read_run`,
  :func:`read_qrels` and :func:`load_beir` return);
- any other column is hashed once by ``pandas.factorize`` (only the first row of each run of
  equal neighbours when the column comes in runs, as query ids do);
- the columns' sets of distinct values are then unified by a factorize of those values rather
  than of the rows, and each column's codes remapped with one ``take``.

:func:`decode` maps codes back to ids (``Index.take``, or a categorical over the uniques).
:func:`lookup` finds ids in a small table (pyarrow's ``index_in``), and
:func:`codes_within_groups` codes ids that only need to be told apart inside their query.
Values that pandas keeps apart stay apart (``1`` and ``"1"``, ``b"x"`` and ``"x"``, lone
surrogates such as ``"\\ud800"``, which pyarrow cannot hold) unless ``as_str`` asks for ids
compared as strings, as trec_eval compares them; then bytes are refused (``str(b"x")`` is
``"b'x'"``, not ``"x"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError

__all__ = ["as_column", "as_strings", "codes_within_groups", "column_codes", "decode", "encode", "lookup", "str_id"]

I64 = npt.NDArray[np.int64]


def _uniques_index(uniques: Any) -> pd.Index:
    """An Index of ``pd.factorize``'s uniques; object arrays stay object (pandas would infer an
    Arrow string dtype, which cannot hold every Python string)."""
    if isinstance(uniques, np.ndarray) and uniques.dtype == object:
        return pd.Index(uniques, dtype=object)
    return pd.Index(uniques)


def _run_starts(series: pd.Series) -> I64 | None:
    """Rows where a run of equal neighbours starts (row 0 first), when runs are long enough
    to be worth hashing only their first rows (query ids of a run file); else None."""
    n = len(series)
    if n < 4096:
        return None
    values = series.array
    try:
        differs = pd.array(values[1:] != values[:-1]).to_numpy(dtype=bool, na_value=True)
    except (TypeError, ValueError):  # values that do not compare
        return None
    starts = np.flatnonzero(differs) + 1
    if 4 * (len(starts) + 1) > n:
        return None
    return np.concatenate([[0], starts]).astype(np.int64)


def column_codes(values: Any, *, name: str = "ids") -> tuple[I64, pd.Index]:
    """Codes ``int64 (n,)`` of one id column and its distinct values (``codes`` index them).

    A categorical column gives its own codes and categories; anything else goes through
    ``pandas.factorize`` (codes in order of first appearance), of the first row of each run of
    equal neighbours only when the column comes in long runs (a query id column).

    Raises
    ------
    FrameValidationError
        A missing id (None, NaN, NA), naming ``name`` and the row.
    """
    if isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        cat = values.cat if isinstance(values, pd.Series) else pd.Categorical(values)
        codes, uniques = np.asarray(cat.codes, dtype=np.int64), pd.Index(cat.categories)
    else:
        series = _as_series(values)
        starts = _run_starts(series)
        heads = series if starts is None else series.iloc[starts]
        try:
            raw_codes, raw_uniques = pd.factorize(heads, use_na_sentinel=True)
        except TypeError as exc:  # unhashable ids (lists, dicts)
            raise FrameValidationError(f"{name} holds values that cannot be ids: {exc}") from exc
        codes, uniques = np.asarray(raw_codes, dtype=np.int64), _uniques_index(raw_uniques)
        if starts is not None:
            codes = np.repeat(codes, np.diff(np.append(starts, len(series))))
    if codes.size and codes.min() < 0:
        row = int(np.flatnonzero(codes < 0)[0])
        raise FrameValidationError(f"{name} has a missing value at row {row}")
    return codes, uniques


def str_id(value: Any) -> str:
    """One id as a string (``str(v)``); bytes are refused: ``str(b"x")`` is ``"b'x'"``,
    which is neither ``"x"`` nor what the file said."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview, np.bytes_)):
        raise FrameValidationError(f"ids compared as strings cannot be bytes ({bytes(value)!r}); "
                                   "decode them to str first")
    return str(value)


def _as_str(uniques: pd.Index) -> pd.Index:
    """The distinct values as strings (``str(v)``); a string column is kept as it is."""
    if isinstance(uniques.dtype, pd.StringDtype):
        return uniques
    if uniques.dtype == object and pd.api.types.infer_dtype(uniques, skipna=False) == "string":
        return uniques
    return pd.Index([str_id(v) for v in uniques], dtype=object)


def _joined(indexes: Sequence[pd.Index]) -> pd.Index:
    """The indexes end to end; object values stay object (``Index.append`` would infer an Arrow
    string dtype, which cannot hold lone surrogates)."""
    if len(indexes) == 1:
        return indexes[0]
    if all(u.dtype != object for u in indexes):
        return indexes[0].append(list(indexes[1:]))
    return pd.Index(np.concatenate([np.asarray(u, dtype=object) for u in indexes]), dtype=object)


def _as_series(values: Any) -> pd.Series:
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True)
    if isinstance(values, pd.Index):
        return pd.Series(values.array, dtype=object if values.dtype == object else None)
    try:  # pandas' inference keeps mixed values apart (np.asarray would turn b"x" and 1 into str)
        if isinstance(values, np.ndarray):
            return pd.Series(values, dtype=object if values.dtype == object else None)
        return pd.Series(values)
    except UnicodeError:  # strings that the Arrow string dtype cannot hold (lone surrogates)
        return pd.Series(np.asarray(values, dtype=object), dtype=object)


def encode(columns: Sequence[Any], *, names: Sequence[str] | None = None, sort: bool = False,
           as_str: bool = False) -> tuple[list[I64], pd.Index]:
    """One set of codes for several id columns.

    Each column is coded by :func:`column_codes` (a categorical's own codes, or one hash pass);
    the columns' sets of distinct values are then unified by a factorize of those values (few
    next to the rows) and each column's codes remapped with one ``take``.

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
    parts = [column_codes(c, name=n) for c, n in zip(columns, names, strict=True)]
    codes = [c for c, _ in parts]
    sets = [([i], u) for i, (_, u) in enumerate(parts)]  # (columns, their distinct values)
    converted = False
    if as_str:
        as_strings = [(cols, _as_str(u)) for cols, u in sets]
        converted = any(new is not old for (_, new), (_, old) in zip(as_strings, sets, strict=True))
        sets = as_strings
    if len(sets) == 1 and not sort and not converted:  # converted strings may coincide ("10", 10)
        return codes, sets[0][1]
    joint_uniques = _joined([u for _, u in sets])
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
    return codes, _uniques_index(merged)


def decode(uniques: pd.Index, codes: npt.ArrayLike, *, categorical: bool = False) -> Any:
    """The ids of ``codes`` (an array for a DataFrame column); ``categorical`` gives a
    ``pandas.Categorical`` over ``uniques`` instead (no id is copied)."""
    codes = np.asarray(codes, dtype=np.int64)
    if categorical:
        return pd.Categorical.from_codes(codes, categories=uniques)
    return as_column(uniques.take(codes).array)


def as_column(values: Any) -> Any:
    """``values`` (an array of ids) ready to be a DataFrame column: object values get the dtype
    pandas would infer, or stay object where that dtype cannot hold them (a column of strings
    with lone surrogates, which the Arrow string dtype refuses)."""
    if not pd.api.types.is_object_dtype(getattr(values, "dtype", None)):
        return values
    try:
        column = pd.Series(np.asarray(values, dtype=object), copy=False)
    except UnicodeError:
        column = pd.Series(np.asarray(values, dtype=object), dtype=object, copy=False)
    return column if column.dtype == object else column.array  # a DataFrame would infer again


_BLOCK_ROWS = 1 << 15
_PARALLEL_LOOKUP = 1 << 20  # rows from which lookup splits the column over threads


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
            arr = np.array([str_id(v) for v in arr], dtype=object)
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
        objects = pd.Index([str_id(v) for v in table], dtype=object)
        wanted = pd.Index([str_id(v) for v in np.asarray(values, dtype=object)], dtype=object)
        return np.asarray(objects.get_indexer(wanted), dtype=np.int64)
    keys = keys.cast(arr.type)
    if len(arr) < _PARALLEL_LOOKUP:
        found = pc.index_in(arr, value_set=keys)
        return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    # a long column: one part per thread (pyarrow's index_in frees the GIL)
    from kolm_search._kernels import resolve_threads

    parts = np.array_split(np.arange(len(arr)), resolve_threads(None))
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="kolm-ids") as pool:
        found_parts = list(pool.map(lambda rows: pc.index_in(arr.slice(int(rows[0]), len(rows)), value_set=keys)
                                    .fill_null(-1).to_numpy(zero_copy_only=False), [r for r in parts if len(r)]))
    return np.concatenate(found_parts).astype(np.int64) if found_parts else np.zeros(0, np.int64)


def _block_layout(groups: Sequence[I64]) -> list[tuple[I64, I64]] | None:
    """Per column, the group of each run of rows and where the run starts, when every group's
    rows are contiguous in every column and all columns list their groups in one order;
    else None."""
    layout: list[tuple[I64, I64]] = []
    order: dict[int, int] = {}
    for g in groups:
        starts = np.concatenate([[0], np.flatnonzero(g[1:] != g[:-1]) + 1]).astype(np.int64) if len(g) else g[:0]
        heads = g[starts]
        if len(np.unique(heads)) != len(heads):  # a group in two places
            return None
        for h in heads.tolist():
            order.setdefault(h, len(order))
        layout.append((heads, starts))
    for heads, _ in layout:
        rank = np.array([order[h] for h in heads.tolist()], np.int64)
        if np.any(np.diff(rank) <= 0):  # another order than the first columns'
            return None
    return layout


def codes_within_groups(columns: Sequence[Any], groups: Sequence[I64], *, names: Sequence[str] | None = None,
                        n_threads: int | None = None, with_ids: bool = True) -> tuple[list[I64], int, pd.Index | None]:
    """Codes that tell ids apart inside each group (a query), across several columns, their
    bound, and the id of each code (an Index of that length: ``ids.take(codes)`` gives the
    ids back; an id may stand at several codes, one per block), or None when ``with_ids`` is
    false and the codes are positions within groups (see below).

    ``groups[i]`` int64 (len(columns[i]),) gives each row's group. Inside one group, equal ids
    of any column get one code and different ids different codes; codes of different groups
    may coincide or not. When every group's rows are contiguous and all columns list the
    groups in one order (runs written query by query from one topics file), the ids are
    hashed in blocks of whole groups, blocks on parallel threads, so every hash table stays
    small and in cache; otherwise the codes are :func:`encode`'s global ones. One column of
    Arrow strings whose groups hold no id twice (screened by hashes in one pass) is coded by
    each row's position within its group, unless ``with_ids`` asks for the ids of the codes.
    """
    from kolm_search._kernels import resolve_threads

    names = list(names) if names is not None else [f"ids[{i}]" for i in range(len(columns))]
    groups = [np.asarray(g, dtype=np.int64) for g in groups]
    n = sum(len(g) for g in groups)
    categorical = any(isinstance(getattr(c, "dtype", None), pd.CategoricalDtype) for c in columns)
    if not with_ids and len(columns) == 1 and n > 2 * _BLOCK_ROWS:  # one column, most often no repeat: positions are codes
        from kolm_search.engine.arrow_strings import positions_if_distinct

        distinct = positions_if_distinct(_as_series(columns[0]), groups[0], n_threads)
        if distinct is not None:
            return [distinct[0]], distinct[1], None
    layout = None if categorical or n <= 2 * _BLOCK_ROWS else _block_layout(groups)
    if layout is None:
        codes, uniques = encode(columns, names=names)
        return codes, len(uniques), uniques
    series = [_as_series(c) for c in columns]
    for s_, name in zip(series, names, strict=True):
        na = s_.isna().to_numpy()
        if na.any():
            raise FrameValidationError(f"{name} has a missing value at row {int(np.flatnonzero(na)[0])}")
    # blocks of whole groups, in the shared order, of about _BLOCK_ROWS rows over all columns
    order: dict[int, int] = {}
    for heads, _ in layout:
        for h in heads.tolist():
            order.setdefault(h, len(order))
    sizes = np.zeros(len(order), np.int64)
    spans = []  # per column: (rank of each run, start, end)
    for (heads, starts), g in zip(layout, groups, strict=True):
        rank = np.array([order[h] for h in heads.tolist()], np.int64)
        ends = np.append(starts[1:], len(g))
        np.add.at(sizes, rank, ends - starts)
        spans.append((rank, starts, ends))
    block_of_rank = np.cumsum(sizes) // _BLOCK_ROWS
    n_blocks = int(block_of_rank[-1]) + 1 if len(sizes) else 0
    jobs = []  # per block: the row range of each column
    for b in range(n_blocks):
        ranges = []
        for rank, starts, ends in spans:
            inside = np.flatnonzero(block_of_rank[rank] == b)
            ranges.append((int(starts[inside[0]]), int(ends[inside[-1]])) if len(inside) else (0, 0))
        jobs.append(ranges)

    def hash_block(ranges: list[tuple[int, int]]) -> tuple[I64, pd.Index]:
        pieces = [s_.iloc[a:e] for s_, (a, e) in zip(series, ranges, strict=True) if e > a]
        joined = pieces[0] if len(pieces) == 1 else pd.concat(pieces, ignore_index=True)
        block_codes, uniques = pd.factorize(joined)
        return np.asarray(block_codes, dtype=np.int64), pd.Index(uniques, copy=False)

    threads = min(len(jobs), resolve_threads(n_threads))
    if threads > 1:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kolm-ids") as pool:
            hashed = list(pool.map(hash_block, jobs))
    else:
        hashed = [hash_block(job) for job in jobs]
    out = [np.empty(len(g), np.int64) for g in groups]
    offset = 0
    for ranges, (block_codes, uniques) in zip(jobs, hashed, strict=True):
        at = 0
        for column, (a, e) in enumerate(ranges):
            out[column][a:e] = block_codes[at:at + e - a] + offset
            at += e - a
        offset += len(uniques)
    ids_of_codes = hashed[0][1].append([u for _, u in hashed[1:]]) if hashed else pd.Index([])
    return out, offset, ids_of_codes
