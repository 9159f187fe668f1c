"""An experiment's runs (:class:`Runs`), and the measures of its stage pipelines' runs computed
from their codes, without making their DataFrames.

A stage pipeline's run is a :class:`~kolm_search.compose.queries.CodedRun`: rows of the
prepared queries, codes of a document table, ranks and scores. To evaluate it, the qrels are
mapped to those codes once (:class:`QrelsCodes`: the qrels' query ids to codes shared with the
queries' rows, their document ids to the table's codes by ``table.codes(ids,
missing="ignore")``, a hash lookup of the judged documents only, never a read of the whole
table), for every pipeline over the same table and queries; the runs are then placed as they
are into trec_eval's ranking, one kernel pass each
(:func:`~kolm_search._kernels.coded_ranking.place_run`), and measured together by the kernel
pass :func:`~kolm_search.evaluation.evaluate` ends with
(:func:`~kolm_search.evaluation.measure_pass.measure_ranked`; a run not in rank order through
:func:`~kolm_search.evaluation.measure_pass.measure`), the document ids of their rows read only
where scores tie. The values are those of ``evaluate`` on the run's DataFrame, float for float.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._kernels.measure_ids import DIVERSITY_IDS, METRIC_IDS
from kolm_search.compose.queries import CodedRun, PreparedQueries
from kolm_search.engine import ids
from kolm_search.errors import FrameValidationError
from kolm_search.evaluation.measure_pass import (
    CodedPair,
    kept,
    measure,
    measure_ranked,
    per_query_frame,
    per_query_rows,
    tie_order,
)

__all__ = ["Measured", "QrelsCodes", "chunks", "evaluate_coded", "evaluate_coded_together"]

I64 = npt.NDArray[np.int64]
DENSE_DOCS = 1 << 22  # tables up to this many documents get a per-document array; larger ones a search
#: rows of the runs of one kernel pass (more gained nothing on 2 x 100,000 rows; 5 x 22,500: ~10 %)
TOGETHER_ROWS = 1 << 17
TIE_ROOM = 1024


def _tie_room(rows: int) -> int:
    """Tie positions made room for at first when placing runs of ``rows`` rows: one in 16 rows,
    at least :data:`TIE_ROOM` (the runs of tied entries that hold a judged one are few; a run
    needing more is placed again with more)."""
    return max(TIE_ROOM, rows >> 4)


class Measured(NamedTuple):
    """A run's per-query values: ``values`` float64 ``(n_q, m)`` over the query codes whose ids
    are ``labels`` (sorted), ``keep`` bool ``(n_q,)`` the queries evaluated, ``keys`` the
    columns; :meth:`frame` is the per-query table ``evaluate`` returns."""

    labels: pd.Index
    values: npt.NDArray[np.float64]
    keep: npt.NDArray[np.bool_]
    keys: list[str]

    def frame(self) -> pd.DataFrame:
        return per_query_rows(self.labels, self.values, self.keep, self.keys)


class QrelsCodes:
    """Qrels mapped to the codes of runs over one set of queries and one document table.

    Query ids (the queries' and the qrels', as strings) get one set of codes in sorted order,
    as :func:`~kolm_search.evaluation.evaluate` gives them; ``row_q`` int64 ``(n_queries,)``
    is the code of each query row. The judged documents are coded as ``evaluate`` codes them
    (``judged``, ``qrels_d``) and looked up in the table once: ``judged_of(docs)`` is the
    judged code of table codes (-1 when not judged). A judged document that the table lacks
    keeps its judgement (it counts for recall and the ideal ranking) and is never retrieved.
    """

    def __init__(self, qrels: pd.DataFrame, rel: I64, prepared: PreparedQueries, table: Any) -> None:
        self.qids, self.table = prepared.qids, table
        (self.row_q, self.qrels_q), self.q_labels = ids.encode(
            [pd.Series(prepared.qid_column, copy=False), qrels["qid"]], names=["run qid", "qrels qid"], sort=True,
            as_str=True)
        (self.qrels_d,), self.judged = ids.encode([qrels["doc_id"]], names=["qrels doc_id"], as_str=True)
        self.rel = rel
        #: each query row has its own code (ids equal as strings, such as 1 and "1", share one: such
        #: runs are evaluated from their DataFrames, whose self-hit cut groups by the ids as they are)
        self.distinct = len(np.unique(self.row_q)) == len(self.row_q)
        self.n_docs = len(table)
        at = np.asarray(table.codes([str(v) for v in self.judged], missing="ignore"), np.int64)
        present = np.flatnonzero(at >= 0)
        self._dense: I64 | None = None
        if self.n_docs <= DENSE_DOCS:
            self._dense = np.full(self.n_docs, -1, np.int64)
            self._dense[at[present]] = present
        by_code = np.argsort(at[present], kind="stable")
        self._codes, self._judged_at = at[present][by_code], present[by_code]
        self._self: I64 | None = None

    def dense(self) -> I64 | None:
        """The judged code of every table code (int64 ``(n_docs,)``, -1 when not judged), or None
        for a table too large to hold one per document."""
        return self._dense

    def matches(self, prepared: PreparedQueries, table: Any) -> bool:
        """True when these codes serve runs over ``prepared``'s queries and ``table``."""
        return table is self.table and (prepared.qids is self.qids or prepared.qids == self.qids)

    def judged_of(self, docs: I64) -> I64:
        """The judged code of each table code of ``docs`` (-1 when not judged)."""
        if self._dense is not None:
            return self._dense[docs]
        at = np.minimum(np.searchsorted(self._codes, docs), max(len(self._codes) - 1, 0))
        hit = (self._codes[at] == docs) if len(self._codes) else np.zeros(len(docs), bool)
        return np.where(hit, self._judged_at[at] if len(self._codes) else -1, -1).astype(np.int64)

    def self_codes(self) -> I64:
        """The table code of each query row's own id (-1 when no document has it): its self-hit."""
        if self._self is None:
            self._self = np.asarray(self.table.codes([ids.str_id(q) for q in self.qids], missing="ignore"), np.int64)
        return self._self


