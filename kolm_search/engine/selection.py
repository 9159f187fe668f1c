"""What filters select: a :class:`Selection` per filter (matching rows, or a mask when many
match) and :class:`Selections`, the selections of a batch as the kernels read them.

A filter that matches few documents -- ids, selective equalities -- is kept as its sorted
rows, so its cost grows with what it matches rather than with the table: ``ROWS_SHARE`` of
the table is the switch (below, int64 rows take at most half the bytes of a one-byte mask).
A batch stores each distinct selection once (queries with equal filters share it): the
rows of all row selections in one CSR array, and a ``uint8`` mask only for each large one.
Kernels test a document with :func:`kolm_search._kernels.selection.selected` (a binary
search in the rows, or a mask read); the BM25 kernel scores a small row selection document at
a time instead of scanning the postings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ROWS_SHARE", "Selection", "Selections"]

ROWS_SHARE = 1 / 16  # a selection of at most this share of the table is kept as rows

I64 = npt.NDArray[np.int64]


def _small(count: int, n_docs: int) -> bool:
    return count <= n_docs * ROWS_SHARE


@dataclass(frozen=True)
class Selection:
    """The documents one filter matches, over a table of ``n_docs``: ``rows`` int64 sorted
    unique (few) or ``mask`` bool (n_docs,) (many); exactly one is set."""

    n_docs: int
    rows: I64 | None = None
    mask: npt.NDArray[np.bool_] | None = None

    @classmethod
    def of_rows(cls, rows: npt.ArrayLike, n_docs: int) -> Selection:
        """From sorted unique rows (a mask when they are many)."""
        r = np.asarray(rows, dtype=np.int64)
        if _small(len(r), n_docs):
            return cls(n_docs, rows=r)
        mask = np.zeros(n_docs, bool)
        mask[r] = True
        return cls(n_docs, mask=mask)

    @classmethod
    def of_mask(cls, mask: npt.NDArray[np.bool_]) -> Selection:
        """From a mask (rows when it holds few)."""
        n_docs = len(mask)
        count = int(np.count_nonzero(mask))
        if _small(count, n_docs):
            return cls(n_docs, rows=np.flatnonzero(mask).astype(np.int64))
        return cls(n_docs, mask=mask)

    @classmethod
    def everything(cls, n_docs: int) -> Selection:
        return cls.of_mask(np.ones(n_docs, bool))

    def as_mask(self) -> npt.NDArray[np.bool_]:
        """A fresh bool mask (n_docs,)."""
        if self.mask is not None:
            return self.mask.copy()
        out = np.zeros(self.n_docs, bool)
        out[self.rows] = True
        return out

    def count(self) -> int:
        if self.rows is not None:
            return len(self.rows)
        assert self.mask is not None
        return int(np.count_nonzero(self.mask))

    def invert(self) -> Selection:
        return Selection.of_mask(~self.as_mask() if self.mask is None else ~self.mask)

    def intersect(self, other: Selection) -> Selection:
        if self.rows is not None and other.rows is not None:
            return Selection(self.n_docs, rows=np.intersect1d(self.rows, other.rows, assume_unique=True))
        if self.rows is not None or other.rows is not None:
            rows, mask = (self.rows, other.mask) if self.rows is not None else (other.rows, self.mask)
            assert rows is not None and mask is not None
            return Selection(self.n_docs, rows=rows[mask[rows]])
        assert self.mask is not None and other.mask is not None
        return Selection.of_mask(self.mask & other.mask)

    def union(self, other: Selection) -> Selection:
        if self.rows is not None and other.rows is not None:
            return Selection.of_rows(np.union1d(self.rows, other.rows), self.n_docs)
        out = self.as_mask()
        if other.rows is not None:
            out[other.rows] = True
        else:
            out |= other.mask  # type: ignore[arg-type]
        return Selection(self.n_docs, mask=out)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes if self.rows is not None else self.mask.nbytes)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Selections:
    """The selections of a batch, as the kernels take them.

    Attributes
    ----------
    ids : int64 (n_queries,)
        Each query's selection, -1 for no filter (queries with equal filters share one).
    ptr : int64 (n_sel + 1,), rows : int64 (nnz,)
        Selection ``s``'s rows are ``rows[ptr[s]:ptr[s + 1]]``, ascending (empty for a mask).
    mask_of : int64 (n_sel,)
        Row of ``masks`` holding selection ``s``, or -1 when it is given by its rows.
    masks : uint8 (n_masks, n_docs)
        One row per large selection (a (1, 1) placeholder when there is none).
    """

    ids: I64
    ptr: I64
    rows: I64
    mask_of: I64
    masks: npt.NDArray[np.uint8]

    @classmethod
    def none(cls, n_queries: int) -> Selections:
        """No query filtered."""
        return cls.build(np.full(n_queries, -1, np.int64), [])

    @classmethod
    def build(cls, ids: npt.ArrayLike, selections: Sequence[Selection]) -> Selections:
        """From each query's index into ``selections`` (-1: none) and the distinct selections."""
        ids_a = np.ascontiguousarray(ids, dtype=np.int64)
        counts = [len(s.rows) if s.rows is not None else 0 for s in selections]
        ptr = np.zeros(len(selections) + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        rows = np.concatenate([s.rows for s in selections if s.rows is not None] or [np.zeros(0, np.int64)])
        large = [s.mask for s in selections if s.mask is not None]
        mask_of = np.full(len(selections), -1, np.int64)
        mask_of[[i for i, s in enumerate(selections) if s.mask is not None]] = np.arange(len(large))
        masks = np.stack(large).view(np.uint8) if large else np.ones((1, 1), np.uint8)
        out = cls(ids_a, ptr, np.ascontiguousarray(rows, dtype=np.int64), mask_of, np.ascontiguousarray(masks))
        for a in (out.ids, out.ptr, out.rows, out.mask_of, out.masks):
            a.flags.writeable = False
        return out

    @classmethod
    def from_masks(cls, mask_ids: npt.ArrayLike, masks: npt.ArrayLike) -> Selections:
        """From per-query rows of a mask matrix (n_masks, n_docs), -1 for none."""
        m = np.asarray(masks).astype(bool)
        return cls.build(mask_ids, [Selection.of_mask(row) for row in m])

    def take(self, rows: npt.ArrayLike) -> Selections:
        """The selections of the queries ``rows`` (e.g. one per expanded text), sharing the arrays."""
        return Selections(self.ids[np.asarray(rows, dtype=np.int64)], self.ptr, self.rows, self.mask_of, self.masks)

    def arrays(self) -> tuple[I64, I64, I64, I64, npt.NDArray[np.uint8]]:
        """``(ids, ptr, rows, mask_of, masks)``, the kernels' arguments."""
        return self.ids, self.ptr, self.rows, self.mask_of, self.masks

    def mask(self, query: int, n_docs: int) -> npt.NDArray[np.bool_]:
        """Query ``query``'s selection as a bool mask (n_docs,) (all True when unfiltered)."""
        s = int(self.ids[query])
        if s < 0:
            return np.ones(n_docs, bool)
        if self.mask_of[s] >= 0:
            return self.masks[self.mask_of[s]].astype(bool)
        out = np.zeros(n_docs, bool)
        out[self.rows[self.ptr[s]:self.ptr[s + 1]]] = True
        return out

    def check(self, n_queries: int, n_docs: int) -> None:
        """Raise ``ValueError`` unless these fit ``n_queries`` x ``n_docs`` (what a kernel trusts)."""
        n_sel = len(self.mask_of)
        ok = (self.ids.shape == (n_queries,) and self.ptr.shape == (n_sel + 1,) and self.ptr[0] == 0
              and self.ptr[-1] == len(self.rows) and bool(np.all(np.diff(self.ptr) >= 0))
              and (not len(self.ids) or (self.ids.min() >= -1 and self.ids.max() < n_sel))
              and (not len(self.rows) or (self.rows.min() >= 0 and self.rows.max() < n_docs))
              and bool(np.all((np.diff(self.rows) > 0) | np.isin(np.arange(1, len(self.rows)), self.ptr)))
              and (not n_sel or self.mask_of.max() < len(self.masks))
              and (self.masks.ndim == 2 and (not n_sel or self.mask_of.max() < 0 or self.masks.shape[1] == n_docs)))
        if not ok:
            raise ValueError(f"selections of shape ids {self.ids.shape}, {n_sel} selections, masks {self.masks.shape} "
                             f"do not fit {n_queries} queries x {n_docs} documents")

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays()))
