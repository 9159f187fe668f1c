"""``evaluate``: trec_eval's measures (and ir_measures') over run and qrels DataFrames, in one kernel pass.

Metric names (see :mod:`kolm_search.evaluation.measures`): ir_measures names and objects,
trec_eval and kolm_search spellings, all case-insensitive. Computed natively:

======================  =====================  ==================================================
ir_measures             trec_eval / ours       meaning
======================  =====================  ==================================================
``nDCG@k``, ``nDCG``    ``ndcg_cut_k``         nDCG, graded gains (the grades, or ``gains=``)
``AP``, ``AP@k``        ``map``, ``map@k``     average precision (over the top k, / number relevant)
``RR``, ``RR@k``        ``mrr``, ``mrr@k``     reciprocal rank of the first relevant document
``P@k``                 ``P_k``, precision@k   relevant in the top k, over k
``R@k``                 ``recall@k``           relevant in the top k, over the number relevant
``Rprec``               ``r-precision``        precision at R = number relevant
``Success@k``           ``hit_rate@k``         1 when a relevant document is in the top k
``Bpref``               ``bpref``              binary preference (Buckley & Voorhees, SIGIR 2004)
``Judged@k``            ``judged@k``           share of the top k (or all) that is judged
``NumRet``              ``num_ret``            documents retrieved (summed over queries)
``NumRelRet``           ``num_rel_ret``        relevant documents retrieved (summed)
``NumRel``              ``num_rel``            relevant documents judged (summed)
``ERR@k``                                      gdeval's expected reciprocal rank (grades 0..4)
``RBP(p=.8,rel=1)``                            rank-biased precision, binary relevance
``infAP``               ``infAP``              trec_eval's inferred AP (grade < 0: pooled, unjudged)
======================  =====================  ==================================================

and the rest of trec_eval's ``all_trec`` by its names: ``gm_map`` and ``gm_bpref`` (geometric
means; per query the log), ``iprec_at_recall_0.10`` (interpolated precision at a recall level)
and ``11pt_avg``, ``set_P``, ``set_recall``, ``set_F``, ``set_map``, ``set_relative_P`` (of the
retrieved set), ``relative_P_k``, ``Rprec_mult_0.20``, ``utility`` (trec_eval's default
coefficients), ``binG``, ``G``, ``ndcg_rel``, ``Rndcg``, and the counts ``num_q`` and
``num_nonrel_judged_ret`` (summed).

Also natively, by ir_measures' names: ``IPrec@r``, ``SetP`` (``relative=True``), ``SetR``,
``SetF`` (``beta=``), ``NumQ``, ``nDCG(dcg='exp-log2')@k``; and ``DCG@k`` (also ``dcg='exp-log2'``)
and BEIR's capped recall ``R_cap@k`` (trec_eval's ``relative_P``), which ir_measures lacks. Over
subtopic qrels (a ``subtopic`` or ``iteration`` column), ``alpha_nDCG@k``, ``alpha_DCG@k``,
``ERR_IA@k`` and ``nERR_IA@k`` as ndeval computes them (:mod:`kolm_search.evaluation.diversity`).

``rel=`` sets the relevance level of one measure (``P(rel=2)@5`` beside ``P@5``; default the
call's ``relevance_level``), ``judged_only=True`` ranks only judged documents (trec_eval
``-J``), ``gains={grade: gain}`` remaps nDCG's gains. Any other ir_measures measure is
computed by ir_measures (extra ``measures``) on the same ranking. ``hits@k`` is refused (it
means the number of relevant documents in ranx); use ``success@k``.

Exactly trec_eval's semantics (the test oracles are pytrec_eval and ir_measures): documents
ranked by score compared as float32, descending, ties by document id descending (byte order;
the run's own ``rank`` column is ignored) -- one ranking for every measure, also those that
ir_measures computes with other tools; relevant means ``relevance >= rel``; duplicate
documents for one query are an error; a query is evaluated when it is in both the run and
the qrels, and queries of the qrels missing from the run are skipped (``missing="ignore"``,
trec_eval's default) or count as zero (``missing="zero"``, trec_eval ``-c``, ir_measures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from kolm_search._params import boolean
from kolm_search.engine import ids
from kolm_search.engine.arrow_strings import lookup_within_groups, string_ranks
from kolm_search.engine.runs import as_run, check_ids, numeric_column
from kolm_search.evaluation.measure_pass import (
    CodedPair,
    check_grades,
    measure,
    per_query_frame,
    prepare_qrels,
    ranking_order,
    settings,
)
from kolm_search.evaluation.measures import aggregate, parse_measure
from kolm_search.evaluation.self_hits import self_hit_mask, wants_self_hits_dropped

__all__ = ["evaluate", "parse_metric", "ranking_order"]


def parse_metric(name: Any) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg_cut", 10)``; ``"mrr"`` -> ``("recip_rank", 0)``; a measure
    only ir_measures computes -> ``("", 0)``. See :func:`~kolm_search.evaluation.measures.parse_measure`.

    Raises ``KolmValueError`` naming the metric for anything unknown.
    """
    spec = parse_measure(name)
    return spec.kind, spec.cutoff