def _cut(q: I64, rank: I64, keep: npt.NDArray[np.bool_], limit: int) -> npt.NDArray[np.bool_]:
    """``keep`` further cut to each query's ``limit`` first kept rows by rank (ties in row order),
    as :func:`~kolm_search.evaluation.self_hits.drop_self_hits` cuts."""
    rows = np.flatnonzero(keep)
    kq, kr = q[rows], rank[rows]
    if len(rows) > 1 and not bool(((kq[1:] > kq[:-1]) | ((kq[1:] == kq[:-1]) & (kr[1:] > kr[:-1]))).all()):
        order = np.lexsort((kr, kq))  # stable
        rows, kq = rows[order], kq[order]
    starts = np.flatnonzero(np.concatenate([[True], kq[1:] != kq[:-1]])) if len(kq) else np.zeros(0, np.int64)
    position = np.arange(len(kq)) - np.repeat(starts, np.diff(np.append(starts, len(kq))))
    out = np.zeros(len(keep), bool)
    out[rows[position < limit]] = True
    return out


def evaluate_coded(run: CodedRun, codes: QrelsCodes, specs: list[Any], keys: list[str], *,
                   self_hits_limit: int | None = None, drop: bool = False, relevance_level: int = 1,
                   judged_only: bool = False, missing: Literal["ignore", "zero"] = "ignore",
                   n_threads: int | None = None, subtopics: tuple[pd.DataFrame, str] | None = None,
                   values_only: bool = False) -> Any:
    """``evaluate(frame, qrels, specs, per_query=True, ...)`` of the run's DataFrame ``frame``
    (:meth:`CodedRun.frame`, or with ``self_hits_limit`` its ``drop_self_hits(frame,
    self_hits_limit)[0]``), computed from its codes; ``codes`` must :meth:`~QrelsCodes.matches`
    the run and be ``distinct``. ``drop``: self-hits dropped as ``evaluate(drop_self_hits=True)``
    drops them (a query left without rows scores 0). None when a score is NaN (``evaluate`` of
    the DataFrame names the row). ``values_only``: a :class:`Measured` instead of the DataFrame."""
    arrays = _coded_arrays(run, codes, self_hits_limit, drop)
    if arrays is None:
        return None
    q, doc, score, emptied = arrays
    if codes.n_docs <= DENSE_DOCS:
        run_d, n_run_d = doc, codes.n_docs
    else:  # codes of the documents this run retrieves (the kernel keeps a mark per code)
        uniques, inverse = np.unique(doc, return_inverse=True)
        run_d, n_run_d = inverse.astype(np.int64), len(uniques)
    table = run.table
    pair = CodedPair(q_labels=codes.q_labels, run_q=codes.row_q[q], score32=score.astype(np.float32),
                     run_d=np.asarray(run_d, np.int64), n_run_d=n_run_d, run_judged=codes.judged_of(doc),
                     docs_at=lambda rows: table.ids_of(doc[rows]),
                     id_ranks=lambda rows: table.id_ranks(doc[rows]), qrels_q=codes.qrels_q, qrels_d=codes.qrels_d,
                     rel=codes.rel, judged=codes.judged, emptied=emptied)
    values, keep = measure(pair, specs, relevance_level=relevance_level, judged_only=judged_only, missing=missing,
                           n_threads=n_threads, subtopics=subtopics)
    return Measured(codes.q_labels, values, keep, keys) if values_only else per_query_frame(pair, values, keep, keys)


