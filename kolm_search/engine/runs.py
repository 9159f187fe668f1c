"""Runs and qrels: their columns, dtypes and validation, in one place.

======  ============================  ==================================================
table   columns                       dtypes and meaning
======  ============================  ==================================================
run     ``qid, doc_id, rank, score``  ids of any hashable type (categorical after
                                      :func:`~kolm_search.io.read_run`), ``rank`` int64
                                      zero-based (optional on input), ``score`` float64,
                                      higher is better
qrels   ``qid, doc_id, relevance``    ``relevance`` integer grades fitting int32, higher
                                      is better (negative: judged, counts as unjudged)
======  ============================  ==================================================

Fusion, evaluation, the readers and writers and re-ranking all take their tables through
:func:`as_run` and :func:`as_qrels`, which accept a DataFrame, an object with a ``.run`` or
``.qrels`` DataFrame (``BatchResult``, ``Dataset``), nested dicts ``{qid: {doc_id: value}}``
and the frames and objects of PyTerrier, ir_measures/ir_datasets, ranx, polars and pyarrow
(:mod:`kolm_search.engine.peer_columns` maps their column names to these), and raise
:class:`~kolm_search.errors.FrameValidationError` naming the table, the column and the first
bad row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.engine import ids
from kolm_search.engine.peer_columns import table_of
from kolm_search.errors import FrameValidationError

__all__ = ["QRELS_COLUMNS", "RUN_COLUMNS", "as_qrels", "as_run", "check_ids", "check_qrels", "numeric_column",
           "relevance_column"]

RUN_COLUMNS = ("qid", "doc_id", "rank", "score")
QRELS_COLUMNS = ("qid", "doc_id", "relevance")
_INT32 = np.iinfo(np.int32)


def as_run(run: Any, *, what: str = "run") -> pd.DataFrame:
    """The run as a DataFrame with ``qid, doc_id, score`` (``rank`` optional); a DataFrame in
    these names is returned as is, one in PyTerrier's, ir_measures' or ranx's names renamed.

    ``what`` names the run in errors (``"run 'bm25'"``).
    """
    return table_of(run, "run", what)


def as_qrels(qrels: Any, *, what: str = "qrels") -> pd.DataFrame:
    """Qrels as a DataFrame with ``qid, doc_id, relevance`` (from ``label``, ``score``... as
    :mod:`kolm_search.engine.interop` says); a DataFrame in these names is returned as is."""
    return table_of(qrels, "qrels", what)


def numeric_column(table: pd.DataFrame, column: str, what: str, *, finite: bool = False) -> npt.NDArray[np.float64]:
    """``table[column]`` as float64; a non-numeric or missing value (or, with ``finite``, an
    infinite one) raises naming the row and the value. A float64 column is returned as a view."""
    col = table[column]
    if isinstance(col.dtype, np.dtype) and col.dtype == np.float64:
        values = col.to_numpy()
    else:
        values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    bad = ~np.isfinite(values) if finite else np.isnan(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        kind = "non-finite" if finite and not np.isnan(values[row]) else "non-numeric or missing"
        raise FrameValidationError(f"{what} has a {kind} {column} at row {row}: {col.iloc[row]!r}")
    return values


def relevance_column(qrels: pd.DataFrame, what: str = "qrels") -> npt.NDArray[np.int64]:
    """The grades as int64; each must be an integer within int32's range."""
    col = qrels["relevance"]
    values = pd.to_numeric(col, errors="coerce").to_numpy(np.float64, na_value=np.nan)
    if isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu":  # exact (float64 rounds near 2**63); no NA here
        ints = col.to_numpy()
        bad = (ints < _INT32.min) | (ints > _INT32.max)
    else:
        bad = ~np.isfinite(values) | (np.mod(np.nan_to_num(values), 1) != 0) | (values < _INT32.min) | (values > _INT32.max)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise FrameValidationError(
            f"{what} relevance must be integers within [{_INT32.min}, {_INT32.max}]; row {row} has {col.iloc[row]!r}")
    return values.astype(np.int64)


def check_qrels(qrels: Any) -> tuple[pd.DataFrame, npt.NDArray[np.int64]]:
    """Qrels checked by the rules of :func:`~kolm_search.evaluate` (every reader of judgements
    that trains or scores on them calls this): ``(frame, grades int64 (n,))``.

    Raises :class:`~kolm_search.errors.FrameValidationError` for a table that is not qrels, a
    missing ``qid``/``doc_id`` (naming the row), a grade that is not an integer within int32
    (naming the row), or a document judged twice for one query (ids compared as strings;
    naming the first such query in sorted order; trec_eval refuses it too).
    """
    frame = as_qrels(qrels)
    check_ids(frame, "qrels")
    grades = relevance_column(frame)
    if len(frame) > 1:
        (q,), q_uniques = ids.encode([frame["qid"]], names=["qrels qid"], sort=True, as_str=True)
        (d,), d_uniques = ids.encode([frame["doc_id"]], names=["qrels doc_id"], as_str=True)
        twice = pd.Series(q * max(len(d_uniques), 1) + d).duplicated().to_numpy()
        if twice.any():
            query = q_uniques[int(q[twice].min())]
            raise FrameValidationError(f"qrels has a duplicate document for query {query!r} (trec_eval rejects it too)")
    return frame, grades


def check_ids(table: pd.DataFrame, what: str) -> None:
    """Raise naming the row when ``qid`` or ``doc_id`` holds a missing value."""
    for column in ("qid", "doc_id"):
        na = table[column].isna().to_numpy()
        if na.any():
            raise FrameValidationError(f"{what} {column} has a missing value at row {int(np.flatnonzero(na)[0])}")
