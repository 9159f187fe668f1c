"""Top-k kernels: sparse (term-at-a-time BM25) scoring and dense block selection.

Ordering everywhere: descending score, ties by ascending document code.

``sparse_topk`` (one signature)
    q_ptr int64 (n_q+1,), q_terms int64 (nnz_q,)       query token ids (repeats kept, in order)
    t_ptr int64 (V+1,), t_docs int32 (nnz,), t_w float32 (nnz,)   postings by term
    offsets float32 (n_q,)       added to each matching document's score (BM25L/BM25+)
    mask_ids int64 (n_q,), masks uint8 (n_masks, n_docs)   per-query filter (-1: none)
    n_docs, k, n_chunks int64
    -> docs int64 (n_q, k), scores float32 (n_q, k), counts int64 (n_q,)
    Only documents that contain at least one query token are candidates.

``dense_topk_fused`` (one signature)
    queries float32 (m, d) C-contiguous, docs float32 (n, d) C-contiguous
    mask_ids int64 (m,), masks uint8 (n_masks, n)      per-query filter (-1: none)
    heap_s float32 (m, k), heap_d int64 (m, k), sizes int64 (m,)   running heaps
    tile_q, tile_d, n_tasks int64
    The products and the selection in one parallel pass over cache-sized tiles.
``heaps_sorted``: turns the heaps into rows sorted best first.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

__all__ = ["dense_topk_fused", "dense_topk_numpy", "heaps_sorted", "sparse_topk", "sparse_topk_numpy"]


@njit(cache=True, inline="always")
def _worse(s1, d1, s2, d2):  # pragma: no cover - compiled
    return s1 < s2 or (s1 == s2 and d1 > d2)


@njit(cache=True, inline="always")
def _swap(hs, hd, i, j):  # pragma: no cover - compiled
    hs[i], hs[j] = hs[j], hs[i]
    hd[i], hd[j] = hd[j], hd[i]


@njit(cache=True, inline="always")
def _sift_down(hs, hd, i, size):  # pragma: no cover - compiled
    """Move entry ``i`` down the min-heap ``hs/hd[:size]`` (root = worst) to its place."""
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        right = left + 1
        if right < size and _worse(hs[right], hd[right], hs[left], hd[left]):
            c = right
        if _worse(hs[c], hd[c], hs[i], hd[i]):
            _swap(hs, hd, i, c)
            i = c
        else:
            break


@njit(cache=True)
def _heap_push(hs, hd, size, k, s, d):  # pragma: no cover - compiled
    """Offer (s, d) to a min-heap (root = worst kept) of capacity k; returns the new size."""
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
def _sort_heap(hs, hd, size):  # pragma: no cover - compiled
    """Sort a heap built by :func:`_heap_push` best first, in place: descending score, equal
    scores by ascending id. Heap sort: the root (worst kept) goes to the end, repeatedly.
    (No ``np.argsort`` here: its merge sort alone took ~10 s of cold compile.)"""
    end = size
    while end > 1:
        end -= 1
        _swap(hs, hd, 0, end)
        _sift_down(hs, hd, 0, end)


@njit(cache=True, nogil=True)
def _sparse_chunk(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks, n_docs, k,
                  q0, q1, out_d, out_s, counts, dense_ratio):  # pragma: no cover - compiled
    acc = np.zeros(n_docs, np.float32)
    stamp = np.full(n_docs, -1, np.int64)
    hit = np.zeros(n_docs, np.uint8)
    touched = np.empty(n_docs, np.int64)
    hs = np.empty(k, np.float32)
    hd = np.empty(k, np.int64)
    for q in range(q0, q1):
        m = mask_ids[q]
        off = offsets[q]
        size = 0
        n_post = 0
        for j in range(q_ptr[q], q_ptr[q + 1]):
            t = q_terms[j]
            n_post += t_ptr[t + 1] - t_ptr[t]
        if n_post * dense_ratio > n_docs:  # stale stamps stay older than q: no reset needed
            # dense: plain accumulation, then one scan with a heap threshold
            acc[:] = 0.0
            hit[:] = 0
            for j in range(q_ptr[q], q_ptr[q + 1]):
                t = q_terms[j]
                for p in range(t_ptr[t], t_ptr[t + 1]):
                    d = t_docs[p]
                    acc[d] += t_w[p]
                    hit[d] = 1
            for d in range(n_docs):
                if hit[d] == 0:
                    continue
                s = acc[d] + off
                if size == k and s < hs[0]:
                    continue
                if m >= 0 and masks[m, d] == 0:
                    continue
                size = _heap_push(hs, hd, size, k, s, d)
        else:
            nt = 0
            for j in range(q_ptr[q], q_ptr[q + 1]):
                t = q_terms[j]
                for p in range(t_ptr[t], t_ptr[t + 1]):
                    d = t_docs[p]
                    if stamp[d] != q:
                        stamp[d] = q
                        acc[d] = 0.0
                        touched[nt] = d
                        nt += 1
                    acc[d] += t_w[p]
            for i in range(nt):
                d = touched[i]
                if m >= 0 and masks[m, d] == 0:
                    continue
                size = _heap_push(hs, hd, size, k, acc[d] + off, d)
        _sort_heap(hs, hd, size)
        for i in range(size):
            out_s[q, i] = hs[i]
            out_d[q, i] = hd[i]
        counts[q] = size


@njit(cache=True, parallel=True)
def _sparse_parallel(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks, n_docs, k, n_chunks,
                     dense_ratio):  # pragma: no cover
    n_q = q_ptr.shape[0] - 1
    out_d = np.full((n_q, k), -1, np.int64)
    out_s = np.zeros((n_q, k), np.float32)
    counts = np.zeros(n_q, np.int64)
    for c in prange(n_chunks):
        q0 = (n_q * c) // n_chunks
        q1 = (n_q * (c + 1)) // n_chunks
        _sparse_chunk(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks, n_docs, k,
                      q0, q1, out_d, out_s, counts, dense_ratio)
    return out_d, out_s, counts


def sparse_topk(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks, n_docs, k, n_chunks=1,
                dense_ratio=16):
    """Compiled sparse scoring + top-k (see the module docstring).

    A query whose postings exceed ``n_docs / dense_ratio`` accumulates into a dense array and
    scans it once; others track touched documents (0: always sparse; huge: always dense).
    """
    return _sparse_parallel(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks,
                            np.int64(n_docs), np.int64(k), np.int64(max(1, n_chunks)), np.int64(dense_ratio))


def _topk_rows_numpy(scores: npt.NDArray[np.float32], valid: npt.NDArray[np.bool_], k: int):
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


def sparse_topk_numpy(q_ptr, q_terms, t_ptr, t_docs, t_w, offsets, mask_ids, masks, n_docs, k):
    """Numpy twin of :func:`sparse_topk` (dense score matrix; the test oracle)."""
    n_q = len(q_ptr) - 1
    scores = np.zeros((n_q, n_docs), np.float32)
    hit = np.zeros((n_q, n_docs), bool)
    for q in range(n_q):
        for t in q_terms[q_ptr[q]:q_ptr[q + 1]]:
            sl = slice(t_ptr[t], t_ptr[t + 1])
            np.add.at(scores[q], t_docs[sl], t_w[sl])
            hit[q, t_docs[sl]] = True
        scores[q] += offsets[q]
        if mask_ids[q] >= 0:
            hit[q] &= masks[mask_ids[q]].astype(bool)
    return _topk_rows_numpy(scores, hit, k)


@njit(cache=True, inline="always")
def _offer_row(row, bd, d0, m, masks, hs, hd, size, k):  # pragma: no cover - compiled
    """Offer ``row[:bd]`` (docs ``d0..d0+bd``) to one query's heap; returns the new size.

    Scanned 16 scores at a time: a branch-free (vectorisable) test against the heap's worst
    kept score skips whole runs, since after the first few thousand documents almost no
    score enters a top-k.
    """
    thr = hs[0] if size == k else -np.inf
    j = 0
    while j < bd:
        end = min(j + 16, bd)
        hit = False
        for t in range(j, end):
            hit |= row[t] >= thr
        if hit:
            for t in range(j, end):
                s = row[t]
                if size == k and s < hs[0]:
                    continue
                d = d0 + t
                if m >= 0 and masks[m, d] == 0:
                    continue
                size = _heap_push(hs, hd, size, k, s, d)
            thr = hs[0] if size == k else -np.inf
        j = end
    return size


@njit(cache=True, parallel=True)
def dense_topk_fused(queries, docs, mask_ids, masks, heap_s, heap_d, sizes, tile_q, tile_d,
                     n_tasks):  # pragma: no cover - compiled
    """Tile-by-tile products and selection: each task owns query tiles (round robin), and for
    each document tile computes ``Q_t @ D_t.T`` (single-threaded BLAS, into a per-task
    buffer) and folds it into the heaps while the scores are still in cache.

    The caller limits BLAS to one thread for the call (each task is one thread).
    """
    m = queries.shape[0]
    n = docs.shape[0]
    k = heap_s.shape[1]
    n_tq = (m + tile_q - 1) // tile_q
    for task in prange(n_tasks):
        buf = np.empty(tile_q * tile_d, np.float32)
        for tq in range(task, n_tq, n_tasks):
            q0 = tq * tile_q
            q1 = min(m, q0 + tile_q)
            qt = queries[q0:q1]
            for d0 in range(0, n, tile_d):
                d1 = min(n, d0 + tile_d)
                s = buf[: (q1 - q0) * (d1 - d0)].reshape((q1 - q0, d1 - d0))
                np.dot(qt, docs[d0:d1].T, s)
                for r in range(q1 - q0):
                    q = q0 + r
                    sizes[q] = _offer_row(s[r], d1 - d0, d0, mask_ids[q], masks, heap_s[q], heap_d[q], sizes[q], k)


@njit(cache=True, parallel=True)
def heaps_sorted(heap_s, heap_d, sizes):  # pragma: no cover
    for q in prange(heap_s.shape[0]):
        _sort_heap(heap_s[q], heap_d[q], sizes[q])


def dense_topk_numpy(scores: npt.NDArray[np.float32], mask_ids, masks, k: int):
    """Numpy twin of the dense path: full score matrix in, top-k rows out."""
    valid = np.ones(scores.shape, bool)
    for q in range(scores.shape[0]):
        if mask_ids[q] >= 0:
            valid[q] = masks[mask_ids[q]].astype(bool)
    return _topk_rows_numpy(scores, valid, k)
