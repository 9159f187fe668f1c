"""Reciprocal Rank Fusion for documents: ``rrf_score`` and ``merge_with_rrf``.

RRF (Cormack, Clarke & Buettcher, "Reciprocal rank fusion outperforms Condorcet and
individual rank learning methods", SIGIR 2009) scores a document by
``sum_l w_l / (k + rank_l + 1)`` over the lists ``l`` that hold it, with zero-based ranks.
Both functions here, :class:`~kolm_search.retrievers.composite.CompositeRetriever` and the
DataFrame-level :func:`kolm_search.fuse` run the same kernel,
:func:`kolm_search._kernels.fusion.fuse_groups`, through :func:`fuse_arrays` (one contribution
per entry) or :func:`fuse_rrf_arrays` (RRF straight from ranks).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import numba_threads
from kolm_search._kernels.fusion import fuse_groups, rank_ranges
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.types import SearchDocument

__all__ = ["check_k", "check_weights", "fuse_arrays", "fuse_rrf_arrays", "merge_with_rrf", "rrf_score"]


def check_k(k: object) -> float:
    """Validate the RRF constant: a finite, non-negative real number."""
    if isinstance(k, bool) or not isinstance(k, numbers.Real):
        raise KolmTypeError(f"k must be a non-negative number, got {k!r}")
    value = float(k)
    if not math.isfinite(value) or value < 0:
        raise KolmValueError(f"k must be a finite non-negative number, got {k!r}")
    return value


def check_weights(weights: Sequence[float] | npt.NDArray[np.float64] | None, n_lists: int) -> npt.NDArray[np.float64]:
    """Validate per-list weights (finite, >= 0, one per list); ``None`` means all ones."""
    if weights is None:
        return np.ones(n_lists, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size != n_lists:
        raise KolmValueError(f"weights must have one entry per list ({n_lists}), got {list(weights)!r}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise KolmValueError(f"weights must be finite and non-negative, got {list(weights)!r}")
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
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral):
        raise KolmValueError(f"rank must be a non-negative integer, got {rank!r}")
    if rank < 0:
        raise KolmValueError(f"rank must be a non-negative integer, got {rank!r}")
    return 1.0 / (check_k(k) + int(rank) + 1.0)


def fuse_arrays(
    group_ptr: npt.ArrayLike,
    list_ids: npt.ArrayLike,
    docs: npt.ArrayLike,
    contrib: npt.ArrayLike,
    n_docs: int,
    *,
    mnz: bool = False,
    limit: int | None = None,
    n_threads: int | None = None,
    out: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Fuse coded candidate lists of many queries in one kernel call.

    Parameters
    ----------
    group_ptr : int64 (n_groups + 1,)
        Entry offsets of each query (entries sorted by query).
    list_ids, docs : int64 (n,)
        List id and document code of every entry; inside a query, each list's entries are
        contiguous and best first.
    contrib : float64 (n,)
        Each entry's contribution (e.g. ``w / (k + rank + 1)`` for RRF).
    n_docs : int
        Upper bound (exclusive) of the document codes.
    mnz : bool
        Multiply each fused sum by the number of lists holding the doc (CombMNZ).
    limit : int, optional
        Keep at most ``limit`` documents per query.
    n_threads : int, optional
        Numba threads for this call (restored afterwards).
    out : (int64 (>= n,), float64 (>= n,)), optional
        Output buffers to write into instead of fresh arrays (``out_docs`` and
        ``out_scores`` are then views of them): a batch job that fuses batch after batch
        reuses one pair and faults in no new memory per call. ``len(docs)`` entries always
        suffice; a shorter buffer, a wrong dtype or a buffer that overlaps an input raises.

    Returns
    -------
    out_ptr : int64 (n_groups + 1,)
    out_docs : int64 (m,)
    out_scores : float64 (m,)
        Query g's fused documents are ``out_docs[out_ptr[g]:out_ptr[g+1]]``, by descending
        score, ties in order of first appearance inside the query. Both arrays are
        contiguous; they may be views of a larger buffer (written without a counting pass).
    """
    ct = np.ascontiguousarray(contrib, dtype=np.float64)
    gp, li, dc = _coded(group_ptr, list_ids, docs, ct, "contrib")
    with numba_threads(n_threads) as threads:  # the kernel validates codes and contributions
        return fuse_groups(gp, li, dc, ct, max(int(n_docs), 0), mnz, -1 if limit is None else int(limit),
                           _chunks(gp, threads), out=out)


