"""Parquet run and qrels files: reading and writing with errors that name the file and the column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.engine.runs import check_ids, numeric_column
from kolm_search.errors import FrameValidationError

__all__ = ["check_parquet_columns", "rank_column", "read_parquet", "to_parquet"]


def check_parquet_columns(frame: pd.DataFrame, what: str, numbers: tuple[str, ...]) -> None:
    """Ids must be strings or integers (a categorical of them too) and present; ``numbers``
    (those present) of a numeric dtype other than bool. Raises FrameValidationError naming
    the column and its dtype."""
    for column in ("qid", "doc_id"):
        col = frame[column]
        values = col.cat.categories if isinstance(col.dtype, pd.CategoricalDtype) else col
        kind = pd.api.types.infer_dtype(values, skipna=True)
        if kind not in ("string", "integer", "empty"):
            raise FrameValidationError(f"{what} column {column} holds {kind} values ({col.dtype}); "
                                       "ids must be strings or integers")
    check_ids(frame, what)
    for column in numbers:
        if column in frame.columns:
            dtype = frame[column].dtype
            if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
                raise FrameValidationError(f"{what} column {column} has dtype {dtype}; expected numbers")


def rank_column(frame: pd.DataFrame, what: str) -> npt.NDArray[np.int64]:
    """The ``rank`` column as int64: integral values within int64, else an error naming the row."""
    col = frame["rank"]
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu":
        ints = col.to_numpy()
        bad = ints > np.iinfo(np.int64).max if col.dtype == np.uint64 else np.zeros(len(ints), bool)
    else:
        values = numeric_column(frame, "rank", what, finite=True)
        bad = (np.mod(values, 1) != 0) | (np.abs(values) >= 2.0**63)
        ints = np.where(bad, 0, values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise FrameValidationError(f"{what} rank must be integers within int64; row {row} has {col.iloc[row]!r}")
    return ints.astype(np.int64)


def read_parquet(path: Path, what: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises many kinds for a file that is not parquet
        raise FrameValidationError(f"{path}: cannot read the {what} as parquet ({type(exc).__name__}: {exc})") from exc


def to_parquet(df: pd.DataFrame, path: Path) -> None:
    import pyarrow as pa

    try:
        df.to_parquet(path, index=False)
    except (pa.ArrowException, UnicodeError, TypeError, ValueError) as exc:
        raise FrameValidationError(f"{path}: cannot write the table as parquet ({type(exc).__name__}: {exc})") from exc
