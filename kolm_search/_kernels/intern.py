"""String interning: Arrow string buffers in, dense int codes out (first-appearance order).

``intern_bytes(offsets int64 (n+1,), data uint8 (m,)) -> (codes int64 (n,), first int64 (u,))``
    ``codes[i]`` is the rank of string i's first appearance; ``first[c]`` is the row where
    code c first appears. Open addressing on word-at-a-time hashes (murmur3-finalised), doubling at load 1/2; a row equal
    to the one before reuses its code without hashing (sorted or run-length columns such as
    query ids cost one byte comparison a row).

Numpy twin: :func:`intern_numpy` (``pd.factorize`` on the decoded strings).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
from numba import njit

from kolm_search._kernels.words import bytes_equal, hash_bytes

__all__ = ["intern_bytes", "intern_numpy"]


@njit(cache=True, inline="always")
def _equal(data, offsets, a, b):  # pragma: no cover - compiled
    ua, ub, one = np.uint64(a), np.uint64(b), np.uint64(1)  # rows are >= 0: no wraparound check
    sa, ea = offsets[ua], offsets[ua + one]
    sb, eb = offsets[ub], offsets[ub + one]
    if ea - sa != eb - sb:
        return False
    return bytes_equal(data, sa, data, sb, ea - sa)


@njit(cache=True, inline="always")
def _hash(data, s, e):  # pragma: no cover - compiled
    return hash_bytes(data, s, e)


@njit(cache=True)
def _fill(offsets, data, i0, table, cap, ustart, ubytes, first, codes, nu, used):  # pragma: no cover
    """Intern rows from ``i0`` until done or until a buffer must grow; returns (i, nu, used).

    No array is reassigned in here (that would make Numba refcount them in the hot loop).
    """
    n = offsets.shape[0] - 1
    mask = cap - 1
    for i in range(i0, n):
        s = offsets[i]
        e = offsets[i + 1]
        ln = e - s
        if i > 0 and _equal(data, offsets, i - 1, i):
            codes[i] = codes[i - 1]
            continue
        h = np.int64(_hash(data, s, e) >> np.uint64(1))  # non-negative: -1 marks a free slot
        j = h & mask
        u = table[2 * j + 1]
        while u != -1:
            if table[2 * j] == h and ustart[u + 1] - ustart[u] == ln and bytes_equal(ubytes, ustart[u], data, s, ln):
                break
            j = (j + 1) & mask
            u = table[2 * j + 1]
        if u != -1:
            codes[i] = u
            continue
        if 2 * (nu + 1) > cap or nu + 2 > ustart.shape[0] or used + ln > ubytes.shape[0]:
            return i, nu, used  # grow, then resume at row i
        ubytes[used: used + ln] = data[s:e]
        ustart[nu] = used
        used += ln
        ustart[nu + 1] = used
        table[2 * j] = h
        table[2 * j + 1] = nu
        first[nu] = i
        codes[i] = nu
        nu += 1
    return n, nu, used


@njit(cache=True)
def _rehash(old, cap):  # pragma: no cover - compiled
    table = np.full(2 * cap, -1, np.int64)
    for slot in range(old.shape[0] // 2):
        uu = old[2 * slot + 1]
        if uu == -1:
            continue
        hh = old[2 * slot]
        jj = hh & (cap - 1)
        while table[2 * jj + 1] != -1:
            jj = (jj + 1) & (cap - 1)
        table[2 * jj] = hh
        table[2 * jj + 1] = uu
    return table


@njit(cache=True)
def intern_bytes(offsets, data):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    cap = 1024
    table = np.full(2 * cap, -1, np.int64)  # interleaved (hash, code) slots: one cache line a probe
    ustart = np.empty(1024, np.int64)  # each unique's bytes, copied into a compact buffer
    ubytes = np.empty(8192, np.uint8)
    first = np.empty(max(n, 1), np.int64)
    codes = np.empty(n, np.int64)
    i, nu, used = 0, 0, 0
    while True:
        i, nu, used = _fill(offsets, data, i, table, cap, ustart, ubytes, first, codes, nu, used)
        if i >= n:
            break
        if 2 * (nu + 1) > cap:
            cap *= 2
            table = _rehash(table, cap)
        if nu + 2 > ustart.shape[0]:
            grown = np.empty(ustart.shape[0] * 2, np.int64)
            grown[: nu + 1] = ustart[: nu + 1]
            ustart = grown
        need = used + offsets[i + 1] - offsets[i]
        if need > ubytes.shape[0]:
            gb = np.empty(max(ubytes.shape[0] * 2, need), np.uint8)
            gb[:used] = ubytes[:used]
            ubytes = gb
    return codes, first[:nu].copy()


def intern_numpy(values: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Twin of :func:`intern_bytes` on decoded values: codes and first-appearance rows."""
    codes, _ = pd.factorize(np.asarray(values, dtype=object))
    codes = codes.astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    return codes, first.astype(np.int64)
