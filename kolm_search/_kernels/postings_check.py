"""Checking a block of saved postings in one pass: what the search kernels rely on.

A block is the postings of terms ``t0 .. t1 - 1`` (pointers ``t_ptr`` int64 (V + 1,), already
checked: from 0, never decreasing), given as the slices ``docs`` (int32) and ``weights``
(float32) that start at posting ``base = t_ptr[t0]``. :func:`first_bad_posting` returns the
first posting that breaks an invariant, as ``(kind, position)``:

=====  ==================================================================
kind   the posting at ``position`` (counted over the whole postings)
=====  ==================================================================
0      none: every posting is sound (``position`` -1)
1      its document row lies outside ``[0, n_docs)``
2      its document row is not above the one before it in its term
3      its weight is NaN, infinite or negative
=====  ==================================================================

and, for a sound block, writes the bounds that the pruned kernel reads (the layout of
:mod:`kolm_search._kernels.blocks`, whose :func:`~kolm_search._kernels.blocks.posting_bounds`
computes the same from resident arrays): each term's smallest and largest weight (``t_min[t]``,
+inf without postings; ``t_max[t]``, 0 without postings) and each of its blocks of
:data:`~kolm_search._kernels.blocks.BLOCK` postings' largest weight and last document
(``b_max``, ``b_last`` at ``b_ptr[t] + i``). It is one read of each slice, so that a load can
check an index of any size block by block (:mod:`kolm_search.retrievers._blocks`) without
mapping its pages. :func:`first_bad_term` does the same for a list of terms ``terms`` int64
(n,), in that order, over the whole postings (``base`` 0: the memory-mapped arrays, of which
only those terms' pages are read), for a search that checks the terms it reads on first use.
:func:`first_bad_posting_numpy` and :func:`first_bad_term_numpy` are the numpy twins (the test
oracles).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels.blocks import BLOCK, posting_bounds_numpy
from kolm_search._kernels.sig import f32, i64, ro, rw

__all__ = ["first_bad_posting", "first_bad_posting_numpy", "first_bad_term", "first_bad_term_numpy"]

_I32 = types.int32
_SIGNATURE = types.UniTuple(i64, 2)(ro(i64), ro(i64), ro(_I32), ro(f32), i64, i64, i64, rw(f32), rw(f32), rw(f32),
                                   rw(_I32))
_TERMS_SIGNATURE = types.UniTuple(i64, 2)(ro(i64), ro(i64), ro(_I32), ro(f32), ro(i64), i64, rw(f32), rw(f32), rw(f32),
                                         rw(_I32))


@njit(cache=True, nogil=True)
def _check_term(t, base, t_ptr, b_ptr, docs, weights, n_docs, t_min, t_max, b_max,
                b_last):  # pragma: no cover - compiled
    """Term ``t``'s postings (``docs``, ``weights`` from posting ``base``): (kind, position)."""
    inf = np.float32(np.inf)
    top = np.float32(0.0)
    low = inf
    prev = -1
    lo, hi = t_ptr[t], t_ptr[t + 1]
    b = b_ptr[t]
    for start in range(lo, hi, BLOCK):
        end = min(start + BLOCK, hi)
        mx = np.float32(0.0)
        for p in range(start, end):
            i = p - base
            d = docs[i]
            if d < 0 or d >= n_docs:
                return 1, p
            if d <= prev:
                return 2, p
            prev = d
            w = weights[i]
            if not (w >= 0 and w < inf):  # NaN fails both
                return 3, p
            if w > mx:
                mx = w
            if w < low:
                low = w
        b_max[b] = mx
        b_last[b] = docs[end - 1 - base]
        b += 1
        if mx > top:
            top = mx
    t_min[t] = low
    t_max[t] = top
    return 0, -1


@njit(_SIGNATURE, cache=True, nogil=True)
def first_bad_posting(t_ptr, b_ptr, docs, weights, t0, t1, n_docs, t_min, t_max, b_max,
                      b_last):  # pragma: no cover - compiled
    base = t_ptr[t0]
    for t in range(t0, t1):
        kind, pos = _check_term(t, base, t_ptr, b_ptr, docs, weights, n_docs, t_min, t_max, b_max, b_last)
        if kind:
            return kind, pos
    return 0, -1


@njit(_TERMS_SIGNATURE, cache=True, nogil=True)
def first_bad_term(t_ptr, b_ptr, docs, weights, terms, n_docs, t_min, t_max, b_max,
                   b_last):  # pragma: no cover - compiled
    for j in range(len(terms)):
        kind, pos = _check_term(terms[j], 0, t_ptr, b_ptr, docs, weights, n_docs, t_min, t_max, b_max, b_last)
        if kind:
            return kind, pos
    return 0, -1


def first_bad_posting_numpy(t_ptr: npt.NDArray[np.int64], b_ptr: npt.NDArray[np.int64], docs: npt.NDArray[np.int32],
                            weights: npt.NDArray[np.float32], t0: int, t1: int, n_docs: int,
                            t_min: npt.NDArray[np.float32], t_max: npt.NDArray[np.float32],
                            b_max: npt.NDArray[np.float32], b_last: npt.NDArray[np.int32]) -> tuple[int, int]:
    """Twin of :func:`first_bad_posting` (vectorised numpy)."""
    base = int(t_ptr[t0])
    ptr = np.asarray(t_ptr[t0:t1 + 1], np.int64) - base
    n = int(ptr[-1])
    docs, weights = np.asarray(docs[:n]), np.asarray(weights[:n])
    pos = np.arange(n)
    first_term = np.zeros(n, bool)
    starts = ptr[:-1][np.diff(ptr) > 0]
    first_term[starts] = True
    rising = np.ones(n, bool)
    rising[1:] = docs[1:] > docs[:-1]
    with np.errstate(invalid="ignore"):
        bad_w = ~((weights >= 0) & (weights < np.inf))
    kinds = np.where((docs < 0) | (docs >= n_docs), 1, np.where(~(rising | first_term), 2, np.where(bad_w, 3, 0)))
    hit = np.flatnonzero(kinds)
    if len(hit):
        return int(kinds[hit[0]]), int(pos[hit[0]]) + base
    lo_t, hi_t, bm, bl = posting_bounds_numpy(ptr, docs, weights)
    t_min[t0:t1], t_max[t0:t1] = lo_t, hi_t
    b0, b1 = int(b_ptr[t0]), int(b_ptr[t1])
    b_max[b0:b1], b_last[b0:b1] = bm, bl
    return 0, -1


def first_bad_term_numpy(t_ptr: npt.NDArray[np.int64], b_ptr: npt.NDArray[np.int64], docs: npt.NDArray[np.int32],
                         weights: npt.NDArray[np.float32], terms: npt.NDArray[np.int64], n_docs: int,
                         t_min: npt.NDArray[np.float32], t_max: npt.NDArray[np.float32],
                         b_max: npt.NDArray[np.float32], b_last: npt.NDArray[np.int32]) -> tuple[int, int]:
    """Twin of :func:`first_bad_term`: :func:`first_bad_posting_numpy` of each term in turn."""
    for t in np.asarray(terms, np.int64).tolist():
        lo, hi = int(t_ptr[t]), int(t_ptr[t + 1])
        got = first_bad_posting_numpy(t_ptr, b_ptr, docs[lo:hi], weights[lo:hi], t, t + 1, n_docs, t_min, t_max,
                                      b_max, b_last)
        if got[0]:
            return got
    return 0, -1
