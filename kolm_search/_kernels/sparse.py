"""Sparse top-k: term-at-a-time scoring of a batch of queries over a term-major index (BM25).

Inputs of :func:`sparse_topk`:

- ``q_ptr`` int64 (n_q + 1,), ``q_terms`` int64 (nnz_q,), ``q_weights`` float32 (nnz_q,): query
  q's terms and their weights are ``[q_ptr[q], q_ptr[q+1])`` (a repeated token is repeated);
- ``t_ptr`` int64 (V + 1,), ``t_docs`` int32 (nnz,), ``t_w`` float32 (nnz,): the postings of
  term t, documents ascending, each with its stored weight;
- ``offsets`` float32 (n_q,): added to every candidate's score (the BM25L/BM25+ constants);
- ``sel_ids, sel_ptr, sel_rows, sel_mask, masks``: the filter of each query, the arrays of
  :class:`kolm_search.engine.selection.Selections` (sorted rows or a mask row per selection; -1: none).

A document's score is ``sum(q_weight * t_w)`` over the query's postings that hold it, in
query-term order, in float32; only documents holding at least one query term are candidates.
Output rows are best first, equal scores by ascending document code. A query selecting few
rows (cheaper to look up, by binary search in each query term's postings, than to scan the
postings) is scored document at a time over those rows, with the same sums in the same order,
so its results are those of the scan bit for bit. Scratch arrays are allocated by the wrapper,
one set per thread (allocations inside a kernel cost seconds of compile time).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_pieces
from kolm_search._kernels.heap import heap_push, kth_largest_above, sort_heap, topk_rows_numpy
from kolm_search._kernels.selection import selection_matrix_numpy
from kolm_search._kernels.sig import f32, i64, ro, rw, u8

__all__ = ["ROW_LOOKUP_COST", "query_costs", "sparse_topk", "sparse_topk_numpy"]

ROW_LOOKUP_COST = 16  # a selected row costs about this many postings per query term (a binary search)
_SIGNATURE = types.void(ro(i64), ro(i64), ro(f32), ro(i64), ro(types.int32), ro(f32), ro(f32), ro(i64), ro(i64),
                        ro(i64), ro(i64), ro(u8, 2), ro(u8), i64, i64, i64, rw(i64, 2), rw(f32, 2), rw(i64), rw(f32),
                        rw(i64), rw(i64), rw(f32), rw(i64), rw(f32), rw(f32), rw(i64), i64, i64)
PIECES = 8  # pieces of a batch per thread (threads take the next piece when free)
SLICE = 1 << 15  # documents summed at a time by the plain dense path (their sums stay in cache)
SPAN = 64  # documents per span of the plain dense path's selection (the largest sum of each is kept)


@njit
def _plain_dense(q, q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, off, k, acc, span_max, heap, pos, hs,
                 hd):  # pragma: no cover - compiled
    """Query ``q``, every product of which is > 0 (so a document holds a query term exactly when
    its sum is > 0): its top ``k`` in ``hs, hd``, its size returned; ``acc`` is zero on entry and
    on return. Sums slice by slice of the documents (each slice's sums stay in cache), each span's
    largest kept; the k-th largest of those is a score that k documents reach, so only spans
    reaching it are read again."""
    n_docs = acc.shape[0]
    j0 = q_ptr[q]
    n = q_ptr[q + 1] - j0
    for i in range(n):
        pos[i] = t_ptr[q_terms[j0 + i]]
    n_spans = (n_docs + SPAN - 1) // SPAN
    n_pos = 0
    for c0 in range(0, n_docs, SLICE):
        c1 = min(c0 + SLICE, n_docs)
        for i in range(n):  # query-term order, as the other paths
            t = q_terms[j0 + i]
            wq = q_weights[j0 + i]
            hi = t_ptr[t + 1]
            p = pos[i]
            while p < hi:
                d = t_docs[p]
                if d >= c1:
                    break
                acc[d] += wq * t_w[p]
                p += 1
            pos[i] = p
        for b in range(c0 // SPAN, (c1 + SPAN - 1) // SPAN):
            mx = np.float32(0.0)
            for d in range(b * SPAN, min(b * SPAN + SPAN, n_docs)):
                mx = max(mx, acc[d])
            span_max[b] = mx
            if mx > 0:
                n_pos += 1
    lim = kth_largest_above(span_max, n_spans, k, heap, -np.inf) + off if n_pos >= k else -np.inf  # monotone rounding
    size = 0
    for b in range(n_spans):
        mx = span_max[b]
        if mx > 0:
            if mx + off >= lim:
                for d in range(b * SPAN, min(b * SPAN + SPAN, n_docs)):
                    a = acc[d]
                    if a > 0:
                        s = a + off
                        if s >= lim and (size < k or s >= hs[0]):
                            size = heap_push(hs, hd, size, k, s, d)
            for d in range(b * SPAN, min(b * SPAN + SPAN, n_docs)):
                acc[d] = 0.0
    return size


@njit(_SIGNATURE, cache=True, nogil=True)
def _sparse_chunk(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, offsets, sel_ids, sel_ptr, sel_rows, sel_mask, masks,
                  plain, k, dense_ratio, row_cost, out_d, out_s, counts, acc, stamp, touched, hs, hd, span_max, heap,
                  pos, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``; ``acc`` (all zero on entry and on return), ``stamp`` (no query's on entry),
    ``touched`` (n_docs,), ``hs``, ``hd``, ``heap`` (k,), ``span_max`` (n_docs / SPAN,) and
    ``pos`` (the longest query,) are this chunk's scratch. A query selecting few rows scores
    them one by one; one whose postings exceed ``n_docs / dense_ratio`` accumulates into every
    document and scans them once (without stamps when ``plain[q]``: no selection, a finite
    offset and every product > 0); others track the documents they touch."""
    n_docs = acc.shape[0]
    dirty = False  # acc holds sums of a query that did not take the plain path
    for q in range(q0, q1):
        m = sel_ids[q]
        off = offsets[q]
        n_post = 0
        for j in range(q_ptr[q], q_ptr[q + 1]):
            n_post += t_ptr[q_terms[j] + 1] - t_ptr[q_terms[j]]
        size = 0
        n_terms = q_ptr[q + 1] - q_ptr[q]
        if m >= 0 and sel_mask[m] < 0 and (sel_ptr[m + 1] - sel_ptr[m]) * n_terms * row_cost < n_post:
            for i in range(sel_ptr[m], sel_ptr[m + 1]):  # document at a time over the selected rows
                d = sel_rows[i]
                a = np.float32(0.0)
                hit = False
                for j in range(q_ptr[q], q_ptr[q + 1]):  # query-term order, as the scans below
                    t = q_terms[j]
                    lo, hi = t_ptr[t], t_ptr[t + 1]
                    while lo < hi:  # binary search of d in t's postings (written out: no call in the loop)
                        mid = (lo + hi) >> 1
                        if t_docs[mid] < d:
                            lo = mid + 1
                        else:
                            hi = mid
                    if lo < t_ptr[t + 1] and t_docs[lo] == d:
                        a += q_weights[j] * t_w[lo]
                        hit = True
                if hit:
                    s = a + off
                    if size < k or s >= hs[0]:
                        size = heap_push(hs, hd, size, k, s, d)
        elif plain[q] and n_post * dense_ratio > n_docs:
            if dirty:
                acc[:] = 0.0
                dirty = False
            size = _plain_dense(q, q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, off, k, acc, span_max, heap, pos,
                                hs, hd)
        elif n_post * dense_ratio > n_docs:  # dense: accumulate into every document, scan once
            dirty = True
            for d in range(n_docs):
                acc[d] = 0.0
            for j in range(q_ptr[q], q_ptr[q + 1]):
                t = q_terms[j]
                wq = q_weights[j]
                for p in range(t_ptr[t], t_ptr[t + 1]):
                    d = t_docs[p]
                    acc[d] += wq * t_w[p]
                    stamp[d] = q
            for d in range(n_docs):
                if stamp[d] == q:
                    s = acc[d] + off
                    if size < k or s >= hs[0]:
                        ok = True
                        if m >= 0:  # the selection test, written out (a call per candidate costs more)
                            mm = sel_mask[m]
                            if mm >= 0:
                                ok = masks[mm, d] != 0
                            else:
                                lo, hi = sel_ptr[m], sel_ptr[m + 1]
                                while lo < hi:
                                    mid = (lo + hi) >> 1
                                    if sel_rows[mid] < d:
                                        lo = mid + 1
                                    else:
                                        hi = mid
                                ok = lo < sel_ptr[m + 1] and sel_rows[lo] == d
                        if ok:
                            size = heap_push(hs, hd, size, k, s, d)
        else:  # sparse: track the documents touched
            dirty = True
            nt = 0
            for j in range(q_ptr[q], q_ptr[q + 1]):
                t = q_terms[j]
                wq = q_weights[j]
                for p in range(t_ptr[t], t_ptr[t + 1]):
                    d = t_docs[p]
                    if stamp[d] != q:  # first posting of d for this query
                        stamp[d] = q
                        acc[d] = 0.0
                        touched[nt] = d
                        nt += 1
                    acc[d] += wq * t_w[p]
            for i in range(nt):
                d = touched[i]
                s = acc[d] + off
                if size < k or s >= hs[0]:  # most stop at the worst kept
                    ok = True
                    if m >= 0:
                        mm = sel_mask[m]
                        if mm >= 0:
                            ok = masks[mm, d] != 0
                        else:
                            lo, hi = sel_ptr[m], sel_ptr[m + 1]
                            while lo < hi:
                                mid = (lo + hi) >> 1
                                if sel_rows[mid] < d:
                                    lo = mid + 1
                                else:
                                    hi = mid
                            ok = lo < sel_ptr[m + 1] and sel_rows[lo] == d
                    if ok:
                        size = heap_push(hs, hd, size, k, s, d)
        sort_heap(hs, hd, size)
        for i in range(size):
            out_s[q, i] = hs[i]
            out_d[q, i] = hd[i]
        counts[q] = size
    if dirty:  # leave acc zero (the scratch serves the next piece)
        acc[:] = 0.0


def query_costs(q_ptr: npt.NDArray[np.int64], q_terms: npt.NDArray[np.int64], t_ptr: npt.NDArray[np.int64],
                n_docs: int, dense_ratio: int = 16) -> npt.NDArray[np.int64]:
    """Cumulative estimated work of the queries, int64 (n_q + 1,) (CSR offsets for
    :func:`~kolm_search._kernels.chunk_bounds`): each its postings, plus a pass over a 16th of the
    documents for one on the dense path, plus a constant."""
    n_q = len(q_ptr) - 1
    owner = np.repeat(np.arange(n_q), np.diff(q_ptr))
    ids = np.asarray(q_terms, np.int64)
    post = np.bincount(owner, weights=(t_ptr[ids + 1] - t_ptr[ids]).astype(np.float64), minlength=n_q)
    cost = post + 64 + np.where(post * dense_ratio > n_docs, n_docs / 16, 0)
    out = np.zeros(n_q + 1, np.int64)
    np.cumsum(cost.astype(np.int64), out=out[1:])
    return out


def sparse_topk(q_ptr: npt.NDArray[np.int64], q_terms: npt.NDArray[np.int64], q_weights: npt.NDArray[np.float32],
                t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], t_w: npt.NDArray[np.float32],
                offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64], sel_ptr: npt.NDArray[np.int64],
                sel_rows: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], masks: npt.NDArray[np.uint8],
                n_docs: int, k: int, *, n_threads: int | None = None, dense_ratio: int = 16,
                row_cost: int = ROW_LOOKUP_COST, t_min: npt.NDArray[np.float32] | None = None,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Top-``k`` documents of every query: ``docs int64 (n_q, k), scores float32 (n_q, k),
    counts int64 (n_q,)`` (row q's first ``counts[q]`` entries are valid, best first).

    The caller guarantees the index layout (term ids below ``len(t_ptr) - 1``, pointers
    monotone, documents below ``n_docs``) and selections that fit it
    (:meth:`kolm_search.engine.selection.Selections.check`). A query whose postings exceed
    ``n_docs / dense_ratio`` takes the dense path (0: never; huge: always); one whose selected
    rows times its terms times ``row_cost`` (default :data:`ROW_LOOKUP_COST`; 0: always, huge:
    never) are fewer than its postings is scored row by row. ``t_min`` float32 (V,), each term's
    smallest stored weight (+inf without postings; :func:`kolm_search._kernels.blocks.posting_bounds`),
    lets a dense query with no selection, a finite offset and every ``q_weight * t_min > 0`` skip
    the stamps that mark the documents it touches (a sum > 0 marks them); the results are the same.
    """
    c = np.ascontiguousarray
    n_q = len(q_ptr) - 1
    plain = np.zeros(n_q, np.uint8)
    if t_min is not None and n_q:
        q_ids = np.asarray(q_terms, np.int64)
        with np.errstate(invalid="ignore", over="ignore"):  # 0 * inf (a term without postings): NaN, not > 0
            product = np.asarray(q_weights, np.float32) * np.asarray(t_min, np.float32)[q_ids]  # float32, as summed
        owner = np.repeat(np.arange(n_q), np.diff(q_ptr))
        bad = np.bincount(owner, weights=~(product > 0), minlength=n_q) > 0
        plain[~bad & (np.asarray(sel_ids) < 0) & np.isfinite(offsets)] = 1
    out_d = np.full((n_q, k), -1, np.int64)
    out_s = np.zeros((n_q, k), np.float32)
    counts = np.zeros(n_q, np.int64)
    threads = resolve_threads(n_threads) if n_q >= 16 else 1
    bounds = chunk_bounds(query_costs(q_ptr, q_terms, t_ptr, n_docs, dense_ratio), PIECES * threads)
    arrays = (c(q_ptr, np.int64), c(q_terms, np.int64), c(q_weights, np.float32), c(t_ptr, np.int64),
              c(t_docs, np.int32), c(t_w, np.float32), c(offsets, np.float32), c(sel_ids, np.int64),
              c(sel_ptr, np.int64), c(sel_rows, np.int64), c(sel_mask, np.int64), c(masks, np.uint8), plain)
    longest = max(int(np.diff(q_ptr).max()) if n_q else 0, 1)

    def scratch() -> tuple[np.ndarray, ...]:
        return (np.zeros(n_docs, np.float32), np.full(n_docs, -1, np.int64), np.empty(n_docs, np.int64),
                np.empty(k, np.float32), np.empty(k, np.int64), np.empty((n_docs + SPAN - 1) // SPAN, np.float32),
                np.empty(k, np.float32), np.empty(longest, np.int64))

    run_pieces(lambda *a: _sparse_chunk(*arrays, int(k), int(dense_ratio), int(row_cost), out_d, out_s, counts, *a),
               bounds, threads, scratch)
    return out_d, out_s, counts


def sparse_topk_numpy(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, offsets, sel_ids, sel_ptr, sel_rows, sel_mask,
                      masks, n_docs, k):
    """Numpy twin of :func:`sparse_topk` (a dense score matrix; the test oracle)."""
    n_q = len(q_ptr) - 1
    scores = np.zeros((n_q, n_docs), np.float32)
    hit = np.zeros((n_q, n_docs), bool)
    allowed = selection_matrix_numpy(sel_ids, sel_ptr, sel_rows, sel_mask, masks, n_docs)
    for q in range(n_q):
        for j in range(q_ptr[q], q_ptr[q + 1]):
            t = q_terms[j]
            sl = slice(t_ptr[t], t_ptr[t + 1])
            np.add.at(scores[q], t_docs[sl], np.float32(q_weights[j]) * t_w[sl])
            hit[q, t_docs[sl]] = True
        scores[q] += offsets[q]
    return topk_rows_numpy(scores, hit & allowed, k)
