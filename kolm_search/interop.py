"""Runs and qrels in the shapes of PyTerrier, ir_measures/ir_datasets and ranx, in and out.

In: :func:`~kolm_search.runs.as_run` and :func:`~kolm_search.runs.as_qrels` (so ``evaluate``,
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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError

__all__ = ["QRELS_NAMES", "RUN_NAMES", "table_of", "to_ir_measures", "to_pyterrier", "to_ranx", "to_trec_dict"]

Kind = Literal["run", "qrels"]

_QID = {"qid": "kolm_search, PyTerrier", "query_id": "ir_measures, ir_datasets", "q_id": "ranx",
        "query-id": "BEIR"}
_DOC = {"doc_id": "kolm_search, ir_measures, ranx", "docno": "PyTerrier", "corpus-id": "BEIR"}
RUN_NAMES: dict[str, dict[str, str]] = {"qid": _QID, "doc_id": _DOC, "score": {"score": "all"},
                                         "rank": {"rank": "kolm_search, PyTerrier"}}
"""Our run column -> {accepted name: who uses it}."""
QRELS_NAMES: dict[str, dict[str, str]] = {"qid": _QID, "doc_id": _DOC,
                                           "relevance": {"relevance": "kolm_search, ir_measures", "label": "PyTerrier"}}
"""Our qrels column -> {accepted name: who uses it}; ``score`` (ranx, BEIR) is the grade's last resort."""
_REQUIRED = {"run": ("qid", "doc_id", "score"), "qrels": ("qid", "doc_id", "relevance")}
_VALUE = {"run": "score", "qrels": "relevance"}


