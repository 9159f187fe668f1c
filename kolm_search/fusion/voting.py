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

from kolm_search.fusion.entries import Entries, pair_codes

__all__ = ["borda_points", "complete_lists", "condorcet"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def complete_lists(entries: Entries, fill: float = 0.0) -> tuple[Entries, Bools, I64, I64]:
    """Every block completed with the query's candidates it lacks (documents of its other
    lists), appended after its own entries in the query's first-appearance order; ranks
    become positions.

    Returns
    -------
    entries : Entries
        The completed blocks; the added entries score ``fill``.
    present : bool (m,)
        Whether each entry was in the block before.
    n_ranked : int64 (m,)
        Number of entries the entry's block had before.
    n_candidates : int64 (m,)
        Number of candidates of the entry's query.
    """
    n_q, n_l = entries.n_queries, entries.n_lists
    query = entries.query
    cand_code = pair_codes(query, entries.docs)
    first = np.zeros(len(entries), bool)
    first[np.unique(cand_code, return_index=True)[1]] = True
    cand_docs = entries.docs[first]
    n_cand = np.bincount(query[first], minlength=n_q)
    cand_start = np.concatenate([[0], np.cumsum(n_cand)[:-1]]).astype(np.int64)
    grid_size = n_cand * n_l
    grid_start = np.concatenate([[0], np.cumsum(grid_size)[:-1]]).astype(np.int64)
    total = int(grid_size.sum())
    grid_q = np.repeat(np.arange(n_q, dtype=np.int64), grid_size)
    within = np.arange(total, dtype=np.int64) - grid_start[grid_q]
    grid_l = within // np.maximum(n_cand[grid_q], 1)
    grid_c = cand_start[grid_q] + within % np.maximum(n_cand[grid_q], 1)
    held = np.zeros(total, bool)
    held[grid_start[query] + entries.lists * n_cand[query] + cand_code - cand_start[query]] = True
    missing = ~held
    blocks = np.bincount(entries.block, minlength=n_q * n_l)
    m_block = grid_q[missing] * n_l + grid_l[missing]
    m_rank = np.arange(int(missing.sum()), dtype=np.int64)
    if len(m_rank):
        starts = np.flatnonzero(np.diff(m_block, prepend=-1))
        m_rank = m_rank - np.repeat(starts, np.diff(np.append(starts, len(m_block))))
    m_pos = blocks[m_block] + m_rank
    pos = np.concatenate([entries.slot, m_pos])
    blk = np.concatenate([entries.block, m_block])
    order = np.lexsort((pos, blk))
    lists = np.concatenate([entries.lists, grid_l[missing]])[order]
    docs = np.concatenate([entries.docs, cand_docs[grid_c[missing]]])[order]
    score = np.concatenate([entries.score, np.full(len(m_block), fill)])[order]
    rel = None
    if entries.rel is not None:
        rel = np.concatenate([entries.rel, entries.rel[first][grid_c[missing]]])[order]
    present = np.concatenate([np.ones(len(entries), bool), np.zeros(len(m_block), bool)])[order]
    ptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(grid_size, out=ptr[1:])
    out = Entries(ptr, lists, docs, score, n_l, entries.n_docs, rel)
    return out, present, blocks[blk[order]], n_cand[out.query]


def borda_points(entries: Entries) -> tuple[Entries, F64]:
    """The lists completed with their missing candidates, and each entry's Borda points."""
    full, present, n_ranked, n_cand = complete_lists(entries)
    c = n_cand.astype(np.float64)
    return full, np.where(present, c - full.position, (c - n_ranked + 1.0) / 2.0)


def condorcet(entries: Entries, weights: F64, limit: int | None, n_threads: int | None) -> tuple[I64, I64, F64]:
    """Condorcet-fuse every query (see the module docstring); ``weights`` float64 (n_lists,)."""
    from kolm_search._kernels import load

    kernel: Any = load("condorcet").condorcet_groups
    out: tuple[I64, I64, F64] = kernel(entries.ptr, entries.lists, entries.docs, weights, entries.n_docs,
                                       limit=limit, n_threads=n_threads)
    return out
