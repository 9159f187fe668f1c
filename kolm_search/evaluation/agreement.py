"""How much two runs agree, query by query: rank-biased overlap and Kendall's tau.

Each run is ranked the trec_eval way (score descending, compared as float32, ties by document
id descending), as everywhere in :mod:`kolm_search.evaluation`.

- **RBO** (Webber, Moffat & Zobel, TOIS 2010): the extrapolated ``RBO_ext`` of their eq. 32,
  for rankings of different lengths too: with ``X_d`` the documents both top-``d`` lists share,
  ``(1 - p) / p * sum over d of X_d / d * p**d`` plus the extrapolation of the agreement at the
  deeper list's end. ``p`` is the persistence (the expected depth is ``1 / (1 - p)``); 1 for two
  equal rankings, 0 for disjoint ones.
- **Kendall's tau** (``scipy.stats.kendalltau``, tau-b) between the two runs' ranks of the
  documents both retrieved, with its p-value; NaN where they share fewer than two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.engine import ids
from kolm_search.engine.runs import as_run, check_ids, numeric_column
from kolm_search.errors import KolmValueError

__all__ = ["compare_runs", "rbo"]


def rbo(a: Sequence[Any], b: Sequence[Any], p: float = 0.9) -> float:
    """Extrapolated rank-biased overlap of two rankings (sequences of distinct ids, best
    first), Webber et al.'s eq. 32 for uneven lengths; NaN when both are empty."""
    if not 0.0 < p < 1.0:
        raise KolmValueError(f"the persistence p must be in (0, 1), got {p!r}")
    first, second = list(a), list(b)
    short, long = (first, second) if len(first) <= len(second) else (second, first)
    s, n = len(short), len(long)
    if n == 0:
        return float("nan")
    if s == 0:
        return 0.0
    _, codes = np.unique(np.asarray(long + short, dtype=object), return_inverse=True)
    in_long = np.zeros(len(codes), bool)
    seen_short = np.zeros(len(codes), bool)
    overlap = np.zeros(n + 1, np.int64)  # X_d: documents of short[:d] found in long[:d]
    x = 0
    for d in range(1, n + 1):
        lc = codes[d - 1]
        in_long[lc] = True
        if seen_short[lc]:
            x += 1
        if d <= s:
            sc = codes[n + d - 1]
            seen_short[sc] = True
            if in_long[sc]:
                x += 1
        overlap[d] = x
    depth = np.arange(1, n + 1)
    weights = p ** depth
    x_s, x_l = overlap[s], overlap[n]
    total = (overlap[1:] / depth * weights).sum()
    tail = depth > s
    total += (x_s * (depth[tail] - s) / (s * depth[tail]) * weights[tail]).sum()
    return float((1 - p) / p * total + ((x_l - x_s) / n + x_s / s) * p ** n)


def _ranked(run: Any, what: str) -> dict[str, list[str]]:
    from kolm_search.evaluation.metrics import ranking_order

    frame = as_run(run, what=what)
    check_ids(frame, what)
    score32 = numeric_column(frame, "score", what).astype(np.float32)
    (q,), queries = ids.encode([frame["qid"]], names=[f"{what} qid"], as_str=True)
    docs = ids.as_strings(frame["doc_id"])
    order = ranking_order(q, score32, docs)
    doc_text = np.asarray(docs.astype(str), dtype=object)[order]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(q, minlength=len(queries)))])  # rows sorted by query
    out: dict[str, list[str]] = {}
    for code in np.flatnonzero(np.diff(bounds)).tolist():
        ranking = doc_text[bounds[code]:bounds[code + 1]].tolist()
        if len(set(ranking)) != len(ranking):
            raise KolmValueError(f"{what} has a duplicate document for query {queries[code]!r}")
        out[str(queries[code])] = ranking
    return out


def compare_runs(run_a: Any, run_b: Any, *, p: float = 0.9, depth: int | None = None) -> pd.DataFrame:
    """Per-query agreement of two runs (of the queries both answer).

    Parameters
    ----------
    run_a, run_b : runs (DataFrames ``qid, doc_id, score``, or anything :func:`evaluate` takes)
    p : float
        RBO's persistence, in (0, 1).
    depth : int, optional
        Compare the top ``depth`` of each ranking only.

    Returns
    -------
    DataFrame
        One row per query, sorted by ``qid`` (as strings): ``qid, rbo, kendall_tau,
        kendall_p_value, common`` (documents both retrieved, within the depth), ``n_a``,
        ``n_b``. ``.attrs["p"]`` and ``.attrs["depth"]`` say how it was computed.
    """
    from scipy import stats

    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise KolmValueError(f"depth must be a positive integer, got {depth!r}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
        raise KolmValueError(f"the persistence p must be in (0, 1), got {p!r}")
    a, b = _ranked(run_a, "run_a"), _ranked(run_b, "run_b")
    rows = []
    for qid in sorted(set(a) & set(b)):
        ra, rb = a[qid][:depth], b[qid][:depth]
        position = {d: i for i, d in enumerate(rb)}
        common = [d for d in ra if d in position]
        if len(common) >= 2:
            tau, p_value = stats.kendalltau(np.arange(len(common)), [position[d] for d in common])
        else:
            tau = p_value = float("nan")
        rows.append({"qid": qid, "rbo": rbo(ra, rb, p), "kendall_tau": float(tau), "kendall_p_value": float(p_value),
                     "common": len(common), "n_a": len(ra), "n_b": len(rb)})
    table = pd.DataFrame(rows, columns=["qid", "rbo", "kendall_tau", "kendall_p_value", "common", "n_a", "n_b"])
    table.attrs.update({"p": float(p), "depth": depth})
    return table
