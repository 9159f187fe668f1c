"""Id columns to dense integer codes and back, through pandas only.

Ids stay what they are wherever users see them (strings, ints, categoricals); inside, tables
speak ``int64`` codes. :func:`encode` gives several columns one shared set of codes:

- a categorical column hands over its own codes, no hashing at all (what :func:`read_run`,
  :func:`read_qrels` and :func:`load_beir` return);
- any other column is hashed once by ``pandas.factorize`` (pyarrow's dictionary encoding for
  Arrow string columns); several large columns are hashed on parallel threads;
- the columns' distinct values are then unified, a factorize of the few distinct values rather
  than of the rows, and each column's codes remapped with one ``take``.

:func:`decode` maps codes back to ids (``Index.take``, or a categorical over the uniques).
Values that pandas keeps apart stay apart (``1`` and ``"1"``, ``b"x"`` and ``"x"``) unless
``as_str`` asks for ids compared as strings, as trec_eval compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError

__all__ = ["column_codes", "decode", "encode"]

I64 = npt.NDArray[np.int64]
_PARALLEL_ROWS = 200_000


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
    """The distinct values as strings (``str(v)``); string values are kept as they are."""
    if pd.api.types.is_string_dtype(uniques.dtype) and pd.api.types.infer_dtype(uniques, skipna=False) == "string":
        return uniques
    return pd.Index([v if isinstance(v, str) else str(v) for v in uniques], dtype=object)


def encode(columns: Sequence[Any], *, names: Sequence[str] | None = None, sort: bool = False,
           as_str: bool = False, n_threads: int | None = None) -> tuple[list[I64], pd.Index]:
    """One set of codes for several id columns.

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
    n_threads : int, optional
        Threads for hashing several large columns (default: the usable cores).

    Returns
    -------
    codes : list of int64 arrays, one per column
    uniques : Index
        ``uniques[codes[i]]`` are column i's ids (as strings under ``as_str``).
    """
    from kolm_search._kernels import resolve_threads

    names = list(names) if names is not None else [f"ids[{i}]" for i in range(len(columns))]
    jobs = list(zip(columns, names, strict=True))
    threads = min(len(jobs), resolve_threads(n_threads))
    if threads > 1 and sum(len(c) for c in columns) >= _PARALLEL_ROWS:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kolm-ids") as pool:
            parts = list(pool.map(lambda job: column_codes(job[0], name=job[1]), jobs))
    else:
        parts = [column_codes(c, name=n) for c, n in jobs]
    uniques = [_as_str(u) if as_str else u for _, u in parts]
    if len(parts) == 1 and not sort and not as_str:
        return [parts[0][0]], uniques[0]
    if not sort and all(u is uniques[0] for u in uniques):  # categoricals sharing one set of categories
        return [c for c, _ in parts], uniques[0]
    joint = uniques[0].append(uniques[1:]) if len(uniques) > 1 else uniques[0]
    try:
        joint_codes, joint_uniques = pd.factorize(joint, sort=sort)
    except TypeError as exc:  # ids of types that do not order (sort=True)
        raise FrameValidationError(f"ids of mixed types cannot be sorted: {exc}") from exc
    joint_codes = np.asarray(joint_codes, dtype=np.int64)
    out, start = [], 0
    for (codes, _), u in zip(parts, uniques, strict=True):
        out.append(joint_codes[start:start + len(u)][codes])
        start += len(u)
    return out, _uniques_index(joint_uniques)


def decode(uniques: pd.Index, codes: npt.ArrayLike, *, categorical: bool = False) -> Any:
    """The ids of ``codes`` (an array for a DataFrame column); ``categorical`` gives a
    ``pandas.Categorical`` over ``uniques`` instead (no id is copied)."""
    codes = np.asarray(codes, dtype=np.int64)
    if categorical:
        return pd.Categorical.from_codes(codes, categories=uniques)
    return uniques.take(codes).array
