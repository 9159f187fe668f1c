"""The selections of a batch (:class:`kolm_search.engine.selection.Selections`) as the kernels read
them, and their numpy twin.

A selection ``s >= 0`` is a row of ``masks`` (``mask_of[s] >= 0``) or sorted rows
``rows[ptr[s]:ptr[s + 1]]``, found by binary search; ``s < 0`` selects everything. The sparse
and dense kernels write that test out in their loops: a helper taking the arrays costs their
reference counting on every call (measured: 2-3x the dense kernel's time under a filter).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["selection_matrix_numpy"]


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
