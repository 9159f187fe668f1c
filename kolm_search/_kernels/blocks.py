"""Blocks of postings: the per-block bounds that the pruned kernel reads, and its lookups.

A term's postings (documents ascending, :mod:`kolm_search._kernels.sparse`'s layout) are cut
into blocks of :data:`BLOCK` postings from the term's first: block ``i`` of term t holds
``[t_ptr[t] + i * BLOCK, min(t_ptr[t] + (i + 1) * BLOCK, t_ptr[t + 1]))`` and is entry
``b_ptr[t] + i`` of the block arrays (:func:`block_pointers`). Per block: ``b_max`` float32, its
largest weight, and ``b_last`` int32, its last document. Per term: ``t_max`` (largest weight, 0
without postings) and ``t_min`` (smallest weight, +inf without postings).

:func:`posting_bounds` computes all four in one pass over the postings (threads over terms);
:func:`posting_bounds_numpy` is its twin. The ``@njit`` helpers find a document in a term's
postings from the blocks' last documents: galloping over the blocks from the previous
document's block (callers visit documents in ascending order), then a count of the smaller
documents inside the block (a fixed-length loop, which vectorises).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import f32, i64, ro, rw

__all__ = ["BLOCK", "BLOCK_SHIFT", "block_pointers", "posting_bounds", "posting_bounds_numpy"]

BLOCK_SHIFT = 6
BLOCK = 1 << BLOCK_SHIFT  # postings per block
_SIGNATURE = types.void(ro(i64), ro(types.int32), ro(f32), ro(i64), rw(f32), rw(f32), rw(f32), rw(types.int32), i64,
                        i64)


def block_pointers(t_ptr: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each term's blocks start in the block arrays, int64 (V + 1,): term t has
    ``ceil(df_t / BLOCK)`` blocks (none without postings)."""
    out = np.zeros(len(t_ptr), np.int64)
    np.cumsum((np.diff(np.asarray(t_ptr, np.int64)) + (BLOCK - 1)) // BLOCK, out=out[1:])
    return out


@njit(_SIGNATURE, cache=True, nogil=True)
def _bounds_chunk(t_ptr, t_docs, t_w, b_ptr, t_min, t_max, b_max, b_last, v0, v1):  # pragma: no cover - compiled
    """Terms ``v0 <= t < v1``."""
    for t in range(v0, v1):
        lo, hi = t_ptr[t], t_ptr[t + 1]
        lo_t = np.float32(np.inf)
        hi_t = np.float32(0.0)
        b = b_ptr[t]
        for start in range(lo, hi, BLOCK):
            end = min(start + BLOCK, hi)
            mx = t_w[start]
            mn = t_w[start]
            for p in range(start + 1, end):
                x = t_w[p]
                mx = max(mx, x)
                mn = min(mn, x)
            b_max[b] = mx
            b_last[b] = t_docs[end - 1]
            b += 1
            hi_t = max(hi_t, mx)
            lo_t = min(lo_t, mn)
        t_min[t] = lo_t
        t_max[t] = hi_t


def posting_bounds(t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], t_w: npt.NDArray[np.float32], *,
                   n_threads: int | None = None,
                   ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32],
                              npt.NDArray[np.int32]]:
    """``t_min, t_max`` float32 (V,), ``b_max`` float32 (n_blocks,), ``b_last`` int32
    (n_blocks,) of postings ``t_ptr`` int64 (V + 1,), ``t_docs`` int32, ``t_w`` float32 (nnz,)
    (the caller guarantees the layout: pointers monotone, ending at ``len(t_w)``). Weights are
    compared as floats: a NaN weight gives undefined bounds (an index refuses NaN weights)."""
    c = np.ascontiguousarray
    t_ptr, t_docs, t_w = c(t_ptr, np.int64), c(t_docs, np.int32), c(t_w, np.float32)
    n_terms = len(t_ptr) - 1
    b_ptr = block_pointers(t_ptr)
    t_min = np.empty(n_terms, np.float32)
    t_max = np.empty(n_terms, np.float32)
    b_max = np.empty(int(b_ptr[-1]), np.float32)
    b_last = np.empty(int(b_ptr[-1]), np.int32)
    bounds = chunk_bounds(t_ptr, resolve_threads(n_threads) if len(t_w) > 1 << 20 else 1)
    run_chunks(lambda v0, v1: _bounds_chunk(t_ptr, t_docs, t_w, b_ptr, t_min, t_max, b_max, b_last, v0, v1), bounds)
    return t_min, t_max, b_max, b_last


def posting_bounds_numpy(t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], t_w: npt.NDArray[np.float32],
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Numpy twin of :func:`posting_bounds` (the test oracle)."""
    ptr = np.asarray(t_ptr, np.int64)
    df = np.diff(ptr)
    has = df > 0
    t_min = np.full(len(df), np.inf, np.float32)
    t_max = np.zeros(len(df), np.float32)
    w = np.asarray(t_w, np.float32)
    if has.any():
        t_min[has] = np.minimum.reduceat(w, ptr[:-1][has])
        t_max[has] = np.maximum.reduceat(w, ptr[:-1][has])
    b_ptr = block_pointers(ptr)
    n_blocks = int(b_ptr[-1])
    term = np.repeat(np.arange(len(df)), np.diff(b_ptr))  # each block's term
    starts = ptr[:-1][term] + ((np.arange(n_blocks) - b_ptr[:-1][term]) << BLOCK_SHIFT)
    ends = np.minimum(starts + BLOCK, ptr[1:][term])
    b_max = np.maximum.reduceat(w, starts) if n_blocks else np.zeros(0, np.float32)
    b_last = np.asarray(t_docs, np.int32)[ends - 1] if n_blocks else np.zeros(0, np.int32)
    return t_min, t_max, b_max.astype(np.float32), b_last.astype(np.int32)


@njit
def next_block(b_last, bm, nb, j, d):  # pragma: no cover - compiled
    """The first block ``>= j`` of a term whose last document is ``>= d`` (its blocks are
    ``b_last[bm : bm + nb]``, numbered from 0), or ``nb``."""
    if j >= nb or b_last[bm + j] >= d:
        return j
    a = j + 1  # every block before a ends below d
    step = 1
    b = a
    while b < nb and b_last[bm + b] < d:
        a = b + 1
        b = a + step
        step <<= 1
    if b > nb:
        b = nb
    while a < b:  # the answer lies in [a, b]
        mid = (a + b) >> 1
        if b_last[bm + mid] < d:
            a = mid + 1
        else:
            b = mid
    return a


@njit
def in_block(t_docs, start, end, d):  # pragma: no cover - compiled
    """The first position of ``[start, end)`` holding a document ``>= d``, given one does."""
    if end - start == BLOCK:
        full = np.int32(0)
        for x in range(BLOCK):
            full += np.int32(t_docs[start + x] < d)
        return start + full
    cnt = 0
    for x in range(start, end):
        cnt += t_docs[x] < d
    return start + cnt


@njit
def find(t_docs, lo, hi, b_last, bm, nb, j, d):  # pragma: no cover - compiled
    """``(position of d in the postings [lo, hi) or -1, d's block)``, searching from block ``j``."""
    j = next_block(b_last, bm, nb, j, d)
    if j >= nb:
        return -1, j
    start = lo + (j << BLOCK_SHIFT)
    end = min(start + BLOCK, hi)
    p = in_block(t_docs, start, end, d)
    return (p if t_docs[p] == d else -1), j
