"""Ranking kernel: trec_eval's row order of a run that is already in rank order, in one pass.

A run is ranked by query ascending, then score descending compared as float32 (-0.0 equal to
0.0, as trec_eval compares them). Rows are packed into one uint64 key per row, the query code
in the high 32 bits and the score's bits, flipped so that a higher score is a smaller number,
in the low 32: the stable sort of the keys is the ranking (ties on a key are broken by the
caller, by document id).

:func:`presorted_ranking` computes the keys and, when every query's rows are together and in key
order already (a run file as search engines write it), the stable sort's permutation without
sorting: the queries' row ranges put in query-code order. :func:`descending_key_numpy` and
:func:`presorted_order_numpy` are its numpy twins (the test oracle and the general path).
:func:`tie_runs` finds, in one pass over the ranking, the runs of equal keys that hold a row
that matters (a judged one), whose rows the caller orders by document id; its twin is
:func:`tie_runs_numpy`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels.sig import i64, ro, rw

__all__ = ["descending_key_numpy", "presorted_order_numpy", "presorted_ranking", "tie_runs", "tie_runs_numpy"]

_U32 = types.uint32
_U64 = types.uint64
_SIGN = np.uint32(0x80000000)
_LOW = np.uint64(0xFFFFFFFF)


@njit(types.boolean(ro(i64), ro(_U32), i64, rw(_U64), rw(i64), rw(i64), rw(i64)), cache=True, nogil=True)
def _presorted(query, bits, n_q, key, start, count, order):  # pragma: no cover - compiled
    n = len(query)
    for q in range(n_q):
        start[q] = -1
        count[q] = 0
    ordered = True
    for i in range(n):
        b = bits[i]
        if b == _SIGN:  # -0.0 is 0.0
            b = np.uint32(0)
        ascending = ~b if b >> np.uint32(31) else b | _SIGN
        q = query[i]
        key[i] = (np.uint64(q) << np.uint64(32)) | (np.uint64(~ascending) & _LOW)
        if not ordered:
            continue
        if i == 0 or query[i - 1] != q:
            if start[q] != -1:  # a query in two places
                ordered = False
                continue
            start[q] = i
        elif key[i] < key[i - 1]:
            ordered = False
            continue
        count[q] += 1
    if not ordered:
        return False
    at = 0
    for q in range(n_q):
        for j in range(count[q]):
            order[at] = start[q] + j
            at += 1
    return True


def presorted_ranking(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32], n_q: int,
                      ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64] | None]:
    """The ranking keys (uint64 (n,)) of rows with query codes ``query`` int64 (n,), each in
    ``[0, n_q)``, and finite scores ``score32`` float32 (n,); and the stable sort of the keys
    (int64 (n,)) when every query's rows are together and in key order, else None."""
    query = np.ascontiguousarray(query, np.int64)
    bits = np.ascontiguousarray(score32, np.float32).view(np.uint32)
    n = len(query)
    if len(bits) != n:
        raise ValueError(f"presorted_ranking: {n} query codes but {len(bits)} scores")
    if n and (int(query.min()) < 0 or int(query.max()) >= n_q):
        raise ValueError(f"presorted_ranking: query codes must lie in [0, {n_q}), got "
                         f"[{int(query.min())}, {int(query.max())}]")
    key, order = np.empty(n, np.uint64), np.empty(n, np.int64)
    start, count = np.empty(n_q, np.int64), np.empty(n_q, np.int64)
    ok = _presorted(query, bits, int(n_q), key, start, count, order)
    return key, order if ok else None


def descending_key_numpy(query: npt.NDArray[np.int64], score32: npt.NDArray[np.float32]) -> npt.NDArray[np.uint64]:
    """Twin of the keys of :func:`presorted_ranking`."""
    bits = (score32 + np.float32(0.0)).view(np.uint32)
    ascending = np.where(bits >> np.uint32(31), ~bits, bits | _SIGN)
    return (query.astype(np.uint64) << np.uint64(32)) | (~ascending).astype(np.uint64)


