"""``evaluate``: trec_eval's measures over run and qrels DataFrames, in one kernel pass.

Metric names (case-insensitive; trec_eval spellings accepted too):

================  =================  ======================================================
name              trec_eval          meaning
================  =================  ======================================================
``ndcg@k``        ``ndcg_cut_k``     nDCG at k, graded gains (the relevance level)
``ndcg``          ``ndcg``           nDCG over the whole ranking
``map``           ``map``            mean average precision
``map@k``         ``map_cut_k``      AP over the top k, divided by the number relevant
``mrr``           ``recip_rank``     reciprocal rank of the first relevant document
``precision@k``   ``P_k``            relevant in the top k, over k
``recall@k``      ``recall_k``       relevant in the top k, over the number relevant
``r-precision``   ``Rprec``          precision at R = number relevant
``hit_rate@k``    ``success_k``      1 when a relevant document is in the top k
``bpref``         ``bpref``          binary preference (Buckley & Voorhees, SIGIR 2004)
================  =================  ======================================================

Exactly trec_eval's semantics (the test oracle is pytrec_eval): documents ranked by score
compared as float32, descending, ties by document id descending (byte order; the run's own
``rank`` column is ignored); relevant means ``relevance >= relevance_level``; duplicate
documents for one query are an error; a query is evaluated when it is in both the run and
the qrels, and queries of the qrels missing from the run are skipped (``missing="ignore"``,
trec_eval's default) or count as zero (``missing="zero"``, trec_eval ``-c``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError

__all__ = ["as_qrels_frame", "as_run_frame", "evaluate", "parse_metric"]

_ALIASES = {
    "ndcg_cut": "ndcg_cut", "ndcg": "ndcg_cut",
    "map_cut": "map_cut", "map": "map_cut",
    "p": "P", "precision": "P",
    "recall": "recall",
    "success": "success", "hit_rate": "success", "hitrate": "success", "hits": "success",
}
_PLAIN = {
    "ndcg": "ndcg", "map": "map", "mrr": "recip_rank", "recip_rank": "recip_rank",
    "r-precision": "Rprec", "rprec": "Rprec", "r_precision": "Rprec", "bpref": "bpref",
}


def parse_metric(name: str) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg_cut", 10)``; ``"mrr"`` -> ``("recip_rank", 0)``.

    Raises ``KolmValueError`` naming the metric for anything unknown.
    """
    if not isinstance(name, str):
        raise KolmTypeError(f"metric names must be strings, got {name!r}")
    key = name.strip().lower()
    if key in _PLAIN:
        return _PLAIN[key], 0
    match = re.fullmatch(r"([a-z_\-]+?)(?:@|_|\.)(\d+)", key)
    if match and match.group(1) in _ALIASES:
        k = int(match.group(2))
        if k <= 0:
            raise KolmValueError(f"metric {name!r}: the cutoff must be a positive integer")
        return _ALIASES[match.group(1)], k
    raise KolmValueError(
        f"unknown metric {name!r}; use ndcg@k, ndcg, map, map@k, mrr, precision@k, recall@k, "
        "r-precision, hit_rate@k or bpref"
    )


def _from_nested(data: Mapping[Any, Mapping[Any, Any]], value: str) -> pd.DataFrame:
    rows = [(q, d, v) for q, docs in data.items() for d, v in docs.items()]
    return pd.DataFrame(rows, columns=["qid", "doc_id", value])


def _as_frame(obj: Any, attr: str, value: str, what: str) -> pd.DataFrame:
    if hasattr(obj, attr) and isinstance(getattr(obj, attr), pd.DataFrame):
        obj = getattr(obj, attr)
    if isinstance(obj, Mapping):
        obj = _from_nested(obj, value)
    if not isinstance(obj, pd.DataFrame):
        raise KolmTypeError(f"{what} must be a DataFrame (qid, doc_id, {value}), got {type(obj).__name__}")
    missing = [c for c in ("qid", "doc_id", value) if c not in obj.columns]
    if missing:
        raise FrameValidationError(f"{what} lacks column(s) {missing}; has {list(obj.columns)}")
    return obj


def as_run_frame(run: Any) -> pd.DataFrame:
    """A run as a DataFrame ``qid, doc_id, score`` (from a DataFrame, BatchResult or nested dict)."""
    return _as_frame(run, "run", "score", "run")


def as_qrels_frame(qrels: Any) -> pd.DataFrame:
    """Qrels as a DataFrame ``qid, doc_id, relevance`` (from a DataFrame, Dataset or nested dict)."""
    return _as_frame(qrels, "qrels", "relevance", "qrels")


def _as_str(col: pd.Series, what: str) -> pd.Series:
    if col.dtype == object:  # Python strs read in place (no missing value possible), else pandas below
        from kolm_search.interning import object_strings

        arr = object_strings(col.to_numpy())
        if arr is not None:
            return pd.Series(pd.array(arr, dtype="str"), index=col.index, name=col.name, copy=False)
    if col.isna().any():
        row = int(np.flatnonzero(col.isna().to_numpy())[0])
        raise FrameValidationError(f"{what} has a missing value at row {row}")
    if pd.api.types.is_string_dtype(col.dtype) and not isinstance(col.dtype, pd.CategoricalDtype):
        return col.astype("str") if col.dtype != "str" else col
    return col.astype("str")