def fuse_rrf_arrays(
    group_ptr: npt.ArrayLike,
    list_ids: npt.ArrayLike,
    docs: npt.ArrayLike,
    ranks: npt.ArrayLike,
    n_docs: int,
    *,
    k: float = 60,
    weights: Sequence[float] | npt.NDArray[np.float64] | None = None,
    limit: int | None = None,
    n_threads: int | None = None,
    out: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """RRF of coded candidate lists straight from their ranks: :func:`fuse_arrays` with
    ``contrib = weights[list_ids] / (k + ranks + 1)``, bit-identical to it, without the
    contribution array: the kernel looks each entry's value up in a (n_lists, max rank + 1)
    table (one pass and one large array fewer; ranks so sparse that the table would outgrow
    the entries take the contribution array).

    Parameters
    ----------
    group_ptr, list_ids, docs, n_docs, limit, n_threads, out
        As in :func:`fuse_arrays`; list ids index ``weights``.
    ranks : int64 (n,)
        Zero-based rank of every entry in its list (non-negative).
    k : float, default 60
    weights : sequence of float, optional
        One weight per list id (``max(list_ids) + 1`` of them); default all ones.

    Returns
    -------
    ``(out_ptr, out_docs, out_scores)`` as :func:`fuse_arrays`.
    """
    rk = np.ascontiguousarray(ranks, dtype=np.int64)
    gp, li, dc = _coded(group_ptr, list_ids, docs, rk, "ranks")
    kp1 = check_k(k) + 1.0
    lim = -1 if limit is None else int(limit)
    with numba_threads(n_threads) as threads:
        r_min, r_max, l_min, l_max = rank_ranges(rk, li, 4 * threads)
        if r_min < 0:
            raise KolmValueError(f"ranks must be non-negative, got {r_min}")
        if l_min < 0:
            raise KolmValueError(f"list_ids must be non-negative, got {l_min}")
        n_lists, stride = l_max + 1 if li.size else 1, r_max + 1 if rk.size else 1
        w = check_weights(weights, n_lists if weights is None else len(weights))
        if w.size < n_lists:
            raise KolmValueError(f"weights must have one entry per list ({n_lists}), got {list(w)!r}")
        if n_lists * stride > max(rk.size, 1 << 16):  # sparse ranks: a table would outgrow the data
            contrib = np.divide(w[li], np.add(rk, kp1, dtype=np.float64))
            return fuse_groups(gp, li, dc, contrib, max(int(n_docs), 0), False, lim, _chunks(gp, threads), out=out)
        # w / (k + rank + 1) for every (list, rank): the same two float64 operations per value
        table = np.divide(w[:n_lists, None], np.add(np.arange(stride), kp1, dtype=np.float64)[None, :])
        return fuse_groups(gp, li, dc, np.zeros(0, np.float64), max(int(n_docs), 0), False, lim,
                           _chunks(gp, threads), ranks=rk, rrf_table=table, out=out)


def _coded(group_ptr: npt.ArrayLike, list_ids: npt.ArrayLike, docs: npt.ArrayLike, values: npt.NDArray[np.generic],
           what: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Coded arrays as contiguous int64, their shapes checked against each other."""
    gp = np.ascontiguousarray(group_ptr, dtype=np.int64)
    li = np.ascontiguousarray(list_ids, dtype=np.int64)
    dc = np.ascontiguousarray(docs, dtype=np.int64)
    n = dc.shape[0]
    if gp.ndim != 1 or gp.size < 1 or gp[0] != 0 or gp[-1] != n or np.any(gp[1:] < gp[:-1]):
        raise KolmValueError("group_ptr must start at 0, end at len(docs) and never decrease")
    if li.shape != (n,) or values.shape != (n,):
        raise KolmValueError(f"list_ids, docs and {what} must have one shape, got {li.shape}, {dc.shape}, {values.shape}")
    return gp, li, dc


def _chunks(gp: npt.NDArray[np.int64], threads: int) -> int:
    """Chunks of queries for the fusion kernel: one per thread. Numba hands each thread one
    contiguous share of a ``prange`` (static schedule), so more chunks balance nothing, while
    each chunk allocates and fills its own mark array (8 bytes a code): 4 chunks a thread
    measured ~11 % slower over a 100,000-code range."""
    n_groups = gp.size - 1
    return 1 if n_groups < 64 else min(n_groups, max(1, threads))


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
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 0:
        raise KolmValueError(f"limit must be a non-negative integer, got {limit!r}")
    if not isinstance(doc_map, Mapping):
        raise KolmTypeError(f"doc_map must be a dict id -> SearchDocument, got {type(doc_map).__name__}")
    w = check_weights(weights, len(ranked_lists))
    codes: dict[str, int] = {}
    list_col: list[int] = []
    doc_col: list[int] = []
    contrib: list[float] = []
    for li, docs in enumerate(ranked_lists):
        for rank, doc in enumerate(docs):
            if not isinstance(doc, SearchDocument):
                raise KolmTypeError(
                    f"ranked_lists[{li}][{rank}] is {type(doc).__name__}, expected SearchDocument"
                )
            code = codes.setdefault(doc.id, len(codes))
            if doc.id not in doc_map:
                doc_map[doc.id] = doc
            list_col.append(li)
            doc_col.append(code)
            contrib.append(w[li] / (kk + rank + 1.0))
    if not doc_col or limit == 0:
        return []
    ids = list(codes)
    _, out_docs, out_scores = fuse_arrays(
        np.array([0, len(doc_col)]), list_col, doc_col, contrib, len(ids), limit=int(limit)
    )
    return [
        replace(doc_map[ids[int(c)]], score=float(s)) for c, s in zip(out_docs, out_scores, strict=True)
    ]
