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
import numpy.typing as npt
import pandas as pd

from kolm_search._kernels.measure_ids import (
    ANY_LEVEL,
    DIVERSITY_IDS,
    EXPONENTIAL,
    MAX_EXP_GRADE,
    METRIC_IDS,
    N_PARAMS,
    QueryStatus,
)
from kolm_search._params import boolean
from kolm_search.engine import ids
from kolm_search.engine.arrow_strings import lookup_within_groups
from kolm_search.engine.runs import as_qrels, as_run, check_ids, check_qrels, numeric_column
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.evaluation.measures import MeasureSpec, aggregate, metric_list, parse_measure
from kolm_search.evaluation.self_hits import self_hit_mask, wants_self_hits_dropped

__all__ = ["evaluate", "parse_metric", "ranking_order"]


def parse_metric(name: Any) -> tuple[str, int]:
    """``"ndcg@10"`` -> ``("ndcg_cut", 10)``; ``"mrr"`` -> ``("recip_rank", 0)``; a measure
    only ir_measures computes -> ``("", 0)``. See :func:`~kolm_search.evaluation.measures.parse_measure`.

    Raises ``KolmValueError`` naming the metric for anything unknown.
    """
    spec = parse_measure(name)
    return spec.kind, spec.cutoff


def ranking_order(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32], doc_ids: pd.Series,
                  ) -> npt.NDArray[np.int64]:
    """Row order by query ascending, score descending (compared as float32), then document id
    descending as a string (byte order): trec_eval's ranking.

    One stable sort of a packed (query, score) key (none when the rows are in that order
    already, :mod:`kolm_search._kernels.ranking`); only the rows tied on it, which are few,
    have their ids read and compared.
    """
    from kolm_search._kernels import load

    query = np.ascontiguousarray(query, np.int64)
    if len(query) and (int(query.min()) < 0 or int(query.max()) >= 1 << 32):
        raise KolmValueError("ranking_order takes query codes in [0, 2**32) (the high half of each key)")
    n_q = int(query.max()) + 1 if len(query) else 0
    kernels = load("ranking")
    if n_q <= 2 * len(query) + 1024:  # the kernel keeps a slot per query code
        key, order = kernels.presorted_ranking(query, score32, n_q)
    else:  # sparse codes (a caller's own): the numpy path, whose memory is the rows'
        key = kernels.descending_key_numpy(query, np.asarray(score32, np.float32))
        order = kernels.presorted_order_numpy(query, key)
    if order is None:  # not in rank order already: the stable sort
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


def _kernel_group(kernels: Any, specs: list[tuple[int, MeasureSpec]], level: int, judged_only: bool,
                  r_args: tuple[Any, ...], qrels_q: npt.NDArray[np.int64], qrels_d: npt.NDArray[np.int64],
                  rel: npt.NDArray[np.int64], n_judged: int, values: npt.NDArray[np.float64],
                  n_threads: int | None) -> npt.NDArray[np.int64]:
    """Fill ``values[:, column]`` of ``specs`` (column, spec) sharing one grade mapping; returns status."""
    gains = specs[0][1].gains if specs else None
    if gains is not None:
        rel = pd.Series(rel).replace(dict(gains)).to_numpy(np.int64)
    j_order = np.lexsort((-rel, qrels_q))
    j_count = np.bincount(qrels_q, minlength=len(r_args[0]) - 1)
    levels = [level if METRIC_IDS[s.kind] in ANY_LEVEL or s.rel is None else s.rel for _, s in specs]
    flags = [int(s.judged_only or judged_only) for _, s in specs]
    order = sorted(range(len(specs)), key=lambda i: (flags[i], levels[i]))  # one pass per level and flag
    chosen = [specs[i][1] for i in order]
    params = np.zeros((len(chosen), N_PARAMS))
    for row, m in enumerate(chosen):
        params[row, :len(m.params)] = m.params
    got, status = kernels.evaluate_queries(
        *r_args, np.concatenate([[0], np.cumsum(j_count)]), qrels_d[j_order], rel[j_order], n_judged,
        [METRIC_IDS[m.kind] for m in chosen], [m.cutoff for m in chosen], [levels[i] for i in order],
        [flags[i] for i in order], params, n_threads=n_threads)
    for j, i in enumerate(order):
        values[:, specs[i][0]] = got[:, j]
    return np.asarray(status)


