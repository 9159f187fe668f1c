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
order of first appearance inside the group. ``out_docs`` and ``out_scores`` are contiguous but
may be views of a larger allocation (see :func:`fuse_groups`: the output is written at an
upper bound, without a counting pass).

Layout: one random access per entry (``mark[doc] = group << 32 | slot``); the per-document
sums live in small per-group slot arrays. When ``n_docs`` is large next to the groups (codes of
a whole corpus), ``mark`` is an open-addressing hash table of 2-4x the widest group instead of
an array over every code: it stays in cache and costs no fill of ``n_docs`` entries per chunk. Full lists are sorted on integer keys (the IEEE
bits of the negated score, in the same order as the scores) by one counting pass on their
leading bits and one insertion pass; with ``limit`` only the buckets that reach the first
``limit`` positions are sorted, or, for a limit under 1/32 of the list, a heap selects.

Over a code range past L2 (``n_docs >= 2**15``) each pass prefetches the mark of the entry 16
ahead (:func:`kolm_search._kernels.words.prefetch`): the misses overlap instead of queueing
behind each entry's dependent work (full lists at 100,000 codes ~7-14 % faster; below that
range the marks sit in cache and no prefetch is issued).

Indices read from arrays (codes, slots, buckets, table positions) index as unsigned integers
once known to be in range: Numba wraps a negative signed index (a compare and an add at every
access, which LLVM cannot drop for a loaded value); unsigned indices skip it (~15 % of the
kernel: 2,000 queries x 3 lists x 1,000 docs, 0.088 -> 0.072 s).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from kolm_search._kernels.sorting import stable_argsort
from kolm_search._kernels.topk import _heap_push, _sort_heap, _worse
from kolm_search._kernels.words import PREFETCH_AHEAD as _AHEAD
from kolm_search._kernels.words import prefetch
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["fuse_groups", "fuse_groups_numpy", "output_rows", "rank_ranges"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_FAR = 1 << 15  # codes from which a direct mark array (8 bytes a code) leaves L1/L2: prefetch it


@njit(cache=True)
def _sort_slots(keys, n, o, ks, count, bks, stop):  # pragma: no cover - compiled
    """Write into ``o[:n]`` the slots ``0..n-1`` by ascending ``keys``, equal keys in slot order;
    only ``o[:stop]`` is guaranteed final (a top-``stop`` selection when ``stop < n``).

    One stable counting pass on the keys' leading bits (``n`` to ``2n`` buckets over the key
    range) leaves disorder only inside buckets; one insertion pass over the prefix that holds
    position ``stop`` removes it. Crowded buckets (more than ``32 n`` moves) fall back to a
    merge sort, so the worst case stays n log n. Scratch: ``ks`` int64 (n,) (the keys in
    bucket order, so the insertion pass reads one array), ``bks`` int32 (n,) (each slot's
    bucket), ``count`` int32 (>= 2n,). Prefix sums run in a register: a scan through memory
    waits on store-to-load forwarding at every bucket.
    """
    if n == 0:
        return
    kmin = keys[0]
    kmax = keys[0]
    for t in range(1, n):
        kmin = min(kmin, keys[t])
        kmax = max(kmax, keys[t])
    span = np.uint64(kmax) - np.uint64(kmin)
    nb = 2
    while nb < n:
        nb *= 2
    shift = np.uint64(0)
    while shift < np.uint64(63) and (span >> shift) >= np.uint64(nb):
        shift += np.uint64(1)
    for b in range(nb):
        count[b] = 0
    for t in range(n):
        bk = (np.uint64(keys[t]) - np.uint64(kmin)) >> shift
        bks[t] = np.int32(bk)
        count[bk] += 1
    acc = np.int32(0)
    for b in range(nb):  # exclusive prefix sums: count[b] becomes the start of bucket b
        c = count[b]
        count[b] = acc
        acc += c
    for t in range(n):  # stable scatter: slots in order inside each bucket
        sb = np.uint32(bks[t])
        p = np.uint32(count[sb])
        o[p] = t
        ks[p] = keys[t]
        count[sb] = np.int32(p + 1)
    end = n  # count[b] is now the end of bucket b: sort only the buckets that reach stop
    if stop < n:
        for b in range(nb):
            if count[b] >= stop:
                end = count[b]
                break
    moves = np.int64(0)
    one = np.uint64(1)
    for a in range(1, end):
        ua = np.uint64(a)
        kv = ks[ua]
        if ks[ua - one] <= kv:  # already in place (stable: equal keys keep slot order)
            continue
        v = o[ua]
        j = ua  # insertion point, moving left
        while j > 0 and ks[j - one] > kv:
            ks[j] = ks[j - one]
            o[j] = o[j - one]
            j -= one
        moves += a - np.int64(j)
        ks[j] = kv
        o[j] = v
        if moves > 32 * n:  # crowded buckets: a stable merge sort of all slots instead
            stable_argsort(keys, n, o, ks)
            return


@njit(cache=True, nogil=True)
def _table_bits(width):  # pragma: no cover - compiled
    """log2 of the hash table size for groups of up to ``width`` entries (load <= 1/2)."""
    hb = 4
    while (1 << hb) < 2 * width:
        hb += 1
    return hb


@njit(cache=True, nogil=True)
def _use_table(n_docs, hb):  # pragma: no cover - compiled
    """Hash the codes when a direct array over ``[0, n_docs)`` would be 16x the table or more
    (a direct array is cheaper while it stays in cache; past that its misses and its fill,
    one per chunk, cost more than hashing: 3x at a million codes)."""
    return n_docs > (16 << hb)


@njit(cache=True, nogil=True, inline="always")
def _usable(d, c, n_docs, err):  # pragma: no cover - compiled
    """True when code d lies in ``[0, n_docs)`` and contribution c is finite; else flags it."""
    if d < 0 or d >= n_docs or not np.isfinite(c):
        _flag(err, d, n_docs)
        return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _hash_slot(d, hshift):  # pragma: no cover - compiled
    """Home slot of code d in a table of ``2**(64 - hshift)`` slots (Fibonacci hashing)."""
    return (np.uint64(d) * np.uint64(0x9E3779B97F4A7C15)) >> hshift


@njit(cache=True, nogil=True, inline="always")
def _open_slot(t, d, c, lid, s_doc, s_acc, s_nl, s_last):  # pragma: no cover - compiled
    """Slot t holds doc d, first seen in list lid with contribution c."""
    t = np.uint64(t)
    s_doc[t] = d
    s_acc[t] = c
    s_nl[t] = 1
    s_last[t] = lid


@njit(cache=True, nogil=True, inline="always")
def _add_to_slot(t, c, lid, s_acc, s_nl, s_last):  # pragma: no cover - compiled
    """Add contribution c from list lid to slot t, once per list (a list's entries are
    contiguous and best first, so a repeat inside the last list is skipped)."""
    if s_last[t] != lid:
        s_acc[t] += c
        s_nl[t] += 1
        s_last[t] = lid


@njit(cache=True, nogil=True)
def _collect_hashed(list_ids, docs, src, off, n_docs, start, stop, g, table, hshift, s_doc, s_acc, s_nl, s_last,
                    err):  # pragma: no cover - compiled
    """Slots of the distinct docs of entries ``[start, stop)`` (group ``g``, entry i
    contributing ``src[i - off]``) through an
    open-addressing table (``table[h] = g << 32 | slot``, Fibonacci hashing, linear probing;
    entries of other groups count as free). Returns the number of slots."""
    tag = g << 32
    hmask = np.uint64(table.shape[0] - 1)
    nt = 0
    for i in range(start, stop):
        d = docs[i]
        c = src[np.uint64(i - off)]
        if not _usable(d, c, n_docs, err):
            continue
        lid = list_ids[i]
        h = _hash_slot(d, hshift)
        while True:
            m = table[h]
            if (m >> 32) != g:  # free for this group: a new doc
                table[h] = tag | nt
                _open_slot(nt, d, c, lid, s_doc, s_acc, s_nl, s_last)
                nt += 1
                break
            t = np.uint64(m & 0xFFFFFFFF)
            if s_doc[t] == d:
                _add_to_slot(t, c, lid, s_acc, s_nl, s_last)
                break
            h = (h + np.uint64(1)) & hmask
    return nt


@njit(cache=True, nogil=True)
def _fuse_chunk(group_ptr, list_ids, docs, contrib, ranks, rrf_tab, stride, n_docs, mnz, limit, g0, g1, cursor,
                backward, out_docs, out_scores, counts, err):  # pragma: no cover - compiled
    # One random access per entry: mark[d] = (group << 32) | slot. Everything else lives in
    # per-slot arrays (slots = docs in order of first appearance), small and cache-resident.
    # A large code range is hashed into a table of 2-4x the widest group instead.
    # Groups are written one after another from ``cursor`` up, or (``backward``) last group
    # first, each block ending where the next one starts, down from ``cursor``.
    width = 1
    for g in range(g0, g1):
        width = max(width, group_ptr[g + 1] - group_ptr[g])
    hb = _table_bits(width)
    hashed = _use_table(n_docs, hb)
    far = n_docs >= _FAR
    mark = np.full((1 << hb) if hashed else n_docs, -1, np.int64)
    hshift = np.uint64(64 - hb)
    s_doc = np.empty(width, np.int64)
    s_acc = np.empty(width, np.float64)
    s_nl = np.empty(width, np.int64)
    s_last = np.empty(width, np.int64)
    negs = np.empty(width, np.float64)
    keys = negs.view(np.int64)  # the same buffer, read as integers
    order = np.empty(width, np.int64)
    ks = np.empty(width, np.int64)
    bks = np.empty(width, np.int32)
    count = np.empty(2 * width + 2, np.int32)
    cap = max(limit, 1)
    hs = np.empty(cap, np.float64)
    ht = np.empty(cap, np.int64)
    rrf = ranks.shape[0] > 0
    cbuf = np.empty(width if rrf and hashed else 0, np.float64)  # RRF values of a group (hashed path)
    for j in range(g1 - g0):
        g = g1 - 1 - j if backward else g0 + j
        start = group_ptr[g]
        stop = group_ptr[g + 1]
        tag = g << 32
        nt = 0
        src = contrib
        off = 0
        if rrf and hashed:  # the group's contributions from the table: one short pass in cache
            # (the direct-mark loop below looks each one up inline: ~3 % faster than this pass)
            for i in range(start, stop):
                cbuf[i - start] = rrf_tab[np.uint64(list_ids[i] * stride + ranks[i])]
            src = cbuf
            off = start
        if hashed:
            nt = _collect_hashed(list_ids, docs, src, off, n_docs, start, stop, g, mark, hshift, s_doc, s_acc,
                                 s_nl, s_last, err)
        else:
            for i in range(start, stop):
                if far and i + _AHEAD < stop:  # a later entry's mark: its miss overlaps this work
                    prefetch(mark, np.uint64(docs[i + _AHEAD]))
                d = docs[i]
                lid = list_ids[i]
                if rrf:
                    c = rrf_tab[np.uint64(lid * stride + ranks[i])]
                else:
                    c = src[np.uint64(i - off)]
                if not _usable(d, c, n_docs, err):
                    continue
                m = mark[np.uint64(d)]
                if (m >> 32) != g:
                    mark[np.uint64(d)] = tag | nt
                    _open_slot(nt, d, c, lid, s_doc, s_acc, s_nl, s_last)
                    nt += 1
                else:
                    _add_to_slot(np.uint64(m & 0xFFFFFFFF), c, lid, s_acc, s_nl, s_last)
        if mnz:
            for t in range(nt):
                s_acc[t] *= s_nl[t]
        if 0 <= limit and 32 * limit <= nt:  # a short top-limit: a heap on (score, first appearance)
            size = 0
            for t in range(nt):
                s = s_acc[t]
                if size == limit and not _worse(hs[0], ht[0], s, t):
                    continue
                size = _heap_push(hs, ht, size, limit, s, t)
            _sort_heap(hs, ht, size)
            if backward:
                cursor -= size
            at = cursor
            if not backward:
                cursor += size
            for t in range(size):
                out_docs[at + t] = s_doc[ht[t]]
                out_scores[at + t] = hs[t]
            counts[g] = size
            continue
        keep = nt if limit < 0 else min(limit, nt)
        for t in range(nt):  # IEEE bits of -score -> int64 keys in the same order
            negs[t] = -(s_acc[t] + 0.0)  # + 0.0: -0.0 and 0.0 get one key
            kb = keys[t]
            if kb < 0:
                keys[t] = kb ^ 0x7FFFFFFFFFFFFFFF
        _sort_slots(keys, nt, order, ks, count, bks, keep)
        if backward:
            cursor -= keep
        at = np.uint64(cursor)
        if not backward:
            cursor += keep
        for t in range(keep):
            u = np.uint64(order[t])
            out_docs[at + np.uint64(t)] = s_doc[u]
            out_scores[at + np.uint64(t)] = s_acc[u]
        counts[g] = keep


@njit(cache=True, nogil=True)
def _flag(err, d, n_docs):  # pragma: no cover - compiled
    """Record a bad entry in ``err`` (int64 (3,)): [bad code seen, first bad code, non-finite]."""
    if d < 0 or d >= n_docs:
        if err[0] == 0:
            err[0] = 1
            err[1] = d
    else:
        err[2] = 1


@njit(cache=True, nogil=True)
def _unique_counts(group_ptr, docs, n_docs, g0, g1, counts, err):  # pragma: no cover - compiled
    """Distinct documents of each group in ``[g0, g1)`` (the sizes of full fused lists). Reads
    the codes only: a non-finite contribution is flagged by the fusing pass."""
    width = 1
    for g in range(g0, g1):
        width = max(width, group_ptr[g + 1] - group_ptr[g])
    hb = _table_bits(width)
    if _use_table(n_docs, hb):  # the table holds (group, doc) pairs; other groups' pairs are free
        t_group = np.full(1 << hb, -1, np.int64)
        t_doc = np.empty(1 << hb, np.int64)
        hmask = np.uint64((1 << hb) - 1)
        hshift = np.uint64(64 - hb)
        for g in range(g0, g1):
            c = 0
            for i in range(group_ptr[g], group_ptr[g + 1]):
                d = docs[i]
                if not _usable(d, 0.0, n_docs, err):
                    continue
                h = _hash_slot(d, hshift)
                while t_group[h] == g and t_doc[h] != d:
                    h = (h + np.uint64(1)) & hmask
                if t_group[h] != g:
                    t_group[h] = g
                    t_doc[h] = d
                    c += 1
            counts[g] = c
        return
    mark = np.full(n_docs, -1, np.int64)
    far = n_docs >= _FAR
    for g in range(g0, g1):
        c = 0
        stop = group_ptr[g + 1]
        for i in range(group_ptr[g], stop):
            if far and i + _AHEAD < stop:
                prefetch(mark, np.uint64(docs[i + _AHEAD]))
            d = docs[i]
            if not _usable(d, 0.0, n_docs, err):
                continue
            if mark[np.uint64(d)] != g:
                mark[np.uint64(d)] = g
                c += 1
        counts[g] = c


@njit(cache=True, parallel=True)
def _fuse_parallel(mode, group_ptr, list_ids, docs, contrib, ranks, rrf_tab, stride, n_docs, mnz, limit, n_chunks, plan,
                   out_docs, out_scores, counts, src_docs, src_scores, err):  # pragma: no cover - compiled
    """One parallel entry point (one compilation) for the three passes over chunks of groups
    (chunk c holds groups ``[n_groups * c // n_chunks, n_groups * (c + 1) // n_chunks)``):
    mode 0 counts distinct docs; mode 1 fuses chunk c into ``out`` from position
    ``plan[c, 0]``, upwards, or downwards when ``plan[c, 1]`` is set; mode 2 copies chunk c's
    fused entries, written upwards from ``plan[c, 0]`` in ``src``, to ``out`` at its groups'
    ``group_ptr`` offsets. Modes 0 and 1 skip an entry with a code outside ``[0, n_docs)``
    and flag it in ``err[chunk]``, mode 1 also an entry whose contribution is not finite
    (mode 1 checks codes again after mode 0 on purpose: one predictable compare an entry, and
    the kernel never indexes out of bounds whatever its caller did)."""
    n_groups = counts.shape[0]
    for c in prange(n_chunks):
        g0 = (n_groups * c) // n_chunks
        g1 = (n_groups * (c + 1)) // n_chunks
        if mode == 0:
            _unique_counts(group_ptr, docs, n_docs, g0, g1, counts, err[c])
        elif mode == 1:
            _fuse_chunk(group_ptr, list_ids, docs, contrib, ranks, rrf_tab, stride, n_docs, mnz, limit, g0, g1,
                        plan[c, 0], plan[c, 1] != 0, out_docs, out_scores, counts, err[c])
        else:
            a, b = np.uint64(group_ptr[g0]), np.uint64(plan[c, 0])
            for t in range(group_ptr[g1] - group_ptr[g0]):
                out_docs[a + np.uint64(t)] = src_docs[b + np.uint64(t)]
                out_scores[a + np.uint64(t)] = src_scores[b + np.uint64(t)]


@njit(cache=True, parallel=True)
def _ranges(ranks, list_ids, n_chunks):  # pragma: no cover - compiled
    n = ranks.shape[0]
    out = np.empty((n_chunks, 4), np.int64)
    for c in prange(n_chunks):
        r0, r1, l0, l1 = 0, -1, 0, -1
        lo = (n * c) // n_chunks
        hi = (n * (c + 1)) // n_chunks
        if lo < hi:
            r0, r1, l0, l1 = ranks[lo], ranks[lo], list_ids[lo], list_ids[lo]
        for i in range(lo, hi):
            r0 = min(r0, ranks[i])
            r1 = max(r1, ranks[i])
            l0 = min(l0, list_ids[i])
            l1 = max(l1, list_ids[i])
        out[c, 0], out[c, 1], out[c, 2], out[c, 3] = r0, r1, l0, l1
    return out


def rank_ranges(ranks: I64, list_ids: I64, n_chunks: int = 1) -> tuple[int, int, int, int]:
    """``(min rank, max rank, min list id, max list id)`` in one parallel pass over both
    arrays (int64 (n,) each); ``(0, -1, 0, -1)`` when empty."""
    if ranks.shape[0] == 0:
        return 0, -1, 0, -1
    nc = max(1, min(int(n_chunks), ranks.shape[0]))
    out = _ranges(ranks, list_ids, np.int64(nc))
    return int(out[:, 0].min()), int(out[:, 1].max()), int(out[:, 2].min()), int(out[:, 3].max())


def _raise_flagged(err: I64, n_docs: int) -> None:
    """Raise for the first problem flagged by a fusion pass (``err`` int64 (n_chunks, 3))."""
    bad = np.flatnonzero(err[:, 0])
    if bad.size:
        raise KolmValueError(f"document codes must lie in [0, {n_docs}), got {int(err[bad[0], 1])}")
    if err[:, 2].any():
        raise KolmValueError("contributions must be finite (a NaN or inf score was given)")


def _check_out(out: object, need: int, inputs: tuple[np.ndarray, ...]) -> tuple[I64, F64]:
    """Validate caller-provided output buffers ``(docs int64, scores float64)``: 1-D,
    C-contiguous, writeable, at least ``need`` entries, sharing no memory with each other or
    with the inputs (the kernel reads the inputs while it writes)."""
    if not (isinstance(out, tuple) and len(out) == 2 and all(isinstance(a, np.ndarray) for a in out)):
        raise KolmTypeError(f"out must be a tuple of two numpy arrays (docs, scores), got {type(out).__name__}")
    o_docs, o_scores = out
    for name, a, dt in (("out[0] (docs)", o_docs, np.int64), ("out[1] (scores)", o_scores, np.float64)):
        if a.dtype != dt or a.ndim != 1:
            raise KolmTypeError(f"{name} must be a 1-D {np.dtype(dt).name} array, got {a.ndim}-D {a.dtype}")
        if not (a.flags.c_contiguous and a.flags.writeable):
            raise KolmValueError(f"{name} must be C-contiguous and writeable")
        if a.shape[0] < need:
            raise KolmValueError(f"{name} must hold at least {need} entries (the upper bound of this "
                                 f"fusion's output; len(docs) always suffices), got {a.shape[0]}")
    if np.may_share_memory(o_docs, o_scores) or any(np.may_share_memory(a, x) for a in out for x in inputs):
        raise KolmValueError("out buffers must not share memory with each other or with the inputs")
    return o_docs, o_scores


def _outputs(m: int, given: tuple[I64, F64] | None) -> tuple[I64, F64]:
    """``m`` entries of output: the first ``m`` of the given buffers, or fresh arrays."""
    if given is None:
        return np.empty(m, np.int64), np.empty(m, np.float64)
    return given[0][:m], given[1][:m]


def fuse_groups(group_ptr: I64, list_ids: I64, docs: I64, contrib: F64, n_docs: int,
                mnz: bool, limit: int, n_chunks: int = 1, *, ranks: I64 | None = None,
                rrf_table: F64 | None = None, out: tuple[I64, F64] | None = None) -> tuple[I64, I64, F64]:
    """Compiled fusion over all groups (see the module docstring for shapes and dtypes).

    With ``ranks`` (int64 (n,), in ``[0, stride)``) and ``rrf_table`` (float64 (n_lists,
    stride)) entry i contributes ``rrf_table[list_ids[i], ranks[i]]`` (RRF's ``w / (k + rank +
    1)`` precomputed for every list and rank: no contribution array); ``contrib`` is then
    ignored and may be empty. The caller guarantees the indices are in range.

    The passes validate as they go (no separate pass): a document code outside
    ``[0, n_docs)`` or a non-finite contribution raises :class:`KolmValueError`.

    Output placement. Each group's fused list is at most as long as the group (or ``limit``),
    so the outputs are allocated at that bound and, with one or two chunks, written without
    knowing any count in advance: chunk 0 fills its groups downwards from the bound of its
    share, chunk 1 upwards from the same point; the two meet without a gap, and the returned
    ``out_docs`` / ``out_scores`` are contiguous views of the written part (no counting pass,
    no copy; pages past it are never touched). With more chunks, full lists are counted
    first (one read of the codes) and written in place; top-``limit`` lists are written at
    each chunk's bound and copied together. Outputs are allocated by numpy (huge pages where
    the kernel allows; Numba's own allocations fault in 4 KiB pages, which costs as much as
    the fusion on large batches), or written into ``out``: caller-provided ``(docs int64,
    scores float64)`` buffers of at least the output bound (``len(docs)`` always suffices;
    with ``limit``, the sum over groups of ``min(size, limit)``), reused across calls so that
    no fresh memory is faulted in; the outputs are then views of them.
    """
    n_groups = group_ptr.shape[0] - 1
    nc = max(1, int(n_chunks))
    nd = np.int64(n_docs)
    counts = np.zeros(n_groups, np.int64)
    out_ptr = np.zeros(n_groups + 1, np.int64)
    err = np.zeros((nc, 3), np.int64)
    sizes = np.diff(group_ptr)
    widest = int(sizes.max()) if n_groups else 0
    full = limit < 0 or limit >= widest
    none_i, none_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
    rk = none_i if ranks is None else ranks
    tab = none_f if rrf_table is None else np.ascontiguousarray(rrf_table, np.float64).reshape(-1)
    stride = np.int64(1 if rrf_table is None or rrf_table.ndim < 2 else rrf_table.shape[1])
    m_, l_, nc_ = bool(mnz), np.int64(-1 if full else limit), np.int64(nc)
    first = (n_groups * np.arange(nc + 1, dtype=np.int64)) // nc  # first group of each chunk
    plan = np.zeros((nc, 2), np.int64)  # per chunk: start position, downwards?

    def run(mode: int, out_d: I64, out_s: F64, src_d: I64 = none_i, src_s: F64 = none_f) -> None:
        _fuse_parallel(mode, out_ptr if mode == 2 else group_ptr, list_ids, docs, contrib, rk, tab, stride, nd, m_,
                       l_, nc_, plan, out_d, out_s, counts, src_d, src_s, err)
        _raise_flagged(err, n_docs)

    bound = np.zeros(n_groups + 1, np.int64)  # upper bounds of the output offsets
    np.cumsum(sizes if full else np.minimum(sizes, limit), out=bound[1:])
    given = None if out is None else _check_out(out, int(bound[-1]), (group_ptr, list_ids, docs, contrib, rk, tab))
    if full and nc > 2:  # count, then write straight to place
        run(0, none_i, none_f)
        np.cumsum(counts, out=out_ptr[1:])
        plan[:, 0] = out_ptr[first[:-1]]
        out_docs, out_scores = _outputs(int(out_ptr[-1]), given)
        run(1, out_docs, out_scores)
        return out_ptr, out_docs, out_scores
    # top-limit lists of more chunks are written at each chunk's bound, then copied together
    buf_docs, buf_scores = _outputs(int(bound[-1]), None if nc > 2 else given)
    plan[:, 0] = bound[first[:-1]]
    if nc == 2:  # meet in the middle: chunk 0 downwards from the bound of its share
        plan[0, 0], plan[0, 1] = bound[first[1]], 1
    run(1, buf_docs, buf_scores)
    np.cumsum(counts, out=out_ptr[1:])
    m = int(out_ptr[-1])
    if nc <= 2:
        lo = int(plan[0, 0]) - (int(out_ptr[first[1]]) if nc == 2 else 0)
        return out_ptr, buf_docs[lo:lo + m], buf_scores[lo:lo + m]
    out_docs, out_scores = _outputs(m, given)
    run(2, out_docs, out_scores, buf_docs, buf_scores)
    return out_ptr, out_docs, out_scores


@njit(cache=True, parallel=True)
def _output_rows(ptr, out_ptr, out_local, rep, use_rep, doc_rows, rank, n_chunks):  # pragma: no cover
    n_groups = out_ptr.shape[0] - 1
    for c in prange(n_chunks):
        for g in range((n_groups * c) // n_chunks, (n_groups * (c + 1)) // n_chunks):
            base = ptr[g]
            first = out_ptr[g]
            for i in range(first, out_ptr[g + 1]):
                if use_rep:
                    doc_rows[i] = rep[np.uint64(base + out_local[i])]  # >= 0: no wraparound check
                rank[i] = i - first


def output_rows(ptr: I64, out_ptr: I64, out_local: I64, rep: I64 | None, n_chunks: int = 1,
                *, overwrite: bool = False) -> tuple[I64 | None, I64]:
    """Input rows and ranks of fused output entries (numpy-allocated).

    ptr int64 (n_groups+1,) input rows per group; out_ptr int64 (n_groups+1,) and out_local
    int64 (m,) the fused output in per-group codes; rep int64 (n,) the input row of each
    group's code (``rep[ptr[g] + code]``), or None. With ``overwrite`` the rows are written
    over ``out_local`` (one large array fewer when the codes are not needed afterwards).
    -> ``(doc_rows int64 (m,) or None, rank int64 (m,) zero-based)``
    """
    m = out_local.shape[0]
    use = rep is not None
    doc_rows = out_local if (use and overwrite) else np.empty(m if use else 0, np.int64)
    rank = np.empty(m, np.int64)
    _output_rows(ptr, out_ptr, out_local, rep if use else doc_rows, use, doc_rows, rank, np.int64(max(1, n_chunks)))
    return (doc_rows if use else None), rank


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
