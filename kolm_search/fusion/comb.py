"""CombMIN, CombMAX and CombMED (Fox & Shaw, TREC-2 1993): an order statistic of each
document's scores over the lists that hold it, not a sum, so computed here with numpy
(a sort by document, then the first, last or middle value of each document's run).

CombMED is ``numpy.median``'s: the middle score, or the mean of the two middle ones.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kolm_search.fusion.entries import Entries, pair_codes

__all__ = ["COMB_STATS", "comb_stat", "rank_candidates"]

COMB_STATS = ("min", "max", "med")
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]


def rank_candidates(query: I64, docs: I64, score: F64, n_queries: int,
                    limit: int | None) -> tuple[I64, I64, F64]:
    """Each query's candidates best first (ties in the given order), cut at ``limit``.

    Parameters
    ----------
    query, docs : int64 (m,)
        Query (non-decreasing) and document of each candidate, in first-appearance order.
    score : float64 (m,)
    n_queries : int
    limit : int, optional

    Returns
    -------
    out_ptr : int64 (n_queries + 1,), out_docs : int64 (k,), out_scores : float64 (k,)
    """
    order = np.lexsort((np.arange(len(docs)), -score, query))
    query, docs, score = query[order], docs[order], score[order]
    if limit is not None and len(query):
        starts = np.searchsorted(query, np.arange(n_queries))
        keep = np.arange(len(query)) - starts[query] < limit
        query, docs, score = query[keep], docs[keep], score[keep]
    out_ptr = np.zeros(n_queries + 1, np.int64)
    np.cumsum(np.bincount(query, minlength=n_queries), out=out_ptr[1:])
    return out_ptr, docs, score


def comb_stat(entries: Entries, stat: str, limit: int | None) -> tuple[I64, I64, F64]:
    """Fuse by the minimum, maximum or median (``stat``) of each document's scores."""
    if len(entries) == 0:
        return np.zeros(entries.n_queries + 1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    code = pair_codes(entries.query, entries.docs)  # candidates in first-appearance order
    n_cand = int(code.max()) + 1 if len(code) else 0
    order = np.lexsort((entries.score, code))
    values = entries.score[order]
    count = np.bincount(code, minlength=n_cand)
    start = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
    if stat == "min":
        fused = values[start]
    elif stat == "max":
        fused = values[start + count - 1]
    else:
        fused = (values[start + (count - 1) // 2] + values[start + count // 2]) / 2.0
    first = np.zeros(len(code), bool)
    first[np.unique(code, return_index=True)[1]] = True
    return rank_candidates(entries.query[first], entries.docs[first], fused, entries.n_queries, limit)