@overload
def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[Any] | str | Any = ...,
    per_query: Literal[False] = ...,
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
    judged_only: bool = False,
) -> dict[str, float]: ...
@overload
def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[Any] | str | Any,
    per_query: Literal[True],
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
    judged_only: bool = False,
) -> pd.DataFrame: ...
@overload
def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[Any] | str | Any = ...,
    *,
    per_query: Literal[True],
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
    judged_only: bool = False,
) -> pd.DataFrame: ...
@overload
def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[Any] | str | Any = ...,
    per_query: bool = ...,
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
    judged_only: bool = False,
) -> dict[str, float] | pd.DataFrame: ...  # a bool known only at run time
def evaluate(
    run: Any,
    qrels: Any,
    metrics: Sequence[Any] | str | Any = ("ndcg@10",),
    per_query: bool = False,
    *,
    relevance_level: int = 1,
    missing: Literal["ignore", "zero"] = "ignore",
    n_threads: int | None = None,
    drop_self_hits: bool | None = None,
    judged_only: bool = False,
) -> dict[str, float] | pd.DataFrame:
    """Evaluate a run against qrels with trec_eval's semantics.

    Two call forms, each with one return type: ``evaluate(run, qrels, metrics)`` returns the
    ``dict`` of each metric's value over the queries; ``evaluate(run, qrels, metrics,
    per_query=True)`` returns a ``DataFrame`` of each query's values. ``per_query`` must be a
    ``bool`` (anything else is a :class:`~kolm_search.errors.ParameterError`).

    Parameters
    ----------
    run : DataFrame ``qid, doc_id, score`` (or a BatchResult, or ``{qid: {doc: score}}``)
    qrels : DataFrame ``qid, doc_id, relevance`` (or a Dataset, or ``{qid: {doc: rel}}``)
    metrics : str, ir_measures Measure, or a list of them
        ir_measures names (``nDCG@10``, ``AP``, ``RR@10``, ``P(rel=2)@5``, ``R@100``, ``Rprec``,
        ``Bpref``, ``Success@10``, ``Judged@10``, ``NumRet``, ``NumRel``, ``NumRelRet``,
        ``ERR@10``, ``RBP(p=0.8,rel=1)``, ``infAP``, parameters ``rel``, ``judged_only``, ``gains``) or
        objects, trec_eval names (``ndcg_cut_10``, ``P_5``, ``map``, ``recip_rank``, ...) and
        ``ndcg@10, map@k, mrr, precision@k, recall@k, r-precision, hit_rate@k, success@k``;
        any other ir_measures measure goes through ir_measures (extra ``measures``). ``hits@k``
        is refused (ranx counts relevant documents with it). See the module docstring.
    per_query : bool
        Return a DataFrame with one row per evaluated query (``qid`` plus one column per
        metric) instead of the dict of means.
    relevance_level : int, default 1
        Minimum relevance counted as relevant by binary measures that have no ``rel=`` of
        their own (nDCG uses graded gains).
    missing : {"ignore", "zero"}
        Queries of the qrels absent from the run: skipped, or scored zero.
    n_threads : int, optional
        Threads for this call (default: the usable cores).
    drop_self_hits : bool, optional
        Drop the run's documents whose id equals the query id before scoring (BEIR's
        evaluation); None follows the qrels' flag (on for BEIR datasets, see
        :mod:`kolm_search.evaluation.self_hits`).
    judged_only : bool
        Rank only judged documents (grade >= 0) for every measure, as trec_eval ``-J`` does
        (a measure's own ``judged_only=True`` does it for that measure).

    Returns
    -------
    dict of str to float (``per_query=False``)
        Keyed by each metric as given (an ir_measures object by its ``str()``); the counts
        ``NumRet``, ``NumRel``, ``NumRelRet`` (``num_q``, ``num_nonrel_judged_ret``) are summed
        over queries, ``gm_map`` and ``gm_bpref`` are geometric means (their per-query values
        are logs, as trec_eval's), the rest averaged. No query evaluated (run and qrels share
        none): each mean NaN, each count 0.
    DataFrame (``per_query=True``)
        One row per evaluated query, sorted by ``qid`` (``str``, the ids compared as strings),
        then one ``float64`` column per metric, named as the dict's keys.
    """
    per_query = boolean("per_query", per_query)
    specs, keys = settings(metrics, relevance_level, missing)
    run_df = as_run(run)
    qrels_df, rel, subtopics = prepare_qrels(qrels, specs)
    emptied: list[str] = []  # queries whose run held only self-hits: scored 0, as BEIR's pytrec_eval call does
    if wants_self_hits_dropped(qrels_df, drop_self_hits):
        hits = self_hit_mask(run_df)
        if hits.any():
            before = set(run_df["qid"].astype(str))
            run_df = run_df[~hits]
            emptied = sorted(before - set(run_df["qid"].astype(str)))
    check_ids(run_df, "run")
    score32 = numeric_column(run_df, "score", "run").astype(np.float32)
    check_grades(specs, rel)
    (run_q, qrels_q), q_uniques = ids.encode([run_df["qid"], qrels_df["qid"]], names=["run qid", "qrels qid"],
                                             sort=True, as_str=True)
    (qrels_d,), judged = ids.encode([qrels_df["doc_id"]], names=["qrels doc_id"], as_str=True)
    run_docs = ids.as_strings(run_df["doc_id"])
    run_judged = lookup_within_groups(run_docs, run_q, judged, qrels_q, qrels_d, n_threads=n_threads)  # per query
    if run_judged is None:  # (the kernel reads only a query's own judged documents) else among all judged ones
        run_judged = ids.lookup(run_docs, judged)
    (run_d,), n_run_d, _ = ids.codes_within_groups([run_docs], [run_q], names=["run doc_id"], with_ids=False,
                                                n_threads=n_threads)  # to find duplicates
    pair = CodedPair(q_labels=q_uniques, run_q=run_q, score32=score32, run_d=run_d, n_run_d=n_run_d,
                     run_judged=run_judged, docs_at=lambda rows: run_docs.iloc[rows],
                     id_ranks=lambda rows: string_ranks(run_docs.iloc[rows]), qrels_q=qrels_q,
                     qrels_d=qrels_d, rel=rel, judged=judged,
                     emptied=np.isin(np.asarray(q_uniques, dtype=object), emptied) if emptied else None)
    values, keep = measure(pair, specs, relevance_level=int(relevance_level), judged_only=bool(judged_only),
                           missing=missing, n_threads=n_threads, subtopics=subtopics)
    table = per_query_frame(pair, values, keep, keys)
    if per_query:
        return table
    return aggregate(table, specs)
