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

Returns ``(out_ptr int64 (n_groups + 1,), out_docs int64 (m,), out_scores float64 (m,))``:
group g's fused docs sit at ``[out_ptr[g], out_ptr[g + 1])``, by descending score, ties in
order of first appearance inside the group.

Layout: one random access per entry (``mark[doc] = group << 32 | slot``); the per-document
sums live in small per-group slot arrays. Full lists are sorted on integer keys (the IEEE
bits of the negated score; integer sorts are about twice as fast as float sorts here);
with ``limit`` a heap selects instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from kolm_search._kernels.topk import _heap_push, _sort_heap, _worse

__all__ = ["fuse_groups", "fuse_groups_numpy"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


@njit(cache=True)
def _sort_slots(keys, n):  # pragma: no cover - compiled
    """Slots ``0..n-1`` by ascending ``keys``, equal keys in slot (first appearance) order."""
    o = np.argsort(keys[:n])  # quicksort on integers; equal keys put back in slot order below
    i = 0
    while i < n:
        j = i + 1
        while j < n and keys[o[j]] == keys[o[i]]:
            j += 1
        for a in range(i + 1, j):  # insertion sort of the (short) tie run
            v = o[a]
            b = a - 1
            while b >= i and o[b] > v:
                o[b + 1] = o[b]
                b -= 1
            o[b + 1] = v
        i = j
    return o


@njit(cache=True, nogil=True)
def _fuse_chunk(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, g0, g1, dst,
                out_docs, out_scores, counts):  # pragma: no cover - compiled
    # One random access per entry: mark[d] = (group << 32) | slot. Everything else lives in
    # per-slot arrays (slots = docs in order of first appearance), small and cache-resident.
    mark = np.full(n_docs, -1, np.int64)
    width = 1
    for g in range(g0, g1):
        width = max(width, group_ptr[g + 1] - group_ptr[g])
    s_doc = np.empty(width, np.int64)
    s_acc = np.empty(width, np.float64)
    s_nl = np.empty(width, np.int64)
    s_last = np.empty(width, np.int64)
    negs = np.empty(width, np.float64)
    keys = negs.view(np.int64)  # the same buffer, read as integers
    cap = max(limit, 1)
    hs = np.empty(cap, np.float64)
    ht = np.empty(cap, np.int64)
    for g in range(g0, g1):
        start = group_ptr[g]
        stop = group_ptr[g + 1]
        tag = g << 32
        nt = 0
        for i in range(start, stop):
            d = docs[i]
            m = mark[d]
            if (m >> 32) != g:
                mark[d] = tag | nt
                s_doc[nt] = d
                s_acc[nt] = contrib[i]
                s_nl[nt] = 1
                s_last[nt] = list_ids[i]
                nt += 1
            else:
                t = m & 0xFFFFFFFF
                if s_last[t] != list_ids[i]:  # lists are contiguous: a new id is a new list
                    s_acc[t] += contrib[i]
                    s_nl[t] += 1
                    s_last[t] = list_ids[i]
        if mnz:
            for t in range(nt):
                s_acc[t] *= s_nl[t]
        if 0 <= limit < nt:  # top-limit by a heap on (score, first appearance): no full sort
            size = 0
            for t in range(nt):
                s = s_acc[t]
                if size == limit and not _worse(hs[0], ht[0], s, t):
                    continue
                size = _heap_push(hs, ht, size, limit, s, t)
            _sort_heap(hs, ht, size)
            at = dst[g]
            for t in range(size):
                out_docs[at + t] = s_doc[ht[t]]
                out_scores[at + t] = hs[t]
            counts[g] = size
            continue
        for t in range(nt):
            negs[t] = -(s_acc[t] + 0.0)  # + 0.0: -0.0 and 0.0 get one key
        for t in range(nt):  # IEEE bits -> int64 in the same order (integer sorts are faster)
            b = keys[t]
            if b < 0:
                keys[t] = b ^ 0x7FFFFFFFFFFFFFFF
        order = _sort_slots(keys, nt)
        at = dst[g]
        for t in range(nt):
            out_docs[at + t] = s_doc[order[t]]
            out_scores[at + t] = s_acc[order[t]]
        counts[g] = nt


@njit(cache=True, nogil=True)
def _unique_counts(group_ptr, docs, n_docs, g0, g1, counts):  # pragma: no cover - compiled
    """Distinct documents of each group in ``[g0, g1)`` (the sizes of full fused lists)."""
    mark = np.full(n_docs, -1, np.int64)
    for g in range(g0, g1):
        c = 0
        for i in range(group_ptr[g], group_ptr[g + 1]):
            d = docs[i]
            if mark[d] != g:
                mark[d] = g
                c += 1
        counts[g] = c


@njit(cache=True, parallel=True)
def _fuse_parallel(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, n_chunks):  # pragma: no cover
    n_groups = group_ptr.shape[0] - 1
    counts = np.zeros(n_groups, np.int64)
    out_ptr = np.zeros(n_groups + 1, np.int64)
    if limit < 0:  # full lists: count first, then every group writes straight to its place
        for c in prange(n_chunks):
            _unique_counts(group_ptr, docs, n_docs, (n_groups * c) // n_chunks, (n_groups * (c + 1)) // n_chunks, counts)
        for g in range(n_groups):
            out_ptr[g + 1] = out_ptr[g] + counts[g]
        out_docs = np.empty(out_ptr[n_groups], np.int64)
        out_scores = np.empty(out_ptr[n_groups], np.float64)
        for c in prange(n_chunks):
            _fuse_chunk(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, (n_groups * c) // n_chunks,
                        (n_groups * (c + 1)) // n_chunks, out_ptr, out_docs, out_scores, counts)
        return out_ptr, out_docs, out_scores
    # top-limit: group g writes at most limit entries at g * limit, then a compaction
    dst = np.arange(n_groups + 1).astype(np.int64) * limit
    tmp_docs = np.empty(n_groups * limit, np.int64)
    tmp_scores = np.empty(n_groups * limit, np.float64)
    for c in prange(n_chunks):
        _fuse_chunk(group_ptr, list_ids, docs, contrib, n_docs, mnz, limit, (n_groups * c) // n_chunks,
                    (n_groups * (c + 1)) // n_chunks, dst, tmp_docs, tmp_scores, counts)
    for g in range(n_groups):
        out_ptr[g + 1] = out_ptr[g] + counts[g]
    out_docs = np.empty(out_ptr[n_groups], np.int64)
    out_scores = np.empty(out_ptr[n_groups], np.float64)
    for c in prange(n_chunks):
        for g in range((n_groups * c) // n_chunks, (n_groups * (c + 1)) // n_chunks):
            for t in range(counts[g]):
                out_docs[out_ptr[g] + t] = tmp_docs[dst[g] + t]
                out_scores[out_ptr[g] + t] = tmp_scores[dst[g] + t]
    return out_ptr, out_docs, out_scores


def fuse_groups(group_ptr: I64, list_ids: I64, docs: I64, contrib: F64, n_docs: int,
                mnz: bool, limit: int, n_chunks: int = 1) -> tuple[I64, I64, F64]:
    """Compiled fusion over all groups (see the module docstring for shapes and dtypes)."""
    return _fuse_parallel(group_ptr, list_ids, docs, contrib, np.int64(n_docs), bool(mnz),
                          np.int64(limit), np.int64(max(1, n_chunks)))


def fuse_groups_numpy(group_ptr: I64, list_ids: I64, docs: I64, contrib: F64, n_docs: int,
                      mnz: bool, limit: int) -> tuple[I64, I64, F64]:
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
    out_docs, out_scores, counts = [], [], np.zeros(n_groups, np.int64)
    for g in range(n_groups):
        sel = np.flatnonzero(u_group == g)
        if limit >= 0:
            sel = sel[:limit]
        out_docs.append(u_doc[sel])
        out_scores.append(sums[sel])
        counts[g] = sel.size
    out_ptr = np.zeros(n_groups + 1, np.int64)
    np.cumsum(counts, out=out_ptr[1:])
    return (out_ptr, np.concatenate(out_docs).astype(np.int64) if out_docs else np.zeros(0, np.int64),
            np.concatenate(out_scores).astype(np.float64) if out_scores else np.zeros(0, np.float64))
