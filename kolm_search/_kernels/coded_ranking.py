"""Placing kernel: runs kept as codes (query row, document code, score per entry) written into
trec_eval's ranking of several runs measured together, one pass per run, with no assembly.

The runs of an experiment's pipelines are laid out one after another (run ``j`` from row
``base``), each query's entries together in order of query code, as the evaluation kernel
reads them (:mod:`kolm_search._kernels.metrics`): run ``j``'s query code ``c`` is the combined
code ``j * n_q + c``. A run whose entries are already in rank order within contiguous queries
(descending score compared as float32, what every stage returns) is placed without sorting:
:func:`check_run` counts each query's entries, checks the order and the codes and counts the
entries of runs tied on their float32 score that hold a judged document; :func:`place_run` then
writes each entry's document code and its code among the judged documents at its place, and
reports those tied runs (the caller orders them by document id, as trec_eval does). A run that is not in that order is left to the general path
(:func:`~kolm_search.evaluation.measure_pass.ranking_order_of`, the numpy twin of this kernel
being :func:`place_run_numpy`, built on it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit

from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["BAD_CODE", "NAN_SCORE", "UNORDERED", "check_run", "place_run", "place_run_numpy"]

NAN_SCORE = -1  # a score is NaN: the run is not measured here
UNORDERED = -2  # not in rank order within contiguous queries: the general path ranks it
BAD_CODE = -3  # a query row, a query code or a document code out of range


@njit(i64(ro(i64), ro(i64), ro(f64), ro(i64), ro(i64), i64, rw(i64)), cache=True, nogil=True)
def _check(q, doc, score, row_code, judged_of, n_q, count):  # pragma: no cover - compiled
    n = len(q)
    n_rows = len(row_code)
    n_docs = len(judged_of)
    for c in range(n_q):
        count[c] = 0
    nan = False
    unordered = False
    m = 0
    i = 0
    while i < n:  # query by query: codes, order, counts and the tied runs holding a judged entry
        r = q[i]
        if r < 0 or r >= n_rows:
            return BAD_CODE
        c = row_code[r]
        if c < 0 or c >= n_q:
            return BAD_CODE
        if count[c] != 0:  # a query in two places
            unordered = True
        prev = np.float32(np.inf)
        start = i
        judged = False
        end = i
        while end < n and q[end] == r:
            d = doc[end]
            if d < 0 or d >= n_docs:
                return BAD_CODE
            s = score[end]
            if np.isnan(s):
                nan = True
            s32 = np.float32(s)
            if s32 > prev:
                unordered = True
            elif s32 != prev:  # a run of equal scores ends before ``end``
                if judged and end - start > 1:
                    m += end - start
                start = end
                judged = False
            if judged_of[d] >= 0:
                judged = True
            prev = s32
            end += 1
        if judged and end - start > 1:
            m += end - start
        count[c] += end - i
        i = end
    if nan:
        return NAN_SCORE
    if unordered:
        return UNORDERED
    return m


@njit(i64(ro(i64), ro(i64), ro(f64), ro(i64), ro(i64), i64, ro(i64), rw(i64), rw(i64), rw(i64), rw(i64), i64),
      cache=True, nogil=True)
def _place(q, doc, score, row_code, judged_of, base, count, r_doc, r_judged, tie_rows, tie_run,
           n_ties):  # pragma: no cover - compiled
    n = len(q)
    n_q = len(count)
    ptr = np.empty(n_q, np.int64)
    done = np.zeros(n_q, np.bool_)
    at = base
    for c in range(n_q):
        ptr[c] = at
        at += count[c]
    if at - base != n or at > len(r_doc) or at > len(r_judged):
        return BAD_CODE
    m = 0
    i = 0
    while i < n:  # one query's entries: placed in order, its tied runs holding a judged entry reported
        r = q[i]
        if r < 0 or r >= len(row_code) or row_code[r] < 0 or row_code[r] >= n_q:
            return BAD_CODE
        c = row_code[r]
        shift = ptr[c] - i
        end = i + count[c]
        if done[c] or end <= i or end > n or (end < n and q[end] == r):  # counts that are not this run's
            return BAD_CODE
        done[c] = True
        start = i
        prev = np.float32(score[i])
        judged = False
        for t in range(i, end + 1):
            s32 = np.float32(score[t]) if t < end else prev
            if t == end or s32 != prev:  # a run of equal scores ends before t
                if judged and t - start > 1:
                    if n_ties + m + t - start > min(len(tie_rows), len(tie_run)):
                        return BAD_CODE
                    for u in range(start, t):
                        tie_rows[n_ties + m] = u + shift
                        tie_run[n_ties + m] = start + shift  # the run's first position
                        m += 1
                if t == end:
                    break
                start = t
                judged = False
                prev = s32
            d = doc[t]
            if q[t] != r or d < 0 or d >= len(judged_of):
                return BAD_CODE
            jd = judged_of[d]
            r_doc[t + shift] = d
            r_judged[t + shift] = jd
            if jd >= 0:
                judged = True
        i = end
    return m


def check_run(q: npt.NDArray[np.int64], doc: npt.NDArray[np.int64], score: npt.NDArray[np.float64],
              row_code: npt.NDArray[np.int64], judged_of: npt.NDArray[np.int64], n_q: int,
              count: npt.NDArray[np.int64]) -> int:
    """Check one run and count it, before :func:`place_run` places it.

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
    count : int64 (n_q,)
        Written: each query code's number of entries.

    Returns
    -------
    int
        The number of entries in runs of two or more entries of one query tied on their float32
        score (``-0.0`` equal to ``0.0``) that hold a judged entry (the tie positions
        :func:`place_run` reports), or :data:`BAD_CODE` (a code out of range), :data:`NAN_SCORE`
        or :data:`UNORDERED` (not in rank order within contiguous queries), in that precedence.
    """
    q, doc, score, row_code, judged_of = _inputs(q, doc, score, row_code, judged_of)
    if len(count) != n_q or count.dtype != np.int64:
        raise ValueError(f"check_run: count must be int64 ({n_q},)")
    return int(_check(q, doc, score, row_code, judged_of, int(n_q), count))


def place_run(q: npt.NDArray[np.int64], doc: npt.NDArray[np.int64], score: npt.NDArray[np.float64],
              row_code: npt.NDArray[np.int64], judged_of: npt.NDArray[np.int64], base: int,
              count: npt.NDArray[np.int64], r_doc: npt.NDArray[np.int64], r_judged: npt.NDArray[np.int64],
              tie_rows: npt.NDArray[np.int64], tie_run: npt.NDArray[np.int64], n_ties: int) -> int:
    """Place a run that :func:`check_run` passed (``count`` its counts) into the combined ranking:
    ``r_doc`` / ``r_judged`` int64 (N,) get its entries' document and judged codes at ``base ..
    base + n``, by query code, then rank; ``tie_rows`` / ``tie_run`` int64 get, from ``n_ties``,
    the positions of its tied runs holding a judged entry (ascending within each run) and each
    run's number (its first position). Returns the number of tie positions written."""
    q, doc, score, row_code, judged_of = _inputs(q, doc, score, row_code, judged_of)
    if base < 0 or n_ties < 0 or count.dtype != np.int64:
        raise ValueError("place_run: negative offsets or counts not int64")
    got = int(_place(q, doc, score, row_code, judged_of, int(base), count, r_doc, r_judged, tie_rows, tie_run,
                     int(n_ties)))
    if got < 0:
        raise ValueError("place_run: the counts are not this run's or the outputs do not hold it")
    return got


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
    """Twin of :func:`check_run` then :func:`place_run` for one run at ``base = 0``, from the general path's pieces
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
