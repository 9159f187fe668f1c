"""Bounded min-heaps for top-k selection, used inside the sparse and dense kernels.

A heap of capacity k holds the best k (score, doc) pairs seen so far with the *worst* at the
root. Order everywhere: higher score first, equal scores by lower document code.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["heap_push", "kth_largest_above", "sort_heap", "topk_rows_numpy"]


@njit
def heap_push(hs, hd, size, k, s, d):  # pragma: no cover - compiled
    """Offer ``(s, d)`` to the heap ``hs/hd[:size]`` of capacity ``k``; returns the new size."""
    if size < k:  # grow: sift the new entry up from the last leaf
        i = size
        size += 1
        while i > 0:
            p = (i - 1) >> 1
            if s < hs[p] or (s == hs[p] and d > hd[p]):  # (s, d) worse than its parent
                hs[i] = hs[p]
                hd[i] = hd[p]
                i = p
            else:
                break
    else:
        if s < hs[0] or (s == hs[0] and d > hd[0]):  # not better than the worst kept
            return size
        i = _sift_down(hs, hd, size, s, d)
    hs[i] = s
    hd[i] = d
    return size


@njit
def _sift_down(hs, hd, size, s, d):  # pragma: no cover - compiled
    """Move the hole at the root down to where ``(s, d)`` belongs; returns that position."""
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            return i
        if c + 1 < size and (hs[c + 1] < hs[c] or (hs[c + 1] == hs[c] and hd[c + 1] > hd[c])):
            c += 1
        if hs[c] < s or (hs[c] == s and hd[c] > d):
            hs[i] = hs[c]
            hd[i] = hd[c]
            i = c
        else:
            return i


@njit
def sort_heap(hs, hd, size):  # pragma: no cover - compiled
    """Sort a heap built by :func:`heap_push` best first, in place (heap sort: the root, the
    worst kept, moves to the end repeatedly)."""
    end = size
    while end > 1:
        end -= 1
        s = hs[end]
        d = hd[end]
        hs[end] = hs[0]
        hd[end] = hd[0]
        i = _sift_down(hs, hd, end, s, d)
        hs[i] = s
        hd[i] = d


@njit
def kth_largest_above(vals, n, k, heap, lim):  # pragma: no cover - compiled
    """The ``k``-th largest of those of ``vals[:n]`` above ``lim``, given that at least ``k`` are
    (a min-heap of the best ``k`` in ``heap`` (k,); the caller counts them when it must)."""
    size = 0
    for c in range(n):
        v = vals[c]
        if v <= lim:
            continue
        if size < k:  # sift up
            i = size
            size += 1
            while i > 0:
                parent = (i - 1) >> 1
                if heap[parent] <= v:
                    break
                heap[i] = heap[parent]
                i = parent
            heap[i] = v
        elif v > heap[0]:  # replace the root, sift down
            i = 0
            while True:
                child = 2 * i + 1
                if child >= size:
                    break
                if child + 1 < size and heap[child + 1] < heap[child]:
                    child += 1
                if heap[child] >= v:
                    break
                heap[i] = heap[child]
                i = child
            heap[i] = v
    return heap[0]


def topk_rows_numpy(scores: npt.NDArray[np.float32], valid: npt.NDArray[np.bool_], k: int,
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Top-``k`` of each row of a dense score matrix among ``valid`` entries (the numpy oracle)."""
    n_q = scores.shape[0]
    out_d = np.full((n_q, k), -1, np.int64)
    out_s = np.zeros((n_q, k), np.float32)
    counts = np.zeros(n_q, np.int64)
    for q in range(n_q):
        cand = np.flatnonzero(valid[q])
        order = np.lexsort((cand, -scores[q, cand].astype(np.float64)))[:k]
        counts[q] = order.size
        out_d[q, : order.size] = cand[order]
        out_s[q, : order.size] = scores[q, cand[order]]
    return out_d, out_s, counts