def evaluate_coded_together(items: Sequence[tuple[CodedRun, int | None]], codes: QrelsCodes, specs: list[Any],
                            keys: list[str], *, drop: bool = False, relevance_level: int = 1,
                            judged_only: bool = False, missing: Literal["ignore", "zero"] = "ignore",
                            n_threads: int | None = None) -> list[Measured | None] | None:
    """:func:`evaluate_coded` of several runs (each with its ``self_hits_limit``) over ``codes``
    in one kernel pass: run ``i``'s queries take codes ``i * n_q + code``, the qrels repeated per
    run, so each query of each run is measured alone (the kernel's values are per query). Runs
    in rank order within contiguous queries (every stage's) are placed in the ranking as they
    are, one kernel pass each (:func:`_placed`), with no assembly of their rows; others go
    through :func:`~kolm_search.evaluation.measure_pass.measure`. None when it does not apply
    (a table too large for per-document marks, a measure not the kernel's, a run holding a
    document twice: one by one then, whose errors name the query); an item is None for a run
    with a NaN score, else its :class:`Measured` values."""
    if codes.n_docs > DENSE_DOCS or any(not s.kind or s.kind in DIVERSITY_IDS or s.kind not in METRIC_IDS for s in specs):
        return None
    n_q = len(codes.q_labels)
    # NaN scores are found while placing the runs (a run cut for self-hits is checked whole first)
    found = [_coded_arrays(run, codes, limit, drop, nan_check=limit is not None or drop) for run, limit in items]
    tables = {run.table for run, _ in items}
    if sum(a is not None for a in found) < 1 or len(tables) != 1 or len(items) * max(n_q, 1) >= 1 << 31:
        return None
    placed = _placed(found, codes, next(iter(tables)))
    if placed is None:  # a run not in rank order: the general path
        return _together_general(found, codes, next(iter(tables)), specs, keys, relevance_level=relevance_level,
                                 judged_only=judged_only, missing=missing, n_threads=n_threads)
    live, r_args = placed
    if not live:
        return [None] * len(items)
    k = len(live)
    emptied = None
    if any(found[i][3] is not None for i in live):  # type: ignore[index]
        emptied = np.concatenate([np.zeros(n_q, bool) if found[i][3] is None else found[i][3]  # type: ignore[index]
                                  for i in live])
    try:
        values = measure_ranked(r_args, codes.qrels_q, codes.qrels_d, codes.rel, len(codes.judged),
                                lambda at: codes.q_labels[at % max(n_q, 1)], specs, relevance_level=relevance_level,
                                judged_only=judged_only, n_threads=n_threads, copies=k)
    except FrameValidationError:
        return None
    keep = kept(np.diff(r_args[0]), np.tile(np.bincount(codes.qrels_q, minlength=n_q), k), missing, emptied)
    out: list[Measured | None] = [None] * len(items)
    for j, i in enumerate(live):
        block = slice(j * n_q, (j + 1) * n_q)
        out[i] = Measured(codes.q_labels, values[block], keep[block], keys)
    return out


def _placed(found: list[Any], codes: QrelsCodes, table: Any) -> tuple[list[int], tuple[I64, I64, int, I64]] | None:
    """The runs of ``found`` (:func:`_coded_arrays` of each, None for one left out) in trec_eval's
    ranking, one after another (:func:`~kolm_search._kernels.coded_ranking.place_run`): the
    runs placed (those without a NaN score) and the evaluation kernel's ``(r_ptr, r_doc, n_docs,
    r_judged)`` of them; None when a run is not in rank order within contiguous queries."""
    from kolm_search._kernels import load

    kernel = load("coded_ranking")
    dense = codes.dense()
    if dense is None:
        return None
    n_q = len(codes.q_labels)
    total = sum(len(a[0]) for a in found if a is not None)
    r_doc, r_judged = np.empty(total, np.int64), np.empty(total, np.int64)
    room = _tie_room(total)
    tie_rows, tie_run = np.empty(room, np.int64), np.empty(room, np.int64)
    counts = np.zeros((len(found), n_q), np.int64)
    live: list[int] = []
    base = n_ties = 0
    for i, a in enumerate(found):
        if a is None:
            continue
        got = kernel.place_run(a[0], a[1], a[2], codes.row_q, dense, n_q, base, counts[len(live)], r_doc, r_judged,
                               tie_rows, tie_run, n_ties)
        if got == kernel.NAN_SCORE:
            continue
        if got == kernel.BAD_CODE:
            raise FrameValidationError(f"a coded run holds a query row or document code outside its queries "
                                       f"({len(codes.row_q)}) or table ({codes.n_docs} documents)")
        if got < 0:
            return None
        if n_ties + got > room:  # more tie positions than room: the run placed again with enough
            room = 2 * (n_ties + got)
            tie_rows, tie_run = np.resize(tie_rows[:n_ties], room), np.resize(tie_run[:n_ties], room)
            kernel.place_run(a[0], a[1], a[2], codes.row_q, dense, n_q, base, counts[len(live)], r_doc, r_judged,
                             tie_rows, tie_run, n_ties)
        live.append(i)
        base += len(a[0])
        n_ties += got
    if n_ties:  # the tied runs holding a judged document, each by document id descending
        by_position = np.argsort(tie_rows[:n_ties], kind="stable")
        rows, run = tie_rows[:n_ties][by_position], tie_run[:n_ties][by_position]
        within = tie_order(run, np.asarray(table.id_ranks(r_doc[rows]), np.int64))
        r_doc[rows], r_judged[rows] = r_doc[rows][within], r_judged[rows][within]
    r_ptr = np.concatenate([[0], np.cumsum(counts[:len(live)].ravel())]).astype(np.int64)
    return live, (r_ptr, r_doc[:base], codes.n_docs, r_judged[:base])


