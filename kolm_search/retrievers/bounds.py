"""Posting bounds of a BM25 index and the rule that sends queries to the pruned kernel.

The pruned kernel (:mod:`kolm_search._kernels.pruned`, block-max MaxScore) rules a document out
only when upper bounds show it cannot enter the top-k, so a bound below a weight it bounds would
silently drop results. Its bounds (:func:`index_bounds`, the layout of
:mod:`kolm_search._kernels.blocks`): each term's largest stored weight (``t_max``, saved as
``term_max``), each block of 64 postings' largest weight (``b_max``, saved as ``block_max``) and
last document (``b_last``), and each term's smallest weight (``t_min``: the exhaustive kernel's
dense path skips its stamps when every product of a query is > 0). They are computed from the
postings at every build and merge; on load, from the loaded postings (a full load: one pass
over the mapped arrays; a quick load: term by term, in the pass that checks a term's postings
when a search first reads them, :mod:`kolm_search.retrievers.postings_gate`), and
the saved maxima are compared with them (a file that differs is refused, naming it and the first
term or block that differs). An index saved before block maxima (format 5 and older) or term
maxima (format 3 and older) loads with them computed in that same pass: pruning is available
at once, at no extra read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.errors import KolmValueError

__all__ = ["BOUNDS", "PRUNE_MIN_POSTINGS_PER_K", "PRUNINGS", "Pruning", "SAVED_BOUNDS", "checked_bounds",
           "index_bounds", "prune_queries", "term_maxima"]

Pruning = Literal["auto", "none"]
PRUNINGS = ("auto", "none")
BOUNDS = ("t_min", "t_max", "b_max", "b_last")  # what index_bounds returns, by array name
SAVED_BOUNDS = {"term_max": "t_max", "block_max": "b_max"}  # saved file name -> array name
PRUNE_MIN_POSTINGS_PER_K = 50  # "auto" prunes a query with at least this many postings per result wanted


def term_maxima(t_ptr: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The largest weight of each term, float32 (V,) (0 for a term without postings), of weights
    ``t_w`` float32 (nnz,) under pointers ``t_ptr`` int64 (V + 1,) (numpy)."""
    ptr = np.asarray(t_ptr, np.int64)
    out = np.zeros(len(ptr) - 1, np.float32)
    has = np.diff(ptr) > 0
    if has.any():
        out[has] = np.maximum.reduceat(np.asarray(t_w, np.float32), ptr[:-1][has])
    return out


def index_bounds(t_ptr: npt.NDArray[np.int64], t_docs: npt.NDArray[np.int32], t_w: npt.NDArray[np.float32], *,
                 n_threads: int | None = None) -> dict[str, np.ndarray]:
    """The bounds of checked postings by name (:data:`BOUNDS`): ``t_min, t_max`` float32 (V,),
    ``b_max`` float32, ``b_last`` int32 (n_blocks,) (:func:`kolm_search._kernels.blocks.posting_bounds`)."""
    return dict(zip(BOUNDS, load("blocks").posting_bounds(t_ptr, t_docs, t_w, n_threads=n_threads), strict=True))


def checked_bounds(files: dict[str, tuple[Path, np.ndarray]], bounds: dict[str, np.ndarray],
                   t_ptr: npt.NDArray[np.int64], terms: npt.NDArray[np.int64] | None = None,
                   b_ptr: npt.NDArray[np.int64] | None = None) -> None:
    """Refuse saved maxima (``files``: saved name -> (path, array), names of :data:`SAVED_BOUNDS`)
    that differ from ``bounds`` (:func:`index_bounds` of the loaded postings, pointers ``t_ptr``):
    every entry, or only those of ``terms`` int64 (n,) and their blocks (the sizes in full;
    ``b_ptr``: the block pointers of ``t_ptr``, computed when not given)."""
    if terms is not None and b_ptr is None:
        b_ptr = load("blocks").block_pointers(t_ptr)
    blocks = None if terms is None or b_ptr is None else _blocks_of(terms, b_ptr)
    for name, (path, stored) in files.items():
        want = bounds[SAVED_BOUNDS[name]]
        unit = "term" if name == "term_max" else "block"
        if stored.ndim != 1 or stored.shape != want.shape:
            raise KolmValueError(f"{path}: has {stored.shape[0] if stored.ndim else 0} {unit} maxima, expected "
                                 f"{want.shape[0]} (one per {unit})")
        at = terms if unit == "term" else blocks
        got, need = (stored, want) if at is None else (stored[at], want[at])
        with np.errstate(over="ignore", invalid="ignore"):
            differ = ~(np.asarray(got).astype(np.float32, copy=False) == need)  # NaN differs too
        if differ.any():
            j = int(np.flatnonzero(differ)[0])
            i = j if at is None else int(at[j])
            where = f"term {i}" if unit == "term" else _block_name(i, t_ptr)
            raise KolmValueError(f"{path}: {where} records maximum {stored[i].item()!r}, but its weights' largest is "
                                 f"{want[i].item()!r}; the maxima and the weights come from different indexes")


def _blocks_of(terms: npt.NDArray[np.int64], b_ptr: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The positions in the block arrays (pointers ``b_ptr``) of the blocks of ``terms``, int64, term by term."""
    starts, counts = b_ptr[terms], b_ptr[terms + 1] - b_ptr[terms]
    first = np.cumsum(counts) - counts  # where each term's blocks begin in the output
    return np.repeat(starts - first, counts) + np.arange(int(counts.sum()), dtype=np.int64)


def _block_name(i: int, t_ptr: npt.NDArray[np.int64]) -> str:
    """``"block j of term t"`` for block ``i`` of the block arrays."""
    b_ptr = load("blocks").block_pointers(t_ptr)
    t = int(np.searchsorted(b_ptr, i, side="right")) - 1
    return f"block {i - int(b_ptr[t])} of term {t}"


def prune_queries(q_ptr: npt.NDArray[np.int64], q_ids: npt.NDArray[np.int64], weights: npt.NDArray[np.float32],
                  t_ptr: npt.NDArray[np.int64], offsets: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64],
                  sel_ptr: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.bool_]:
    """The queries that ``pruning="auto"`` sends to the pruned kernel, bool (n_q,): those it can
    take (:func:`kolm_search._kernels.pruned.prunable`) with at least
    :data:`PRUNE_MIN_POSTINGS_PER_K` postings per result wanted. The kernel gives back to the
    exhaustive one a query whose rarer terms hold too many of its postings to leave the others
    out (:data:`kolm_search._kernels.pruned.BAIL`), and one left with more candidates to look up
    than its postings are worth (:data:`kolm_search._kernels.pruned.LOOKUP`)."""
    if len(q_ptr) <= 1:
        return np.zeros(0, bool)
    return np.asarray(load("pruned").prunable(q_ptr, q_ids, weights, t_ptr, offsets, sel_ids, sel_ptr, sel_mask, k,
                                              min_postings=PRUNE_MIN_POSTINGS_PER_K), bool)
