"""Membership of a document in a query's selection (:class:`kolm_search.selection.Selections`),
inlined into the sparse and dense kernels, with its numpy twin.

A selection is a row of ``masks`` (``mask_of[s] >= 0``) or sorted rows
``rows[ptr[s]:ptr[s + 1]]`` (binary search); ``s < 0`` selects everything.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

__all__ = ["find_row", "selected", "selection_matrix_numpy"]


@njit(cache=True, inline="always")
def find_row(rows, lo, hi, d):  # pragma: no cover - compiled
    """The position of ``d`` in sorted ``rows[lo:hi]``, or -1."""
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if rows[mid] < d:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < end and rows[lo] == d else -1


@njit(cache=True, inline="always")
def selected(s, d, ptr, rows, mask_of, masks):  # pragma: no cover - compiled
    """Whether document ``d`` is in selection ``s``."""
    if s < 0:
        return True
    m = mask_of[s]
    if m >= 0:
        return masks[m, d] != 0
    return find_row(rows, ptr[s], ptr[s + 1], d) >= 0


def selection_matrix_numpy(ids: npt.NDArray[np.int64], ptr: npt.NDArray[np.int64], rows: npt.NDArray[np.int64],
                           mask_of: npt.NDArray[np.int64], masks: npt.NDArray[np.uint8],
                           n_docs: int) -> npt.NDArray[np.bool_]:
    """Numpy twin: every query's selection as a bool matrix (n_queries, n_docs)."""
    out = np.ones((len(ids), n_docs), bool)
    for q, s in enumerate(ids):
        if s < 0:
            continue
        if mask_of[s] >= 0:
            out[q] = masks[mask_of[s]].astype(bool)
        else:
            out[q] = False
            out[q, rows[ptr[s]:ptr[s + 1]]] = True
    return out
