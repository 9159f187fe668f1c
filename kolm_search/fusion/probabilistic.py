"""Supervised fusion: per-run tables learned from judged queries, then per-entry values
summed by the fusion kernel (as ranx 0.3.21 trains and applies them).

Training reads each run's *hit list* on every training query (1 where the document at that
rank is judged relevant, else 0; a query the run lacks has an empty list) after the
normalisation, ``Q`` training queries in all:

=============  ==========================================================================
method         table (per run) and the value of an entry at zero-based rank ``i`` of a
               list of ``n``
=============  ==========================================================================
probfuse       ``x`` segments per list (``ceil(n / x)`` ranks each): ``P[k]`` = mean over
               queries of the segment's hit rate; value ``P[k] / (k + 1)`` (Lillis et al.,
               SIGIR 2006)
segfuse        segments ``[0, 5, 15, 35, ..., 5115)``: ``P[k]`` = mean over queries of
               hits / segment length; value ``P[k] * (score + 1)`` (Shokouhi, ECIR 2007)
slidefuse      ``P[i]`` = hit rate at rank ``i`` over the queries reaching it; value the
               mean of ``P`` over ranks ``max(i - w, 0) .. min(i + w, n - 1)`` (Lillis et
               al., ECIR 2008)
posfuse        ``P`` as slidefuse; value ``P[i]`` (0 past the table)
bayesfuse      log-odds of relevance per rank segment ``[0, 5, 10, 15, 20, 30, 100, 200,
               500, 1000)`` (precisions of 0 or 1 moved by 0.001); value the log-odds at
               ``i`` (``log(0.001/0.999)`` past rank 1000 and for a run lacking the
               document) (Aslam & Montague, SIGIR 2001)
mapfuse        the run's MAP over the training queries; value ``MAP / (i + 1)`` (Lillis
               et al., AICS 2010)
=============  ==========================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.fusion.entries import Entries

__all__ = ["BAYES_CUTOFFS", "MIN_LOG_ODDS", "SEGFUSE_BOUNDS", "SUPERVISED", "train", "values"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
SEGFUSE_BOUNDS = np.array([0] + [10 * 2 ** (k - 1) - 5 for k in range(1, 11)], dtype=np.int64)
BAYES_CUTOFFS = np.array([0, 5, 10, 15, 20, 30, 100, 200, 500, 1000], dtype=np.int64)
MIN_LOG_ODDS = math.log(0.001 / 0.999)
SUPERVISED = {"probfuse": "probs", "segfuse": "probs", "slidefuse": "probs", "posfuse": "probs",
              "bayesfuse": "log_odds", "mapfuse": "map_scores"}


def _table(tables: Sequence[Any], n_lists: int) -> tuple[F64, I64]:
    """Per-run tables padded into float64 (n_lists, width) with zeros, and their lengths."""
    lengths = np.array([len(t) for t in tables], dtype=np.int64)
    out = np.zeros((n_lists, int(lengths.max(initial=0)) + 1))
    for li, t in enumerate(tables):
        out[li, :len(t)] = t
    return out, lengths


def values(method: str, e: Entries, params: Mapping[str, Any]) -> tuple[F64, float]:
    """Each entry's value float64 (n,) under a trained ``method``, and the value of a run
    lacking the document (non-zero for bayesfuse only)."""
    pos, li = e.position, e.lists
    if method == "mapfuse":
        return np.asarray(params["map_scores"], float)[li] / (pos + 1.0), 0.0
    key = SUPERVISED[method]
    table, length = _table(params[key], e.n_lists)
    if method == "probfuse":
        n_seg = length[li]
        seg = -(-e.size // np.maximum(n_seg, 1))  # ceil(n / x) ranks per segment
        k = pos // np.maximum(seg, 1)
        return np.where(k < n_seg, table[li, np.minimum(k, table.shape[1] - 1)] / (k + 1.0), 0.0), 0.0
    if method == "segfuse":
        k = np.searchsorted(SEGFUSE_BOUNDS, pos, side="right") - 1
        inside = k < np.minimum(length[li], len(SEGFUSE_BOUNDS) - 1)
        return np.where(inside, table[li, np.minimum(k, table.shape[1] - 1)] * (e.score + 1.0), 0.0), 0.0
    if method == "posfuse":
        return np.where(pos < length[li], table[li, np.minimum(pos, table.shape[1] - 1)], 0.0), 0.0
    if method == "bayesfuse":
        inside = pos < length[li]
        return np.where(inside, table[li, np.minimum(pos, table.shape[1] - 1)], MIN_LOG_ODDS), MIN_LOG_ODDS
    # slidefuse; a window past every rank is the whole list (and keeps ``pos +- w`` in int64)
    w = min(int(params["w"]), int(max(np.max(pos, initial=0), np.max(e.size, initial=0))))
    cums = np.zeros((e.n_lists, table.shape[1] + 1))
    np.cumsum(table, axis=1, out=cums[:, 1:])
    a = np.maximum(pos - w, 0)
    b = np.minimum(pos + w, np.maximum(e.size - 1, pos))  # a rank past the list's length (gaps) ends it
    total = cums[li, np.minimum(b + 1, length[li])] - cums[li, np.minimum(a, length[li])]
    return total / (b - a + 1.0), 0.0


def _per_list(li: I64, key: I64, weights: F64, n_lists: int, width: int) -> F64:
    """Sums of ``weights`` by (list, key) as float64 (n_lists, width)."""
    sums: F64 = np.bincount(li * width + key, weights=weights, minlength=n_lists * width).astype(np.float64)
    return sums.reshape(n_lists, width)


def train(method: str, e: Entries, train_query: npt.NDArray[np.bool_], n_train: int, n_relevant: I64,
          params: Mapping[str, Any]) -> dict[str, Any]:
    """The tables of ``method`` learned on ``e`` (normalised, with ``rel``).

    Parameters
    ----------
    train_query : bool (n_queries,)
        The entries' queries that are training queries.
    n_train : int
        Number of training queries, those no run holds included (their hit lists are empty).
    n_relevant : int64 (n_queries,)
        Relevant documents judged per query (mapfuse's recall base).
    params : dict
        ``n_segments`` for probfuse.

    Returns
    -------
    dict
        ``{"probs": [...]}``, ``{"log_odds": [...]}`` or ``{"map_scores": [...]}``, one
        float64 array (or float) per run.
    """
    assert e.rel is not None
    keep = train_query[e.query]
    q, li, pos, size = e.query[keep], e.lists[keep], e.position[keep], e.size[keep]
    hit = e.rel[keep].astype(np.float64)
    n_l, n = e.n_lists, max(n_train, 1)
    if method == "probfuse":
        x = int(params["n_segments"])
        seg = -(-size // x)
        k = pos // seg
        inside = k < x  # ranks with gaps may fall past the last segment
        q, li, k, seg, size, hit = q[inside], li[inside], k[inside], seg[inside], size[inside], hit[inside]
        seg_len = np.minimum((k + 1) * seg, size) - k * seg
        blocks = (q * n_l + li) * x + k  # per (query, list, segment): hits / length, summed over queries
        first = np.flatnonzero(np.diff(blocks, prepend=-1))
        rate = np.add.reduceat(hit, first) / seg_len[first] if len(first) else np.zeros(0)
        return {"probs": list(_per_list(li[first], k[first], rate, n_l, x) / n)}
    if method in ("segfuse", "bayesfuse"):
        bounds = SEGFUSE_BOUNDS if method == "segfuse" else BAYES_CUTOFFS
        n_seg = len(bounds) - 1
        k = np.searchsorted(bounds, pos, side="right") - 1
        inside = k < n_seg
        key = (q[inside] * n_l + li[inside]) * n_seg + k[inside]
        hits = np.bincount(key, weights=hit[inside], minlength=e.n_queries * n_l * n_seg)
        rate = (hits.reshape(e.n_queries, n_l, n_seg) / np.diff(bounds)).sum(axis=0) / n
        if method == "segfuse":
            return {"probs": list(rate)}
        rate = np.where(rate == 0, 0.001, rate)
        miss = np.where(rate == 1, 0.001, 1.0 - rate)
        return {"log_odds": list(np.repeat(np.log(rate / miss), np.diff(bounds), axis=1))}
    if method == "mapfuse":
        block = q * n_l + li
        cum = np.cumsum(hit)
        start = np.flatnonzero(np.diff(block, prepend=-1))
        cum -= np.repeat(cum[start] - hit[start], np.diff(np.append(start, len(block))))  # hits up to here
        precision = np.where(hit > 0, cum / (pos + 1.0), 0.0)
        ap = np.bincount(block, weights=precision, minlength=e.n_queries * n_l).reshape(e.n_queries, n_l)
        base = n_relevant.astype(np.float64)[:, None]
        ap = np.divide(ap, base, out=np.zeros_like(ap), where=base > 0)
        return {"map_scores": [float(v) for v in ap[train_query].sum(axis=0) / n]}
    # slidefuse, posfuse: hit rate per rank over the queries whose list reaches it
    width = int(pos.max(initial=-1)) + 1
    num = _per_list(li, pos, hit, n_l, width)
    den = _per_list(li, pos, np.ones(len(li)), n_l, width)
    reach = [int(np.flatnonzero(row).max(initial=-1)) + 1 for row in den]
    return {"probs": [num[i, :reach[i]] / den[i, :reach[i]] for i in range(n_l)]}