def presorted_order_numpy(query: npt.NDArray[np.int64], key: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64] | None:
    """Twin of the order of :func:`presorted_ranking`: the stable sort of ``key`` when every
    query's rows are together and in key order, else None."""
    n = len(key)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    boundary = query[1:] != query[:-1]
    if bool(((key[1:] < key[:-1]) & ~boundary).any()):
        return None
    starts = np.concatenate([[0], np.flatnonzero(boundary) + 1]).astype(np.int64)
    heads = query[starts]
    by_query = np.argsort(heads, kind="stable")
    if len(by_query) > 1 and not bool((heads[by_query][1:] > heads[by_query][:-1]).all()):
        return None  # a query in two places
    lengths = np.diff(np.append(starts, n))[by_query]
    shift = starts[by_query] - np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.arange(n, dtype=np.int64) + np.repeat(shift, lengths)


@njit(i64(ro(_U64), ro(i64), ro(types.boolean), rw(i64), rw(i64)), cache=True, nogil=True)
def _tie_runs(key, order, matters, rows, run):  # pragma: no cover - compiled
    n = len(order)
    m = 0
    n_runs = 0
    done = 0  # positions below it are in a run already looked at
    for p in range(n):  # the marked positions (few), each widened to its run of equal keys
        if p < done or not matters[order[p]]:
            continue
        k = key[order[p]]
        low = p
        while low > 0 and key[order[low - 1]] == k:
            low -= 1
        high = p + 1
        while high < n and key[order[high]] == k:
            high += 1
        done = high
        if high - low > 1:
            for i in range(low, high):
                rows[m] = i
                run[m] = n_runs
                m += 1
            n_runs += 1
    return m


def tie_runs(key: npt.NDArray[np.uint64], order: npt.NDArray[np.int64], matters: npt.NDArray[np.bool_],
             ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The positions ``rows`` int64 (m,) of ``order`` (the stable sort of ``key`` uint64 (n,))
    in runs of two or more equal keys holding a row that ``matters`` bool (n,) marks, ascending,
    and ``run`` int64 (m,) each one's run number (0, 1, ... in position order)."""
    key = np.ascontiguousarray(key, np.uint64)
    order = np.ascontiguousarray(order, np.int64)
    matters = np.ascontiguousarray(matters, np.bool_)
    n = len(order)
    if len(key) != n or len(matters) != n:
        raise ValueError(f"tie_runs: {len(key)} keys, {n} positions and {len(matters)} marks")
    if n and (int(order.min()) < 0 or int(order.max()) >= n):
        raise ValueError(f"tie_runs: positions must lie in [0, {n})")
    rows, run = np.empty(n, np.int64), np.empty(n, np.int64)
    m = _tie_runs(key, order, matters, rows, run)
    return rows[:m], run[:m]


def tie_runs_numpy(key: npt.NDArray[np.uint64], order: npt.NDArray[np.int64], matters: npt.NDArray[np.bool_],
                   ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Twin of :func:`tie_runs`: the runs around the rows that matter, found by binary search."""
    ranked = key[order]
    at = np.flatnonzero(matters[order])
    values, last = ranked[at], len(ranked) - 1
    tied = ((at > 0) & (ranked[np.maximum(at - 1, 0)] == values)) \
        | ((at < last) & (ranked[np.minimum(at + 1, last)] == values))
    values = values[tied]  # (sorted)
    if not len(values):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    low, high = np.searchsorted(ranked, values, "left"), np.searchsorted(ranked, values, "right")
    low, first = np.unique(low, return_index=True)  # each run once, in position order
    lengths = high[first] - low
    run = np.repeat(np.arange(len(low), dtype=np.int64), lengths)
    rows = np.arange(len(run), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths) \
        + np.repeat(low, lengths)
    return rows, run
