"""The ranked lists of a batch of queries, as the fusion methods read them.

:class:`Entries` holds, for every query, the entries of each list (run) best first: query
``g`` owns entries ``ptr[g]:ptr[g+1]``, inside it the lists in increasing id, each list's
entries contiguous and in rank order, every document at most once per list. A (query, list)
pair is a *block*; an entry's *position* is its zero-based rank inside its block after
repeats are dropped. :func:`kolm_search.fusion.fuse` and
:func:`~kolm_search.fusion.fuse_frame` build one; normalisations and methods map it to
per-entry values (:mod:`kolm_search.fusion.normalize`, :mod:`kolm_search.fusion.methods`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["Entries", "first_in_block", "pair_codes"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def pair_codes(a: I64, b: I64) -> I64:
    """Codes of the pairs ``(a[i], b[i])`` of non-negative integers, in first-appearance order."""
    if len(a) == 0:
        return np.zeros(0, np.int64)
    span = int(b.max()) + 1
    if (int(a.max()) + 1) * span >= 2**62:  # renumber b to keep the keys exact
        b = np.unique(b, return_inverse=True)[1].reshape(-1).astype(np.int64)
        span = int(b.max()) + 1
    return pd.factorize(a * span + b)[0].astype(np.int64)


def first_in_block(ptr: I64, lists: I64, docs: I64, n_lists: int) -> Bools:
    """bool (n,): whether each entry is its document's first in its (query, list) block."""
    from kolm_search._kernels import load

    query = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    first: Bools = load("fusion").first_in_block(query * n_lists + lists, docs)
    return first


@dataclass(frozen=True, eq=False)
class Entries:
    """Ranked lists of ``n_queries`` queries (see the module docstring).

    Attributes
    ----------
    ptr : int64 (n_queries + 1,)
    lists, docs : int64 (n,)
        List id in ``[0, n_lists)`` and document code in ``[0, n_docs)`` of each entry.
    score : float64 (n,)
        The list's score of the entry (normalised once a normalisation is applied).
    n_lists, n_docs : int
    rel : bool (n,), optional
        Whether the entry's document is judged relevant to its query (for training).
    rank : int64 (n,), optional
        Each entry's rank when not its position among the kept entries (a candidate frame's
        ranks, or positions counted before repeats were dropped).
    """

    ptr: I64
    lists: I64
    docs: I64
    score: F64
    n_lists: int
    n_docs: int
    rel: Bools | None = None
    rank: I64 | None = None

    @classmethod
    def build(cls, ptr: I64, lists: I64, docs: I64, score: F64, n_lists: int, n_docs: int,
              rel: Bools | None = None, rank: I64 | None = None, first: Bools | None = None) -> Entries:
        """Entries from arrays in block order; a document repeated in a block keeps its first
        entry (``first``: :func:`first_in_block`, computed when not given), and ranks
        (``rank``, else positions in the block) are those of the input."""
        if first is None:
            first = first_in_block(ptr, lists, docs, n_lists)
        if first.all():
            return cls(ptr, lists, docs, score, n_lists, n_docs, rel, rank)
        query = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
        if rank is None:
            rank = cls(ptr, lists, docs, score, n_lists, n_docs).position
        new_ptr = np.zeros_like(ptr)
        np.cumsum(np.bincount(query[first], minlength=len(ptr) - 1), out=new_ptr[1:])
        return cls(new_ptr, lists[first], docs[first], score[first], n_lists, n_docs,
                   None if rel is None else rel[first], rank[first])

    def __len__(self) -> int:
        return int(self.docs.shape[0])

    @property
    def n_queries(self) -> int:
        return int(self.ptr.shape[0]) - 1

    @cached_property
    def query(self) -> I64:
        """Query of each entry, int64 (n,)."""
        return np.repeat(np.arange(self.n_queries, dtype=np.int64), np.diff(self.ptr))

    @cached_property
    def block(self) -> I64:
        """Block number ``query * n_lists + list`` of each entry, int64 (n,), non-decreasing."""
        return self.query * self.n_lists + self.lists

    @cached_property
    def _layout(self) -> tuple[I64, I64]:
        starts = np.flatnonzero(np.diff(self.block, prepend=-1))
        sizes = np.diff(np.append(starts, len(self)))
        return np.arange(len(self), dtype=np.int64) - np.repeat(starts, sizes), np.repeat(sizes, sizes)

    @property
    def slot(self) -> I64:
        """Position of each entry among its block's entries, int64 (n,)."""
        return self._layout[0]

    @property
    def position(self) -> I64:
        """Zero-based rank of each entry in its block, int64 (n,): ``rank`` if set, else the
        entry's position among the block's entries."""
        return self._layout[0] if self.rank is None else self.rank

    @property
    def size(self) -> I64:
        """Number of entries of each entry's block, int64 (n,)."""
        return self._layout[1]

    def with_score(self, score: F64) -> Entries:
        """The same entries with other scores."""
        return replace(self, score=score)

    def reordered(self, key: F64) -> Entries:
        """Each block's entries sorted by ascending ``key`` (stable: ties keep their order)."""
        order = np.lexsort((key, self.block))
        return replace(self, lists=self.lists[order], docs=self.docs[order], score=self.score[order],
                       rel=None if self.rel is None else self.rel[order], rank=None)
