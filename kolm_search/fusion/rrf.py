"""Reciprocal Rank Fusion on documents: the spec's ``rrf_score`` and ``mergeWithRrf``.

RRF (Cormack, Clarke & Buettcher, "Reciprocal rank fusion outperforms Condorcet and individual
rank learning methods", SIGIR 2009) scores a document by ``sum_l w_l / (k + rank_l + 1)`` over
the lists ``l`` that hold it, with zero-based ranks. :func:`merge_with_rrf` fuses the few lists
of one query as ``SearchDocument``s, in plain Python; batches of many queries go through
:func:`kolm_search.fusion.fuse` / :func:`~kolm_search.fusion.fuse_frame` and the fusion kernel,
with the same arithmetic and the same tie order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from kolm_search._params import mapping, non_negative_int, real
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["check_k", "check_weights", "merge_with_rrf", "rrf_score"]


def check_k(k: object) -> float:
    """The RRF constant as a float: a finite, non-negative real number, else an error."""
    value: float = real("k", k, low=0.0)
    return value


def check_weights(weights: Sequence[float] | npt.NDArray[np.float64] | None, n_lists: int) -> npt.NDArray[np.float64]:
    """Per-list weights as float64 (n_lists,): finite, >= 0, one per list; ``None`` is all ones."""
    if weights is None:
        return np.ones(n_lists, dtype=np.float64)
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise KolmValueError(f"weights must be numbers, got {weights!r}") from exc
    if w.ndim != 1 or w.size != n_lists:
        raise KolmValueError(f"weights must have one entry per list ({n_lists}), got {list(np.atleast_1d(w))!r}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise KolmValueError(f"weights must be finite and non-negative, got {list(w)!r}")
    return w


def rrf_score(rank: int, k: float = 60) -> float:
    """RRF score of a document at a zero-based ``rank``: ``1 / (k + rank + 1)``.

    Parameters
    ----------
    rank : int
        Zero-based rank position (0 is best). A negative or non-integer rank is an error.
    k : float, default 60
        Smoothing constant, ``>= 0`` (60 is the paper's default).

    Returns
    -------
    float
        A score in ``(0, 1]``; higher is better.
    """
    return 1.0 / (check_k(k) + non_negative_int("rank", rank) + 1.0)


def merge_with_rrf(
    ranked_lists: Sequence[Sequence[SearchDocument]],
    doc_map: dict[str, SearchDocument],
    limit: int,
    k: float = 60,
    *,
    weights: Sequence[float] | None = None,
) -> list[SearchDocument]:
    """Merge ranked document lists into one deduplicated list by RRF.

    Parameters
    ----------
    ranked_lists : list of list of SearchDocument
        One list per retriever, best first (index 0 is rank 0). A document repeated inside
        one list counts once, at its best rank.
    doc_map : dict of str to SearchDocument
        ``id -> document`` map, extended in place; the first document seen for an id wins.
    limit : int
        Maximum number of documents returned (``>= 0``).
    k : float, default 60
        RRF smoothing constant.
    weights : list of float, optional
        One weight per list (weighted RRF); all ones by default.

    Returns
    -------
    list of SearchDocument
        Copies of the documents in ``doc_map``, by descending fused score (carried in
        ``score``); ties keep first-appearance order (list order, then rank).
    """
    kk = check_k(k)
    limit = non_negative_int("limit", limit)
    mapping("doc_map", doc_map)
    w = check_weights(weights, len(ranked_lists))
    fused: dict[str, float] = {}  # insertion order = first appearance
    for li, docs in enumerate(ranked_lists):
        seen: set[str] = set()
        for rank, doc in enumerate(docs):
            if not isinstance(doc, SearchDocument):
                raise KolmTypeError(f"ranked_lists[{li}][{rank}] is {type(doc).__name__}, expected SearchDocument")
            if doc.id not in doc_map:
                doc_map[doc.id] = doc
            if doc.id in seen:
                continue
            seen.add(doc.id)
            fused[doc.id] = fused.get(doc.id, 0.0) + w[li] / (kk + rank + 1.0)
    best = sorted(fused.items(), key=lambda item: -item[1])[: int(limit)]  # stable: ties by first appearance
    return [replace(doc_map[i], score=float(s)) for i, s in best]
