"""Bounded min-heaps for top-k selection, used inside the sparse and dense kernels.

A heap of capacity k holds the best k (score, doc) pairs seen so far with the *worst* at the
root. Order everywhere: higher score first, equal scores by lower document code.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["heap_push", "sort_heap", "topk_rows_numpy"]


@njit(cache=True, inline="always")
def _worse(s1, d1, s2, d2):  # pragma: no cover - compiled
    return s1 < s2 or (s1 == s2 and d1 > d2)


@njit(cache=True, inline="always")
def _swap(hs, hd, i, j):  # pragma: no cover - compiled
    hs[i], hs[j] = hs[j], hs[i]
    hd[i], hd[j] = hd[j], hd[i]


@njit(cache=True, inline="always")
def _sift_down(hs, hd, i, size):  # pragma: no cover - compiled
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        if left + 1 < size and _worse(hs[left + 1], hd[left + 1], hs[left], hd[left]):
            c = left + 1
        if _worse(hs[c], hd[c], hs[i], hd[i]):
            _swap(hs, hd, i, c)
            i = c
        else:
            break


@njit(cache=True)
def heap_push(hs, hd, size, k, s, d):  # pragma: no cover - compiled
    """Offer ``(s, d)`` to the heap ``hs/hd[:size]`` of capacity ``k``; returns the new size."""
    if size < k:
        i = size
        hs[i] = s
        hd[i] = d
        while i > 0:
            p = (i - 1) >> 1
            if _worse(hs[i], hd[i], hs[p], hd[p]):
                _swap(hs, hd, i, p)
                i = p
            else:
                break
        return size + 1
    if not _worse(hs[0], hd[0], s, d):
        return size
    hs[0] = s
    hd[0] = d
    _sift_down(hs, hd, 0, size)
    return size


@njit(cache=True)
def sort_heap(hs, hd, size):  # pragma: no cover - compiled
    """Sort a heap built by :func:`heap_push` best first, in place (heap sort: the root, the
    worst kept, moves to the end repeatedly)."""
    end = size
    while end > 1:
        end -= 1
        _swap(hs, hd, 0, end)
        _sift_down(hs, hd, 0, end)


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
