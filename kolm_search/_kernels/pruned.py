"""Sparse top-k with exact dynamic pruning: MaxScore, term at a time.

Same inputs and outputs as :func:`kolm_search._kernels.sparse.sparse_topk` (see there), plus
``t_max`` float32 (V,): each term's largest stored weight (0 for a term without postings).

Results are those of the exhaustive kernel bit for bit (scores, order, ties). A query's terms
are taken by upper bound ``q_weight * t_max``, largest first. Phase 1 adds whole terms into a
float64 partial sum per document until ``k`` documents are sure to beat any document that only
the remaining terms hold (the k-th best partial sum exceeds the sum of the remaining bounds):
from then on no new document can enter. Phase 2 adds each remaining term only to the documents
that may still enter (a partial sum plus the remaining bounds reaching the k-th best partial
sum), scanning its postings or galloping through them to each candidate, whichever reads less,
and drops those the rising bound rules out. The survivors are then scored as the exhaustive
kernel scores them: ``sum(q_weight * t_w)`` in float32, over the query's terms in query-term
order, plus the offset, and the best ``k`` kept (equal scores: the lower document code).
Every bound is taken in float64 with a margin of ``(n_terms + 4) * 2**-23`` of the largest
possible score (plus the offset), more than float32's rounding of the sum can move a score; a
document is ruled out only when its bound is strictly below a score that ``k`` documents reach.

Queries must have weights >= 0 (stored weights are >= 0: the index checks both) and a finite
offset; :func:`pruned_topk` scores any other query, and one whose few selected rows the exhaustive
kernel scores row by row, with the exhaustive kernel. Its numpy twin is the exhaustive kernel's
(:func:`kolm_search._kernels.sparse.sparse_topk_numpy`): the results are the same.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.heap import heap_push, sort_heap
from kolm_search._kernels.sig import f32, f64, i64, ro, rw, u8
from kolm_search._kernels.sparse import ROW_LOOKUP_COST, sparse_topk, sparse_topk_numpy

__all__ = ["prunable", "pruned_topk", "pruned_topk_numpy"]

pruned_topk_numpy = sparse_topk_numpy  # the oracle: pruning changes no result

SCAN_RATIO = 16  # a term's postings are scanned when fewer than this many per candidate, else searched
_SIGNATURE = types.void(ro(i64), ro(i64), ro(f32), ro(i64), ro(types.int32), ro(f32), ro(f32), ro(f32), ro(i64),
                        ro(i64), ro(i64), ro(i64), ro(u8, 2), i64, i64, rw(i64, 2), rw(f32, 2), rw(i64), rw(f32),
                        rw(i64), rw(f64), rw(f64), rw(i64), rw(i64), rw(i64), rw(i64), rw(i64), rw(f64), rw(f64),
                        rw(i64), rw(i64), i64, i64)
_UNSEEN = -1.0  # acc of a document no query term reached yet (partial sums are >= 0)
_OUT = -2.0  # acc of a document ruled out


@njit
def _kth_best(acc, docs, n, k, heap, lim):  # pragma: no cover - compiled
    """The ``k``-th largest of ``acc[docs[:n]]`` among those above ``lim``, or -inf when fewer
    than ``k`` are (a min-heap of the best ``k`` in ``heap`` (k,))."""
    size = 0
    for c in range(n):
        v = acc[docs[c]]
        if v <= lim:
            continue
        if size < k:  # sift up
            i = size
            size += 1
            while i > 0:
                parent = (i - 1) >> 1
                if heap[parent] <= v:
                    break
                heap[i] = heap[parent]
                i = parent
            heap[i] = v
        elif v > heap[0]:  # replace the root, sift down
            i = 0
            while True:
                child = 2 * i + 1
                if child >= size:
                    break
                if child + 1 < size and heap[child + 1] < heap[child]:
                    child += 1
                if heap[child] >= v:
                    break
                heap[i] = heap[child]
                i = child
            heap[i] = v
    return heap[0] if size == k else -np.inf


@njit(_SIGNATURE, cache=True, nogil=True)
def _pruned_chunk(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, t_max, offsets, sel_ids, sel_ptr, sel_rows, sel_mask,
                  masks, k, scan, out_d, out_s, counts, hs, hd, heap, acc, allow, touched, cand, tmp, order, ubs, rest,
                  runs, runs2, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``; ``acc`` (n_docs,, all ``_UNSEEN`` on entry and on return),
    ``allow`` (n_docs,, all <= q0), ``touched``, ``cand``, ``tmp`` (n_docs,), ``hs``, ``hd``,
    ``heap`` (k,), ``order``, ``ubs``, ``rest`` (the longest query,) and ``runs``, ``runs2`` (one
    more) are this chunk's scratch. ``acc[d]`` is d's partial sum (float64) while d is a
    candidate, then its float32 score."""
    for q in range(q0, q1):
        j0 = q_ptr[q]
        n = q_ptr[q + 1] - j0
        off = np.float64(offsets[q])
        m = sel_ids[q]
        mm = -1
        if m >= 0:
            mm = sel_mask[m]
            if mm < 0:
                for row in range(sel_ptr[m], sel_ptr[m + 1]):
                    allow[sel_rows[row]] = q + 1
        total = 0.0
        for e in range(n):
            ubs[e] = np.float64(q_weights[j0 + e] * t_max[q_terms[j0 + e]])  # the largest float32 product
            total += ubs[e]
            order[e] = e
        for a in range(1, n):  # terms by upper bound, largest first (insertion sort: few terms)
            x = order[a]
            b = a - 1
            while b >= 0 and ubs[order[b]] < ubs[x]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = x
        r_sum = 0.0
        for e in range(n - 1, -1, -1):  # rest[e]: the bounds of the terms after the e-th
            rest[e] = r_sum
            r_sum += ubs[order[e]]
        # a float32 score is within delta of the exact sum of its float32 products plus the offset
        delta = (n + 4) * 2.0 ** -23 * (total + abs(off))
        theta = -np.inf  # k documents score at least this much: one scoring less is out
        # phase 1: whole terms, largest bounds first, until the rest cannot lift a new document past theta
        n_t = 0
        e = 0
        while e < n:
            i = order[e]
            t = q_terms[j0 + i]
            w = q_weights[j0 + i]
            runs[e] = n_t  # the documents a term adds first are ascending: runs to merge
            for p in range(t_ptr[t], t_ptr[t + 1]):
                d = t_docs[p]
                if m >= 0:
                    if mm >= 0:
                        if masks[mm, d] == 0:
                            continue
                    elif allow[d] != q + 1:
                        continue
                x = np.float64(w * t_w[p])
                v = acc[d]
                if v < 0.0:  # unseen
                    acc[d] = x
                    touched[n_t] = d
                    n_t += 1
                else:
                    acc[d] = v + x
            r = rest[e]
            e += 1
            if n_t >= k and total - r > r + 2 * delta:  # could k documents beat every document not yet seen?
                kth = _kth_best(acc, touched, n_t, k, heap, r + 2 * delta)
                if kth > -np.inf:
                    theta = kth + off - delta
                    break
        runs[e] = n_t
        # the documents that may still enter, ascending: each run kept in order, then runs merged
        r = rest[e - 1] if e > 0 else total
        n_c = 0
        n_runs = 0
        for a in range(e):
            runs2[n_runs] = n_c
            for c in range(runs[a], runs[a + 1]):
                d = touched[c]
                if acc[d] + r + off + delta >= theta:
                    cand[n_c] = d
                    n_c += 1
                else:
                    acc[d] = _OUT
            if n_c > runs2[n_runs]:
                n_runs += 1
        runs2[n_runs] = n_c
        in_tmp = False
        while n_runs > 1:  # bottom-up merges of neighbouring runs
            src, dst = (tmp, cand) if in_tmp else (cand, tmp)
            out = 0
            for a in range(0, n_runs, 2):
                lo, mid = runs2[a], runs2[a + 1]
                hi = runs2[a + 2] if a + 2 <= n_runs else mid
                x, y, z = lo, mid, lo
                while x < mid and y < hi:
                    if src[x] < src[y]:
                        dst[z] = src[x]
                        x += 1
                    else:
                        dst[z] = src[y]
                        y += 1
                    z += 1
                while x < mid:
                    dst[z] = src[x]
                    x += 1
                    z += 1
                while y < hi:
                    dst[z] = src[y]
                    y += 1
                    z += 1
                runs2[out] = lo
                out += 1
            runs2[out] = n_c
            n_runs = out
            in_tmp = not in_tmp
        if in_tmp:
            cand[:n_c] = tmp[:n_c]
        # phase 2: the remaining terms, only for the candidates (steps < n - e), then every term
        # in query order for the float32 scores of the survivors (steps >= n - e)
        n_rem = n - e
        for step in range(n_rem + n):
            final = step >= n_rem
            if final:
                if step == n_rem:  # survivors: their exact sums could reach the k-th best lower bound
                    if n_c >= k:
                        low = _kth_best(acc, cand, n_c, k, heap, -np.inf) + off - delta
                        if low > theta:
                            theta = low
                    kept = 0
                    for c in range(n_c):
                        d = cand[c]
                        if acc[d] + off + delta >= theta:
                            cand[kept] = d
                            kept += 1
                            acc[d] = 0.0  # from here the float32 score
                        else:
                            acc[d] = _OUT
                    n_c = kept
                i = step - n_rem
            else:
                i = order[e + step]
            if n_c == 0:
                break
            t = q_terms[j0 + i]
            w = q_weights[j0 + i]
            lo0, hi = t_ptr[t], t_ptr[t + 1]
            if hi - lo0 < scan * n_c:  # scan the postings (ascending: acc is read in order)
                if final:
                    for p in range(lo0, hi):
                        d = t_docs[p]
                        v = acc[d]
                        if v >= 0.0:
                            acc[d] = np.float64(np.float32(v) + w * t_w[p])
                else:
                    for p in range(lo0, hi):
                        d = t_docs[p]
                        v = acc[d]
                        if v >= 0.0:
                            acc[d] = v + np.float64(w * t_w[p])
            else:  # merge the (ascending) candidates with the postings: a few steps, then galloping
                p = lo0
                for c in range(n_c):
                    d = cand[c]
                    steps = 0
                    while p < hi and t_docs[p] < d and steps < 8:
                        p += 1
                        steps += 1
                    if p < hi and t_docs[p] < d:
                        x = p
                        stride = 1
                        y = p + 1
                        while y < hi and t_docs[y] < d:
                            x = y
                            stride <<= 1
                            y = x + stride
                        if y > hi:
                            y = hi
                        x += 1
                        while x < y:
                            mid = (x + y) >> 1
                            if t_docs[mid] < d:
                                x = mid + 1
                            else:
                                y = mid
                        p = x
                    if p >= hi:
                        break
                    if t_docs[p] == d:
                        if final:
                            acc[d] = np.float64(np.float32(acc[d]) + w * t_w[p])
                        else:
                            acc[d] += np.float64(w * t_w[p])
            if not final:  # a higher bound, and the candidates it rules out
                r = rest[e + step]
                if n_c >= k:
                    low = _kth_best(acc, cand, n_c, k, heap, -np.inf) + off - delta
                    if low > theta:
                        theta = low
                kept = 0
                for c in range(n_c):
                    d = cand[c]
                    if acc[d] + r + off + delta >= theta:
                        cand[kept] = d
                        kept += 1
                    else:
                        acc[d] = _OUT
                n_c = kept
        size = 0
        o32 = offsets[q]
        for c in range(n_c):
            d = cand[c]
            s = np.float32(acc[d]) + o32
            if size < k or s >= hs[0]:
                size = heap_push(hs, hd, size, k, s, d)
        for c in range(n_t):  # leave acc as found
            acc[touched[c]] = _UNSEEN
        sort_heap(hs, hd, size)
        for c in range(size):
            out_s[q, c] = hs[c]
            out_d[q, c] = hd[c]
        counts[q] = size


