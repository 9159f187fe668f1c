"""Column names and table kinds of the peers (PyTerrier, ir_measures/ir_datasets, ranx, BEIR),
mapped to the run and qrels schema; :mod:`kolm_search.engine.interop` documents the table and holds the
conversions the other way. Used by :func:`~kolm_search.engine.runs.as_run` / ``as_qrels``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import pandas as pd

from kolm_search._extras import peer_isinstance
from kolm_search.errors import FrameValidationError, KolmTypeError

__all__ = ["Kind", "QRELS_NAMES", "RUN_NAMES", "table_of"]

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
    if peer_isinstance(obj, "ranx", "Run", "Qrels"):
        return _from_nested(obj.to_dict(), _VALUE[kind], what)
    if peer_isinstance(obj, "polars", "LazyFrame"):
        obj = obj.collect()
    if peer_isinstance(obj, "polars", "DataFrame") or peer_isinstance(obj, "pyarrow", "Table", "RecordBatch"):
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
