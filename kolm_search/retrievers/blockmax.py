"""Block maxima of a term-major index: what exact dynamic pruning reads beside the postings.

Each term's postings are cut into blocks of ``2 ** shift`` (the last one shorter); a block's
maximum is the largest stored weight in it, a term's maximum the largest of its blocks'. The
pruned kernel (:mod:`kolm_search._kernels.pruned`) skips a document only when these bounds
show it cannot enter the top-k, so a maximum below a weight it bounds would silently drop
results: maxima are computed from the weights at every build and merge, saved with the index
(``block_max``) and, on load, compared with the maxima of the loaded weights (a file that differs
is refused, naming it and the first block that differs; an index saved before block maxima
existed gets them computed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.errors import KolmValueError

__all__ = ["BLOCK_SHIFT", "MAX_SHIFT", "PRUNE_POSTINGS_PER_K", "PRUNINGS", "BlockMaxima", "Pruning", "block_pointers",
           "prune_queries"]

Pruning = Literal["auto", "none"]
PRUNINGS = ("auto", "none")
PRUNE_POSTINGS_PER_K = 0.0  # "auto" prunes a query with at least this many postings per result wanted

BLOCK_SHIFT = 6  # blocks of 64 postings (0.4 % of the postings' bytes; see benchmarks/bench_pruning.py)
MAX_SHIFT = 16


def block_pointers(t_ptr: npt.NDArray[np.int64], shift: int) -> npt.NDArray[np.int64]:
    """Block pointers int64 (V + 1,): term t's blocks are ``[b_ptr[t], b_ptr[t + 1])``."""
    lengths = np.diff(np.asarray(t_ptr, np.int64))
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum((lengths + (1 << shift) - 1) >> shift, out=out[1:])
    return out


def _maxima(t_ptr: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32], b_ptr: npt.NDArray[np.int64],
            shift: int) -> npt.NDArray[np.float32]:
    n_blocks = int(b_ptr[-1])
    if n_blocks == 0:
        return np.zeros(0, np.float32)
    counts = np.diff(b_ptr)
    term = np.repeat(np.arange(len(counts)), counts)
    starts = np.asarray(t_ptr, np.int64)[term] + ((np.arange(n_blocks) - b_ptr[term]) << shift)
    return np.maximum.reduceat(np.asarray(t_w, np.float32), starts).astype(np.float32, copy=False)


@dataclass(frozen=True)
class BlockMaxima:
    """Block and term maxima of an index's weights.

    Attributes
    ----------
    shift : int
        Blocks hold ``2 ** shift`` postings.
    b_ptr : int64 (V + 1,)
        Term t's blocks (:func:`block_pointers`).
    b_max : float32 (n_blocks,)
        Largest weight of each block (what is saved).
    t_max : float32 (V,)
        Largest weight of each term (0 without postings).
    """

    shift: int
    b_ptr: npt.NDArray[np.int64]
    b_max: npt.NDArray[np.float32]
    t_max: npt.NDArray[np.float32]

    @classmethod
    def of(cls, t_ptr: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32], shift: int = BLOCK_SHIFT) -> BlockMaxima:
        """The maxima of weights ``t_w`` float32 (nnz,) under pointers ``t_ptr`` int64 (V + 1,)."""
        b_ptr = block_pointers(t_ptr, shift)
        return cls._from(b_ptr, _maxima(t_ptr, t_w, b_ptr, shift), shift)

    @classmethod
    def _from(cls, b_ptr: npt.NDArray[np.int64], b_max: npt.NDArray[np.float32], shift: int) -> BlockMaxima:
        t_max = np.zeros(len(b_ptr) - 1, np.float32)
        has = np.diff(b_ptr) > 0
        if has.any():
            t_max[has] = np.maximum.reduceat(b_max, b_ptr[:-1][has])
        return cls(shift, b_ptr, b_max, t_max)

    @classmethod
    def checked(cls, path: Path, stored: np.ndarray, t_ptr: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32],
                shift: int) -> BlockMaxima:
        """Saved maxima ``stored`` (the file ``path``) of checked weights, refused unless equal
        to the weights' own maxima in blocks of ``2 ** shift``."""
        if not 0 <= shift <= MAX_SHIFT:
            raise KolmValueError(f"{path}: block size 2**{shift} is outside [1, 2**{MAX_SHIFT}]")
        b_ptr = block_pointers(t_ptr, shift)
        want = _maxima(t_ptr, t_w, b_ptr, shift)
        if stored.shape != want.shape:
            raise KolmValueError(f"{path}: has {stored.shape[0]} block maxima, expected {want.shape[0]} "
                                 f"(blocks of {1 << shift} postings of every term)")
        with np.errstate(over="ignore", invalid="ignore"):
            got = stored.astype(np.float32, copy=False)
        differ = ~(got == want)  # NaN differs too
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            term = int(np.searchsorted(b_ptr, i, side="right") - 1)
            raise KolmValueError(f"{path}: block {i} (term {term}) records maximum {stored[i].item()!r}, but its "
                                 f"weights' largest is {want[i].item()!r}; the block maxima and the weights come "
                                 "from different indexes")
        return cls._from(b_ptr, want, shift)


def prune_queries(q_ptr: npt.NDArray[np.int64], q_ids: npt.NDArray[np.int64], weights: npt.NDArray[np.float32],
                  t_ptr: npt.NDArray[np.int64], offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64],
                  sel_ptr: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.bool_]:
    """The queries that ``pruning="auto"`` sends to the pruned kernel, bool (n_q,): those it
    can take (:func:`kolm_search._kernels.pruned.prunable`) with at least
    :data:`PRUNE_POSTINGS_PER_K` postings per result wanted (the rule measured by
    ``benchmarks/bench_pruning.py``)."""
    return load("pruned").prunable(q_ptr, q_ids, weights, t_ptr, offsets, sel_ids, sel_ptr, sel_mask, k,  # type: ignore[no-any-return]
                                   min_postings=PRUNE_POSTINGS_PER_K)
