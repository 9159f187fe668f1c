"""Per-query normalisation of learning-to-rank features (``LTRReranker(query_norm=...)``).

A raw retrieval score is comparable within one query's candidates, not across queries nor
across collections (BM25's scale grows with the query's length and the collection's term
statistics). A tree ensemble splits a feature at one threshold for every query, so a model
fitted on raw scores learns thresholds that hold for its training queries only. Each
transform below maps every feature column within each query's candidate list:

- ``"none"``: the raw features;
- ``"minmax"``: ``(x - min) / (max - min)`` over the query's candidates (0 where they are all
  equal);
- ``"zscore"``: ``(x - mean) / std`` over the query's candidates (0 where ``std`` is 0);
- ``"rank"``: the candidate's rank by the column, descending, from 0 (tied values share the
  smallest rank): a tree's splits on it are splits on reciprocal ranks too (any monotone map of
  a feature splits the same way);
- ``"minmax+rank"``: both, side by side (twice the columns).

A column constant within every query (a query's length) becomes 0 under each transform but
``"none"``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmValueError

__all__ = ["QUERY_NORMS", "normalise_per_query"]

QUERY_NORMS = ("minmax", "minmax+rank", "none", "rank", "zscore")


def _check(x: npt.NDArray[np.float64], group: npt.NDArray[np.int64], how: str) -> None:
    if how not in QUERY_NORMS:
        raise KolmValueError(f"query_norm must be one of {QUERY_NORMS}, got {how!r}")
    if x.ndim != 2 or group.shape != (x.shape[0],):
        raise KolmValueError(f"normalise_per_query: features {x.shape} and groups {group.shape} do not match")


def _minmax(x: npt.NDArray[np.float64], inv: npt.NDArray[np.intp], n: int) -> npt.NDArray[np.float64]:
    lo = np.full((n, x.shape[1]), np.inf)
    hi = np.full((n, x.shape[1]), -np.inf)
    np.minimum.at(lo, inv, x)
    np.maximum.at(hi, inv, x)
    span = (hi - lo)[inv]
    safe = np.where(span > 0, span, 1.0)
    return np.where(span > 0, (x - lo[inv]) / safe, 0.0)


def _zscore(x: npt.NDArray[np.float64], inv: npt.NDArray[np.intp], n: int) -> npt.NDArray[np.float64]:
    count = np.bincount(inv, minlength=n).astype(np.float64)[:, None]
    total = np.zeros((n, x.shape[1]))
    np.add.at(total, inv, x)
    mean = total / count
    dev = x - mean[inv]
    sq = np.zeros((n, x.shape[1]))
    np.add.at(sq, inv, dev * dev)
    std = np.sqrt(sq / count)[inv]
    return np.where(std > 0, dev / np.where(std > 0, std, 1.0), 0.0)


def _rank(x: npt.NDArray[np.float64], inv: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
    out = np.empty_like(x)
    idx = np.arange(len(inv))
    for j in range(x.shape[1]):
        order = np.lexsort((-x[:, j], inv))
        g, v = inv[order], x[order, j]
        new_group = np.r_[True, g[1:] != g[:-1]]
        new_value = new_group | np.r_[True, v[1:] != v[:-1]]
        start = np.maximum.accumulate(np.where(new_group, idx, 0))
        first_tied = np.maximum.accumulate(np.where(new_value, idx, 0))
        out[order, j] = first_tied - start
    return out


def normalise_per_query(x: npt.NDArray[np.float64], group: npt.NDArray[np.int64],
                        how: str) -> npt.NDArray[np.float64]:
    """The features ``x`` (n_candidates, n_features; float64) normalised within each query.

    Parameters
    ----------
    x : ndarray (n, f) of float64
    group : ndarray (n,) of int
        The query of each row (any order; rows of one query need not be adjacent).
    how : one of :data:`QUERY_NORMS`

    Returns
    -------
    ndarray (n, f) of float64, or (n, 2 f) for ``"minmax+rank"``
    """
    x = np.asarray(x, dtype=np.float64)
    group = np.asarray(group)
    _check(x, group, how)
    if how == "none" or not len(x):
        return x if how != "minmax+rank" else np.hstack([x, x])
    _, inv = np.unique(group, return_inverse=True)
    inv = inv.reshape(-1)
    n = int(inv.max()) + 1
    if how == "minmax":
        return _minmax(x, inv, n)
    if how == "zscore":
        return _zscore(x, inv, n)
    if how == "rank":
        return _rank(x, inv)
    return np.hstack([_minmax(x, inv, n), _rank(x, inv)])