def prunable(q_ptr: npt.NDArray[np.int64], q_terms: npt.NDArray[np.int64], q_weights: npt.NDArray[np.float32],
             t_ptr: npt.NDArray[np.int64], offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64],
             sel_ptr: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], k: int, *, min_postings: float = 0.0,
             row_cost: int = ROW_LOOKUP_COST) -> npt.NDArray[np.bool_]:
    """Which queries the pruned kernel may take, bool (n_q,): weights >= 0, a finite offset, not
    scored row by row by the exhaustive kernel (few selected rows), and at least
    ``min_postings * k`` postings (pruning pays on long postings and small ``k``; 0: any)."""
    n_q = len(q_ptr) - 1
    lengths = np.diff(q_ptr)
    owner = np.repeat(np.arange(n_q), lengths)
    n_post = np.bincount(owner, weights=(t_ptr[q_terms + 1] - t_ptr[q_terms]).astype(np.float64), minlength=n_q)
    negative = np.bincount(owner, weights=(q_weights < 0).astype(np.float64), minlength=n_q) > 0
    ok = ~negative & np.isfinite(offsets) & (n_post >= min_postings * k)
    sel = np.asarray(sel_ids)
    has = sel >= 0
    if has.any():  # the exhaustive kernel's row-by-row test, as it makes it
        s = sel[has]
        rows = (sel_ptr[s + 1] - sel_ptr[s]) * lengths[has] * row_cost
        by_rows = (np.asarray(sel_mask)[s] < 0) & (rows < n_post[has])
        ok[np.flatnonzero(has)[by_rows]] = False
    return ok


