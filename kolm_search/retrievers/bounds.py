"""Term maxima of a BM25 index and the rule that sends queries to the pruned kernel.

The pruned kernel (:mod:`kolm_search._kernels.pruned`, term-at-a-time MaxScore) rules a
document out only when upper bounds show it cannot enter the top-k, so a bound below a weight
it bounds would silently drop results. Its bounds are each term's largest stored weight
(``term_max``): computed from the weights at every build and merge, saved with the index and,
on load, compared with the maxima of the loaded weights (a file that differs is refused, naming
it and the first term that differs; an index saved before term maxima existed gets them
computed). Per-block maxima (of 64 postings) were measured only 4-20 % below the term maxima on
``benchmarks/bench_pruning.py``'s corpus (documents in random order), too little to pay for a
block-at-a-time kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.errors import KolmValueError

__all__ = ["PRUNE_MAX_K", "PRUNE_MIN_POSTINGS_PER_K", "PRUNE_PHASE_SHARE", "PRUNINGS", "Pruning", "checked_term_maxima", "equal_term_maxima",
           "prune_queries", "term_maxima"]

Pruning = Literal["auto", "none"]
PRUNINGS = ("auto", "none")
# "auto" prunes a query when all three hold (measured by benchmarks/bench_pruning.py, see benchmarks/README.md):
PRUNE_MAX_K = 512  # k at most this (at top-1000 the pruned kernel was slower on the synthetic queries)
PRUNE_MIN_POSTINGS_PER_K = 50  # at least this many postings per result wanted
PRUNE_PHASE_SHARE = 0.15  # the postings of its largest-bound terms that reach 4 k documents: at most this share


def term_maxima(t_ptr: npt.NDArray[np.int64], t_w: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """The largest weight of each term, float32 (V,) (0 for a term without postings), of weights
    ``t_w`` float32 (nnz,) under pointers ``t_ptr`` int64 (V + 1,)."""
    ptr = np.asarray(t_ptr, np.int64)
    out = np.zeros(len(ptr) - 1, np.float32)
    has = np.diff(ptr) > 0
    if has.any():
        out[has] = np.maximum.reduceat(np.asarray(t_w, np.float32), ptr[:-1][has])
    return out


def checked_term_maxima(path: Path, stored: np.ndarray, t_ptr: npt.NDArray[np.int64],
                        t_w: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Saved maxima ``stored`` (the file ``path``) of checked weights, refused unless equal to
    the weights' own."""
    return equal_term_maxima(path, stored, term_maxima(t_ptr, t_w))


def equal_term_maxima(path: Path, stored: np.ndarray, want: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Saved maxima ``stored`` (the file ``path``), refused unless equal to ``want`` (the
    weights' own, float32 (V,)); ``want`` returned."""
    if stored.shape != want.shape:
        raise KolmValueError(f"{path}: has {stored.shape[0]} term maxima, expected {want.shape[0]} (one per term)")
    with np.errstate(over="ignore", invalid="ignore"):
        differ = ~(stored.astype(np.float32, copy=False) == want)  # NaN differs too
    if differ.any():
        t = int(np.flatnonzero(differ)[0])
        raise KolmValueError(f"{path}: term {t} records maximum {stored[t].item()!r}, but its weights' largest is "
                             f"{want[t].item()!r}; the maxima and the weights come from different indexes")
    return want


def prune_queries(q_ptr: npt.NDArray[np.int64], q_ids: npt.NDArray[np.int64], weights: npt.NDArray[np.float32],
                  t_ptr: npt.NDArray[np.int64], t_max: npt.NDArray[np.float32], offsets: npt.NDArray[np.float32],
                  sel_ids: npt.NDArray[np.int64], sel_ptr: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64],
                  k: int) -> npt.NDArray[np.bool_]:
    """The queries that ``pruning="auto"`` sends to the pruned kernel, bool (n_q,).

    Those it can take (:func:`kolm_search._kernels.pruned.prunable`), with ``k`` at most
    :data:`PRUNE_MAX_K`, at least :data:`PRUNE_MIN_POSTINGS_PER_K` postings per result, and whose
    terms of largest bound (``weight * term_max``), taken until they hold ``4 k`` postings, hold
    at most :data:`PRUNE_PHASE_SHARE` of the query's postings: an estimate of what the kernel
    must read in full before it can rule documents out.
    """
    n_q = len(q_ptr) - 1
    if k > PRUNE_MAX_K or n_q == 0:
        return np.zeros(n_q, bool)
    ok = load("pruned").prunable(q_ptr, q_ids, weights, t_ptr, offsets, sel_ids, sel_ptr, sel_mask, k,
                                 min_postings=PRUNE_MIN_POSTINGS_PER_K)
    if not len(q_ids):
        return np.asarray(ok, bool)
    owner = np.repeat(np.arange(n_q), np.diff(q_ptr))
    df = (t_ptr[q_ids + 1] - t_ptr[q_ids]).astype(np.float64)
    ub = np.asarray(weights, np.float64) * t_max[q_ids]
    order = np.lexsort((-ub, owner))  # by query, then largest bound first
    cum = np.cumsum(df[order])
    start = np.concatenate([[0.0], cum])[q_ptr[:-1]]  # postings before each query's first term
    within = cum - start[owner[order]]
    total = np.bincount(owner, weights=df, minlength=n_q)
    reach = np.full(n_q, np.inf)  # the postings read until 4 k are reached
    hit = within >= 4 * k
    np.minimum.at(reach, owner[order][hit], within[hit])
    reach = np.where(np.isinf(reach), total, reach)
    return np.asarray(ok, bool) & (reach <= PRUNE_PHASE_SHARE * np.maximum(total, 1))