def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[str] | str = ("ndcg@10",),
    per_query: bool = False,
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
) -> dict[str, float] | pd.DataFrame:
    """Evaluate a run against qrels with trec_eval's semantics.

    Parameters
    ----------
    run : DataFrame ``qid, doc_id, score`` (or a BatchResult, or ``{qid: {doc: score}}``)
    qrels : DataFrame ``qid, doc_id, relevance`` (or a Dataset, or ``{qid: {doc: rel}}``)
    metrics : str or list of str
        See the module docstring.
    per_query : bool
        Return a DataFrame with one row per evaluated query (``qid`` plus one column per
        metric) instead of the dict of means.
    relevance_level : int, default 1
        Minimum relevance counted as relevant by binary measures (nDCG uses graded gains).
    missing : {"ignore", "zero"}
        Queries of the qrels absent from the run: skipped, or scored zero.
    n_threads : int, optional
        Numba threads for this call.

    Returns
    -------
    dict of str to float, or DataFrame
    """
    from kolm_search._kernels import numba_threads
    from kolm_search._kernels.grouping import counting_order, intern_groups
    from kolm_search._kernels.metrics import METRIC_IDS, evaluate_groups
    from kolm_search.interning import factorize, string_buffers

    names = [metrics] if isinstance(metrics, str) else list(metrics)
    if not names:
        raise KolmValueError("metrics must name at least one metric")
    parsed = [parse_metric(m) for m in names]
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, (int, np.integer)) or relevance_level < 1:
        raise KolmValueError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    if missing not in ("ignore", "zero"):
        raise KolmValueError(f"missing must be 'ignore' or 'zero', got {missing!r}")
    run_df, qrels_df = as_run_frame(run), as_qrels_frame(qrels)
    score = pd.to_numeric(run_df["score"], errors="coerce")
    if score.isna().any():
        row = int(np.flatnonzero(score.isna().to_numpy())[0])
        raise FrameValidationError(f"run has a non-numeric or missing score at row {row}: {run_df['score'].iloc[row]!r}")
    rel_num = pd.to_numeric(qrels_df["relevance"], errors="coerce")
    if rel_num.isna().any() or not np.all(np.mod(rel_num.to_numpy(np.float64), 1) == 0):
        bad = rel_num.isna() | (np.mod(rel_num.fillna(0.5).to_numpy(np.float64), 1) != 0)
        row = int(np.flatnonzero(np.asarray(bad))[0])
        raise FrameValidationError(f"qrels relevance must be integers; row {row} has {qrels_df['relevance'].iloc[row]!r}")
    rel = rel_num.to_numpy(np.int64)
    n_run = len(run_df)
    qids = pd.concat([_as_str(run_df["qid"], "run qid"), _as_str(qrels_df["qid"], "qrels qid")], ignore_index=True)
    docs = pd.concat([_as_str(run_df["doc_id"], "run doc_id"), _as_str(qrels_df["doc_id"], "qrels doc_id")], ignore_index=True)
    q_codes, q_uniques = factorize(qids, sort=True, name="qid")
    order, ptr = counting_order(q_codes, np.int64(len(q_uniques)))
    buffers = string_buffers(docs)
    assert buffers is not None
    _, offsets, data = buffers
    metric_ids = np.array([METRIC_IDS[m] for m, _ in parsed], np.int64)
    cutoffs = np.array([k for _, k in parsed], np.int64)
    max_level = int(max(rel.max(initial=0), 0))
    with numba_threads(n_threads) as threads:
        chunks = 1 if len(q_uniques) < 64 else min(len(q_uniques), 4 * threads)
        local, _, _ = intern_groups(order, ptr, offsets, data, chunks)
        values, status = evaluate_groups(order, ptr, local, n_run, score.to_numpy(np.float32), rel, offsets, data,
                                         metric_ids, cutoffs, relevance_level, max_level, chunks)
    for code, word in ((2, "run"), (3, "qrels")):
        if (status == code).any():
            q = q_uniques[int(np.flatnonzero(status == code)[0])]
            raise FrameValidationError(f"{word} has a duplicate document for query {q!r} (trec_eval rejects it too)")
    keep = status == 0
    if missing == "zero":
        in_qrels = np.zeros(len(q_uniques), bool)
        in_qrels[np.unique(q_codes[n_run:])] = True
        keep = keep | in_qrels
    table = pd.DataFrame(values[keep], columns=names)
    table.insert(0, "qid", np.asarray(q_uniques)[keep])
    if per_query:
        return table
    if table.empty:
        return {name: float("nan") for name in names}
    return {name: float(table[name].mean()) for name in names}


