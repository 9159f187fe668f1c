"""Sparse top-k with exact dynamic pruning: block-max MaxScore, document at a time.

Same inputs and outputs as :func:`kolm_search._kernels.sparse.sparse_topk` (see there), plus the
block maxima of the postings:

- ``b_ptr`` int64 (V + 1,): term t's blocks are ``[b_ptr[t], b_ptr[t+1])``; block ``i`` of t
  holds its postings ``[t_ptr[t] + i * B, min(t_ptr[t] + (i + 1) * B, t_ptr[t+1]))``, ``B = 1 << shift``;
- ``b_max`` float32 (n_blocks,): the largest stored weight of each block;
- ``t_max`` float32 (V,): the largest stored weight of each term (0 for a term without postings).

Results are those of the exhaustive kernel bit for bit (scores, order, ties). Every document
that is fully scored gets the exhaustive kernel's float32 sum, ``sum(q_weight * t_w)`` over the
query's terms in query-term order, plus the query's offset. Documents are visited in ascending
order, so one that scores no more than the worst of ``k`` kept results would lose to it (equal
scores: the lower document code wins) and may be skipped: a document is skipped only when an
upper bound of its score, taken in float64 with a margin that covers float32's rounding of the
sum (``(n_terms + 2) * 2**-23`` of the bound), is at most that worst score. Query terms are
ordered by their upper bound ``q_weight * t_max``; the longest prefix whose bounds sum (plus the
offset) to at most the worst kept score is *non-essential*: only documents in an essential term's
postings can enter, and non-essential postings are looked up (block by block, their block
maxima tightening the bound first) only for documents that may still enter.

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

_BIG = np.int64(1) << 62
_SIGNATURE = types.void(ro(i64), ro(i64), ro(f32), ro(i64), ro(types.int32), ro(f32), ro(i64), ro(f32), ro(f32), i64,
                        ro(f32), ro(i64), ro(i64), ro(i64), ro(i64), ro(u8, 2), i64, rw(i64, 2), rw(f32, 2), rw(i64),
                        rw(f32), rw(i64), rw(i64), rw(i64), rw(f32), rw(f64), rw(f64), rw(i64), rw(f64), rw(f32),
                        i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _pruned_chunk(q_ptr, q_terms, q_weights, t_ptr, t_docs, t_w, b_ptr, b_max, t_max, shift, offsets, sel_ids,
                  sel_ptr, sel_rows, sel_mask, masks, k, out_d, out_s, counts, hs, hd, pos, ends, wts, ubs, bms,
                  order, pre, contrib, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``; ``hs``, ``hd`` (k,) and the cursors ``pos``, ``ends``, ``wts``,
    ``ubs``, ``bms``, ``order``, ``pre``, ``contrib`` (longest query,) are this chunk's scratch."""
    for q in range(q0, q1):
        j0 = q_ptr[q]
        n = q_ptr[q + 1] - j0
        off = offsets[q]
        off64 = np.float64(off)
        aoff = abs(off64)
        eps = (n + 2) * 2.0 ** -23  # float32 rounding of an n-term sum and the offset, with room
        m = sel_ids[q]
        mm = -1
        sp = np.int64(0)
        se = np.int64(0)
        if m >= 0:
            mm = sel_mask[m]
            sp = sel_ptr[m]
            se = sel_ptr[m + 1]
        for i in range(n):
            t = q_terms[j0 + i]
            pos[i] = t_ptr[t]
            ends[i] = t_ptr[t + 1]
            w = q_weights[j0 + i]
            wts[i] = w
            ubs[i] = np.float64(w * t_max[t])  # the float32 product the scan computes, at its largest
            order[i] = i
        for a in range(1, n):  # order: by upper bound, ascending (insertion sort: few terms)
            x = order[a]
            b = a - 1
            while b >= 0 and ubs[order[b]] > ubs[x]:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = x
        acc = 0.0
        for a in range(n):
            acc += ubs[order[a]]
            pre[a] = acc
        size = 0
        theta = -np.inf  # the worst kept score once k are kept
        ne = 0  # order[:ne] are non-essential
        while True:
            d = _BIG
            for e in range(ne, n):  # the next candidate: the least document of an essential cursor
                i = order[e]
                if pos[i] < ends[i]:
                    dd = np.int64(t_docs[pos[i]])
                    if dd < d:
                        d = dd
            if d == _BIG:
                break
            ok = True
            if m >= 0:  # the selection test, written out
                if mm >= 0:
                    ok = masks[mm, d] != 0
                else:
                    while sp < se and sel_rows[sp] < d:  # candidates ascend: a moving pointer
                        sp += 1
                    ok = sp < se and sel_rows[sp] == d
            ess = 0.0
            for e in range(ne, n):  # essential postings of d, consumed
                i = order[e]
                p = pos[i]
                if p < ends[i] and t_docs[p] == d:
                    c = wts[i] * t_w[p]
                    contrib[i] = c
                    ess += np.float64(c)
                    pos[i] = p + 1
                else:
                    contrib[i] = 0.0
            if not ok:
                continue
            if ne > 0:  # (only once k are kept)
                bound = ess + pre[ne - 1]
                if bound + off64 + eps * (bound + aoff) <= theta:
                    continue
                bound = ess
                for e in range(ne):  # shallow: each non-essential cursor to the block that may hold d
                    i = order[e]
                    t = q_terms[j0 + i]
                    start = t_ptr[t]
                    p = pos[i]
                    hi = ends[i]
                    bm = 0.0
                    while p < hi:
                        lb = (p - start) >> shift
                        last = start + ((lb + 1) << shift)
                        if last > hi:
                            last = hi
                        if t_docs[last - 1] >= d:
                            bm = np.float64(wts[i] * b_max[b_ptr[t] + lb])
                            break
                        p = last
                    pos[i] = p
                    bms[i] = bm
                    bound += bm
                if bound + off64 + eps * (bound + aoff) <= theta:
                    continue
                pruned = False
                for e in range(ne - 1, -1, -1):  # deep: the largest bounds first, stop once d cannot enter
                    i = order[e]
                    p = pos[i]
                    c = np.float32(0.0)
                    if p < ends[i]:  # its block's last document is >= d
                        while t_docs[p] < d:
                            p += 1
                        pos[i] = p
                        if t_docs[p] == d:
                            c = wts[i] * t_w[p]
                    contrib[i] = c
                    bound += np.float64(c) - bms[i]
                    if e > 0 and bound + off64 + eps * (bound + aoff) <= theta:
                        pruned = True
                        break
                if pruned:
                    continue
            a32 = np.float32(0.0)
            for i in range(n):  # query-term order, as the exhaustive kernel (absent terms add 0)
                a32 += contrib[i]
            s = a32 + off
            if size < k or s >= hs[0]:
                size = heap_push(hs, hd, size, k, s, d)
                if size == k:
                    theta = np.float64(hs[0])
                    while ne < n and pre[ne] + off64 + eps * (pre[ne] + aoff) <= theta:
                        ne += 1
        sort_heap(hs, hd, size)
        for i in range(size):
            out_s[q, i] = hs[i]
            out_d[q, i] = hd[i]
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
                b_ptr: npt.NDArray[np.int64], b_max: npt.NDArray[np.float32], t_max: npt.NDArray[np.float32],
                shift: int, offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64],
                sel_ptr: npt.NDArray[np.int64], sel_rows: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64],
                masks: npt.NDArray[np.uint8], n_docs: int, k: int, *, n_threads: int | None = None,
                prune: npt.NDArray[np.bool_] | None = None,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Top-``k`` documents of every query, as :func:`~kolm_search._kernels.sparse.sparse_topk`
    returns them: ``docs int64 (n_q, k), scores float32 (n_q, k), counts int64 (n_q,)``.

    ``prune`` bool (n_q,) (default :func:`prunable` with any length) marks the queries that the
    pruned kernel scores; it must imply :func:`prunable`'s conditions. The others go to the
    exhaustive kernel. The caller guarantees the layout as for ``sparse_topk``, and block maxima
    that bound every block (``b_max``, ``t_max``: :mod:`kolm_search.retrievers.blockmax` checks
    them), else results are wrong.
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
    longest = int(np.diff(p_ptr).max()) if n_p else 0
    threads = resolve_threads(n_threads) if n_p >= 16 else 1
    bounds = chunk_bounds(np.arange(n_p + 1, dtype=np.int64), threads)
    arrays = (p_ptr, p_terms, p_w, c(t_ptr, np.int64), c(t_docs, np.int32), c(t_w, np.float32), c(b_ptr, np.int64),
              c(b_max, np.float32), c(t_max, np.float32), int(shift), c(offsets[prune], np.float32),
              c(sel_ids[prune], np.int64), c(sel_ptr, np.int64), c(sel_rows, np.int64), c(sel_mask, np.int64),
              c(masks, np.uint8), int(k), p_d, p_s, p_n)

    def chunk(q0: int, q1: int) -> None:
        scratch = (np.empty(k, np.float32), np.empty(k, np.int64), np.empty(longest, np.int64),
                   np.empty(longest, np.int64), np.empty(longest, np.float32), np.empty(longest, np.float64),
                   np.empty(longest, np.float64), np.empty(longest, np.int64), np.empty(longest, np.float64),
                   np.empty(longest, np.float32))
        _pruned_chunk(*arrays, *scratch, q0, q1)

    run_chunks(chunk, bounds)
    out_d[prune], out_s[prune], counts[prune] = p_d, p_s, p_n
    return out_d, out_s, counts
