"""Repeats kernel: the first entry of a stage's candidate frame whose document its query already holds.

A stage returns one list per query, its entries grouped by query; a query holding one document
twice breaks the frame's schema (the operators match documents by (query, document code)).
:func:`first_repeat` finds the first such entry in one pass, stamping each document's slot of
a table-sized array with the query it was last seen in (O(entries + documents), no sort); for
a table much larger than the frame it sorts the entries' keys instead (:func:`first_repeat_numpy`,
the twin).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from kolm_search._kernels.sig import i64, ro, rw

__all__ = ["first_repeat", "first_repeat_numpy"]


@njit(i64(ro(i64), ro(i64), rw(i64)), cache=True, nogil=True)
def _first_repeat(query, doc, stamp):  # pragma: no cover - compiled
    """The first ``i`` with ``doc[i]`` seen before for the query ``query[i]`` (entries grouped
    by query; ``stamp`` all -1, one slot per document), else -1."""
    for i in range(len(doc)):
        d = doc[i]
        if stamp[d] == query[i]:
            return i
        stamp[d] = query[i]
    return -1


def first_repeat(query: npt.NDArray[np.integer], doc: npt.NDArray[np.integer], n_docs: int) -> int:
    """The position of the first entry whose document an earlier entry of its query holds, or -1.

    Parameters
    ----------
    query : int array (n,)
        Each entry's query (>= 0), the entries of one query together (a frame's order).
    doc : int array (n,)
        Each entry's document code, ``0 <= doc < n_docs``.
    n_docs : int
        The number of documents of the table the codes refer to.
    """
    if len(doc) == 0:
        return -1
    if n_docs > 4 * len(doc) + 4096:  # a table much larger than the frame: no table-sized array
        return first_repeat_numpy(query, doc, n_docs)
    stamp = np.full(int(n_docs), -1, np.int64)
    return int(_first_repeat(np.ascontiguousarray(query, np.int64), np.ascontiguousarray(doc, np.int64), stamp))


def first_repeat_numpy(query: npt.NDArray[np.integer], doc: npt.NDArray[np.integer], n_docs: int) -> int:
    """Twin of :func:`first_repeat`: one sort of the (query, document) keys."""
    keys = np.asarray(query, np.int64) * max(int(n_docs), 1) + np.asarray(doc, np.int64)
    order = np.argsort(keys, kind="stable")
    same = np.flatnonzero(keys[order][1:] == keys[order][:-1])
    return -1 if len(same) == 0 else int(order[same + 1].min())
