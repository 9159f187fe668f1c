"""Fusion kernel: sum per-entry contributions per (query, doc) over many ranked lists.

Every fusion method reduces to one pass once each entry carries its *contribution*:
RRF ``w_l / (k + rank + 1)`` (Cormack, Clarke & Buettcher, SIGIR 2009), CombSUM
``w_l * normalised score`` and CombMNZ (CombSUM times the number of lists that hold the doc;
Fox & Shaw, TREC-2 1994). The wrapper in :mod:`kolm_search.fusion` computes contributions
with numpy and calls :func:`fuse_groups`.

Inputs (one signature, cast by the caller)
------------------------------------------
group_ptr : int64 (n_groups + 1,)   entries of group g are ``[group_ptr[g], group_ptr[g+1])``
list_ids  : int64 (n,)              list of each entry, in ``[0, n_lists)``
docs      : int64 (n,)              document code, in ``[0, n_docs)``
contrib   : float64 (n,)            the entry's contribution
n_docs    : int64
mnz       : bool                    multiply each sum by its number of lists
limit     : int64                   keep at most ``limit`` docs per group (< 0: all)

Precondition: inside a group, the entries of each list are contiguous and best first, so
the first time a doc appears in a list is its best entry; later repeats of it in that list
are ignored (a doc counts once per list, at its best rank).

Returns ``(out_docs int64 (n,), out_scores float64 (n,), counts int64 (n_groups,))``: group g's
fused docs sit at ``[group_ptr[g], group_ptr[g] + counts[g])``, by descending score, ties in
order of first appearance inside the group.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from kolm_search._kernels.topk import _heap_push, _sort_heap

__all__ = ["fuse_groups", "fuse_groups_numpy"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@njit(cache=True, nogil=True)
def _fuse_chunk(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, g0, g1,
                out_docs, out_scores, counts):  # pragma: no cover - compiled
    acc = np.zeros(n_docs, np.float64)
    nlists = np.zeros(n_docs, np.int64)
    stamp = np.full(n_docs, -1, np.int64)
    last_list = np.full(n_docs, -1, np.int64)
    hs = np.empty(max(limit, 1), np.float64)
    ht = np.empty(max(limit, 1), np.int64)
    for g in range(g0, g1):
        start = group_ptr[g]
        stop = group_ptr[g + 1]
        touched = np.empty(stop - start, np.int64)
        nt = 0
        for i in range(start, stop):
            d = docs[i]
            if stamp[d] != g:
                stamp[d] = g
                acc[d] = 0.0
                nlists[d] = 0
                last_list[d] = -1
                touched[nt] = d
                nt += 1
            if last_list[d] != list_ids[i]:
                # lists are contiguous inside a group: a new list id means a new list
                acc[d] += contrib[i]
                nlists[d] += 1
                last_list[d] = list_ids[i]
        if 0 <= limit < nt:
            # top-limit by a heap on (score, first appearance): no full sort
            size = 0
            for t in range(nt):
                d = touched[t]
                s = acc[d] * nlists[d] if mnz else acc[d]
                size = _heap_push(hs, ht, size, limit, s, t)
            _sort_heap(hs, ht, size)
            for t in range(size):
                out_docs[start + t] = touched[ht[t]]
                out_scores[start + t] = hs[t]
            counts[g] = size
            continue
        scores = np.empty(nt, np.float64)
        for t in range(nt):
            d = touched[t]
            s = acc[d]
            if mnz:
                s *= nlists[d]
            scores[t] = -s
        order = np.argsort(scores, kind="mergesort")
        for t in range(nt):
            out_docs[start + t] = touched[order[t]]
            out_scores[start + t] = -scores[order[t]]
        counts[g] = nt


@njit(cache=True, parallel=True)
def _fuse_parallel(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, n_chunks):  # pragma: no cover
    n = docs.shape[0]
    n_groups = group_ptr.shape[0] - 1
    out_docs = np.empty(n, np.int64)
    out_scores = np.empty(n, np.float64)
    counts = np.zeros(n_groups, np.int64)
    for c in prange(n_chunks):
        g0 = (n_groups * c) // n_chunks
        g1 = (n_groups * (c + 1)) // n_chunks
        _fuse_chunk(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, g0, g1,
                    out_docs, out_scores, counts)
    return out_docs, out_scores, counts


def fuse_groups(group_ptr: I64, list_ids: I64, docs: I64, contrib: F64, n_docs: int,
                mnz: bool, limit: int, n_chunks: int = 1) -> tuple[I64, F64, I64]:
    """Compiled fusion over all groups (see the module docstring for shapes and dtypes)."""
    return _fuse_parallel(group_ptr, list_ids, docs, contrib, np.int64(n_docs), bool(mnz),
                          np.int64(limit), np.int64(max(1, n_chunks)))


def fuse_groups_numpy(group_ptr: I64, list_ids: I64, docs: I64, contrib: F64, n_docs: int,
                      mnz: bool, limit: int) -> tuple[I64, F64, I64]:
    """Pure-numpy twin of :func:`fuse_groups` (the test oracle); same inputs and outputs."""
    n = docs.shape[0]
    n_groups = group_ptr.shape[0] - 1
    group = np.repeat(np.arange(n_groups, dtype=np.int64), np.diff(group_ptr))
    idx = np.arange(n, dtype=np.int64)
    n_lists = int(list_ids.max()) + 1 if n else 1
    # keep the first entry of each (group, list, doc)
    gld = (group * n_lists + list_ids) * n_docs + docs
    _, first = np.unique(gld, return_index=True)
    first.sort()
    g_k, d_k, c_k = group[first], docs[first], contrib[first]
    gd = g_k * n_docs + d_k
    uniq, inverse = np.unique(gd, return_inverse=True)
    sums = np.bincount(inverse, weights=c_k, minlength=uniq.size)
    nl = np.bincount(inverse, minlength=uniq.size)
    appear = np.full(uniq.size, n, dtype=np.int64)
    np.minimum.at(appear, inverse, idx[first])
    if mnz:
        sums = sums * nl
    u_group = uniq // n_docs
    u_doc = uniq % n_docs
    order = np.lexsort((appear, -sums, u_group))
    u_group, u_doc, sums = u_group[order], u_doc[order], sums[order]
    out_docs = np.zeros(n, np.int64)
    out_scores = np.zeros(n, np.float64)
    counts = np.zeros(n_groups, np.int64)
    for g in range(n_groups):
        sel = np.flatnonzero(u_group == g)
        if limit >= 0:
            sel = sel[:limit]
        s = group_ptr[g]
        out_docs[s:s + sel.size] = u_doc[sel]
        out_scores[s:s + sel.size] = sums[sel]
        counts[g] = sel.size
    return out_docs, out_scores, counts