def _take(q_ptr: npt.NDArray[np.int64], q_terms: npt.NDArray[np.int64], q_weights: npt.NDArray[np.float32],
          chosen: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The CSR queries ``chosen`` (bool (n_q,)), in order."""
    lengths = np.diff(q_ptr)
    keep = np.repeat(chosen, lengths)
    ptr = np.zeros(int(chosen.sum()) + 1, np.int64)
    np.cumsum(lengths[chosen], out=ptr[1:])
    return ptr, q_terms[keep], q_weights[keep]


def pruned_topk(q_ptr: npt.NDArray[np.int64], q_terms: npt.NDArray[np.int64], q_weights: npt.NDArray[np.float32],
                t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], t_w: npt.NDArray[np.float32],
                t_max: npt.NDArray[np.float32], offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64],
                sel_ptr: npt.NDArray[np.int64], sel_rows: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64],
                masks: npt.NDArray[np.uint8], n_docs: int, k: int, *, n_threads: int | None = None,
                prune: npt.NDArray[np.bool_] | None = None, scan: int = SCAN_RATIO,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Top-``k`` documents of every query, as :func:`~kolm_search._kernels.sparse.sparse_topk`
    returns them: ``docs int64 (n_q, k), scores float32 (n_q, k), counts int64 (n_q,)``.

    ``prune`` bool (n_q,) (default :func:`prunable` with any length) marks the queries that the
    pruned kernel scores; it must imply :func:`prunable`'s conditions. The others go to the
    exhaustive kernel. The caller guarantees the layout as for ``sparse_topk``, and term maxima
    at least every weight of their term (:mod:`kolm_search.retrievers.bounds` checks them), else
    results are wrong. ``scan``: a term's postings are scanned when fewer than ``scan`` per
    candidate, else searched.
    """
    c = np.ascontiguousarray
    q_ptr, q_terms, q_weights = c(q_ptr, np.int64), c(q_terms, np.int64), c(q_weights, np.float32)
    offsets, sel_ids = c(offsets, np.float32), c(sel_ids, np.int64)
    n_q = len(q_ptr) - 1
    if prune is None:
        prune = prunable(q_ptr, q_terms, q_weights, t_ptr, offsets, sel_ids, sel_ptr, sel_mask, k)
    prune = np.asarray(prune, bool)
    if not prune.any():
        return sparse_topk(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, offsets, sel_ids, sel_ptr, sel_rows,
                           sel_mask, masks, n_docs, k, n_threads=n_threads)
    out_d = np.full((n_q, k), -1, np.int64)
    out_s = np.zeros((n_q, k), np.float32)
    counts = np.zeros(n_q, np.int64)
    rest = ~prune
    if rest.any():
        r_ptr, r_terms, r_w = _take(q_ptr, q_terms, q_weights, rest)
        d, s, n = sparse_topk(r_ptr, r_terms, r_w, t_ptr, t_docs, t_w, offsets[rest], sel_ids[rest], sel_ptr, sel_rows,
                              sel_mask, masks, n_docs, k, n_threads=n_threads)
        out_d[rest], out_s[rest], counts[rest] = d, s, n
    p_ptr, p_terms, p_w = _take(q_ptr, q_terms, q_weights, prune) if rest.any() else (q_ptr, q_terms, q_weights)
    n_p = len(p_ptr) - 1
    p_d = np.full((n_p, k), -1, np.int64)
    p_s = np.zeros((n_p, k), np.float32)
    p_n = np.zeros(n_p, np.int64)
    longest = max(int(np.diff(p_ptr).max()) if n_p else 0, 1)
    threads = resolve_threads(n_threads) if n_p >= 16 else 1
    bounds = chunk_bounds(np.arange(n_p + 1, dtype=np.int64), threads)
    arrays = (p_ptr, p_terms, p_w, c(t_ptr, np.int64), c(t_docs, np.int32), c(t_w, np.float32), c(t_max, np.float32),
              c(offsets[prune], np.float32), c(sel_ids[prune], np.int64), c(sel_ptr, np.int64), c(sel_rows, np.int64),
              c(sel_mask, np.int64), c(masks, np.uint8), int(k), int(scan), p_d, p_s, p_n)

    def chunk(q0: int, q1: int) -> None:
        scratch = (np.empty(k, np.float32), np.empty(k, np.int64), np.empty(k, np.float64),
                   np.full(n_docs, _UNSEEN, np.float64), np.zeros(n_docs, np.int64), np.empty(n_docs, np.int64),
                   np.empty(n_docs, np.int64), np.empty(n_docs, np.int64), np.empty(longest, np.int64),
                   np.empty(longest, np.float64), np.empty(longest, np.float64), np.empty(longest + 1, np.int64),
                   np.empty(longest + 1, np.int64))
        _pruned_chunk(*arrays, *scratch, q0, q1)

    run_chunks(chunk, bounds)
    out_d[prune], out_s[prune], counts[prune] = p_d, p_s, p_n
    return out_d, out_s, counts