def _through_ir_measures(specs: list[tuple[int, MeasureSpec]], q_uniques: pd.Index, run_q: npt.NDArray[np.int64],
                         run_docs: pd.Series, qrels_q: npt.NDArray[np.int64], qrels_docs: pd.Index,
                         rel: npt.NDArray[np.int64], values: npt.NDArray[np.float64]) -> None:
    """Fill ``values[:, column]`` of measures only ir_measures computes, from the run ranked by
    :func:`ranking_order` (``run_q``, ``run_docs`` in rank order): its scores are replaced by
    descending ranks, so every tool behind ir_measures sees trec_eval's ranking."""
    from kolm_search._extras import require

    irm = require("ir_measures", "measures")
    measures = [irm.parse_measure(s.external) if isinstance(s.external, str) else s.external for _, s in specs]
    columns: dict[str, list[int]] = {}
    for (col, _), m in zip(specs, measures, strict=True):
        columns.setdefault(repr(m), []).append(col)
    starts = np.concatenate([[0], np.cumsum(np.bincount(run_q, minlength=len(q_uniques)))])
    depth = np.arange(len(run_q)) - starts[run_q]
    qid = np.asarray(q_uniques, dtype=object)
    run = pd.DataFrame({"query_id": qid[run_q], "doc_id": np.asarray(run_docs, dtype=object),
                        "score": (starts[run_q + 1] - starts[run_q] - depth).astype(np.float64)})
    qrels = pd.DataFrame({"query_id": qid[qrels_q], "doc_id": np.asarray(qrels_docs, dtype=object), "relevance": rel})
    row = {q: i for i, q in enumerate(qid.tolist())}
    unique = list({repr(m): m for m in measures}.values())
    try:
        for measure in unique:  # one at a time: ir_measures 0.4.3 may put NumRet or nDCG in another's -J call
            for metric in irm.iter_calc([measure], qrels, run):
                if metric.query_id in row:
                    values[row[metric.query_id], columns[repr(metric.measure)]] = metric.value
    except Exception as exc:  # ir_measures' providers raise anything; name the measures and the cause
        names = ", ".join(s.key for _, s in specs)
        raise KolmValueError(f"ir_measures could not compute {names}: {type(exc).__name__}: {exc}") from exc


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
    from kolm_search._kernels import load

    per_query = boolean("per_query", per_query)
    names = metric_list(metrics)
    specs = [parse_measure(m) for m in names]
    keys = [s.key for s in specs]
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, (int, np.integer)) or relevance_level < 1:
        raise KolmValueError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    if missing not in ("ignore", "zero"):
        raise KolmValueError(f"missing must be 'ignore' or 'zero', got {missing!r}")
    run_df = as_run(run)
    diversity = [(col, s) for col, s in enumerate(specs) if s.kind in DIVERSITY_IDS]
    if diversity:  # subtopic qrels: the other measures see each document once, at its best grade
        from kolm_search.evaluation.diversity import collapse_subtopics, subtopic_column

        sub_qrels = as_qrels(qrels)
        sub_column = subtopic_column(sub_qrels, [s for _, s in diversity])
        check_ids(sub_qrels, "qrels")
        qrels = collapse_subtopics(sub_qrels, sub_column)
    qrels_df, rel = check_qrels(qrels)  # the rules every trainer on qrels shares (fit_fusion)
    emptied: list[str] = []  # queries whose run held only self-hits: scored 0, as BEIR's pytrec_eval call does
    if wants_self_hits_dropped(qrels_df, drop_self_hits):
        hits = self_hit_mask(run_df)
        if hits.any():
            before = set(run_df["qid"].astype(str))
            run_df = run_df[~hits]
            emptied = sorted(before - set(run_df["qid"].astype(str)))
    check_ids(run_df, "run")
    score32 = numeric_column(run_df, "score", "run").astype(np.float32)
    if any(METRIC_IDS.get(s.kind) in EXPONENTIAL for s in specs) and len(rel) and rel.max() > MAX_EXP_GRADE:
        raise KolmValueError(f"exponential gains 2**grade - 1 take grades up to {MAX_EXP_GRADE}; the qrels have "
                             f"grade {int(rel.max())}")
    if any(s.kind == "err_cut" for s in specs) and len(rel) and rel.max() > 4:
        raise KolmValueError(f"ERR@k (gdeval's, as ir_measures computes it) takes grades up to 4; the qrels have "
                             f"grade {int(rel.max())}")
    (run_q, qrels_q), q_uniques = ids.encode([run_df["qid"], qrels_df["qid"]], names=["run qid", "qrels qid"],
                                             sort=True, as_str=True)
    (qrels_d,), judged = ids.encode([qrels_df["doc_id"]], names=["qrels doc_id"], as_str=True)
    run_docs = ids.as_strings(run_df["doc_id"])
    run_judged = lookup_within_groups(run_docs, run_q, judged, qrels_q, qrels_d, n_threads=n_threads)  # per query
    if run_judged is None:  # (the kernel reads only a query's own judged documents) else among all judged ones
        run_judged = ids.lookup(run_docs, judged)
    (run_d,), n_run_d, _ = ids.codes_within_groups([run_docs], [run_q], names=["run doc_id"], with_ids=False,
                                                n_threads=n_threads)  # to find duplicates
    n_q = len(q_uniques)
    order = ranking_order(run_q, score32, run_docs)
    r_count = np.bincount(run_q, minlength=n_q)
    j_count = np.bincount(qrels_q, minlength=n_q)
    kernels = load("metrics")
    r_args = (np.concatenate([[0], np.cumsum(r_count)]), run_d[order], n_run_d, run_judged[order])
    values = np.zeros((n_q, len(specs)))
    groups: dict[Any, list[tuple[int, MeasureSpec]]] = {None: []}
    for col, spec in enumerate(specs):
        if spec.kind in METRIC_IDS:
            groups.setdefault(spec.gains, []).append((col, spec))
    for group in groups.values():  # the first (no gain mapping) also checks for duplicates
        status = _kernel_group(kernels, group, int(relevance_level), bool(judged_only), r_args, qrels_q, qrels_d,
                               rel, len(judged), values, n_threads)
        for code, word in ((QueryStatus.RUN_DUPLICATE, "run"), (QueryStatus.QRELS_DUPLICATE, "qrels")):
            if (status == code).any():
                q = q_uniques[int(np.flatnonzero(status == code)[0])]
                raise FrameValidationError(f"{word} has a duplicate document for query {q!r} (trec_eval rejects it too)")
    if diversity:
        from kolm_search.evaluation.diversity import diversity_values

        diversity_values(diversity, sub_qrels, sub_column, q_uniques, run_q[order], run_docs.iloc[order],
                         int(relevance_level), bool(judged_only), values, n_threads)
    external = [(col, spec) for col, spec in enumerate(specs) if not spec.kind]
    if external:
        ranked = order
        if judged_only:  # trec_eval -J for the measures ir_measures computes: unjudged documents leave the ranking
            width = np.int64(len(judged) + 1)
            pairs = qrels_q[rel >= 0].astype(np.int64) * width + qrels_d[rel >= 0]
            ranked = order[np.isin(run_q[order].astype(np.int64) * width + run_judged[order], pairs)
                           & (run_judged[order] >= 0)]
        _through_ir_measures(external, q_uniques, run_q[ranked], run_docs.iloc[ranked], qrels_q,
                             judged[qrels_d], rel, values)
    keep = (r_count > 0) & (j_count > 0)
    if missing == "zero":
        keep |= j_count > 0
    if emptied:
        keep |= np.isin(np.asarray(q_uniques, dtype=object), emptied) & (j_count > 0)
    table = pd.DataFrame(values[keep], columns=keys)
    table.insert(0, "qid", ids.decode(q_uniques, np.flatnonzero(keep)))
    if per_query:
        return table
    return aggregate(table, specs)
