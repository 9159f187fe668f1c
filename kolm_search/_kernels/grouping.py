"""Grouping kernels: stable counting sort by a dense key, query blocks, per-group interning.

``counting_order(keys int64 (n,), n_keys) -> (order int64 (n,), ptr int64 (n_keys+1,))``
    Stable sort of rows by key in O(n + n_keys): ``order[ptr[k]:ptr[k+1]]`` are the rows of key k
    in input order.

``block_segments(bptr, b_row, b_len, b_lid, ptr, key, descending=False)``
    Rows grouped by query from *blocks* (runs of rows of one query inside one list, as
    query-grouped runs arrive) instead of a per-row sort: block b is rows
    ``[b_row[b], b_row[b] + b_len[b])`` of list ``b_lid[b]``; query g owns blocks
    ``[bptr[g], bptr[g+1])`` (by list, then row) and output positions ``[ptr[g], ptr[g+1])``.
    Returns ``order`` (row at each position), ``lid_o`` (its list), ``position`` (its rank
    inside its (query, list) segment) and whether ``key`` never decreases inside a segment.
    Single-row blocks take any row order (the fallback for unsorted runs).

``intern_groups(order, ptr, offsets int64 (n+1,), data uint8, n_chunks)``
    ``-> (local int64 (n,), rep int64 (n,), counts int64 (n_groups,))``: for the rows of each group
    (``order[ptr[g]:ptr[g+1]]``), ``local[p]`` is the code of row ``order[p]``'s string *within its
    group* (first-appearance order) and ``rep[ptr[g] + c]`` is the row where the group's code c
    first appears. A group's table is small and cache-resident, which is why matching ids per
    query beats a global dictionary of every id.

Numpy twins: :func:`counting_order_numpy`, :func:`block_segments_numpy`, :func:`intern_groups_numpy`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from numba import njit, prange

from kolm_search._kernels.intern import _equal, _hash
from kolm_search.errors import KolmValueError

__all__ = [
    "block_segments",
    "block_segments_numpy",
    "counting_order",
    "counting_order_numpy",
    "intern_groups",
    "intern_groups_numpy",
]


@njit(cache=True)
def counting_order(keys, n_keys):  # pragma: no cover - compiled
    ptr = np.zeros(n_keys + 1, np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for k in range(n_keys):
        ptr[k + 1] += ptr[k]
    fill = ptr[:-1].copy()
    order = np.empty(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        order[fill[k]] = i
        fill[k] += 1
    return order, ptr


def counting_order_numpy(keys, n_keys):
    order = np.argsort(keys, kind="stable").astype(np.int64)
    ptr = np.zeros(n_keys + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n_keys), out=ptr[1:])
    return order, ptr


@njit(cache=True, nogil=True)
def _intern_chunk(order, ptr, offsets, data, g0, g1, max_size, local, rep, counts):  # pragma: no cover
    # Open addressing, one int64 a slot: (high 32 bits of the hash) << 32 | (code + 1), 0 empty.
    # The slot index comes from the low bits, the tag from the high ones; 8-byte slots keep a
    # 3,000-document query's table at 64 KB (16-byte (hash, code) pairs were 28 % slower).
    cap = 16
    while cap < 2 * max_size:
        cap *= 2
    table = np.zeros(cap, np.int64)
    used = np.empty(cap, np.int64)
    high = np.int64(-4294967296)  # 0xFFFFFFFF00000000
    for g in range(g0, g1):
        s = ptr[g]
        e = ptr[g + 1]
        gcap = 16
        while gcap < 2 * (e - s):
            gcap *= 2
        mask = gcap - 1
        nused = 0
        nu = 0
        umask = np.uint64(mask)
        one = np.uint64(1)
        for p in range(s, e):
            row = np.uint64(order[p])
            h = _hash(data, offsets[row], offsets[row + one])
            tag = np.int64(h >> np.uint64(32)) << 32
            j = h & umask
            ent = table[j]
            u = -1
            while ent != 0:
                if (ent & high) == tag and _equal(data, offsets, rep[np.uint64(s + (ent & 0xFFFFFFFF) - 1)], row):
                    u = (ent & 0xFFFFFFFF) - 1
                    break
                j = (j + one) & umask
                ent = table[j]
            if u == -1:
                u = nu
                table[j] = tag | (u + 1)
                used[nused] = j
                nused += 1
                rep[np.uint64(s + u)] = row
                nu += 1
            local[p] = u
        counts[g] = nu
        for t in range(nused):
            table[used[t]] = 0


@njit(cache=True, parallel=True)
def _intern_parallel(order, ptr, offsets, data, n_chunks, local, rep, counts):  # pragma: no cover
    n_groups = ptr.shape[0] - 1
    max_size = 0
    for g in range(n_groups):
        max_size = max(max_size, ptr[g + 1] - ptr[g])
    for c in prange(n_chunks):
        g0 = (n_groups * c) // n_chunks
        g1 = (n_groups * (c + 1)) // n_chunks
        _intern_chunk(order, ptr, offsets, data, g0, g1, max_size, local, rep, counts)


def intern_groups(order, ptr, offsets, data, n_chunks=1):
    """Compiled per-group interning (see the module docstring; outputs numpy-allocated)."""
    n = order.shape[0]
    widest = int(np.max(np.diff(ptr))) if ptr.shape[0] > 1 else 0
    if widest >= 2**31:  # codes live in 32 bits of a table slot
        raise KolmValueError(f"a group holds {widest} rows; at most 2**31 - 1 are supported")
    local = np.empty(n, np.int64)
    rep = np.empty(n, np.int64)
    counts = np.zeros(ptr.shape[0] - 1, np.int64)
    _intern_parallel(order, ptr, offsets, data, np.int64(max(1, n_chunks)), local, rep, counts)
    return local, rep, counts


def intern_groups_numpy(order, ptr, strings):
    """Twin of :func:`intern_groups` over decoded strings (``strings[row]``)."""
    n = len(order)
    local = np.empty(n, np.int64)
    rep = np.empty(n, np.int64)
    counts = np.zeros(len(ptr) - 1, np.int64)
    for g in range(len(ptr) - 1):
        rows = order[ptr[g]:ptr[g + 1]]
        codes, uniques = pd.factorize(np.asarray([strings[r] for r in rows], dtype=object))
        local[ptr[g]:ptr[g + 1]] = codes
        _, first = np.unique(codes, return_index=True)
        rep[ptr[g]:ptr[g] + len(first)] = rows[first]
        counts[g] = len(first)
    return local, rep, counts


@njit(cache=True, parallel=True)
def _block_segments(bptr, b_row, b_len, b_lid, ptr, key, sign, order, lid_o, position):  # pragma: no cover
    n_groups = bptr.shape[0] - 1
    bad = np.zeros(n_groups, np.bool_)
    one = np.uint64(1)
    for g in prange(n_groups):
        p = np.uint64(ptr[g])  # offsets and rows are >= 0: unsigned indices skip Numba's wraparound
        seg_start = p
        prev_l = -1
        prev_key = 0.0
        for b in range(bptr[g], bptr[g + 1]):
            lr = b_lid[b]
            r0 = np.uint64(b_row[b])
            for row in range(r0, r0 + np.uint64(b_len[b])):
                kr = sign * key[row]  # -1.0 * x is -x exactly
                if lr != prev_l:
                    seg_start = p
                    prev_l = lr
                elif kr < prev_key:
                    bad[g] = True
                prev_key = kr
                order[p] = row
                lid_o[p] = lr
                position[p] = p - seg_start
                p += one
    return not bad.any()


def block_segments(bptr, b_row, b_len, b_lid, ptr, key, descending=False):
    """Rows of query-sorted blocks: ``(order, lid_o, position, sorted)``.

    bptr int64 (n_groups+1,), b_row/b_len/b_lid int64 (n_blocks,), ptr int64 (n_groups+1,),
    key float64 (rows,) -> order/lid_o/position int64 (n,), bool (``key`` non-decreasing
    inside every (query, list) segment; non-increasing with ``descending``, i.e. scores best
    first without a negated copy). Outputs are numpy-allocated (huge pages).
    """
    n = int(ptr[-1])
    order = np.empty(n, np.int64)
    lid_o = np.empty(n, np.int64)
    position = np.empty(n, np.int64)
    ok = _block_segments(bptr, b_row, b_len, b_lid, ptr, key, -1.0 if descending else 1.0, order, lid_o, position)
    return order, lid_o, position, bool(ok)


def _segment_positions_numpy(order, ptr, lid, key, n_lists):
    """Each row's list id and position in its (query, list) segment, and sortedness."""
    n_groups = len(ptr) - 1
    group = np.repeat(np.arange(n_groups), np.diff(ptr))
    lid_o = lid[order]
    seg = group * (lid.max() + 1 if len(lid) else 1) + lid_o
    change = np.concatenate([[True], seg[1:] != seg[:-1]]) if len(seg) else np.zeros(0, bool)
    starts = np.flatnonzero(change)
    seg_id = np.cumsum(change) - 1
    position = np.arange(len(order)) - starts[seg_id]
    k = key[order]
    ok = not np.any((~change[1:]) & (k[1:] < k[:-1])) if len(k) > 1 else True
    return lid_o.astype(np.int64), position.astype(np.int64), bool(ok), (group * n_lists + lid_o).astype(np.int64)


def block_segments_numpy(bptr, b_row, b_len, b_lid, ptr, key, descending=False):
    """Twin of :func:`block_segments`: expand the blocks, then the per-row segment walk."""
    n_rows = len(key)
    lid = np.zeros(n_rows, np.int64)
    parts = []
    for b in range(len(b_row)):
        rows = np.arange(b_row[b], b_row[b] + b_len[b], dtype=np.int64)
        lid[rows] = b_lid[b]
        parts.append(rows)
    order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    lid_o, position, ok, _ = _segment_positions_numpy(order, ptr, lid, -key if descending else key, 1)
    return order, lid_o, position, ok
