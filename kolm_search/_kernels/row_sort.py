"""Row sort kernel: the stable argsort of each row of a float matrix (a reranker's new scores,
one row per query), as ``np.argsort(values, axis=1, kind="stable")`` gives it.

Each value becomes an int64 in the same order as the float (``-0.0`` as ``0.0``) whose low
``b`` bits, ``2**b >= width``, are replaced by its column (:func:`pack`), so numpy's vectorised
sort of the packed keys (unique within a row) orders each row by value wherever two values
differ above those bits; :func:`unpack` then reads the columns and finishes each row with an
insertion sort on (value, column), which moves only the entries whose values shared the rest,
so the result is the stable order exactly. A row needing many moves (values alike in all but
their last bits) is left to numpy's stable argsort. The numpy twin is :func:`stable_rows_numpy`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["stable_rows", "stable_rows_numpy"]

_MIN = np.int64(-0x8000_0000_0000_0000)
_LOW63 = np.int64(0x7FFF_FFFF_FFFF_FFFF)
MOVES = 8  # insertion moves per entry a row may take before it is sorted by numpy's stable argsort


@njit(types.boolean(ro(f64, 2), i64, rw(i64, 2)), cache=True, nogil=True)
def _pack(values, mask, packed):  # pragma: no cover - compiled
    raw = values.view(np.int64)
    n_rows, width = values.shape
    for r in range(n_rows):
        for c in range(width):
            if np.isnan(values[r, c]):
                return False
            v = raw[r, c]
            if v == _MIN:  # -0.0 is 0.0
                v = 0
            packed[r, c] = ((v ^ ((v >> 63) & _LOW63)) & ~mask) | c
    return True


@njit(i64(ro(f64, 2), i64, rw(i64, 2), rw(types.boolean)), cache=True, nogil=True)
def _unpack(values, mask, cols, wrong):  # pragma: no cover - compiled
    raw = values.view(np.int64)
    n_rows, width = values.shape
    keys = np.empty(width, np.int64)  # a row's value keys in the packed order
    n_wrong = 0
    for r in range(n_rows):
        wrong[r] = False
        for t in range(width):
            c = cols[r, t] & mask
            cols[r, t] = c
            v = raw[r, c]
            if v == _MIN:  # -0.0 is 0.0
                v = 0
            keys[t] = v ^ ((v >> 63) & _LOW63)
        budget = MOVES * width
        for t in range(1, width):  # an insertion sort on (value key, column): exact and stable
            k = keys[t]
            if keys[t - 1] < k or (keys[t - 1] == k and cols[r, t - 1] < cols[r, t]):
                continue
            c = cols[r, t]
            u = t - 1
            while u >= 0 and (keys[u] > k or (keys[u] == k and cols[r, u] > c)):
                keys[u + 1] = keys[u]
                cols[r, u + 1] = cols[r, u]
                u -= 1
                budget -= 1
            keys[u + 1] = k
            cols[r, u + 1] = c
            if budget < 0:
                wrong[r] = True
                n_wrong += 1
                break
    return n_wrong


def stable_rows(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64] | None:
    """``np.argsort(values, axis=1, kind="stable")`` (int64 ``(n_rows, width)``) of a float64
    matrix ``(n_rows, width)``; None when it holds NaN (the caller sorts it otherwise)."""
    values = np.ascontiguousarray(values, np.float64)
    if values.ndim != 2:
        raise ValueError(f"stable_rows takes a matrix, got {values.ndim} dimensions")
    n_rows, width = values.shape
    mask = np.int64((1 << max(1, (width - 1).bit_length())) - 1)
    packed = np.empty((n_rows, width), np.int64)
    if not _pack(values, mask, packed):
        return None
    packed.sort(axis=1)
    wrong = np.empty(n_rows, np.bool_)
    if _unpack(values, mask, packed, wrong):
        rows = np.flatnonzero(wrong)
        packed[rows] = np.argsort(values[rows], axis=1, kind="stable")
    return packed


def stable_rows_numpy(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Twin of :func:`stable_rows` (for a matrix without NaN)."""
    return np.argsort(values, axis=1, kind="stable").astype(np.int64)