def _module(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def _from_nested(data: Mapping[Any, Any], value: str, what: str) -> pd.DataFrame:
    rows: list[tuple[Any, Any, Any]] = []
    for q, docs in data.items():
        if not isinstance(docs, Mapping):
            raise KolmTypeError(f"{what} as nested dicts needs {{qid: {{doc_id: {value}}}}}; "
                                f"query {q!r} maps to {type(docs).__name__}")
        rows.extend((q, d, v) for d, v in docs.items())
    return pd.DataFrame(rows, columns=["qid", "doc_id", value])


def _from_records(items: Iterable[Any], what: str) -> pd.DataFrame | None:
    """A list or iterator of named tuples as a frame; None when ``items`` is not one."""
    iterator: Iterator[Any] = iter(items)
    first = next(iterator, None)
    if first is None:
        raise FrameValidationError(f"{what} is an empty sequence; give a DataFrame (it may have no rows)")
    fields = getattr(first, "_fields", None)
    if not isinstance(first, tuple) or not fields:
        return None
    rows = [first, *iterator]
    for i, row in enumerate(rows):
        if getattr(row, "_fields", None) != fields:
            raise FrameValidationError(f"{what} item {i} is not a {type(first).__name__} like item 0: {row!r}")
    return pd.DataFrame.from_records(rows, columns=list(fields))


def _to_pandas(obj: Any, kind: Kind, what: str) -> Any:
    """``obj`` as a pandas DataFrame when it is one of the foreign forms; else ``obj`` unchanged."""
    if isinstance(obj, pd.DataFrame):
        return obj
    module = _module(obj)
    if module == "ranx" and callable(getattr(obj, "to_dict", None)):
        return _from_nested(obj.to_dict(), _VALUE[kind], what)
    if module == "polars":
        if type(obj).__name__ == "LazyFrame":
            obj = obj.collect()
        if callable(getattr(obj, "to_pandas", None)):
            return obj.to_pandas()
    if module == "pyarrow" and type(obj).__name__ in ("Table", "RecordBatch"):
        return obj.to_pandas()
    inner = getattr(obj, kind, None)
    if isinstance(inner, pd.DataFrame):  # BatchResult.run, Dataset.qrels
        return inner
    if isinstance(obj, Mapping):
        return _from_nested(obj, _VALUE[kind], what)
    if isinstance(obj, (list, tuple, Iterator)) and not isinstance(obj, (str, bytes)):
        frame = _from_records(obj, what)
        if frame is not None:
            return frame
    return obj


def _accepted(kind: Kind) -> str:
    names = RUN_NAMES if kind == "run" else QRELS_NAMES
    parts = [f"{ours}: " + ", ".join(f"{n} ({who})" for n, who in aliases.items()) for ours, aliases in names.items()]
    if kind == "qrels":
        parts[-1] += ", score (ranx, BEIR; when neither of the others is there)"
    return "; ".join(parts)


def _renaming(columns: list[Any], kind: Kind, what: str) -> dict[Any, str]:
    """``{found name: our name}`` for the columns that need renaming; raises when a required
    column is missing or two columns claim one role."""
    names = RUN_NAMES if kind == "run" else QRELS_NAMES
    present = set(columns)
    rename: dict[Any, str] = {}
    missing = []
    for ours, aliases in names.items():
        found = [a for a in aliases if a in present]
        if kind == "qrels" and ours == "relevance" and not found and "score" in present:
            found = ["score"]
        if len(found) > 1:
            raise FrameValidationError(f"{what} has {len(found)} columns for {ours}: {found}; keep one (columns: "
                                       f"{list(columns)})")
        if not found:
            if ours in _REQUIRED[kind]:
                missing.append(ours)
            continue
        if found[0] != ours:
            rename[found[0]] = ours
    if missing:
        raise FrameValidationError(f"{what} lacks column(s) {missing}; has {list(columns)}; accepted names: "
                                   f"{_accepted(kind)}")
    return rename


def table_of(obj: Any, kind: Kind, what: str | None = None) -> pd.DataFrame:
    """``obj`` as a pandas DataFrame with our column names (``qid, doc_id, score[, rank]`` for a
    run, ``qid, doc_id, relevance`` for qrels); a DataFrame already in our names is returned as
    is, one in another's names renamed (not copied). Values are not checked here.

    Raises
    ------
    KolmTypeError
        ``obj`` is none of the accepted forms.
    FrameValidationError
        A required column is missing (the message lists the columns found and every accepted
        name) or two columns claim one role.
    """
    what = what or kind
    frame = _to_pandas(obj, kind, what)
    if not isinstance(frame, pd.DataFrame):
        raise KolmTypeError(f"{what} must be a DataFrame with {', '.join(_REQUIRED[kind])} (or a ranx "
                            f"{'Run' if kind == 'run' else 'Qrels'}, nested dicts, a polars or pyarrow table); "
                            f"got {type(obj).__module__}.{type(obj).__name__}")
    rename = _renaming(list(frame.columns), kind, what)
    return frame.rename(columns=rename) if rename else frame


def _checked(obj: Any, kind: Kind) -> pd.DataFrame:
    """Our frame with string ids, float64 scores or int64 grades, no missing ids, no duplicates."""
    from kolm_search.runs import check_ids, numeric_column, relevance_column

    frame = table_of(obj, kind)
    check_ids(frame, kind)
    out = pd.DataFrame({"qid": frame["qid"].astype(str).to_numpy(object),
                        "doc_id": frame["doc_id"].astype(str).to_numpy(object)})
    if kind == "run":
        out["score"] = numeric_column(frame, "score", kind, finite=True)
    else:
        out["relevance"] = relevance_column(frame, kind)
    dup = out.duplicated(["qid", "doc_id"])
    if dup.any():
        row = out[dup].iloc[0]
        raise FrameValidationError(f"{kind} has document {row.doc_id!r} twice for query {row.qid!r}")
    return out


def _resolve(obj: Any, kind: Literal["auto", "run", "qrels"]) -> tuple[Kind, pd.DataFrame]:
    """The kind (``"auto"`` decided from the object) and the checked frame."""
    if kind not in ("auto", "run", "qrels"):
        raise KolmValueError(f"kind must be 'auto', 'run' or 'qrels', got {kind!r}")
    if kind != "auto":
        return kind, _checked(obj, kind)
    if _module(obj) == "ranx":
        found: Kind = "qrels" if type(obj).__name__ == "Qrels" else "run"
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
    return found, _checked(obj, found)


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
    from kolm_search.adapters._extras import require

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
    """PyTerrier's frame: a run as ``qid, docno, score, rank`` sorted by query then descending
    score (``rank`` zero-based in that order, PyTerrier's ``add_ranks``); qrels as
    ``qid, docno, label``. Ids are strings."""
    k, frame = _resolve(table, kind)
    frame = frame.rename(columns={"doc_id": "docno"})
    if k == "qrels":
        return frame.rename(columns={"relevance": "label"})
    frame = frame.sort_values(["qid", "score"], ascending=[True, False], kind="stable").reset_index(drop=True)
    frame["rank"] = frame.groupby("qid", sort=False).cumcount().to_numpy(np.int64)
    return frame
