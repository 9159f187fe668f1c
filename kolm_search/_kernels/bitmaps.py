"""Document bitmaps of frequent terms: a document's place in a term's postings in O(1).

A term's bitmap is ``bits`` uint64 (n_words,), ``n_words = ceil(n_docs / 64)``: bit ``d & 63`` of
word ``d >> 6`` is set when document ``d`` holds the term; its rank directory ``rank`` int32
(n_words,) counts the set bits before each word. The position of document ``d`` in the term's
postings (documents ascending) is then ``rank[d >> 6] + popcount(bits[d >> 6] & (2**(d & 63) - 1))``
(:func:`bit_rank`): the posting holding ``d`` when its bit is set, else the first posting after
``d`` (as a search would find it), with no galloping or binary search.

:func:`term_bitmaps` builds them from checked postings (one pass over each term's postings,
threads over terms); :func:`term_bitmaps_numpy` is its twin. They are derived data, never saved:
``(n_docs / 8) * 1.5`` bytes per term.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import i64, ro, rw

__all__ = ["bit_rank", "popcount", "term_bitmaps", "term_bitmaps_numpy"]

_U64 = types.uint64
_I32 = types.int32
_SIGNATURE = types.void(ro(i64), ro(_I32), ro(i64), rw(_U64, 2), rw(_I32, 2), i64, i64)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit
def popcount(x):  # pragma: no cover - compiled
    """The set bits of uint64 ``x`` (SWAR; LLVM emits the popcount instruction where there is one)."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@njit
def bit_rank(bits, rank, d):  # pragma: no cover - compiled
    """``(position, present)`` of document ``d`` in a term's postings from its bitmap ``bits``
    and rank directory ``rank`` (rows of :func:`term_bitmaps`): the posting holding ``d``
    (present) or the first posting after it (absent; the postings' length when none is)."""
    i = d >> 6
    word = bits[i]
    b = np.uint64(d & 63)
    p = np.int64(rank[i]) + popcount(word & ((np.uint64(1) << b) - np.uint64(1)))
    return p, (word >> b) & np.uint64(1) != 0


@njit(_SIGNATURE, cache=True, nogil=True)
def _bitmaps_chunk(t_ptr, t_docs, terms, bits, rank, r0, r1):  # pragma: no cover - compiled
    """Rows ``r0 <= r < r1`` (term ``terms[r]``); ``bits`` zeroed by the caller."""
    n_words = bits.shape[1]
    for r in range(r0, r1):
        t = terms[r]
        lo, hi = t_ptr[t], t_ptr[t + 1]
        w = 0  # words before w have their rank
        for p in range(lo, hi):
            d = t_docs[p]
            i = d >> 6
            while w <= i:
                rank[r, w] = p - lo
                w += 1
            bits[r, i] |= np.uint64(1) << np.uint64(d & 63)
        while w < n_words:
            rank[r, w] = hi - lo
            w += 1


def term_bitmaps(t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], terms: npt.NDArray[np.int64],
                 n_docs: int, *, n_threads: int | None = None,
                 ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int32]]:
    """``bits`` uint64 and ``rank`` int32 (len(terms), ceil(n_docs / 64)) of the postings of
    ``terms`` int64 (distinct term ids) under ``t_ptr`` int64 (V + 1,), ``t_docs`` int32 (nnz,)
    (the caller guarantees the layout: each term's documents ascending, in ``[0, n_docs)``)."""
    c = np.ascontiguousarray
    t_ptr, t_docs, terms = c(t_ptr, np.int64), c(t_docs, np.int32), c(terms, np.int64)
    n_words = max((int(n_docs) + 63) >> 6, 1)
    bits = np.zeros((len(terms), n_words), np.uint64)
    rank = np.empty((len(terms), n_words), np.int32)
    if len(terms):
        cost = np.zeros(len(terms) + 1, np.int64)
        np.cumsum(t_ptr[terms + 1] - t_ptr[terms] + n_words, out=cost[1:])
        bounds = chunk_bounds(cost, resolve_threads(n_threads) if cost[-1] > 1 << 20 else 1)
        run_chunks(lambda r0, r1: _bitmaps_chunk(t_ptr, t_docs, terms, bits, rank, r0, r1), bounds)
    return bits, rank


def term_bitmaps_numpy(t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], terms: npt.NDArray[np.int64],
                       n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Numpy twin of :func:`term_bitmaps` (the test oracle)."""
    n_words = max((int(n_docs) + 63) >> 6, 1)
    bits = np.zeros((len(terms), n_words), np.uint64)
    rank = np.zeros((len(terms), n_words), np.int32)
    for r, t in enumerate(np.asarray(terms, np.int64)):
        docs = np.asarray(t_docs[t_ptr[t]:t_ptr[t + 1]], np.int64)
        held = np.zeros(n_words * 64, bool)
        held[docs] = True
        bits[r] = np.packbits(held.reshape(n_words, 64)[:, ::-1], axis=1).view(">u8").ravel().astype(np.uint64)
        rank[r] = np.searchsorted(docs, np.arange(n_words) * 64)
    return bits, rank
