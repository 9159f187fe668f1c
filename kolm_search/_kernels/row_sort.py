"""Row sort kernel: the stable argsort of each row of a float matrix (a reranker's new scores,
one row per query), as ``np.argsort(values, axis=1, kind="stable")`` gives it.

Each value becomes an int64 in the same order as the float (``-0.0`` as ``0.0``) whose low
``b`` bits, ``2**b >= width``, are replaced by its column (:func:`pack`), so numpy's vectorised
sort of the packed keys (unique within a row) orders each row by value wherever two values
differ above those bits; :func:`unpack` then reads the columns and finishes each row with an
insertion sort on (value, column), which moves only the entries whose values shared the rest,
so the result is the stable order exactly. A row needing many moves (values alike in all but
their last bits) is left to numpy's stable argsort. The numpy twin is :func:`stable_rows_numpy`.

:func:`rescore_rows` does the same for a reranker's candidates as they come (a ranked candidate
frame: each query's entries together, ranks ``0..``), writing each query's row of packed keys
straight from the scores and the re-ranked documents and scores straight from the sorted rows,
so no matrix of scores, column array or gather is made; its twin is :func:`rescore_rows_numpy`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["ranked_counts", "ranked_width", "ranked_width_numpy", "rescore_rows", "rescore_rows_numpy", "stable_rows",
           "stable_rows_numpy"]

_MIN = np.int64(-0x8000_0000_0000_0000)
_LOW63 = np.int64(0x7FFF_FFFF_FFFF_FFFF)
MOVES = 8  # insertion moves per entry a row may take before it is sorted by numpy's stable argsort


@njit(types.boolean(ro(f64, 2), i64, rw(i64, 2)), cache=True, nogil=True)
def _pack(values, mask, packed):  # pragma: no cover - compiled
    raw = values.view(np.int64)
    n_rows, width = values.shape
    for r in range(n_rows):
        for c in range(width):
            if np.isnan(values[r, c]):
                return False
            v = raw[r, c]
            if v == _MIN:  # -0.0 is 0.0
                v = 0
            packed[r, c] = ((v ^ ((v >> 63) & _LOW63)) & ~mask) | c
    return True


@njit(cache=True, nogil=True)
def _before(key_a, col_a, key_b, col_b):  # pragma: no cover - compiled
    """(key, column) a before b, without a branch (a row's order is checked as its keys are read)."""
    return (key_a < key_b) | ((key_a == key_b) & (col_a < col_b))


@njit(cache=True, nogil=True)
def _finish_row(keys, cols, r, m):  # pragma: no cover - compiled
    """Row ``r``'s first ``m`` entries (value ``keys``, columns or ranks ``cols[r]``), nearly in
    order, finished by an insertion sort on (key, column): exact and stable. False once it has
    made more than :data:`MOVES` moves per entry (the row is then left to the caller)."""
    budget = MOVES * m
    for t in range(1, m):
        k = keys[t]
        if _before(keys[t - 1], cols[r, t - 1], k, cols[r, t]):
            continue
        c = cols[r, t]
        u = t - 1
        while u >= 0 and (keys[u] > k or (keys[u] == k and cols[r, u] > c)):
            keys[u + 1] = keys[u]
            cols[r, u + 1] = cols[r, u]
            u -= 1
            budget -= 1
        keys[u + 1] = k
        cols[r, u + 1] = c
        if budget < 0:
            return False
    return True


@njit(i64(ro(f64, 2), i64, rw(i64, 2), rw(types.boolean)), cache=True, nogil=True)
def _unpack(values, mask, cols, wrong):  # pragma: no cover - compiled
    raw = values.view(np.int64)
    n_rows, width = values.shape
    keys = np.empty(width, np.int64)  # a row's value keys in the packed order
    n_wrong = 0
    for r in range(n_rows):
        wrong[r] = False
        ordered = True
        for t in range(width):
            c = cols[r, t] & mask
            cols[r, t] = c
            v = raw[r, c]
            if v == _MIN:  # -0.0 is 0.0
                v = 0
            keys[t] = v ^ ((v >> 63) & _LOW63)
            if t > 0:
                ordered &= _before(keys[t - 1], cols[r, t - 1], keys[t], c)
        if not ordered and not _finish_row(keys, cols, r, width):
            wrong[r] = True
            n_wrong += 1
    return n_wrong


def stable_rows(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64] | None:
    """``np.argsort(values, axis=1, kind="stable")`` (int64 ``(n_rows, width)``) of a float64
    matrix ``(n_rows, width)``; None when it holds NaN (the caller sorts it otherwise)."""
    values = np.ascontiguousarray(values, np.float64)
    if values.ndim != 2:
        raise ValueError(f"stable_rows takes a matrix, got {values.ndim} dimensions")
    n_rows, width = values.shape
    mask = np.int64((1 << max(1, (width - 1).bit_length())) - 1)
    packed = np.empty((n_rows, width), np.int64)
    if not _pack(values, mask, packed):
        return None
    packed.sort(axis=1)
    wrong = np.empty(n_rows, np.bool_)
    if _unpack(values, mask, packed, wrong):
        rows = np.flatnonzero(wrong)
        packed[rows] = np.argsort(values[rows], axis=1, kind="stable")
    return packed


def stable_rows_numpy(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Twin of :func:`stable_rows` (for a matrix without NaN)."""
    return np.argsort(values, axis=1, kind="stable").astype(np.int64)


@njit(i64(ro(types.int32), ro(types.int32), i64, rw(i64)), cache=True, nogil=True)
def _ranked_width(query, rank, n_queries, count):  # pragma: no cover - compiled
    """The longest query's entries when the entries are ranked (queries ascending, each one's
    ranks ``0, 1, ...``), each query's count written into ``count``; -1 otherwise. The checks
    are or'ed without branches; the one branch is taken once per query."""
    for q in range(n_queries):
        count[q] = 0
    n = len(query)
    if n == 0:
        return 0
    width = 0
    prev = query[0]
    c = 0
    bad = prev < 0
    for i in range(n):
        q = query[i]
        bad |= (q < prev) | (q >= n_queries)
        if q != prev:  # a new query: the last one's count kept (a code out of range is not written)
            width = max(width, c)
            if not bad:
                count[prev] = c
            c = 0
        bad |= rank[i] != c
        c += 1
        prev = q
    if bad:
        return -1
    count[prev] = c
    return max(width, c)


def ranked_width(query: npt.NDArray[np.int32], rank: npt.NDArray[np.int32], n_queries: int) -> int:
    """The longest query's number of entries (0 when there are none) when the entries are ranked:
    ``query`` int32 (n,) ascending and below ``n_queries``, ``rank`` int32 (n,) ``0, 1, ...``
    within each query; -1 otherwise. One pass (:func:`ranked_width_numpy` is its twin)."""
    if query.dtype != np.int32 or rank.dtype != np.int32 or len(query) != len(rank) or n_queries > 2 * len(query) + 1:
        return ranked_width_numpy(query, rank, n_queries)  # (a batch mostly of empty queries: no count per query)
    count = np.empty(max(int(n_queries), 0), np.int64)
    return int(_ranked_width(np.ascontiguousarray(query), np.ascontiguousarray(rank), int(n_queries), count))


def ranked_counts(query: npt.NDArray[np.integer], rank: npt.NDArray[np.integer], n_queries: int,
                  ) -> npt.NDArray[np.int64] | None:
    """Each query's number of entries, int64 (n_queries,), when the entries are ranked (as
    :func:`ranked_width` reads them); None when they are not, and for a batch of more than
    ``2 * len(query) + 1`` queries (no array per query is made for one mostly empty). One
    kernel pass for int32 columns; other integer columns by the twin and a ``bincount``."""
    n = len(query)
    if n_queries > 2 * n + 1 or len(rank) != n:
        return None
    count = np.empty(max(int(n_queries), 0), np.int64)
    if query.dtype == np.int32 and rank.dtype == np.int32:
        width = int(_ranked_width(np.ascontiguousarray(query), np.ascontiguousarray(rank), int(n_queries), count))
        return count if width >= 0 else None
    if ranked_width_numpy(query, rank, n_queries) < 0:
        return None
    return np.bincount(np.asarray(query, np.int64), minlength=int(n_queries)).astype(np.int64)


def ranked_width_numpy(query: npt.NDArray[np.integer], rank: npt.NDArray[np.integer], n_queries: int) -> int:
    """Twin of :func:`ranked_width` (any integer dtypes)."""
    q, r = np.asarray(query, np.int64), np.asarray(rank, np.int64)
    if len(q) != len(r):
        return -1
    if len(q) == 0:
        return 0
    if q.min() < 0 or q.max() >= n_queries or bool((q[1:] < q[:-1]).any()):
        return -1
    starts = np.flatnonzero(np.concatenate([[True], q[1:] != q[:-1]]))
    counts = np.diff(np.append(starts, len(q)))
    return int(counts.max()) if np.array_equal(r, np.arange(len(q)) - np.repeat(starts, counts)) else -1


@njit(types.boolean(ro(f64), ro(i64), i64, rw(i64, 2)), cache=True, nogil=True)
def _pack_scores(score, count, mask, packed):  # pragma: no cover - compiled
    """Row ``q`` of ``packed``: the keys of query ``q``'s negated scores with their ranks in the
    low bits, then pads that sort last; False on a NaN score."""
    raw = score.view(np.int64)
    n_rows, width = packed.shape
    pad = (_LOW63 & ~mask)
    at = 0
    for r in range(n_rows):
        for c in range(count[r]):
            if np.isnan(score[at]):
                return False
            v = raw[at] ^ _MIN  # the bits of -score
            if v == _MIN:  # -0.0 is 0.0
                v = 0
            packed[r, c] = ((v ^ ((v >> 63) & _LOW63)) & ~mask) | c
            at += 1
        for c in range(count[r], width):
            packed[r, c] = pad | c
    return True


@njit(types.boolean(ro(i64), ro(f64), ro(i64), i64, rw(i64, 2), rw(i64), rw(f64)), cache=True, nogil=True)
def _unpack_scores(doc, score, count, mask, cols, out_doc, out_score):  # pragma: no cover - compiled
    """Each query's entries by descending score, ties by rank (the sorted packed rows finished
    by an insertion sort on (key, rank)), written to ``out_doc`` / ``out_score``; False when a
    row needs too many moves (the caller sorts otherwise)."""
    raw = score.view(np.int64)
    n_rows, width = cols.shape
    keys = np.empty(max(width, 1), np.int64)
    start = 0
    for r in range(n_rows):
        m = count[r]
        ordered = True
        for t in range(m):
            c = cols[r, t] & mask
            cols[r, t] = c
            v = raw[start + c] ^ _MIN
            if v == _MIN:
                v = 0
            keys[t] = v ^ ((v >> 63) & _LOW63)
            if t > 0:
                ordered &= _before(keys[t - 1], cols[r, t - 1], keys[t], c)
            out_doc[start + t] = doc[start + c]
            out_score[start + t] = score[start + c]
        if not ordered:  # finished, then written again
            if not _finish_row(keys, cols, r, m):
                return False
            for t in range(m):
                out_doc[start + t] = doc[start + cols[r, t]]
                out_score[start + t] = score[start + cols[r, t]]
        start += m
    return True


def rescore_rows(query: npt.NDArray[np.int32], rank: npt.NDArray[np.int32], doc: npt.NDArray[np.int64],
                 score: npt.NDArray[np.float64], n_queries: int, counts: npt.NDArray[np.int64] | None = None,
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None:
    """The documents and scores of ranked candidates (``query`` int32 (n,) ascending, ``rank``
    int32 (n,) ``0..`` within each query, ``doc`` int64 (n,)) with new scores ``score`` float64
    (n,), each query's entries re-ordered by descending score, ties by rank: ``(doc, score)``,
    each (n,). None when the entries are not ranked so, a query or rank is past int32, a score
    is NaN, the batch holds over twice as many queries as entries, the queries' longest list is
    over twice the mean or 2**24, or values alike in all but their last bits need many moves
    (the caller sorts otherwise). ``counts``: :func:`ranked_counts` of ``query`` and ``rank``
    when the caller has it (a frame's, made once for every reranker of one first stage): the
    entries are then taken as ranked without the pass that checks them."""
    if not (_fits_int32(query) and _fits_int32(rank)):
        return None  # a value int32 does not hold: the cast would wrap it (e.g. rank 2**32 into 0)
    query = np.ascontiguousarray(query, np.int32)
    rank = np.ascontiguousarray(rank, np.int32)
    doc = np.ascontiguousarray(doc, np.int64)
    score = np.ascontiguousarray(score, np.float64)
    n = len(query)
    if len(rank) != n or len(doc) != n or len(score) != n:
        raise ValueError(f"rescore_rows: {n} queries, {len(rank)} ranks, {len(doc)} documents, {len(score)} scores")
    if n == 0 or n_queries > 2 * n:  # a matrix mostly of padding (and no count array of a huge batch)
        return None
    if counts is None:
        count = np.empty(max(int(n_queries), 0), np.int64)
        width = int(_ranked_width(query, rank, int(n_queries), count))
    else:  # checked as the kernel reads them: int64 (a fraction or a uint64 past int64 is refused)
        count = np.ascontiguousarray(counts, np.int64)
        width = int(count.max(initial=0))
        if (not np.issubdtype(counts.dtype, np.integer) or count.shape != (n_queries,) or int(count.sum()) != n
                or int(count.min(initial=0)) < 0 or width > n):
            raise ValueError(f"rescore_rows: counts {counts.dtype} of shape {counts.shape} summing to "
                             f"{counts.sum()}, not one integer count >= 0 per query ({n_queries}) summing to {n}")
    if width < 0 or n_queries * width > 2 * n or (width - 1).bit_length() > 24:
        return None
    mask = np.int64((1 << max(1, (width - 1).bit_length())) - 1)
    packed = np.empty((int(n_queries), width), np.int64)
    if not _pack_scores(score, count, mask, packed):
        return None
    packed.sort(axis=1)
    out_doc, out_score = np.empty(n, np.int64), np.empty(n, np.float64)
    if not _unpack_scores(doc, score, count, mask, packed, out_doc, out_score):
        return None
    return out_doc, out_score


def _fits_int32(values: npt.NDArray[np.integer]) -> bool:
    """True when ``values`` (any integer dtype) cast to int32 keep their values."""
    if values.dtype == np.int32 or len(values) == 0:
        return True
    info = np.iinfo(np.int32)
    return bool(np.issubdtype(values.dtype, np.integer) and values.min() >= info.min and values.max() <= info.max)


def rescore_rows_numpy(query: npt.NDArray[np.int32], rank: npt.NDArray[np.int32], doc: npt.NDArray[np.int64],
                       score: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Twin of :func:`rescore_rows` (for entries it takes): one ``lexsort`` by query, descending
    score, rank."""
    order = np.lexsort((rank, -score, query))
    return doc[order].astype(np.int64), score[order].astype(np.float64)