def _together_general(found: list[Any], codes: QrelsCodes, table: Any, specs: list[Any], keys: list[str], *,
                      relevance_level: int, judged_only: bool, missing: Literal["ignore", "zero"],
                      n_threads: int | None) -> list[Measured | None] | None:
    """:func:`evaluate_coded_together` of runs not all in rank order: their rows assembled,
    then ranked by :func:`~kolm_search.evaluation.measure_pass.measure` (NaN scores checked)."""
    n_q = len(codes.q_labels)
    found = [None if a is None or np.isnan(a[2]).any() else a for a in found]
    live = [i for i, a in enumerate(found) if a is not None]
    if not live:
        return [None] * len(found)
    parts = [found[i] for i in live]
    doc = np.concatenate([a[1] for a in parts])
    run_q = np.concatenate([codes.row_q[a[0]] + j * n_q for j, a in enumerate(parts)])
    score = np.concatenate([a[2] for a in parts])
    emptied = None
    if any(a[3] is not None for a in parts):
        emptied = np.concatenate([np.zeros(n_q, bool) if a[3] is None else a[3] for a in parts])
    k = len(parts)
    pair = CodedPair(q_labels=codes.q_labels[np.tile(np.arange(n_q), k)], run_q=run_q,
                     score32=score.astype(np.float32), run_d=doc, n_run_d=codes.n_docs,
                     run_judged=codes.judged_of(doc), docs_at=lambda rows: table.ids_of(doc[rows]),
                     id_ranks=lambda rows: table.id_ranks(doc[rows]),
                     qrels_q=np.concatenate([codes.qrels_q + j * n_q for j in range(k)]),
                     qrels_d=np.tile(codes.qrels_d, k), rel=np.tile(codes.rel, k), judged=codes.judged,
                     emptied=emptied)
    try:
        values, keep = measure(pair, specs, relevance_level=relevance_level, judged_only=judged_only,
                               missing=missing, n_threads=n_threads)
    except FrameValidationError:
        return None
    out: list[Measured | None] = [None] * len(found)
    for j, i in enumerate(live):
        block = slice(j * n_q, (j + 1) * n_q)
        out[i] = Measured(codes.q_labels, values[block], keep[block], keys)
    return out


def chunks(names: list[str], rows: list[int]) -> list[list[str]]:
    """``names`` in consecutive groups of fewer than :data:`TOGETHER_ROWS` rows (one pass each)."""
    out: list[list[str]] = []
    total = TOGETHER_ROWS
    for name, n in zip(names, rows, strict=True):
        if total + n >= TOGETHER_ROWS:
            out.append([])
            total = 0
        out[-1].append(name)
        total += n
    return out


def _coded_arrays(run: CodedRun, codes: QrelsCodes, self_hits_limit: int | None, drop: bool, *,
                  nan_check: bool = True,
                  ) -> tuple[I64, I64, npt.NDArray[np.float64], npt.NDArray[np.bool_] | None] | None:
    """The rows of ``run`` that :func:`evaluate_coded` measures: (query row, document code,
    score, the queries left without rows by ``drop`` or None), None when a score is NaN (not
    looked for with ``nan_check=False``: the caller does)."""
    q, doc, rank, score = run.flat()
    if nan_check and np.isnan(score).any():
        return None
    if self_hits_limit is not None:  # the experiment's cut: self-hits out, then the limit
        kept = _cut(q, rank, doc != codes.self_codes()[q], int(self_hits_limit))
        q, doc, score = q[kept], doc[kept], score[kept]
    emptied = None
    if drop:
        hit = doc == codes.self_codes()[q]
        if hit.any():
            before = np.bincount(codes.row_q[q], minlength=len(codes.q_labels)) > 0
            q, doc, score = q[~hit], doc[~hit], score[~hit]
            emptied = before & ~(np.bincount(codes.row_q[q], minlength=len(codes.q_labels)) > 0)
    return q, np.asarray(doc, np.int64), score, emptied
