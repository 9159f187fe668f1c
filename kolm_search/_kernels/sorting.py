"""Stable sorts written out for Numba kernels.

``np.argsort(kind="mergesort")`` inside a kernel costs ~4 s of cold compile per call site (and
its merge sort is no faster at the list sizes kernels sort: hundreds to a few thousand), so
the kernels share one bottom-up merge sort.

``merge_sort(idx int64 (>= n,), n, tmp int64 (>= n,), keys, rows, data, offsets, by_docno)``
    Stable in-place sort of ``idx[:n]`` (positions into ``keys``): by ascending ``keys``, or
    with ``by_docno`` the way trec_eval ranks a run: ``keys`` (scores) descending, equal
    scores by document id descending (``rows[i]`` is position i's row in the Arrow string
    buffers ``offsets int64, data uint8``).
``stable_argsort(keys (n,), n, o int64 (>= n,), tmp int64 (>= n,))``
    ``o[:n]`` = ``np.argsort(keys[:n], kind="stable")`` (its numpy twin, used by the tests).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["merge_sort", "stable_argsort"]


@njit(cache=True, inline="always")
def _bytes_cmp(data, offsets, a, b):  # pragma: no cover - compiled
    """strcmp of row a and row b: <0, 0, >0."""
    sa, ea = offsets[a], offsets[a + 1]
    sb, eb = offsets[b], offsets[b + 1]
    la, lb = ea - sa, eb - sb
    n = la if la < lb else lb
    for t in range(n):
        ca = data[sa + t]
        cb = data[sb + t]
        if ca != cb:
            return np.int64(ca) - np.int64(cb)
    return la - lb


@njit(cache=True)
def _before(i, j, score, rows, data, offsets):  # pragma: no cover - compiled
    """True when run entry i ranks before entry j (score desc, then docno desc)."""
    if score[i] != score[j]:
        return score[i] > score[j]
    return _bytes_cmp(data, offsets, rows[i], rows[j]) > 0


@njit(cache=True)
def merge_sort(idx, n, tmp, keys, rows, data, offsets, by_docno):  # pragma: no cover - compiled
    src = idx
    dst = tmp
    in_idx = True
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, k = lo, mid, lo
            while a < mid and b < hi:
                x = src[b]
                y = src[a]
                if _before(x, y, keys, rows, data, offsets) if by_docno else keys[x] < keys[y]:
                    dst[k] = x
                    b += 1
                else:
                    dst[k] = y
                    a += 1
                k += 1
            while a < mid:
                dst[k] = src[a]
                a += 1
                k += 1
            while b < hi:
                dst[k] = src[b]
                b += 1
                k += 1
        src, dst = dst, src
        in_idx = not in_idx
        width *= 2
    if not in_idx:
        for t in range(n):
            idx[t] = src[t]


@njit(cache=True)
def stable_argsort(keys, n, o, tmp):  # pragma: no cover - compiled
    """Positions ``0..n-1`` by ascending ``keys[:n]``, equal keys in position order, into ``o``."""
    for t in range(n):
        o[t] = t
    none_i = np.zeros(0, np.int64)
    merge_sort(o, n, tmp, keys, none_i, np.zeros(0, np.uint8), none_i, False)
