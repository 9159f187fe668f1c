"""Sparse top-k with exact dynamic pruning: block-max MaxScore over document-ordered candidates.

Same inputs and outputs as :func:`kolm_search._kernels.sparse.sparse_topk` (see there), plus the
bounds of :mod:`kolm_search._kernels.blocks`: ``t_max`` float32 (V,), each term's largest stored
weight, and per block of :data:`~kolm_search._kernels.blocks.BLOCK` postings ``b_max`` float32
(its largest weight) and ``b_last`` int32 (its last document).

Results are those of the exhaustive kernel bit for bit (scores, order, ties). A query's distinct
(term, weight) pairs (a repeated one read once, its products counted as often as it occurs) are
taken by upper bound ``q_weight * t_max``, largest first. Phase 1 merges whole terms into the
sorted union of their documents, each with a float64 partial sum, until ``k`` documents are sure
to beat any document that only the remaining terms hold (the k-th best partial sum exceeds the
sum of the remaining bounds): from then on no new document can enter. The union's documents that
may still reach the k-th best partial sum are the candidates, in document order. Phase 2 takes
each remaining term for the candidates only: each candidate's block of the term (galloping over
the blocks' last documents, or, for a term given a document bitmap, its place read from the
bitmap and rank directory of :mod:`kolm_search._kernels.bitmaps` in O(1)); a candidate whose
partial sum plus that block's maximum plus the later terms' bounds cannot reach the threshold is
dropped unread, the others are found in the block; then the threshold rises to the k-th best
partial sum. The survivors are scored as the
exhaustive kernel scores them: ``sum(q_weight * t_w)`` in float32, over the query's terms in
query-term order (products kept from phase 2, others looked up again), plus the offset, and the
best ``k`` kept (equal scores: the lower document code). Every bound is taken in float64 with a
margin of ``(n_terms + 4) * 2**-23`` of the largest possible score (plus the offset), more than
float32's rounding of the sum can move a score; a document is ruled out only when its bound is
strictly below a score that ``k`` documents reach.

A query whose phase 1 would merge (beyond its first term) more than ``bail`` times its postings
(frequent terms only, or ``k`` past the documents holding its rarer terms) is given back, as is
one whose phase 2 would look up more candidates (times its remaining terms) than ``1 / lookup``
of its postings (:data:`LOOKUP`: a lookup costs about 8 postings of the exhaustive scan;
:data:`LOOKUP_BITS`, 2, in a bitmap), and
:func:`pruned_topk` scores it with the exhaustive kernel, as it does a query with a negative
weight or a non-finite offset, and one whose few selected rows the exhaustive kernel scores row
by row. The numpy twin is the exhaustive kernel's (:func:`kolm_search._kernels.sparse.sparse_topk_numpy`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_pieces
from kolm_search._kernels.blocks import block_pointers
from kolm_search._kernels.heap import heap_push, sort_heap
from kolm_search._kernels.prune_steps import (
    add_term,
    add_term_bits,
    kth_largest,
    merge,
    rescore_term,
    rescore_term_bits,
)
from kolm_search._kernels.sig import f32, f64, i64, ro, rw, u8
from kolm_search._kernels.sparse import PIECES, ROW_LOOKUP_COST, query_costs, sparse_topk, sparse_topk_numpy

__all__ = ["BAIL", "LOOKUP", "LOOKUP_BITS", "SCAN_RATIO", "prunable", "pruned_topk", "pruned_topk_numpy"]

pruned_topk_numpy = sparse_topk_numpy  # the oracle: pruning changes no result

SCAN_RATIO = 8  # a term's postings are merged with the candidates when fewer than this many per candidate
PRODUCT_ROWS = 4  # products of this many phase-2 terms are kept for the final sums (the others looked up again)
BAIL = 0.3  # a query whose phase 1 would merge more than this share of its postings goes to the exhaustive kernel
LOOKUP_BITS = 2.0  # the same for a term looked up in its bitmap (no gallop, no search)
LOOKUP = 8.0  # a query whose phase-2 lookups times LOOKUP exceed its postings goes to the exhaustive kernel (0: none)
_I32 = types.int32
_SIGNATURE = types.void(ro(i64), ro(i64), ro(f32), ro(i64), ro(_I32), ro(f32), ro(f32), ro(i64), ro(f32), ro(_I32),
                        ro(f32), ro(i64), ro(i64), ro(i64), ro(i64), ro(u8, 2), i64, i64, f64, f64, rw(i64, 2),
                        rw(f32, 2), rw(i64), rw(f32), rw(i64), rw(f64), rw(i64), rw(_I32), rw(f64), rw(_I32), rw(f64),
                        rw(i64), rw(f64), rw(f64), rw(i64), rw(i64), rw(f64), rw(f32, 2), ro(i64), ro(types.uint64, 2),
                        ro(_I32, 2), f64, i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _pruned_chunk(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, t_max, b_ptr, b_max, b_last, offsets, sel_ids,
                  sel_ptr, sel_rows, sel_mask, masks, k, scan, bail, lookup, out_d, out_s, counts, hs, hd, heap,
                  allow, md0, mv0, md1, mv1, order, ubs, rest, slot, grp, mult, prod, f_slot, f_bits, f_rank,
                  lookup_bits, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``; ``allow`` (n_docs or 1,, all <= q0), ``md0, mv0, md1, mv1``
    (the largest union: documents, partial sums), ``hs, hd, heap`` (k,), ``order, ubs, rest,
    slot, grp, mult`` (the longest query,) and ``prod`` (PRODUCT_ROWS, the largest union) are this
    chunk's scratch. ``counts[q] = -1``: query q given back."""
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
        n_post = 0
        n_g = 0  # the query's distinct (term, weight) pairs: a repeated one is read once, its products counted r times
        for e in range(n):
            t = q_terms[j0 + e]
            w = q_weights[j0 + e]
            n_post += t_ptr[t + 1] - t_ptr[t]
            g = e
            if n <= 64:  # (pairs compared: a long weighted query is rarely repeated)
                for f in range(e):
                    if mult[f] > 0 and q_terms[j0 + f] == t and q_weights[j0 + f] == w:
                        g = f
                        break
            grp[e] = g
            mult[e] = 0.0
            mult[g] += 1.0
            if g == e:
                order[n_g] = e
                n_g += 1
        for a in range(n_g):
            i = order[a]
            ubs[i] = mult[i] * np.float64(q_weights[j0 + i] * t_max[q_terms[j0 + i]])  # the largest float32 products
            total += ubs[i]
        for a in range(1, n_g):  # terms by upper bound, largest first (insertion sort: few terms)
            x = order[a]
            b = a - 1
            while b >= 0 and ubs[order[b]] < ubs[x]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = x
        r_sum = 0.0
        for e in range(n_g - 1, -1, -1):  # rest[e]: the bounds of the terms after the e-th
            rest[e] = r_sum
            r_sum += ubs[order[e]]
        # a float32 score is within delta of the exact sum of its float32 products plus the offset
        delta = (n + 4) * 2.0 ** -23 * (total + abs(off))
        theta = -np.inf  # k documents score at least this much: one scoring less is out
        # phase 1: whole terms, largest bounds first, merged into the sorted union of their documents
        cd, cv, od, ov = md0, mv0, md1, mv1
        n_m = 0
        merged = 0
        e = 0
        while e < n_g:
            t = q_terms[j0 + order[e]]
            lo, hi = t_ptr[t], t_ptr[t + 1]
            if e:  # the first term is copied, not merged: it costs about what the exhaustive kernel pays for it
                merged += n_m + hi - lo
                if merged > bail * n_post:
                    break
            n_m = merge(cd, cv, n_m, t_docs, t_w, lo, hi, q_weights[j0 + order[e]], mult[order[e]], od, ov, q, m, mm,
                         masks, allow)
            cd, cv, od, ov = od, ov, cd, cv
            r = rest[e]
            e += 1
            if n_m >= k and total - r > r + 2 * delta:  # could k documents beat every document not yet seen?
                kth = kth_largest(cv, n_m, k, heap, r + 2 * delta)
                if kth > -np.inf:
                    theta = kth + off - delta
                    break
        if merged > bail * n_post:
            counts[q] = -1
            continue
        # the candidates: union documents whose partial sum plus the remaining bounds may reach theta
        n_c = 0
        need = theta - (rest[e - 1] if e > 0 else total) - off - delta
        for c in range(n_m):
            v = cv[c]
            cd[n_c] = cd[c]
            cv[n_c] = v
            n_c += v >= need
        cost = 0.0
        for s in range(e, n_g):
            cost += lookup_bits if f_slot[q_terms[j0 + order[s]]] >= 0 else lookup
        if n_c * cost > n_post:  # looking the candidates up would cost more than the scan
            counts[q] = -1
            continue
        # phase 2: the remaining terms for the candidates only, the threshold rising after each
        for s in range(e, n_g):
            if n_c == 0:
                break
            i = order[s]
            slot[i] = s - e
            t = q_terms[j0 + i]
            f = f_slot[t]
            if f >= 0:
                n_c = add_term_bits(cd, cv, n_c, t, q_weights[j0 + i], mult[i], t_ptr, t_w, b_ptr, b_max, f_bits[f],
                                    f_rank[f], theta - rest[s] - off - delta, prod, s - e)
            else:
                n_c = add_term(cd, cv, n_c, t, q_weights[j0 + i], mult[i], t_ptr, t_docs, t_w, b_ptr, b_max, b_last,
                               theta - rest[s] - off - delta, prod, s - e)
            if n_c >= k:
                theta = max(theta, kth_largest(cv, n_c, k, heap, theta - off + delta) + off - delta)
        # the survivors (exact sums that could reach theta), scored in float32 in query-term order
        need = theta - off - delta
        n_p = min(n_g - e, len(prod))
        kept = 0
        for c in range(n_c):
            v = cv[c]
            cd[kept] = cd[c]
            cv[kept] = 0.0
            for row in range(n_p):
                prod[row, kept] = prod[row, c]
            kept += v >= need
        n_c = kept
        for x in range(e):
            slot[order[x]] = -1
        for i in range(n if n_c else 0):
            g = slot[grp[i]]
            if 0 <= g < len(prod):  # its products were kept in phase 2 (0 for a document without it)
                for c in range(n_c):
                    cv[c] = np.float64(np.float32(cv[c]) + prod[g, c])
            elif f_slot[q_terms[j0 + i]] >= 0:
                f = f_slot[q_terms[j0 + i]]
                rescore_term_bits(cd, cv, n_c, q_terms[j0 + i], q_weights[j0 + i], t_ptr, t_w, f_bits[f], f_rank[f])
            else:
                rescore_term(cd, cv, n_c, q_terms[j0 + i], q_weights[j0 + i], t_ptr, t_docs, t_w, b_ptr, b_last,
                              scan)
        size = 0
        o32 = offsets[q]
        for c in range(n_c):
            s32 = np.float32(cv[c]) + o32
            if size < k or s32 >= hs[0]:
                size = heap_push(hs, hd, size, k, s32, np.int64(cd[c]))
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
                t_max: npt.NDArray[np.float32], b_max: npt.NDArray[np.float32], b_last: npt.NDArray[np.int32],
                offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64], sel_ptr: npt.NDArray[np.int64],
                sel_rows: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], masks: npt.NDArray[np.uint8],
                n_docs: int, k: int, *, n_threads: int | None = None, prune: npt.NDArray[np.bool_] | None = None,
                scan: int = SCAN_RATIO, bail: float = BAIL, lookup: float = LOOKUP,
                t_min: npt.NDArray[np.float32] | None = None,
                bitmaps: tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.int32]] | None = None,
                lookup_bits: float = LOOKUP_BITS,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Top-``k`` documents of every query, as :func:`~kolm_search._kernels.sparse.sparse_topk`
    returns them: ``docs int64 (n_q, k), scores float32 (n_q, k), counts int64 (n_q,)``.

    ``prune`` bool (n_q,) (default :func:`prunable` with any length) marks the queries that the
    pruned kernel scores; it must imply :func:`prunable`'s conditions. The others, and those it
    gives back (``bail``: the share of a query's postings its phase 1 may merge; inf: none given
    back; ``lookup``: what a phase-2 lookup costs in postings, a query whose candidates times its
    remaining terms times ``lookup`` exceed its postings given back; 0: none), go to the
    exhaustive kernel (with ``t_min``, see there). ``bitmaps``: ``(slot int64 (V,), bits uint64,
    rank int32 (rows, ceil(n_docs / 64)))``, row ``slot[t]`` (-1: none) the bitmap and rank
    directory of term t (:func:`kolm_search._kernels.bitmaps.term_bitmaps` of these postings),
    a lookup in which costs ``lookup_bits`` postings. The caller guarantees the
    layout as for ``sparse_topk``, and the bounds of :func:`kolm_search._kernels.blocks.posting_bounds`
    of these postings (:mod:`kolm_search.retrievers.bounds` checks saved ones), else results are
    wrong. ``scan``: a term's postings are merged with the candidates when fewer than ``scan``
    per candidate, else looked up block by block.
    """
    c = np.ascontiguousarray
    q_ptr, q_terms, q_weights = c(q_ptr, np.int64), c(q_terms, np.int64), c(q_weights, np.float32)
    offsets, sel_ids = c(offsets, np.float32), c(sel_ids, np.int64)
    n_q = len(q_ptr) - 1
    b_ptr = block_pointers(t_ptr)
    if len(b_max) != b_ptr[-1] or len(b_last) != b_ptr[-1]:
        raise ValueError(f"{len(b_max)} block maxima and {len(b_last)} block ends for {b_ptr[-1]} blocks")
    if prune is None:
        prune = prunable(q_ptr, q_terms, q_weights, t_ptr, offsets, sel_ids, sel_ptr, sel_mask, k)
    prune = np.asarray(prune, bool)
    out_d = np.full((n_q, k), -1, np.int64)
    out_s = np.zeros((n_q, k), np.float32)
    counts = np.zeros(n_q, np.int64)
    if prune.any():
        p_ptr, p_terms, p_w = _take(q_ptr, q_terms, q_weights, prune) if not prune.all() else (q_ptr, q_terms,
                                                                                              q_weights)
        n_p = len(p_ptr) - 1
        p_d = np.full((n_p, k), -1, np.int64)
        p_s = np.zeros((n_p, k), np.float32)
        p_n = np.zeros(n_p, np.int64)
        longest = max(int(np.diff(p_ptr).max()) if n_p else 0, 1)
        owner = np.repeat(np.arange(n_p), np.diff(p_ptr))
        union = np.minimum(np.bincount(owner, weights=np.diff(t_ptr)[p_terms], minlength=n_p), n_docs)
        p_sel = sel_ids[prune]
        has = p_sel[p_sel >= 0]
        rows = bool((np.asarray(sel_mask)[has] < 0).any())  # a selection of rows: stamped in a scratch array
        threads = resolve_threads(n_threads) if n_p >= 16 else 1
        bounds = chunk_bounds(query_costs(p_ptr, p_terms, t_ptr, n_docs, 0), PIECES * threads)
        cap = int(union.max()) + 1 if n_p else 1
        arrays = (p_ptr, p_terms, p_w, c(t_ptr, np.int64), c(t_docs, np.int32), c(t_w, np.float32),
                  c(t_max, np.float32), b_ptr, c(b_max, np.float32), c(b_last, np.int32), c(offsets[prune], np.float32),
                  c(p_sel, np.int64), c(sel_ptr, np.int64), c(sel_rows, np.int64), c(sel_mask, np.int64),
                  c(masks, np.uint8), int(k), int(scan), float(bail), float(lookup), p_d, p_s, p_n)

        if bitmaps is None:
            bitmaps = (np.full(len(t_ptr) - 1, -1, np.int64), np.zeros((0, 1), np.uint64), np.zeros((0, 1), np.int32))
        f_slot, f_bits, f_rank = c(bitmaps[0], np.int64), c(bitmaps[1], np.uint64), c(bitmaps[2], np.int32)
        if len(f_slot) != len(t_ptr) - 1 or f_bits.shape != f_rank.shape or (
                len(f_bits) and f_bits.shape[1] != max((n_docs + 63) >> 6, 1)) or (
                len(f_slot) and not -1 <= f_slot.min() <= f_slot.max() < len(f_bits)):
            raise ValueError(f"bitmaps of shapes {f_slot.shape}, {f_bits.shape}, {f_rank.shape} for {len(t_ptr) - 1} "
                             f"terms and {n_docs} documents")

        def scratch() -> tuple[np.ndarray | float, ...]:  # this thread's scratch, then the bitmaps
            return (np.empty(k, np.float32), np.empty(k, np.int64), np.empty(k, np.float64),
                    np.zeros(n_docs if rows else 1, np.int64), np.empty(cap, np.int32), np.empty(cap, np.float64),
                    np.empty(cap, np.int32), np.empty(cap, np.float64), np.empty(longest, np.int64),
                    np.empty(longest, np.float64), np.empty(longest, np.float64), np.empty(longest, np.int64),
                    np.empty(longest, np.int64), np.empty(longest, np.float64), np.empty((PRODUCT_ROWS, cap), np.float32),
                    f_slot, f_bits, f_rank, float(lookup_bits))

        run_pieces(lambda *a: _pruned_chunk(*arrays, *a), bounds, threads, scratch)
        out_d[prune], out_s[prune], counts[prune] = p_d, p_s, p_n
    rest = ~prune | (counts < 0)
    if rest.any():
        r_ptr, r_terms, r_w = _take(q_ptr, q_terms, q_weights, rest) if not rest.all() else (q_ptr, q_terms, q_weights)
        d, s, n = sparse_topk(r_ptr, r_terms, r_w, t_ptr, t_docs, t_w, offsets[rest], sel_ids[rest], sel_ptr, sel_rows,
                              sel_mask, masks, n_docs, k, n_threads=n_threads, t_min=t_min)
        out_d[rest], out_s[rest], counts[rest] = d, s, n
    return out_d, out_s, counts
