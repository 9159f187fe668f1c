"""The steps of the pruned kernel (:mod:`kolm_search._kernels.pruned`) over document-ordered
candidates: merging a term into the sorted union of phase 1, adding a term to the candidates of
phase 2 block by block (block maxima drop some unread), adding a term to the survivors' float32
sums, and the k-th largest of a run of partial sums. ``@njit`` helpers, compiled into the kernel.

Candidates are ``cd`` int32 (documents, ascending) and ``cv`` float64 (their partial sums, or
float32 sums held in float64) of the same length; a term's postings are ``[t_ptr[t], t_ptr[t+1])``
of ``t_docs``, ``t_w`` with the block arrays of :mod:`kolm_search._kernels.blocks`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kolm_search._kernels.bitmaps import bit_rank
from kolm_search._kernels.blocks import BLOCK_SHIFT, find, in_block, next_block
from kolm_search._kernels.heap import kth_largest_above

__all__ = ["add_term", "add_term_bits", "kth_largest", "merge", "rescore_term", "rescore_term_bits"]


@njit
def kth_largest(vals, n, k, heap, lim):  # pragma: no cover - compiled
    """The ``k``-th largest of ``vals[:n]`` among those above ``lim``, or -inf when fewer than
    ``k`` are (counted first; then :func:`~kolm_search._kernels.heap.kth_largest_above`)."""
    above = 0
    for c in range(n):
        above += vals[c] > lim
    if above < k:
        return -np.inf
    return kth_largest_above(vals, n, k, heap, lim)


@njit
def _allowed(d, q, m, mm, masks, allow):  # pragma: no cover - compiled
    """Whether document ``d`` passes query ``q``'s selection ``m`` (mask row ``mm``, else rows stamped in ``allow``)."""
    if m < 0:
        return True
    if mm >= 0:
        return masks[mm, d] != 0
    return allow[d] == q + 1


@njit
def merge(cd, cv, n_m, t_docs, t_w, lo, hi, w, r, od, ov, q, m, mm, masks, allow):  # pragma: no cover - compiled
    """Merge the postings ``[lo, hi)`` (weight ``w``, ``r`` times: a term repeated in the query;
    new documents only if selected) into the sorted union ``cd, cv[:n_m]``, written to ``od,
    ov``; returns its new length."""
    o = 0
    a = 0
    p = lo
    if m < 0 and hi - lo >= 4 * n_m:  # a long run: gallop to each union document, copy the postings between
        for a in range(n_m):
            da = cd[a]
            x = p
            if x < hi and t_docs[x] < da:
                step = 1
                y = x + 1
                while y < hi and t_docs[y] < da:
                    x = y
                    y = x + step
                    step <<= 1
                y = min(y, hi)
                x += 1
                while x < y:
                    mid = (x + y) >> 1
                    if t_docs[mid] < da:
                        x = mid + 1
                    else:
                        y = mid
            for z in range(p, x):
                od[o] = t_docs[z]
                ov[o] = r * np.float64(w * t_w[z])
                o += 1
            p = x
            v = cv[a]
            if p < hi and t_docs[p] == da:
                v += r * np.float64(w * t_w[p])
                p += 1
            od[o] = da
            ov[o] = v
            o += 1
        a = n_m
    while a < n_m and p < hi:
        da = cd[a]
        db = t_docs[p]
        if da < db:
            od[o] = da
            ov[o] = cv[a]
            a += 1
            o += 1
        elif da == db:
            od[o] = da
            ov[o] = cv[a] + r * np.float64(w * t_w[p])
            a += 1
            p += 1
            o += 1
        else:
            if _allowed(db, q, m, mm, masks, allow):
                od[o] = db
                ov[o] = r * np.float64(w * t_w[p])
                o += 1
            p += 1
    while a < n_m:
        od[o] = cd[a]
        ov[o] = cv[a]
        a += 1
        o += 1
    while p < hi:
        db = t_docs[p]
        if _allowed(db, q, m, mm, masks, allow):
            od[o] = db
            ov[o] = r * np.float64(w * t_w[p])
            o += 1
        p += 1
    return o


