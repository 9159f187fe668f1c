"""One pass of the evaluation kernel over a run and its qrels given as integer codes: the part
of :func:`~kolm_search.evaluation.evaluate` that comes after the ids are coded.

:func:`~kolm_search.evaluation.evaluate` codes a run DataFrame's ids (its qids and the qrels'
on one set of codes, its documents among the judged ones); an experiment's stage pipelines
code theirs from their document table (:mod:`kolm_search.evaluation.coded_runs`). Both hand a
:class:`CodedPair` to :func:`measure`, which ranks the run the trec_eval way
(:func:`ranking_order`) and fills every measure's value per query, so the two give the same
floats for the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

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
from kolm_search.engine import ids
from kolm_search.engine.arrow_strings import string_ranks
from kolm_search.engine.runs import as_qrels, check_ids, check_qrels
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.evaluation.measures import MeasureSpec, metric_list, parse_measure

__all__ = ["CodedPair", "check_grades", "kept", "measure", "measure_ranked", "per_query_frame", "per_query_rows",
           "prepare_qrels", "ranking_order", "ranking_order_of", "settings", "tie_order"]

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CodedPair:
    """A run and its qrels as the evaluation kernel reads them.

    Attributes
    ----------
    q_labels : pd.Index
        ``(n_q,)`` each query code's id as a string (distinct).
    run_q, run_d, run_judged : int64 ``(n,)``
        Each retrieved row's query code, a code that tells the documents of one query apart
        (below ``n_run_d``), and its code among ``judged`` (-1 when not judged).
    score32 : float32 ``(n,)``
        Each row's score as trec_eval compares it.
    docs_at : callable
        ``docs_at(rows)`` the document ids (strings) of rows ``rows`` int64 ``(m,)``: read only
        for diversity measures and measures ir_measures computes.
    id_ranks : callable
        ``id_ranks(rows)`` int64 ``(m,)``, the ranks of the rows' document ids in code point
        order, comparable within one call (:func:`ranking_order_of` breaks score ties so).
    qrels_q, qrels_d, rel : int64 ``(n_qrels,)``
        Each judgement's query code, document code among ``judged`` and grade.
    judged : pd.Index
        The judged documents' ids as strings.
    emptied : bool ``(n_q,)``, optional
        Queries whose run held only self-hits (scored 0, as BEIR's evaluation does).
    """

    q_labels: pd.Index
    run_q: I64
    score32: npt.NDArray[np.float32]
    run_d: I64
    n_run_d: int
    run_judged: I64
    docs_at: Callable[[I64], Any]
    id_ranks: Callable[[I64], I64]
    qrels_q: I64
    qrels_d: I64
    rel: I64
    judged: pd.Index
    emptied: npt.NDArray[np.bool_] | None = None


def settings(metrics: Any, relevance_level: Any, missing: Any) -> tuple[list[MeasureSpec], list[str]]:
    """The measures of ``metrics`` and their keys; ``relevance_level`` and ``missing`` checked
    (a ``KolmValueError`` naming the value)."""
    specs = [parse_measure(m) for m in metric_list(metrics)]
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, (int, np.integer)) or relevance_level < 1:
        raise KolmValueError(f"relevance_level must be an integer >= 1, got {relevance_level!r}")
    if missing not in ("ignore", "zero"):
        raise KolmValueError(f"missing must be 'ignore' or 'zero', got {missing!r}")
    return specs, [s.key for s in specs]


def prepare_qrels(qrels: Any, specs: list[MeasureSpec]) -> tuple[pd.DataFrame, I64, tuple[pd.DataFrame, str] | None]:
    """The qrels checked (``check_qrels``) and their grades; for diversity measures the subtopic
    qrels and their column too, the checked qrels then holding each document once per query at
    its best grade."""
    diversity = [s for s in specs if s.kind in DIVERSITY_IDS]
    subtopics = None
    if diversity:  # subtopic qrels: the other measures see each document once, at its best grade
        from kolm_search.evaluation.diversity import collapse_subtopics, subtopic_column

        sub_qrels = as_qrels(qrels)
        sub_column = subtopic_column(sub_qrels, diversity)
        check_ids(sub_qrels, "qrels")
        qrels = collapse_subtopics(sub_qrels, sub_column)
        subtopics = (sub_qrels, sub_column)
    qrels_df, rel = check_qrels(qrels)  # the rules every trainer on qrels shares (fit_fusion)
    return qrels_df, rel, subtopics


def check_grades(specs: list[MeasureSpec], rel: I64) -> None:
    """Refuse grades that a measure cannot take (exponential gains, ERR's 0..4)."""
    if any(METRIC_IDS.get(s.kind) in EXPONENTIAL for s in specs) and len(rel) and rel.max() > MAX_EXP_GRADE:
        raise KolmValueError(f"exponential gains 2**grade - 1 take grades up to {MAX_EXP_GRADE}; the qrels have "
                             f"grade {int(rel.max())}")
    if any(s.kind == "err_cut" for s in specs) and len(rel) and rel.max() > 4:
        raise KolmValueError(f"ERR@k (gdeval's, as ir_measures computes it) takes grades up to 4; the qrels have "
                             f"grade {int(rel.max())}")


def ranking_order(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32], doc_ids: pd.Series,
                  ) -> npt.NDArray[np.int64]:
    """Row order by query ascending, score descending (compared as float32), then document id
    descending as a string (byte order): trec_eval's ranking.

    One stable sort of a packed (query, score) key (none when the rows are in that order
    already, :mod:`kolm_search._kernels.ranking`); only the rows tied on it, which are few,
    have their ids read and compared.
    """
    return ranking_order_of(query, score32, lambda rows: string_ranks(doc_ids.iloc[rows]))


def ranking_order_of(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32],
                     id_ranks: Callable[[I64], I64], matters: npt.NDArray[np.bool_] | None = None,
                     ) -> npt.NDArray[np.int64]:
    """:func:`ranking_order` with the order of the document ids of rows given by
    ``id_ranks(rows)``: int64 ranks in code point order of the ids, comparable within the call.

    ``matters`` bool ``(n,)``, optional: the rows whose place among rows of an equal key can
    change a measure (the judged ones). A run of equal keys holding none of them is left in row
    order: its rows are alike to every measure of the kernel, so any order of them gives the
    same values (and their ids are not read)."""
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
    if matters is not None:  # the runs of equal keys around the rows that matter (few): one pass
        rows, run = kernels.tie_runs(key, order, matters)
        if len(rows):
            _break_ties(order, rows, run, id_ranks)
        return order
    ranked = key[order]
    tied = np.flatnonzero(ranked[1:] == ranked[:-1])
    if tied.size:
        in_tie = np.zeros(len(order), bool)
        in_tie[tied] = in_tie[tied + 1] = True
        rows = np.flatnonzero(in_tie)  # every position of a run of equal keys
        run = np.cumsum(np.concatenate([[0], ranked[rows[1:]] != ranked[rows[:-1]]]))  # equal keys are adjacent
        _break_ties(order, rows, run, id_ranks)
    return order


