"""Runs and qrels in the shapes of PyTerrier, ir_measures/ir_datasets and ranx, in and out.

In: :func:`~kolm_search.engine.runs.as_run` and :func:`~kolm_search.engine.runs.as_qrels` (so ``evaluate``,
``compare``, ``fuse``, ``Experiment``, ``write_run``, ...) take through :func:`table_of`:

- pandas DataFrames whose columns use any of these names (other columns are kept, unused):

  =============  ===================  ===================  =================  ====================
  ours           PyTerrier            ir_measures,         ranx               BEIR tsv
                                      ir_datasets
  =============  ===================  ===================  =================  ====================
  ``qid``        ``qid``              ``query_id``         ``q_id``           ``query-id``
  ``doc_id``     ``docno``            ``doc_id``           ``doc_id``         ``corpus-id``
  ``score``      ``score``            ``score``            ``score``
  ``rank``       ``rank`` (0-based)
  ``relevance``  ``label``            ``relevance``        ``score`` (qrels)  ``score`` (qrels)
  =============  ===================  ===================  =================  ====================

  Two names for one column (``label`` and ``relevance``) are refused as ambiguous; a qrels
  table takes ``score`` as its grade only when it has neither ``relevance`` nor ``label``.
  PyTerrier's ``docid`` (Terrier's internal number) is not a document id and is ignored.
- ranx ``Run`` and ``Qrels``; nested dicts ``{qid: {doc_id: value}}`` (pytrec_eval, ranx);
  polars DataFrames and LazyFrames and pyarrow Tables and RecordBatches (recognised by their
  module, so neither is imported for anything else); lists of named tuples (ir_datasets'
  ``qrels_iter()``, ir_measures' ``ScoredDoc``/``Qrel``).

Out: :func:`to_ranx`, :func:`to_ir_measures`, :func:`to_pyterrier`, :func:`to_trec_dict`.
Each keeps the rows and their float64 scores; :func:`to_pyterrier` also keeps a given
``rank`` column's order (ranks are derived from scores only for a run without one).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search._extras import peer_isinstance
from kolm_search.engine.peer_columns import QRELS_NAMES, RUN_NAMES, Kind, _to_pandas, table_of
from kolm_search.engine.runs import check_ids, numeric_column, relevance_column
from kolm_search.errors import FrameValidationError, KolmValueError

__all__ = ["QRELS_NAMES", "RUN_NAMES", "table_of", "to_ir_measures", "to_pyterrier", "to_ranx", "to_trec_dict"]


def _checked(obj: Any, kind: Kind, *, keep_rank: bool = False) -> pd.DataFrame:
    """Our frame with string ids, float64 scores or int64 grades, no missing ids, no duplicates
    (and, with ``keep_rank``, a run's own ``rank`` column as float64 when it has one)."""
    frame = table_of(obj, kind)
    check_ids(frame, kind)
    out = pd.DataFrame({"qid": frame["qid"].astype(str).to_numpy(object),
                        "doc_id": frame["doc_id"].astype(str).to_numpy(object)})
    if kind == "run":
        out["score"] = numeric_column(frame, "score", kind, finite=True)
        if keep_rank and "rank" in frame.columns:
            out["rank"] = numeric_column(frame, "rank", kind, finite=True)
    else:
        out["relevance"] = relevance_column(frame, kind)
    dup = out.duplicated(["qid", "doc_id"])
    if dup.any():
        row = out[dup].iloc[0]
        raise FrameValidationError(f"{kind} has document {row.doc_id!r} twice for query {row.qid!r}")
    return out


def _resolve(obj: Any, kind: Literal["auto", "run", "qrels"], *, keep_rank: bool = False) -> tuple[Kind, pd.DataFrame]:
    """The kind (``"auto"`` decided from the object) and the checked frame."""
    if kind not in ("auto", "run", "qrels"):
        raise KolmValueError(f"kind must be 'auto', 'run' or 'qrels', got {kind!r}")
    if kind != "auto":
        return kind, _checked(obj, kind, keep_rank=keep_rank)
    if peer_isinstance(obj, "ranx", "Run", "Qrels"):
        found: Kind = "qrels" if peer_isinstance(obj, "ranx", "Qrels") else "run"
    elif isinstance(getattr(obj, "run", None), pd.DataFrame):
        found = "run"
    elif isinstance(getattr(obj, "qrels", None), pd.DataFrame):
        found = "qrels"
    else:
        obj = _to_pandas(obj, "run", "table")
        cols = set(map(str, getattr(obj, "columns", ())))
        graded = bool(cols & set(QRELS_NAMES["relevance"]))
        if graded and "score" in cols:
            raise KolmValueError("the table has both a score and a relevance column: pass kind='run' or 'qrels'")
        found = "qrels" if graded else "run"
    return found, _checked(obj, found, keep_rank=keep_rank)


def to_trec_dict(table: Any, kind: Literal["auto", "run", "qrels"] = "auto") -> dict[str, dict[str, Any]]:
    """``{qid: {doc_id: score}}`` (float) or ``{qid: {doc_id: grade}}`` (int): pytrec_eval's and
    ranx's input. ``kind="auto"`` reads qrels from a table with a grade column and no score."""
    k, frame = _resolve(table, kind)
    value = frame.columns[2]
    cast = float if k == "run" else int
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in zip(frame["qid"], frame["doc_id"], frame[value].to_numpy().tolist(), strict=True):
        out.setdefault(q, {})[d] = cast(v)
    return out


def to_ranx(table: Any, kind: Literal["auto", "run", "qrels"] = "auto", *, name: str | None = None) -> Any:
    """A ranx ``Run`` (or ``Qrels``) of the same rows; needs ranx (extra ``ranx``)."""
    from kolm_search._extras import require

    ranx = require("ranx", "ranx")
    k, frame = _resolve(table, kind)
    nested = to_trec_dict(frame, k)
    return ranx.Qrels(nested) if k == "qrels" else ranx.Run(nested, name=name)


def to_ir_measures(table: Any, kind: Literal["auto", "run", "qrels"] = "auto") -> pd.DataFrame:
    """ir_measures' frame: ``query_id, doc_id, score`` (run) or ``query_id, doc_id, relevance``
    (qrels), string ids, float64 scores or int64 grades (what ``ir_measures.calc_aggregate``
    and ir_datasets' records take)."""
    return _resolve(table, kind)[1].rename(columns={"qid": "query_id"})


def to_pyterrier(table: Any, kind: Literal["auto", "run", "qrels"] = "auto") -> pd.DataFrame:
    """PyTerrier's frame: a run as ``qid, docno, score, rank``, qrels as ``qid, docno, label``;
    ids are strings.

    A run is sorted by query, then by its own ``rank`` column when it has one (equal ranks in
    row order), else by descending score (equal scores in row order, PyTerrier's
    ``add_ranks``); ``rank`` is zero-based in that order. So a given rank order, ties
    included, survives the conversion (``fuse``, which reads ``rank`` when every run has one,
    ranks the converted run as the original); ranks are derived from scores only where none
    are given. A missing or non-finite rank is an error naming its row.
    """
    k, frame = _resolve(table, kind, keep_rank=True)
    frame = frame.rename(columns={"doc_id": "docno"})
    if k == "qrels":
        return frame.rename(columns={"relevance": "label"})
    by, ascending = (["qid", "rank"], [True, True]) if "rank" in frame.columns else (["qid", "score"], [True, False])
    frame = frame.sort_values(by, ascending=ascending, kind="stable").reset_index(drop=True)
    frame["rank"] = frame.groupby("qid", sort=False).cumcount().to_numpy(np.int64)
    return frame