@njit
def add_term(cd, cv, n_c, t, w, r, t_ptr, t_docs, t_w, b_ptr, b_max, b_last, need, prod, slot):  # pragma: no cover
    """Add term ``t`` (weight ``w``, ``r`` times) to the partial sums (float64) of the candidates ``cd,
    cv[:n_c]`` (ascending documents), dropping those below ``need`` after it, or before it,
    unread, when the maximum of the block that could hold them cannot lift them to ``need``;
    returns how many are kept. The float32 products go to row ``slot`` of ``prod`` (0: not in t)
    when ``slot < len(prod)``; rows before it move with their candidates."""
    lo, hi = t_ptr[t], t_ptr[t + 1]
    keep = min(slot, len(prod))
    kept = 0
    bm = b_ptr[t]
    nb = b_ptr[t + 1] - bm
    j = 0
    for c in range(n_c):
        d = cd[c]
        v = cv[c]
        x = np.float32(0.0)
        j = next_block(b_last, bm, nb, j, d)
        if j < nb:
            if v + r * np.float64(w * b_max[bm + j]) < need:
                continue  # ruled out by its block's maximum, unread
            start = lo + (j << BLOCK_SHIFT)  # d's place in its block, found from the block alone (no
            p = in_block(t_docs, start, min(start + (1 << BLOCK_SHIFT), hi), d)  # chain of loads between candidates)
            if t_docs[p] == d:
                x = w * t_w[p]
        v += r * np.float64(x)
        cd[kept] = d
        cv[kept] = v
        for row in range(keep):
            prod[row, kept] = prod[row, c]
        if slot < len(prod):
            prod[slot, kept] = x
        kept += v >= need
    return kept


@njit
def rescore_term(cd, cv, n_c, t, w, t_ptr, t_docs, t_w, b_ptr, b_last, scan):  # pragma: no cover - compiled
    """Add term ``t`` (weight ``w``) to the float32 sums (held in float64) ``cv[:n_c]`` of the
    candidates ``cd`` (ascending), merging its postings or looking each candidate up."""
    lo, hi = t_ptr[t], t_ptr[t + 1]
    if hi - lo < scan * n_c:
        p = lo
        for c in range(n_c):
            d = cd[c]
            while p < hi and t_docs[p] < d:
                p += 1
            if p >= hi:
                break
            if t_docs[p] == d:
                cv[c] = np.float64(np.float32(cv[c]) + w * t_w[p])
        return
    bm = b_ptr[t]
    nb = b_ptr[t + 1] - bm
    j = 0
    for c in range(n_c):
        pos, j = find(t_docs, lo, hi, b_last, bm, nb, j, cd[c])
        if j >= nb:
            break
        if pos >= 0:
            cv[c] = np.float64(np.float32(cv[c]) + w * t_w[pos])


@njit
def add_term_bits(cd, cv, n_c, t, w, r, t_ptr, t_w, b_ptr, b_max, bits, rank, need, prod, slot):  # pragma: no cover
    """:func:`add_term` with the term's bitmap ``bits`` and rank directory ``rank`` (rows of
    :func:`kolm_search._kernels.bitmaps.term_bitmaps`): each candidate's place in O(1); a
    candidate holding the term whose block maximum cannot lift it to ``need`` is dropped unread."""
    lo = t_ptr[t]
    keep = min(slot, len(prod))
    kept = 0
    bm = b_ptr[t]
    for c in range(n_c):
        d = cd[c]
        v = cv[c]
        x = np.float32(0.0)
        p, present = bit_rank(bits, rank, d)
        if present:
            if v + r * np.float64(w * b_max[bm + (p >> BLOCK_SHIFT)]) < need:
                continue  # ruled out by its block's maximum, unread
            x = w * t_w[lo + p]
        v += r * np.float64(x)
        cd[kept] = d
        cv[kept] = v
        for row in range(keep):
            prod[row, kept] = prod[row, c]
        if slot < len(prod):
            prod[slot, kept] = x
        kept += v >= need
    return kept


@njit
def rescore_term_bits(cd, cv, n_c, t, w, t_ptr, t_w, bits, rank):  # pragma: no cover - compiled
    """:func:`rescore_term` with the term's bitmap and rank directory."""
    lo = t_ptr[t]
    for c in range(n_c):
        p, present = bit_rank(bits, rank, cd[c])
        if present:
            cv[c] = np.float64(np.float32(cv[c]) + w * t_w[lo + p])
