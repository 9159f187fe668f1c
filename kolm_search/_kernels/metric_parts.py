"""Parts of the evaluation kernel (:mod:`kolm_search._kernels.metrics`) that one query's
measures call: interpolated precision from the ranking's precision envelope, and trec_eval's
gain measures (G, ndcg_rel, Rndcg). Compiled functions over the kernel's scratch arrays;
their oracle is the kernel's (``metrics_twin``, pytrec_eval)."""

from __future__ import annotations

import numpy as np
from numba import njit

from kolm_search._kernels.measure_ids import Measure

__all__ = ["envelope", "gain_measure", "iprec_env"]


@njit(cache=True, nogil=True)
def iprec_env(recall, num_rel, n_e, found, env):  # pragma: no cover - compiled
    """trec_eval's interpolated precision at ``recall``: the best precision at or below the rank
    where ``int(recall * num_rel + 0.9)`` relevant documents are retrieved (trec_eval 9.0, as
    pytrec_eval has it; later versions round), 0 if never; NaN (0 / 0, as trec_eval) when no
    document is ranked and that number is 0. ``found`` relevant documents are ranked, and
    ``env[c]`` is the best precision from the ``c``-th relevant one down (:func:`envelope`),
    made once per ranking for every level."""
    need = np.floor(recall * num_rel + 0.9)
    if n_e == 0 and need == 0:
        return np.nan
    if found == 0 or need > found:
        return 0.0
    return env[int(max(need, 1.0))]


@njit(cache=True, nogil=True)
def envelope(found, env):  # pragma: no cover - compiled
    """``env[c]``, on entry the rank ``p_c`` of the ``c``-th relevant document (``c`` in
    ``1..found``), becomes ``max(k / p_k for k in c..found)``: the best precision at or below
    ``p_c`` (between two relevant ranks precision only falls, so the best is at one of them,
    and is the same float division as at every rank)."""
    best = 0.0
    for c in range(found, 0, -1):
        best = max(best, c / env[c])
        env[c] = best


@njit(cache=True, nogil=True)
def gain_measure(mid, j_rel, js, n_pos, grade_at, n_e, log2, ideal, cum_dcg, num_rel):  # pragma: no cover - compiled
    """trec_eval's G, ndcg_rel and Rndcg (gains are the grades; ``j_rel[js:js + n_pos]`` the
    positive ones, best first; ``ideal`` and ``cum_dcg`` cumulative discounted gains)."""
    v = 0.0
    if mid == Measure.G:
        total = 0.0  # results gain so far; cost is the ideal gain so far (1 per rank past it)
        cost = 0.0
        for i in range(n_e):
            g = max(grade_at[i], 0)
            total += g
            cost += j_rel[js + i] if i < n_pos else 1.0
            if g != 0:
                v += g / np.log2(2.0 + cost - total)
        best = 0.0
        for t in range(n_pos):
            best += j_rel[js + t]
        return v / best if best > 0 else 0.0
    if mid == Measure.NDCG_REL:
        if n_pos == 0:
            return 0.0
        found = 0
        for i in range(n_e):
            if grade_at[i] > 0:
                v += cum_dcg[i + 1] / ideal[min(i + 1, n_pos)]
                found += 1
        v += (n_pos - found) * cum_dcg[n_e] / ideal[n_pos]
        return v / n_pos if v > 0 else 0.0
    # Rndcg: the mean of nDCG at each end of a run of equal positive grades in the ideal
    # ranking, and at the end of the ranking when it is longer than the positive judgements
    # plus one (trec_eval's loop has read one document past them when it looks)
    if num_rel == 0 or n_pos == 0:
        return 0.0
    count = 0
    for t in range(1, n_pos + 1):
        if t == n_pos or j_rel[js + t] != j_rel[js + t - 1]:
            v += cum_dcg[min(t, n_e)] / ideal[t]
            count += 1
    if n_e > n_pos + 1:
        v += cum_dcg[n_e] / ideal[n_pos]
        count += 1
    return v / count
