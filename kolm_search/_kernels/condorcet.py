"""Condorcet fusion kernel: each query's candidates sorted by pairwise majority votes.

Input layout as the fusion kernel's (:mod:`kolm_search._kernels.fusion`): query ``g`` owns
entries ``ptr[g]:ptr[g+1]``, each list's entries contiguous, lists in increasing id, best
first; a document repeated inside one list counts once, at its first (best) entry.

Per query, the candidates are the documents of any list, in first-appearance order (list
order, then rank). Document ``a`` *beats* ``b`` when the lists ranking ``a`` above ``b`` weigh
more than the lists ranking ``b`` above ``a`` (list weights ``w``; a document absent from a
list ranks below every document of it, two absent documents are not compared there). The
candidates are sorted by a stable merge sort with "``b`` goes before ``a`` iff ``b`` beats
``a``" (Montague & Aslam's Condorcet-fuse, CIKM 2002): when the majority relation is a total
order this is that order; with ties or cycles, the merge sort's deterministic result. The
document at zero-based position ``i`` of ``n`` candidates scores ``n - i``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import f64, i64, ro, rw
from kolm_search.errors import KolmValueError

__all__ = ["condorcet_groups", "condorcet_groups_numpy"]

_PARALLEL_ENTRIES = 20_000
_ABSENT = np.iinfo(np.int64).max
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(f64), i64, rw(i64), rw(f64), rw(i64), rw(i64), rw(i64),
                        rw(i64), rw(i64), rw(i64), rw(i64), rw(i64), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _condorcet_chunk(ptr, lists, docs, weights, limit, out_docs, out_scores, counts, mark, cand, touched, pos,
                     idx, tmp, seen, g0, g1):  # pragma: no cover - compiled
    """Sort queries ``g0 <= g < g1``; query g's list goes to ``out[ptr[g]:ptr[g]+counts[g]]``.
    Scratch: ``mark`` (last query seen) and ``cand`` (candidate index) per document code;
    ``touched``, ``idx``, ``tmp`` as long as the widest query; ``pos`` (n_lists x width)
    holds each candidate's position in each list; ``seen`` the entries kept per list."""
    n_lists = weights.shape[0]
    width = touched.shape[0]
    absent = np.iinfo(np.int64).max
    for g in range(g0, g1):
        nc = 0
        for p in range(ptr[g], ptr[g + 1]):
            d = docs[p]
            if mark[d] != g:
                mark[d] = g
                cand[d] = nc
                touched[nc] = d
                nc += 1
        for lst in range(n_lists):
            seen[lst] = 0
            for c in range(nc):
                pos[lst * width + c] = absent
        for p in range(ptr[g], ptr[g + 1]):
            lst = lists[p]
            at = lst * width + cand[docs[p]]
            if pos[at] == absent:  # a repeat inside one list counts once
                pos[at] = seen[lst]
                seen[lst] += 1
        for c in range(nc):
            idx[c] = c
        run = 1
        while run < nc:  # bottom-up stable merge sort
            for lo in range(0, nc, 2 * run):
                mid = min(lo + run, nc)
                hi = min(lo + 2 * run, nc)
                i, j, k = lo, mid, lo
                while i < mid and j < hi:
                    a, b = idx[i], idx[j]
                    for_a = 0.0
                    for_b = 0.0
                    for lst in range(n_lists):
                        pa, pb = pos[lst * width + a], pos[lst * width + b]
                        if pb < pa:
                            for_b += weights[lst]
                        elif pa < pb:
                            for_a += weights[lst]
                    if for_b > for_a:
                        tmp[k] = b
                        j += 1
                    else:
                        tmp[k] = a
                        i += 1
                    k += 1
                while i < mid:
                    tmp[k] = idx[i]
                    i += 1
                    k += 1
                while j < hi:
                    tmp[k] = idx[j]
                    j += 1
                    k += 1
            for c in range(nc):
                idx[c] = tmp[c]
            run *= 2
        m = nc if limit < 0 or limit > nc else limit
        base = ptr[g]
        for i in range(m):
            out_docs[base + i] = touched[idx[i]]
            out_scores[base + i] = nc - i
        counts[g] = m


