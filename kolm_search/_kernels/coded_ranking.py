"""Placing kernel: runs kept as codes (query row, document code, score per entry) written into
trec_eval's ranking of several runs measured together, one pass per run, with no assembly.

The runs of an experiment's pipelines are laid out one after another (run ``j`` from row
``base``), each query's entries together in order of query code, as the evaluation kernel
reads them (:mod:`kolm_search._kernels.metrics`): run ``j``'s query code ``c`` is the combined
code ``j * n_q + c``. A run whose entries are already in rank order within contiguous queries
(descending score compared as float32, what every stage returns) is placed without sorting:
:func:`place_run` counts each query's entries and checks the order and the codes, then writes
each entry's document code and its code among the judged documents at its place, and reports the
runs of entries tied on their float32 score that hold a judged document (the caller orders those
by document id, as trec_eval does) into tie arrays as far as they have room. A run that is not in that order is left to the general path
(:func:`~kolm_search.evaluation.measure_pass.ranking_order_of`, the numpy twin of this kernel
being :func:`place_run_numpy`, built on it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["BAD_CODE", "NAN_SCORE", "NO_ROOM", "UNORDERED", "place_run", "place_run_numpy"]

NAN_SCORE = -1  # a score is NaN: the run is not measured here
UNORDERED = -2  # not in rank order within contiguous queries: the general path ranks it
BAD_CODE = -3  # a query row, a query code or a document code out of range
NO_ROOM = -4  # the outputs do not hold the run


@njit(i64(ro(i64), ro(i64), ro(f64), ro(i64), ro(i64), i64, i64, rw(i64), rw(i64), rw(i64), rw(i64), rw(i64), i64),
      cache=True, nogil=True)
def _place(q, doc, score, row_code, judged_of, n_q, base, count, r_doc, r_judged, tie_rows, tie_run,
           n_ties):  # pragma: no cover - compiled
    n = len(q)
    n_rows = len(row_code)
    n_docs = len(judged_of)
    for c in range(n_q):
        count[c] = 0
    bad = nan = unordered = False
    tied = np.zeros(n_q, np.bool_)  # the queries with two entries of one float32 score
    i = 0
    while i < n:  # query by query: codes, order and counts checked before anything is written
        r = q[i]
        if r < 0 or r >= n_rows:
            return BAD_CODE
        c = row_code[r]
        if c < 0 or c >= n_q:
            return BAD_CODE
        if count[c] != 0:  # a query in two places
            unordered = True
        prev = np.float32(score[i])
        tie = False
        end = i
        while end < n and q[end] == r:  # flags or'ed without branches: this loop is most of the pass
            d = doc[end]
            bad |= (d < 0) | (d >= n_docs)
            s = score[end]
            nan |= s != s
            s32 = np.float32(s)
            unordered |= bool(s32 > prev)
            tie |= bool(s32 == prev) & (end > i)
            prev = s32
            end += 1
        count[c] += end - i
        tied[c] = tie
        i = end
    if bad:
        return BAD_CODE
    if nan:
        return NAN_SCORE
    if unordered:
        return UNORDERED
    ptr = np.empty(n_q, np.int64)
    at = base
    for c in range(n_q):
        ptr[c] = at
        at += count[c]
    if at > len(r_doc) or at > len(r_judged):
        return NO_ROOM
    room = min(len(tie_rows), len(tie_run))
    m = 0
    i = 0
    while i < n:  # one query's entries placed in order; the tied runs around its judged entries reported
        c = row_code[q[i]]
        shift = ptr[c] - i
        end = i + count[c]
        if not tied[c]:  # no ties: the entries copied with their judged codes
            for t in range(i, end):
                d = doc[t]
                r_doc[t + shift] = d
                r_judged[t + shift] = judged_of[d]
            i = end
            continue
        reported = i  # the entries before this one are in a run already looked at
        for t in range(i, end):
            d = doc[t]
            jd = judged_of[d]
            r_doc[t + shift] = d
            r_judged[t + shift] = jd
            if jd < 0 or t < reported:  # judged entries are few: the run of equal scores around one
                continue
            s32 = np.float32(score[t])
            start = t
            while start > i and np.float32(score[start - 1]) == s32:
                start -= 1
            stop = t + 1
            while stop < end and np.float32(score[stop]) == s32:
                stop += 1
            reported = stop
            if stop - start > 1:
                for u in range(start, stop):
                    if n_ties + m < room:
                        tie_rows[n_ties + m] = u + shift
                        tie_run[n_ties + m] = start + shift  # the run's first position
                    m += 1
        i = end
    return m


def place_run(q: npt.NDArray[np.int64], doc: npt.NDArray[np.int64], score: npt.NDArray[np.float64],
              row_code: npt.NDArray[np.int64], judged_of: npt.NDArray[np.int64], n_q: int, base: int,
              count: npt.NDArray[np.int64], r_doc: npt.NDArray[np.int64], r_judged: npt.NDArray[np.int64],
              tie_rows: npt.NDArray[np.int64], tie_run: npt.NDArray[np.int64], n_ties: int) -> int:
    """Place one run into the combined ranking.

    Parameters
    ----------
    q, doc : int64 (n,)
        Each entry's query row (below ``len(row_code)``) and document code (below
        ``len(judged_of)``), each query's entries together, in rank order.
    score : float64 (n,)
    row_code : int64 (n_rows,)
        The query code (below ``n_q``) of each query row; distinct rows have distinct codes.
    judged_of : int64 (n_docs,)
        Each document code's code among the judged documents, -1 when not judged.
    base : int
        Where this run's rows begin in ``r_doc`` / ``r_judged``.
    count : int64 (n_q,)
        Written: each query code's number of entries (the run's block of the combined counts).
    r_doc, r_judged : int64 (N,)
        Written at ``base .. base + n``: the entries by query code, then rank.
    tie_rows, tie_run : int64 (room,)
        Written from ``n_ties`` while they have room: the positions of runs of two or more
        entries of one query tied on their float32 score (``-0.0`` equal to ``0.0``) holding a
        judged entry, ascending within each run, and each run's number (its first position).

    Returns
    -------
    int
        The number of the run's tie positions (those past the room are not written: call again
        with more), or :data:`BAD_CODE` (a code out of range), :data:`NAN_SCORE`,
        :data:`UNORDERED` (not in rank order within contiguous queries), in that precedence
        (nothing written but ``count``), or :data:`NO_ROOM` (``r_doc`` / ``r_judged`` too short).
    """
    q, doc, score, row_code, judged_of = _inputs(q, doc, score, row_code, judged_of)
    if base < 0 or n_ties < 0 or len(count) != n_q or count.dtype != np.int64:
        raise ValueError(f"place_run: negative offsets, or count not int64 ({n_q},)")
    return int(_place(q, doc, score, row_code, judged_of, int(n_q), int(base), count, r_doc, r_judged, tie_rows,
                      tie_run, int(n_ties)))


def _inputs(*arrays: npt.NDArray[Any]) -> list[npt.NDArray[Any]]:
    q, doc, score, row_code, judged_of = arrays
    if len(doc) != len(q) or len(score) != len(q):
        raise ValueError(f"{len(q)} query rows, {len(doc)} documents and {len(score)} scores")
    return [np.ascontiguousarray(q, np.int64), np.ascontiguousarray(doc, np.int64),
            np.ascontiguousarray(score, np.float64), np.ascontiguousarray(row_code, np.int64),
            np.ascontiguousarray(judged_of, np.int64)]


def place_run_numpy(q: npt.NDArray[np.int64], doc: npt.NDArray[np.int64], score: npt.NDArray[np.float64],
                    row_code: npt.NDArray[np.int64], judged_of: npt.NDArray[np.int64], n_q: int,
                    ) -> tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                               npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Twin of :func:`place_run` for one run at ``base = 0``, from the general path's pieces
    (the ranking keys, their stable sort, :func:`~kolm_search._kernels.ranking.tie_runs_numpy`): ``(status, count, r_doc, r_judged,
    tie_rows, tie_run)``; ``status`` is the number of tie positions or a failure code (then the
    arrays are empty). Tie runs are numbered by their first position."""
    from kolm_search._kernels.ranking import descending_key_numpy, tie_runs_numpy

    empty = np.zeros(0, np.int64)
    if len(q) and (q.min() < 0 or q.max() >= len(row_code)):
        return BAD_CODE, empty, empty, empty, empty, empty
    codes = row_code[q]
    if len(q) and (codes.min() < 0 or codes.max() >= n_q or doc.min() < 0 or doc.max() >= len(judged_of)):
        return BAD_CODE, empty, empty, empty, empty, empty
    if np.isnan(score).any():
        return NAN_SCORE, empty, empty, empty, empty, empty
    starts = np.flatnonzero(np.concatenate([[True], q[1:] != q[:-1]])) if len(q) else np.zeros(0, np.int64)
    key = descending_key_numpy(codes, score.astype(np.float32))
    if len(np.unique(codes[starts])) < len(starts) or bool(((key[1:] < key[:-1]) & (q[1:] == q[:-1])).any()):
        return UNORDERED, empty, empty, empty, empty, empty  # a query in two places, or out of rank order
    order = np.argsort(key, kind="stable")  # trec_eval's ranking up to tied keys
    judged = judged_of[doc]
    rows, run = tie_runs_numpy(key, order, judged >= 0)
    first = np.zeros(len(run), np.int64)
    if len(run):
        heads = np.flatnonzero(np.concatenate([[True], run[1:] != run[:-1]]))
        first = np.repeat(rows[heads], np.diff(np.append(heads, len(run))))
    return (len(rows), np.bincount(codes, minlength=n_q).astype(np.int64), doc[order], judged[order], rows,
            first)
