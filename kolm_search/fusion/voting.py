"""Rank voting: Borda count (Aslam & Montague, SIGIR 2001) and Condorcet-fuse (Montague &
Aslam, CIKM 2002), each optionally weighted per run.

- Borda: in a query with ``c`` candidates (documents of any list), a list of ``n`` entries
  gives ``c - i`` points to its entry at zero-based rank ``i`` and ``(c - n + 1) / 2`` to
  each candidate it lacks; a document's score is the (weighted) sum of its points. The
  points are a per-entry value over the lists completed with their missing candidates, so
  the sum goes through the fusion kernel.
- Condorcet: candidates sorted by pairwise majority (weighted) votes in a dedicated kernel
  (:mod:`kolm_search._kernels.condorcet`); the candidate at rank ``i`` scores ``c - i``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.fusion.entries import Entries

__all__ = ["borda_points", "condorcet"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def borda_points(entries: Entries) -> tuple[Entries, F64]:
    """The lists completed with their missing candidates, and each entry's Borda points."""
    full, present, n_ranked, n_cand = entries.with_candidates()
    c = n_cand.astype(np.float64)
    return full, np.where(present, c - full.position, (c - n_ranked + 1.0) / 2.0)


def condorcet(entries: Entries, weights: F64, limit: int | None, n_threads: int | None) -> tuple[I64, I64, F64]:
    """Condorcet-fuse every query (see the module docstring); ``weights`` float64 (n_lists,)."""
    from kolm_search._kernels import load

    kernel: Any = load("condorcet").condorcet_groups
    out: tuple[I64, I64, F64] = kernel(entries.ptr, entries.lists, entries.docs, weights, entries.n_docs,
                                       limit=limit, n_threads=n_threads)
    return out
