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
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search import ids
from kolm_search.errors import FrameValidationError, KolmTypeError, KolmValueError
from kolm_search.evaluation.self_hits import self_hit_mask, wants_self_hits_dropped
from kolm_search.runs import as_qrels, as_run, check_ids, numeric_column, relevance_column

__all__ = ["evaluate", "parse_metric", "ranking_order"]

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


def _descending_key(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """uint64 keys ordering rows by query ascending, then float32 score descending (-0.0 and
    0.0 equal, as trec_eval compares them)."""
    bits = (score32 + np.float32(0.0)).view(np.uint32)
    ascending = np.where(bits >> np.uint32(31), ~bits, bits | np.uint32(0x80000000))
    return (query.astype(np.uint64) << np.uint64(32)) | (~ascending).astype(np.uint64)


def ranking_order(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32], doc_ids: pd.Series,
                  ) -> npt.NDArray[np.int64]:
    """Row order by query ascending, score descending (compared as float32), then document id
    descending as a string (byte order): trec_eval's ranking.

    One stable sort of a packed (query, score) key; only the rows tied on it, which are few,
    have their ids read and compared.
    """
    key = _descending_key(query, score32)
    order = np.argsort(key, kind="stable")
    ranked = key[order]
    tied = np.flatnonzero(ranked[1:] == ranked[:-1])
    if tied.size:
        rows = np.unique(np.concatenate([tied, tied + 1]))  # every position of a run of equal keys
        run = np.cumsum(np.concatenate([[0], ranked[rows[1:]] != ranked[rows[:-1]]]))  # equal keys are adjacent
        names = [str(v) for v in doc_ids.iloc[order[rows]]]
        by_name, _ = pd.factorize(pd.Index(names, dtype=object), sort=True)
        order[rows] = order[rows][np.lexsort((-np.asarray(by_name), run))]
    return order


def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[str] | str = ("ndcg@10",),
    per_query: bool = False,
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
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
        Threads for this call (default: the usable cores).
    drop_self_hits : bool, optional
        Drop the run's documents whose id equals the query id before scoring (BEIR's
        evaluation); None follows the qrels' flag (on for BEIR datasets, see
        :mod:`kolm_search.evaluation.self_hits`).

    Returns
    -------
    dict of str to float, or DataFrame
        Query ids are compared, and returned, as strings, in sorted order.
    """
    from kolm_search._kernels import load

    names = [metrics] if isinstance(metrics, str) else list(metrics)
    if not names:
        raise KolmValueError("metrics must name at least one metric")
    parsed = [parse_metric(m) for m in names]
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, (int, np.integer)) or relevance_level < 1:
        raise KolmValueError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    if missing not in ("ignore", "zero"):
        raise KolmValueError(f"missing must be 'ignore' or 'zero', got {missing!r}")
    run_df, qrels_df = as_run(run), as_qrels(qrels)
    emptied: list[str] = []  # queries whose run held only self-hits: scored 0, as BEIR's pytrec_eval call does
    if wants_self_hits_dropped(qrels_df, drop_self_hits):
        hits = self_hit_mask(run_df)
        if hits.any():
            before = set(run_df["qid"].astype(str))
            run_df = run_df[~hits]
            emptied = sorted(before - set(run_df["qid"].astype(str)))
    check_ids(run_df, "run")
    check_ids(qrels_df, "qrels")
    score32 = numeric_column(run_df, "score", "run").astype(np.float32)
    rel = relevance_column(qrels_df)
    (run_q, qrels_q), q_uniques = ids.encode([run_df["qid"], qrels_df["qid"]], names=["run qid", "qrels qid"],
                                             sort=True, as_str=True)
    (qrels_d,), judged = ids.encode([qrels_df["doc_id"]], names=["qrels doc_id"], as_str=True)
    run_docs = ids.as_strings(run_df["doc_id"])
    run_judged = ids.lookup(run_docs, judged)  # the run's documents among the judged ones, -1 if not
    (run_d,), n_run_d, _ = ids.codes_within_groups([run_docs], [run_q], names=["run doc_id"],
                                                n_threads=n_threads)  # to find duplicates
    n_q = len(q_uniques)
    order = ranking_order(run_q, score32, run_docs)
    j_order = np.lexsort((-rel, qrels_q))
    r_count = np.bincount(run_q, minlength=n_q)
    j_count = np.bincount(qrels_q, minlength=n_q)
    kernels = load("metrics")
    values, status = kernels.evaluate_queries(
        np.concatenate([[0], np.cumsum(r_count)]), run_d[order], n_run_d, run_judged[order],
        np.concatenate([[0], np.cumsum(j_count)]), qrels_d[j_order], rel[j_order], len(judged),
        [kernels.METRIC_IDS[m] for m, _ in parsed], [k for _, k in parsed], int(relevance_level), n_threads=n_threads)
    for code, word in ((2, "run"), (3, "qrels")):
        if (status == code).any():
            q = q_uniques[int(np.flatnonzero(status == code)[0])]
            raise FrameValidationError(f"{word} has a duplicate document for query {q!r} (trec_eval rejects it too)")
    keep = (r_count > 0) & (j_count > 0)
    if missing == "zero":
        keep |= j_count > 0
    if emptied:
        keep |= np.isin(np.asarray(q_uniques, dtype=object), emptied) & (j_count > 0)
    table = pd.DataFrame(values[keep], columns=names)
    table.insert(0, "qid", np.asarray(q_uniques, dtype=object)[keep])
    if per_query:
        return table
    if table.empty:
        return {name: float("nan") for name in names}
    return {name: float(table[name].mean()) for name in names}
