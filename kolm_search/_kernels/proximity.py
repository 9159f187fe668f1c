"""Where query terms occur in documents: the kernels of the term features of learning to rank
(:mod:`kolm_search.retrievers.ltr_terms`).

Documents are given as a forward index: document ``d``'s analysed tokens, in text order, are
``tokens[doc_ptr[d]:doc_ptr[d + 1]]`` (int32 term ids). A candidate is a (query, document)
pair, ``cand_query[i]`` and ``cand_doc[i]``.

- :func:`pair_counts`: for each candidate and each term pair ``(a, b)`` of its query, the
  number of position pairs ``(p, r)`` with ``a`` at ``p`` and ``b`` at ``r`` and
  ``1 <= r - p <= window`` (``ordered``) or ``1 <= |r - p| <= window`` (unordered): Metzler &
  Croft's ordered window ``#1`` is ``window=1, ordered=True``; their unordered window ``#uw8``
  (both terms inside 8 consecutive tokens) is ``window=7, ordered=False``.
- :func:`pair_document_frequency`: for each pair, the documents of the whole collection with
  at least one such match (the documents of both terms' postings are intersected first).
- :func:`match_stats`: for each candidate and its query's distinct terms (sorted, with a weight
  each): how many occur in the document, their summed weight, the smallest distance between
  occurrences of two different terms, the shortest span of tokens holding every distinct term
  the document contains, and the offset of the first occurrence of any (-1 where undefined).

Each has a plain-Python twin (``*_numpy``), the test oracle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import f64, i64, ro, rw
from kolm_search.errors import KolmValueError

__all__ = ["STATS", "match_stats", "match_stats_numpy", "pair_counts", "pair_counts_numpy",
           "pair_document_frequency", "pair_document_frequency_numpy"]

#: The columns of :func:`match_stats`.
STATS = ("matched", "matched_weight", "min_distance", "min_window", "first_match")

_PARALLEL = 20_000  # candidates (or pairs) from which a call is split over threads
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
i32 = types.int32


@njit(i64(ro(i32), i64, i64, i64, i64, i64, types.boolean), cache=True, nogil=True)
def _count(tokens, lo, hi, a, b, window, ordered):  # pragma: no cover - compiled
    """Position pairs of ``a`` then ``b`` within ``window`` in ``tokens[lo:hi]`` (see the module doc)."""
    c = 0
    for p in range(lo, hi):
        if tokens[p] != a:
            continue
        for r in range(p + 1, min(p + window + 1, hi)):
            if tokens[r] == b:
                c += 1
        if not ordered:
            for r in range(max(p - window, lo), p):
                if tokens[r] == b:
                    c += 1
    return c


@njit(types.void(ro(i64), ro(i32), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), i64, types.boolean,
                 rw(i64), i64, i64), cache=True, nogil=True)
def _pair_counts_chunk(doc_ptr, tokens, cand_query, cand_doc, p_ptr, pair_a, pair_b, out_ptr, window, ordered,
                       out, start, stop):  # pragma: no cover - compiled
    for i in range(start, stop):
        d = cand_doc[i]
        q = cand_query[i]
        o = out_ptr[i]
        for j in range(p_ptr[q], p_ptr[q + 1]):
            out[o] = _count(tokens, doc_ptr[d], doc_ptr[d + 1], pair_a[j], pair_b[j], window, ordered)
            o += 1


@njit(types.void(ro(i64), ro(i32), ro(i64), ro(i32), ro(i64), ro(i64), i64, types.boolean, rw(i64), i64, i64),
      cache=True, nogil=True)
def _pair_df_chunk(t_ptr, t_docs, doc_ptr, tokens, pair_a, pair_b, window, ordered, out, start, stop,
                   ):  # pragma: no cover - compiled
    for j in range(start, stop):
        a, b = pair_a[j], pair_b[j]
        i, i_end = t_ptr[a], t_ptr[a + 1]
        k, k_end = t_ptr[b], t_ptr[b + 1]
        n = 0
        while i < i_end and k < k_end:  # both posting lists ascend by document
            da, db = t_docs[i], t_docs[k]
            if da < db:
                i += 1
            elif db < da:
                k += 1
            else:
                if _count(tokens, doc_ptr[da], doc_ptr[da + 1], a, b, window, ordered) > 0:
                    n += 1
                i += 1
                k += 1
        out[j] = n


@njit(types.void(ro(i64), ro(i32), ro(i64), ro(i64), ro(i64), ro(i64), ro(f64), rw(f64, 2), rw(i64), rw(i64),
                 rw(i64), i64, i64), cache=True, nogil=True)
def _stats_chunk(doc_ptr, tokens, cand_query, cand_doc, q_ptr, q_terms, q_weight, out, pos, slot, count,
                 start, stop):  # pragma: no cover - compiled
    """Scratch: ``pos``, ``slot`` as long as the longest document; ``count`` as the widest query."""
    for i in range(start, stop):
        q = cand_query[i]
        d = cand_doc[i]
        t0, t1 = q_ptr[q], q_ptr[q + 1]
        width = t1 - t0
        for s in range(width):
            count[s] = 0
        m = 0
        lo = doc_ptr[d]
        for p in range(lo, doc_ptr[d + 1]):
            t = tokens[p]
            a, b = t0, t1  # binary search of the query's sorted terms
            while a < b:
                h = (a + b) // 2
                if q_terms[h] < t:
                    a = h + 1
                else:
                    b = h
            if a < t1 and q_terms[a] == t:
                pos[m] = p - lo
                slot[m] = a - t0
                count[a - t0] += 1
                m += 1
        matched = 0
        weight = 0.0
        for s in range(width):
            if count[s] > 0:
                matched += 1
                weight += q_weight[t0 + s]
                count[s] = 0
        out[i, 0] = matched
        out[i, 1] = weight
        out[i, 4] = pos[0] if m > 0 else -1
        if matched < 2:
            out[i, 2] = -1
            out[i, 3] = -1
            continue
        best = np.iinfo(np.int64).max
        for k in range(1, m):  # the closest two different terms are next to each other in text order
            if slot[k] != slot[k - 1] and pos[k] - pos[k - 1] < best:
                best = pos[k] - pos[k - 1]
        out[i, 2] = best
        span = np.iinfo(np.int64).max  # shortest run of matches holding every matched term
        have = 0
        left = 0
        for k in range(m):
            if count[slot[k]] == 0:
                have += 1
            count[slot[k]] += 1
            while have == matched:
                if pos[k] - pos[left] + 1 < span:
                    span = pos[k] - pos[left] + 1
                count[slot[left]] -= 1
                if count[slot[left]] == 0:
                    have -= 1
                left += 1
        for k in range(left, m):
            count[slot[k]] = 0
        out[i, 3] = span


def _int64(name: str, a: npt.ArrayLike) -> I64:
    arr = np.ascontiguousarray(a, dtype=np.int64)
    if arr.ndim != 1:
        raise KolmValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _csr(name: str, ptr: npt.ArrayLike, n: int) -> I64:
    p = _int64(name, ptr)
    if len(p) < 1 or p[0] != 0 or p[-1] != n or np.any(np.diff(p) < 0):
        raise KolmValueError(f"{name} must be non-decreasing offsets from 0 to {n}")
    return p


def _documents(doc_ptr: npt.ArrayLike, tokens: npt.ArrayLike) -> tuple[I64, npt.NDArray[np.int32]]:
    raw = np.asarray(tokens)
    if raw.ndim != 1 or (raw.size and not np.issubdtype(raw.dtype, np.integer)):
        raise KolmValueError(f"tokens must be one-dimensional term ids, got {raw.dtype} {raw.shape}")
    if raw.size and (int(raw.min()) < 0 or int(raw.max()) > np.iinfo(np.int32).max):
        raise KolmValueError("tokens must be term ids in [0, 2**31)")
    tok = np.ascontiguousarray(raw, dtype=np.int32)
    return _csr("doc_ptr", doc_ptr, len(tok)), tok


def _candidates(cand_query: npt.ArrayLike, cand_doc: npt.ArrayLike, n_queries: int, n_docs: int) -> tuple[I64, I64]:
    cq, cd = _int64("cand_query", cand_query), _int64("cand_doc", cand_doc)
    if cq.shape != cd.shape:
        raise KolmValueError(f"cand_query {cq.shape} and cand_doc {cd.shape} differ in length")
    if len(cq) and (cq.min() < 0 or cq.max() >= n_queries):
        raise KolmValueError(f"cand_query must lie in [0, {n_queries})")
    if len(cd) and (cd.min() < 0 or cd.max() >= n_docs):
        raise KolmValueError(f"cand_doc must lie in [0, {n_docs})")
    return cq, cd


def _window(window: int) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise KolmValueError(f"window must be an int >= 1, got {window!r}")
    return int(window)


def _threads(n: int, n_threads: int | None) -> int:
    return resolve_threads(n_threads) if n >= _PARALLEL else 1


def pair_counts(doc_ptr: npt.ArrayLike, tokens: npt.ArrayLike, cand_query: npt.ArrayLike, cand_doc: npt.ArrayLike,
                p_ptr: npt.ArrayLike, pair_a: npt.ArrayLike, pair_b: npt.ArrayLike, *, window: int, ordered: bool,
                n_threads: int | None = None) -> tuple[I64, I64]:
    """Matches of every query pair in every candidate's document (see the module doc).

    Parameters
    ----------
    doc_ptr : int64 (n_docs + 1,), tokens : int32 (n_tokens,)
        The forward index (any integer dtype is cast, ids in ``[0, 2**31)``).
    cand_query, cand_doc : int64 (n,)
        Each candidate's query (``[0, n_queries)``) and document (``[0, n_docs)``).
    p_ptr : int64 (n_queries + 1,), pair_a, pair_b : int64 (n_pairs,)
        Query ``q``'s term pairs are ``pair_a[p_ptr[q]:p_ptr[q+1]]``, ``pair_b[...]``.
    window : int >= 1
    ordered : bool

    Returns
    -------
    out_ptr : int64 (n + 1,)
    counts : int64 (out_ptr[-1],)
        Candidate ``i``'s counts, one per pair of its query in order, are
        ``counts[out_ptr[i]:out_ptr[i+1]]``.
    """
    dp, tok = _documents(doc_ptr, tokens)
    pa, pb = _int64("pair_a", pair_a), _int64("pair_b", pair_b)
    if pa.shape != pb.shape:
        raise KolmValueError(f"pair_a {pa.shape} and pair_b {pb.shape} differ in length")
    pp = _csr("p_ptr", p_ptr, len(pa))
    cq, cd = _candidates(cand_query, cand_doc, len(pp) - 1, len(dp) - 1)
    w = _window(window)
    out_ptr = np.zeros(len(cq) + 1, np.int64)
    np.cumsum(np.diff(pp)[cq], out=out_ptr[1:])
    out = np.zeros(int(out_ptr[-1]), np.int64)
    run_chunks(_pair_counts_chunk, chunk_bounds(out_ptr, _threads(len(cq), n_threads)), dp, tok, cq, cd, pp, pa, pb,
               out_ptr, w, bool(ordered), out)
    return out_ptr, out


def pair_document_frequency(t_ptr: npt.ArrayLike, t_docs: npt.ArrayLike, doc_ptr: npt.ArrayLike,
                            tokens: npt.ArrayLike, pair_a: npt.ArrayLike, pair_b: npt.ArrayLike, *, window: int,
                            ordered: bool, n_threads: int | None = None) -> I64:
    """Documents of the collection where each pair ``(pair_a[j], pair_b[j])`` matches at least
    once (int64 (n_pairs,)); ``t_ptr`` int64 (n_terms + 1,) and ``t_docs`` int32 are the
    inverted index (each term's documents ascending), the same collection as the forward index."""
    dp, tok = _documents(doc_ptr, tokens)
    td = np.ascontiguousarray(t_docs, dtype=np.int32)
    tp = _csr("t_ptr", t_ptr, len(td))
    pa, pb = _int64("pair_a", pair_a), _int64("pair_b", pair_b)
    if pa.shape != pb.shape:
        raise KolmValueError(f"pair_a {pa.shape} and pair_b {pb.shape} differ in length")
    n_terms = len(tp) - 1
    if len(pa) and (min(pa.min(), pb.min()) < 0 or max(pa.max(), pb.max()) >= n_terms):
        raise KolmValueError(f"pair terms must lie in [0, {n_terms})")
    if len(td) and (td.min() < 0 or td.max() >= len(dp) - 1):
        raise KolmValueError(f"t_docs must lie in [0, {len(dp) - 1})")
    out = np.zeros(len(pa), np.int64)
    bounds = chunk_bounds(np.arange(len(pa) + 1, dtype=np.int64), _threads(len(pa) * 100, n_threads))
    run_chunks(_pair_df_chunk, bounds, tp, td, dp, tok, pa, pb, _window(window), bool(ordered), out)
    return out


def match_stats(doc_ptr: npt.ArrayLike, tokens: npt.ArrayLike, cand_query: npt.ArrayLike, cand_doc: npt.ArrayLike,
                q_ptr: npt.ArrayLike, q_terms: npt.ArrayLike, q_weight: npt.ArrayLike, *,
                n_threads: int | None = None) -> F64:
    """Where each candidate's query terms occur in its document (see the module doc).

    Parameters
    ----------
    doc_ptr, tokens, cand_query, cand_doc
        As for :func:`pair_counts`.
    q_ptr : int64 (n_queries + 1,), q_terms : int64 (m,), q_weight : float64 (m,)
        Query ``q``'s distinct terms, ascending, and their weights.

    Returns
    -------
    float64 (n, 5)
        Columns :data:`STATS`: distinct terms found, their summed weight, the smallest
        distance (in tokens) between two different terms, the length of the shortest span
        holding every distinct term found (both -1 when fewer than two are found), the offset
        of the first term found (-1 when none is).
    """
    dp, tok = _documents(doc_ptr, tokens)
    qt, qw = _int64("q_terms", q_terms), np.ascontiguousarray(q_weight, dtype=np.float64)
    if qw.shape != qt.shape:
        raise KolmValueError(f"q_weight {qw.shape} and q_terms {qt.shape} differ in length")
    qp = _csr("q_ptr", q_ptr, len(qt))
    owner = np.repeat(np.arange(len(qp) - 1), np.diff(qp))
    if np.any((np.diff(qt) <= 0) & (owner[1:] == owner[:-1])):
        raise KolmValueError("each query's terms must be distinct and ascending")
    cq, cd = _candidates(cand_query, cand_doc, len(qp) - 1, len(dp) - 1)
    out = np.zeros((len(cq), len(STATS)), np.float64)
    longest = int(np.diff(dp).max(initial=0)) + 1
    widest = int(np.diff(qp).max(initial=0)) + 1

    def chunk(start: int, stop: int) -> None:
        _stats_chunk(dp, tok, cq, cd, qp, qt, qw, out, np.empty(longest, np.int64), np.empty(longest, np.int64),
                     np.zeros(widest, np.int64), start, stop)

    run_chunks(chunk, chunk_bounds(np.arange(len(cq) + 1, dtype=np.int64), _threads(len(cq), n_threads)))
    return out


# -- twins (the test oracles) -----------------------------------------------------------------

def _count_numpy(doc: list[int], a: int, b: int, window: int, ordered: bool) -> int:
    pa = [p for p, t in enumerate(doc) if t == a]
    pb = [r for r, t in enumerate(doc) if t == b]
    return sum(1 for p in pa for r in pb if (1 <= r - p <= window if ordered else 1 <= abs(r - p) <= window))


def pair_counts_numpy(doc_ptr: Any, tokens: Any, cand_query: Any, cand_doc: Any, p_ptr: Any, pair_a: Any,
                      pair_b: Any, *, window: int, ordered: bool) -> tuple[I64, I64]:
    """Plain-Python twin of :func:`pair_counts`."""
    dp, tok, pp = list(map(int, doc_ptr)), list(map(int, tokens)), list(map(int, p_ptr))
    counts, out_ptr = [], [0]
    for q, d in zip(map(int, cand_query), map(int, cand_doc), strict=True):
        doc = tok[dp[d]:dp[d + 1]]
        counts += [_count_numpy(doc, int(pair_a[j]), int(pair_b[j]), window, ordered) for j in range(pp[q], pp[q + 1])]
        out_ptr.append(len(counts))
    return np.asarray(out_ptr, np.int64), np.asarray(counts, np.int64)


def pair_document_frequency_numpy(doc_ptr: Any, tokens: Any, pair_a: Any, pair_b: Any, *, window: int,
                                  ordered: bool) -> I64:
    """Plain-Python twin of :func:`pair_document_frequency` (every document scanned)."""
    docs = [list(map(int, tokens[doc_ptr[d]:doc_ptr[d + 1]])) for d in range(len(doc_ptr) - 1)]
    return np.asarray([sum(_count_numpy(doc, int(a), int(b), window, ordered) > 0 for doc in docs)
                       for a, b in zip(pair_a, pair_b, strict=True)], np.int64)


def match_stats_numpy(doc_ptr: Any, tokens: Any, cand_query: Any, cand_doc: Any, q_ptr: Any, q_terms: Any,
                      q_weight: Any) -> F64:
    """Plain-Python twin of :func:`match_stats` (every pair and every span tried)."""
    rows = []
    for q, d in zip(map(int, cand_query), map(int, cand_doc), strict=True):
        doc = list(map(int, tokens[doc_ptr[d]:doc_ptr[d + 1]]))
        terms = {int(t): float(w) for t, w in zip(q_terms[q_ptr[q]:q_ptr[q + 1]], q_weight[q_ptr[q]:q_ptr[q + 1]],
                                                   strict=True)}
        hits = [(p, t) for p, t in enumerate(doc) if t in terms]
        found = {t for _, t in hits}
        first = hits[0][0] if hits else -1
        if len(found) < 2:
            rows.append([len(found), sum(terms[t] for t in found), -1, -1, first])
            continue
        dist = min(abs(p - r) for p, t in hits for r, u in hits if t != u)
        span = min(r - p + 1 for p, _ in hits for r, _ in hits if r >= p and found <= set(doc[p:r + 1]))
        rows.append([len(found), sum(terms[t] for t in found), dist, span, first])
    return np.asarray(rows, np.float64).reshape(-1, len(STATS))