def condorcet_groups(ptr: npt.ArrayLike, lists: npt.ArrayLike, docs: npt.ArrayLike, weights: npt.ArrayLike,
                     n_docs: int, *, limit: int | None = None, n_threads: int | None = None) -> tuple[I64, I64, F64]:
    """Condorcet-fuse every query in one call (see the module docstring).

    Parameters
    ----------
    ptr : int64 (n_groups + 1,)
    lists, docs : int64 (n,)
        As for :func:`kolm_search._kernels.fusion.fuse_groups`.
    weights : float64 (n_lists,)
        Each list's vote (finite, >= 0); list ids lie in ``[0, n_lists)``.
    n_docs : int
        Document codes lie in ``[0, n_docs)``.
    limit : int, optional
        Keep at most ``limit`` documents per query.
    n_threads : int, optional
        Threads for this call.

    Returns
    -------
    out_ptr : int64 (n_groups + 1,)
    out_docs : int64 (m,)
    out_scores : float64 (m,)
        Query g's list ``out_docs[out_ptr[g]:out_ptr[g+1]]``, best first, scored ``n - i``.
    """
    from kolm_search._kernels.fusion import _checked, _limit, _renumbered

    w = np.ascontiguousarray(weights, dtype=np.float64)
    p, li, dc, _ = _checked(ptr, lists, docs, np.zeros(len(np.asarray(docs))), int(n_docs))
    if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise KolmValueError("weights must be finite and non-negative, one per list")
    n, n_groups = dc.shape[0], p.shape[0] - 1
    if n and li.max() >= w.shape[0]:
        raise KolmValueError(f"list ids must lie in [0, {w.shape[0]}), got {li.max()}")
    lim = _limit(limit)
    dc, n_codes, uniques = _renumbered(dc, int(n_docs))
    out_docs = np.empty(n, np.int64)
    out_scores = np.empty(n, np.float64)
    counts = np.zeros(n_groups, np.int64)
    width = int(np.diff(p).max(initial=0)) + 1
    n_lists = max(w.shape[0], 1)

    def chunk(g0: int, g1: int) -> None:
        _condorcet_chunk(p, li, dc, w, lim, out_docs, out_scores, counts, np.full(n_codes, -1, np.int64),
                         np.zeros(n_codes, np.int64), np.empty(width, np.int64), np.empty(n_lists * width, np.int64),
                         np.empty(width, np.int64), np.empty(width, np.int64), np.zeros(n_lists, np.int64), g0, g1)

    threads = resolve_threads(n_threads) if n >= _PARALLEL_ENTRIES else 1
    run_chunks(chunk, chunk_bounds(p, threads))
    out_ptr = np.zeros(n_groups + 1, np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    keep = np.repeat(p[:-1] - out_ptr[:-1], counts) + np.arange(int(out_ptr[-1]))
    out_docs, out_scores = out_docs[keep], out_scores[keep]
    return out_ptr, (out_docs if uniques is None else uniques[out_docs]), out_scores


def condorcet_groups_numpy(ptr: npt.ArrayLike, lists: npt.ArrayLike, docs: npt.ArrayLike, weights: npt.ArrayLike,
                           *, limit: int | None = None) -> tuple[I64, I64, F64]:
    """Plain-Python twin of :func:`condorcet_groups` (the test oracle)."""
    p, li, dc, w = np.asarray(ptr), np.asarray(lists), np.asarray(docs), np.asarray(weights, float)
    out_ptr: list[int] = [0]
    out_docs: list[int] = []
    out_scores: list[float] = []
    for g in range(len(p) - 1):
        rank: list[dict[int, int]] = [{} for _ in range(len(w))]
        order: list[int] = []
        for i in range(int(p[g]), int(p[g + 1])):
            d, lst = int(dc[i]), int(li[i])
            if d not in order:
                order.append(d)
            rank[lst].setdefault(d, len(rank[lst]))

        def beats(b: int, a: int, rank: Any = rank) -> bool:
            pa = [r.get(a, _ABSENT) for r in rank]
            pb = [r.get(b, _ABSENT) for r in rank]
            for_b = sum(float(w[x]) for x in range(len(w)) if pb[x] < pa[x])
            for_a = sum(float(w[x]) for x in range(len(w)) if pa[x] < pb[x])
            return for_b > for_a

        run = 1
        while run < len(order):
            merged: list[int] = []
            for lo in range(0, len(order), 2 * run):
                left, right = order[lo:lo + run], order[lo + run:lo + 2 * run]
                while left and right:
                    merged.append(right.pop(0) if beats(right[0], left[0]) else left.pop(0))
                merged += left + right
            order, run = merged, run * 2
        n_c = len(order)
        kept = order[: limit if limit is not None else n_c]
        out_docs.extend(kept)
        out_scores.extend(float(n_c - i) for i in range(len(kept)))
        out_ptr.append(len(out_docs))
    return np.asarray(out_ptr, np.int64), np.asarray(out_docs, np.int64), np.asarray(out_scores, np.float64)
