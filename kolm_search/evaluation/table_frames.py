"""The small frames of a stored measure table (the table itself, its precision-recall curves)
as JSON values and back: each column's name, dtype text and values, checked against that
dtype when read (:class:`~kolm_search.evaluation.table_cache.TableCache`'s payload). Kept
dtypes: float64, int64, bool, object and str (strings); floats go through JSON by Python's
shortest round-trip repr, so they come back bit for bit."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from kolm_search.errors import KolmValueError

__all__ = ["checked_columns", "decode_frame", "encode_frame", "frame_of"]

_DTYPES = ("float64", "int64", "bool", "object", "str")


def encode_frame(frame: pd.DataFrame) -> dict[str, Any]:
    """A small DataFrame with a default index as JSON values (raises ValueError when a dtype is
    not one this format keeps)."""
    if not isinstance(frame.index, pd.RangeIndex) or frame.index.start != 0 or frame.index.step != 1:
        raise ValueError("not a default index")
    dtypes = [str(t) for t in frame.dtypes]
    if any(t not in _DTYPES for t in dtypes):
        raise ValueError(f"dtypes {dtypes}")
    return {"columns": [str(c) for c in frame.columns], "dtypes": dtypes,
            "values": [frame[c].tolist() for c in frame.columns]}


def decode_frame(data: Any, columns: Sequence[str] | None = None, *, index: str | None = None,
                 kind: type[pd.DataFrame] = pd.DataFrame) -> pd.DataFrame:
    """A frame :func:`encode_frame` wrote, checked (``KolmValueError``), of class ``kind``, with
    column ``index`` as its index."""
    return frame_of(checked_columns(data, columns), index=index, kind=kind)


def checked_columns(data: Any, columns: Sequence[str] | None = None) -> dict[str, Any]:
    """The columns of a frame :func:`encode_frame` wrote, by name (``columns`` when given), each
    checked against its dtype and made an array of it (``KolmValueError`` when one fails)."""
    if not isinstance(data, dict) or not isinstance(data.get("columns"), list):
        raise KolmValueError("a table is not a JSON object with columns")
    names, dtypes, values = data["columns"], data.get("dtypes"), data.get("values")
    if columns is not None and names != list(columns):
        raise KolmValueError(f"columns {names}, expected {list(columns)}")
    if not isinstance(dtypes, list) or not isinstance(values, list) or not len(dtypes) == len(values) == len(names):
        raise KolmValueError("a table's dtypes or values do not match its columns")
    lengths = {len(v) if isinstance(v, list) else -1 for v in values}
    if len(lengths) > 1 or -1 in lengths:
        raise KolmValueError("a table's columns are not lists of one length")
    out: dict[str, Any] = {}
    for name, dtype, column in zip(names, dtypes, values, strict=True):
        if dtype not in _DTYPES:
            raise KolmValueError(f"column {name!r} has dtype {dtype!r}")
        if dtype in ("object", "str"):
            if not all(isinstance(v, str) for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not a string")
            out[name] = _strings(column) if dtype == "str" else np.array(column, dtype=object)
        else:
            kinds = (bool,) if dtype == "bool" else (int,) if dtype == "int64" else (int, float)
            if not all(isinstance(v, kinds) and (dtype == "int64" or dtype == "bool" or not isinstance(v, bool))
                       for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not {dtype}")
            if dtype == "int64" and any(isinstance(v, bool) for v in column):
                raise KolmValueError(f"column {name!r} holds a value that is not {dtype}")
            out[name] = np.array(column, dtype=dtype)
    return out


@functools.cache
def _str_dtype() -> Any:
    """pandas' ``"str"`` dtype (Arrow strings under pandas 3)."""
    return pd.array([], dtype="str").dtype


def _strings(values: list[str]) -> Any:
    """``pd.array(values, dtype="str")``, made from an Arrow array when that dtype is Arrow
    strings (pandas' own path, which infers the type of the list, takes about twice as long)."""
    dtype = _str_dtype()
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        return pd.arrays.ArrowStringArray(pa.array(values, pa.large_string()), dtype=dtype)
    return pd.array(values, dtype="str")


def frame_of(out: dict[str, Any], *, index: str | None = None, kind: type[pd.DataFrame] = pd.DataFrame) -> pd.DataFrame:
    """The frame of :func:`checked_columns`' columns, column ``index`` as its index."""
    rest = [n for n in out if n != index]
    at = None if index is None else pd.Index(out[index], name=index)  # that column as the index
    if rest and all(out[n].dtype == np.float64 for n in rest):  # one float block: no per-column assembly
        return kind(np.column_stack([out[n] for n in rest]), index=at, columns=rest)
    # the dict keeps the order (columns= would reindex: ~2x slower); one block per dtype (copy=False
    # would keep a block per column: each deep copy of the frame, a cached read, would copy 14)
    return kind({n: out[n] for n in rest}, index=at)
