"""Maximal marginal relevance (Carbonell & Goldstein, SIGIR 1998), greedy selection.

``mmr_select(relevance float64 (n,), emb float32 (n, d) L2-normalised, lambda_ float64, top_n int64)``
``-> order int64 (top_n,)``: at each step pick the unselected i maximising
``lambda_ * relevance[i] - (1 - lambda_) * max_{j selected} emb[i] . emb[j]`` (ties: lowest i).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from kolm_search._kernels.sig import f32, f64, i64, ro, rw

__all__ = ["mmr_select", "mmr_select_numpy"]


@njit(rw(i64)(ro(f64), ro(f32, 2), f64, i64), cache=True, nogil=True)
def mmr_select(relevance, emb, lambda_, top_n):  # pragma: no cover - compiled
    n, d = emb.shape
    chosen = np.zeros(n, np.bool_)
    maxsim = np.full(n, -np.inf)
    order = np.empty(top_n, np.int64)
    for step in range(top_n):
        best = -1
        best_score = -np.inf
        for i in range(n):
            if chosen[i]:
                continue
            penalty = maxsim[i] if step > 0 else 0.0
            s = lambda_ * relevance[i] - (1.0 - lambda_) * penalty
            if s > best_score:
                best_score = s
                best = i
        order[step] = best
        chosen[best] = True
        for i in range(n):
            if not chosen[i]:
                dot = 0.0
                for t in range(d):
                    dot += emb[i, t] * emb[best, t]
                if dot > maxsim[i]:
                    maxsim[i] = dot
    return order


def mmr_select_numpy(relevance: npt.NDArray[np.float64], emb: npt.NDArray[np.float32], lambda_: float,
                     top_n: int) -> npt.NDArray[np.int64]:
    """Twin of :func:`mmr_select`."""
    n = emb.shape[0]
    sims = emb.astype(np.float64) @ emb.T.astype(np.float64)
    chosen: list[int] = []
    for _ in range(top_n):
        penalty = sims[:, chosen].max(axis=1) if chosen else np.zeros(n)
        score = lambda_ * relevance - (1.0 - lambda_) * penalty
        score[chosen] = -np.inf
        chosen.append(int(np.argmax(score)))
    return np.asarray(chosen, np.int64)