def _break_ties(order: I64, rows: I64, run: I64, id_ranks: Callable[[I64], I64]) -> None:
    """Sort ``order[rows]`` (positions of runs of equal keys, ascending; ``run`` each one's run
    number, non-decreasing) within each run by document id descending, in place."""
    order[rows] = order[rows][tie_order(run, np.asarray(id_ranks(order[rows]), np.int64))]


def tie_order(run: I64, by_name: I64) -> I64:
    """The permutation that sorts rows of tied runs (``run`` each row's run number, the rows of
    a run together and in ascending run number) by run, then by ``by_name`` descending (the
    ranks of their document ids in code point order), stably."""
    width = int(by_name.max()) + 1
    if int(run[-1]) + 1 < (1 << 62) // width:  # one sort of (run, id descending) packed in an int64
        return np.argsort(run.astype(np.int64) * width + (width - 1 - by_name), kind="stable")
    return np.lexsort((-by_name, run))


def _kernel_group(kernels: Any, specs: list[tuple[int, MeasureSpec]], level: int, judged_only: bool,
                  r_args: tuple[Any, ...], qrels_q: I64, qrels_d: I64, rel: I64, n_judged: int,
                  values: npt.NDArray[np.float64], n_threads: int | None, copies: int = 1) -> I64:
    """Fill ``values[:, column]`` of ``specs`` (column, spec) sharing one grade mapping; returns
    status. ``copies``: the run's queries are ``copies`` blocks of the qrels' ``n_q`` queries
    (block ``j``'s query ``c`` coded ``j * n_q + c``), each judged by the qrels as given."""
    gains = specs[0][1].gains if specs else None
    if gains is not None:
        rel = pd.Series(rel).replace(dict(gains)).to_numpy(np.int64)
    j_order = np.lexsort((-rel, qrels_q))
    j_count = np.bincount(qrels_q, minlength=(len(r_args[0]) - 1) // copies)
    j_doc, j_rel = qrels_d[j_order], rel[j_order]
    if copies > 1:  # the blocks' judgements one after another, as the sort of the repeated qrels puts them
        j_count, j_doc, j_rel = np.tile(j_count, copies), np.tile(j_doc, copies), np.tile(j_rel, copies)
    levels = [level if METRIC_IDS[s.kind] in ANY_LEVEL or s.rel is None else s.rel for _, s in specs]
    flags = [int(s.judged_only or judged_only) for _, s in specs]
    order = sorted(range(len(specs)), key=lambda i: (flags[i], levels[i]))  # one pass per level and flag
    chosen = [specs[i][1] for i in order]
    params = np.zeros((len(chosen), N_PARAMS))
    for row, m in enumerate(chosen):
        params[row, :len(m.params)] = m.params
    got, status = kernels.evaluate_queries(
        *r_args, np.concatenate([[0], np.cumsum(j_count)]), j_doc, j_rel, n_judged,
        [METRIC_IDS[m.kind] for m in chosen], [m.cutoff for m in chosen], [levels[i] for i in order],
        [flags[i] for i in order], params, n_threads=n_threads)
    for j, i in enumerate(order):
        values[:, specs[i][0]] = got[:, j]
    return np.asarray(status)


def _through_ir_measures(specs: list[tuple[int, MeasureSpec]], q_uniques: pd.Index, run_q: I64, run_docs: Any,
                         qrels_q: I64, qrels_docs: pd.Index, rel: I64, values: npt.NDArray[np.float64]) -> None:
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
        for measure_ in unique:  # one at a time: ir_measures 0.4.3 may put NumRet or nDCG in another's -J call
            for metric in irm.iter_calc([measure_], qrels, run):
                if metric.query_id in row:
                    values[row[metric.query_id], columns[repr(metric.measure)]] = metric.value
    except Exception as exc:  # ir_measures' providers raise anything; name the measures and the cause
        names = ", ".join(s.key for _, s in specs)
        raise KolmValueError(f"ir_measures could not compute {names}: {type(exc).__name__}: {exc}") from exc


def measure(pair: CodedPair, specs: list[MeasureSpec], *, relevance_level: int, judged_only: bool,
            missing: Literal["ignore", "zero"], n_threads: int | None,
            subtopics: tuple[pd.DataFrame, str] | None = None,
            ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Every query's value of every measure of ``specs``: ``values`` float64 ``(n_q, m)`` and
    ``keep`` bool ``(n_q,)``, the queries evaluated (in both the run and the qrels; with
    ``missing="zero"`` every judged query). ``subtopics`` is the subtopic qrels and their
    subtopic column, for the diversity measures. Raises ``FrameValidationError`` naming the
    first query whose run or qrels hold a document twice."""
    n_q = len(pair.q_labels)
    diversity = [(col, s) for col, s in enumerate(specs) if s.kind in DIVERSITY_IDS]
    external = [(col, spec) for col, spec in enumerate(specs) if not spec.kind]
    # the kernel reads a document's grade, judged or not: the order of unjudged ones tied on score
    # changes nothing; ir_measures and the diversity measures are given the ranking itself
    matters = None if diversity or external else pair.run_judged >= 0
    order = ranking_order_of(pair.run_q, pair.score32, pair.id_ranks, matters)
    r_count = np.bincount(pair.run_q, minlength=n_q)
    r_args = (np.concatenate([[0], np.cumsum(r_count)]), pair.run_d[order], pair.n_run_d, pair.run_judged[order])
    values = measure_ranked(r_args, pair.qrels_q, pair.qrels_d, pair.rel, len(pair.judged),
                            lambda found: pair.q_labels[found], specs, relevance_level=relevance_level,
                            judged_only=judged_only, n_threads=n_threads)
    if diversity and subtopics is not None:
        from kolm_search.evaluation.diversity import diversity_values

        diversity_values(diversity, subtopics[0], subtopics[1], pair.q_labels, pair.run_q[order],
                         _series(pair.docs_at(order)), int(relevance_level), bool(judged_only), values, n_threads)
    if external:
        ranked = order
        if judged_only:  # trec_eval -J for the measures ir_measures computes: unjudged documents leave the ranking
            width = np.int64(len(pair.judged) + 1)
            judged_rows = pair.rel >= 0
            pairs = pair.qrels_q[judged_rows].astype(np.int64) * width + pair.qrels_d[judged_rows]
            ranked = order[np.isin(pair.run_q[order].astype(np.int64) * width + pair.run_judged[order], pairs)
                           & (pair.run_judged[order] >= 0)]
        _through_ir_measures(external, pair.q_labels, pair.run_q[ranked], pair.docs_at(ranked), pair.qrels_q,
                             pair.judged[pair.qrels_d], pair.rel, values)
    return values, kept(r_count, np.bincount(pair.qrels_q, minlength=n_q), missing, pair.emptied)


def kept(r_count: I64, j_count: I64, missing: Literal["ignore", "zero"],
         emptied: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_]:
    """The queries evaluated (bool ``(n_q,)``) from each query's retrieved rows and judgements:
    those in both (with ``missing="zero"`` every judged query; and the judged queries that
    ``emptied`` marks)."""
    keep = (r_count > 0) & (j_count > 0)
    if missing == "zero":
        keep |= j_count > 0
    if emptied is not None:
        keep |= emptied & (j_count > 0)
    return keep


def measure_ranked(r_args: tuple[I64, I64, int, I64], qrels_q: I64, qrels_d: I64, rel: I64, n_judged: int,
                   labels: Callable[[I64], Any], specs: list[MeasureSpec], *, relevance_level: int,
                   judged_only: bool, n_threads: int | None, copies: int = 1) -> npt.NDArray[np.float64]:
    """The evaluation kernel's measures of ``specs`` (the others' columns left 0) over a run in
    trec_eval's ranking: ``r_args`` is ``(r_ptr, r_doc, n_run_d, r_judged)`` as
    :func:`~kolm_search._kernels.metrics.evaluate_queries` reads them, over ``copies`` blocks of
    the qrels' queries (see :func:`_kernel_group`); ``labels(codes)`` the ids of query codes.
    Returns ``values`` float64 ``(n_q, m)``. Raises ``FrameValidationError`` naming the first
    query (in sorted order of the ids) whose run or qrels hold a document twice."""
    from kolm_search._kernels import load

    kernels = load("metrics")
    values = np.zeros((len(r_args[0]) - 1, len(specs)))
    groups: dict[Any, list[tuple[int, MeasureSpec]]] = {None: []}
    for col, spec in enumerate(specs):
        if spec.kind in METRIC_IDS:
            groups.setdefault(spec.gains, []).append((col, spec))
    for group in groups.values():  # the first (no gain mapping) also checks for duplicates
        status = _kernel_group(kernels, group, int(relevance_level), bool(judged_only), r_args, qrels_q, qrels_d,
                               rel, n_judged, values, n_threads, copies)
        for code, word in ((QueryStatus.RUN_DUPLICATE, "run"), (QueryStatus.QRELS_DUPLICATE, "qrels")):
            if (status == code).any():
                q = min(labels(np.flatnonzero(status == code)))  # the first in sorted order, however coded
                raise FrameValidationError(f"{word} has a duplicate document for query {q!r} (trec_eval rejects it too)")
    return values


def _series(values: Any) -> pd.Series:
    return values if isinstance(values, pd.Series) else pd.Series(values, copy=False)


def per_query_frame(pair: CodedPair, values: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_],
                    keys: list[str]) -> pd.DataFrame:
    """The per-query table of :func:`~kolm_search.evaluation.evaluate`: ``qid`` (strings, in
    the order of the query codes, which both callers give in sorted order of the ids) then
    one float64 column per measure key, the rows of the queries ``keep`` marks."""
    return per_query_rows(pair.q_labels, values, keep, keys)


def per_query_rows(q_labels: pd.Index, values: npt.NDArray[np.float64], keep: npt.NDArray[np.bool_],
                   keys: list[str]) -> pd.DataFrame:
    """:func:`per_query_frame` from the query codes' ids ``q_labels`` (``(n_q,)``)."""
    rows = np.flatnonzero(keep)
    table = pd.DataFrame(values[rows], columns=keys)
    table.insert(0, "qid", ids.decode(q_labels, rows))
    return table
