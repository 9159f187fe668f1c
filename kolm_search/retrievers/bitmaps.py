"""Document bitmaps of an index's frequent terms, built at query time for the pruned kernel.

The pruned kernel's phase 2 looks each candidate up in the remaining (frequent) terms' postings;
through a term's bitmap and rank directory (:mod:`kolm_search._kernels.bitmaps`) a lookup is a
word read and a popcount instead of a gallop over the term's blocks and a search inside one.
Bitmaps are derived from the index's checked postings, never saved (the index format and its
load are unchanged): :class:`TermBitmaps` builds those of a batch's frequent terms (document
frequency at least ``n_docs / DENSE_DIV``) before the kernel call and keeps them for later
batches, up to ``max_bytes`` (each term takes ``n_docs / 8 * 1.5`` bytes: 0.19 MB at 1M
documents, 1.65 MB at 8.8M; the default :data:`BITMAP_BYTES` holds ~1,400 terms at 1M, ~160 at
8.8M). When a batch's terms would not fit beside the kept ones, the cache starts again from
that batch's terms (the most frequent first, as many as fit); the others are looked up block by
block as before. An index of fewer than :data:`MIN_DOCS` documents gets none (a single-query
call on a 6,000-document collection took 5 % longer with them: their set-up, not the kernel).
Results are the same either way, bit for bit.

Thread-safe: builds run under a lock; a published row is never written again, and starting
again allocates new arrays (a kernel running on the old ones keeps them alive).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load

__all__ = ["BITMAP_BYTES", "DENSE_DIV", "MIN_DOCS", "TermBitmaps"]

DENSE_DIV = 64  # a term held by at least n_docs / DENSE_DIV documents is looked up in its bitmap
BITMAP_BYTES = 256 << 20  # the default bound of one index's bitmaps, bytes
MIN_DOCS = 1 << 16  # an index of fewer documents gets none (its postings are cache-resident; the set-up would cost more)

Bitmaps = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.int32]]


class TermBitmaps:
    """The bitmaps of one index's postings ``t_ptr`` int64 (V + 1,), ``t_docs`` int32 (nnz,)
    over ``n_docs`` documents, built on demand (:meth:`for_terms`), at most ``max_bytes``; none
    for an index of fewer than ``min_docs`` documents (default :data:`MIN_DOCS`)."""

    def __init__(self, t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], n_docs: int, *,
                 max_bytes: int = BITMAP_BYTES, dense_div: float = DENSE_DIV, min_docs: int | None = None,
                 n_threads: int | None = None) -> None:
        self.t_ptr, self.t_docs, self.n_docs = t_ptr, t_docs, int(n_docs)
        self.n_threads = n_threads
        self.n_words = max((self.n_docs + 63) >> 6, 1)
        self.capacity = int(max_bytes) // (self.n_words * 12)  # rows that fit
        self.min_df = self.n_docs / dense_div
        self.enabled = self.capacity > 0 and self.n_docs >= (MIN_DOCS if min_docs is None else min_docs)
        ptr = np.asarray(t_ptr, np.int64)
        self._df: npt.NDArray[np.int64] = ptr[1:] - ptr[:-1]  # document frequencies (V,)
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self._rows: dict[int, int] = {}  # term -> row of _bits, _rank
        self._bits = np.zeros((0, self.n_words), np.uint64)
        self._rank = np.zeros((0, self.n_words), np.int32)

    def __getstate__(self) -> dict[str, Any]:  # travels empty (no lock, no rows)
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_rows", "_bits", "_rank")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._clear()

    def matches(self, t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], n_docs: int) -> bool:
        """Whether these bitmaps are of these very arrays (identity, not contents)."""
        return self.t_ptr is t_ptr and self.t_docs is t_docs and self.n_docs == n_docs

    @property
    def nbytes(self) -> int:
        """Bytes held by the kept bitmaps."""
        return int(self._bits.nbytes + self._rank.nbytes)

    def for_terms(self, terms: npt.NDArray[np.int64]) -> Bitmaps | None:
        """``(slot int64 (V,): each term's row or -1, bits uint64, rank int32 (rows, n_words))``
        for the frequent ones of ``terms`` (term ids, repeats allowed), built when missing; None
        when none is frequent or none fits."""
        if not self.enabled:
            return None
        df = self._df
        terms = np.unique(np.asarray(terms, np.int64))
        terms = terms[(df[terms] >= self.min_df) & (df[terms] > 0)]
        if not len(terms):
            return None
        terms = terms[np.argsort(-df[terms], kind="stable")][:self.capacity]
        with self._lock:
            missing = np.array([t for t in terms.tolist() if t not in self._rows], np.int64)
            if len(self._rows) + len(missing) > self.capacity:
                self._clear()
                missing = terms
            if len(missing):
                self._add(missing)
            rows = np.array([self._rows[t] for t in terms.tolist()], np.int64)
            n = len(self._rows)
            bits, rank = self._bits[:n], self._rank[:n]
        slot = np.full(len(df), -1, np.int64)
        slot[terms] = rows
        return slot, bits, rank

    def _add(self, terms: npt.NDArray[np.int64]) -> None:
        """Build the rows of ``terms`` (not kept yet; they fit) after the kept ones (under the lock)."""
        bits, rank = load("bitmaps").term_bitmaps(self.t_ptr, self.t_docs, terms, self.n_docs,
                                                  n_threads=self.n_threads)
        n = len(self._rows)
        if n + len(terms) > len(self._bits):  # grow (new arrays: readers keep the old ones)
            cap = min(self.capacity, max(2 * len(self._bits), n + len(terms)))
            grown_bits = np.zeros((cap, self.n_words), np.uint64)
            grown_rank = np.zeros((cap, self.n_words), np.int32)
            grown_bits[:n], grown_rank[:n] = self._bits[:n], self._rank[:n]
            self._bits, self._rank = grown_bits, grown_rank
        self._bits[n:n + len(terms)] = bits
        self._rank[n:n + len(terms)] = rank
        for i, t in enumerate(terms.tolist()):
            self._rows[t] = n + i
