"""A stable argsort written out for Numba kernels.

``np.argsort(kind="mergesort")`` inside a kernel costs ~4 s of cold compile per call site (and
its merge sort is no faster at the list sizes kernels sort: hundreds to a few thousand), so
the kernels that need a stable order share this one.

``stable_argsort(keys (n,), n, o int64 (n,), tmp int64 (n,))`` -> fills ``o``; numpy twin:
``np.argsort(keys[:n], kind="stable")`` (what the tests compare against).
"""

from __future__ import annotations

from numba import njit

__all__ = ["stable_argsort"]


@njit(cache=True)
def stable_argsort(keys, n, o, tmp):  # pragma: no cover - compiled
    """``o[:n]`` = positions ``0..n-1`` by ascending ``keys[:n]``, equal keys in position order.

    Bottom-up merge sort; ``o`` and ``tmp`` int64 (>= n,), ``keys`` any ordered dtype (one
    compilation per key dtype: int64 in fusion, float32 in the metrics).
    """
    for t in range(n):
        o[t] = t
    src = o
    dst = tmp
    in_o = True
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            a, b, k = lo, mid, lo
            while a < mid and b < hi:
                if keys[src[b]] < keys[src[a]]:
                    dst[k] = src[b]
                    b += 1
                else:
                    dst[k] = src[a]
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
        in_o = not in_o
        width *= 2
    if not in_o:
        for t in range(n):
            o[t] = src[t]
