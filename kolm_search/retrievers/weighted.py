"""Weighted queries for BM25: each query a bag of analysed terms with a weight per term.

A weighted query scores ``sum_t w_t * bm25(t, d)`` (Lucene's ``BoostQuery``, Terrier's
``term^w``), so pseudo-relevance feedback (:mod:`kolm_search.retrievers.feedback`) can pass its
expanded queries straight to the kernel. Terms are the analyser's output (vocabulary entries),
never re-tokenised: a weighted query is ``{"stem": weight}``, not text.

Rules shared by :meth:`BM25Retriever.score_weighted` and :meth:`BM25Retriever.score_terms`:
weights must be finite and ``>= 0`` (else :class:`KolmValueError` naming the query and the term);
a zero weight and a term absent from the index are dropped (they could only match documents
with score 0); a term given twice in CSR form counts twice (repeats sum, as in a text query).

Scores are float32 sums, so a query whose weights could carry a score past float32's range
is refused (:func:`check_bound`): for every query, ``sum_t w_t * (max posting weight of t +
|non-occurrence constant of t|)``, computed in float64, must stay within half of float32's
maximum (:data:`SCORE_BOUND`, a margin for the float32 rounding of the sum). No weighted query
scores ``inf`` or ``nan``; the error names the query, its heaviest term and weight, and the bound.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["SCORE_BOUND", "check_bound", "check_weighted", "encode_weighted", "term_bounds"]

_F32_MAX = float(np.finfo(np.float32).max)
SCORE_BOUND = _F32_MAX / 2  # a weighted query's largest possible score must stay below this


def encode_weighted(vocab_index: Mapping[str, int], queries: Sequence[Mapping[str, float]],
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Weighted queries (analysed term -> weight) as CSR ``(ptr int64 (m + 1,), ids int64 (nnz,),
    weights float32 (nnz,))`` over the index's term ids.

    Unknown terms and zero weights are dropped. Raises :class:`KolmTypeError` for a query that
    is not a mapping or a term that is not a string, :class:`KolmValueError` for a weight that
    is not a finite number in ``[0, float32 max]`` (naming the query position and the term).
    """
    if isinstance(queries, Mapping) or isinstance(queries, (str, bytes)):
        raise KolmTypeError(f"weighted queries must be a sequence of mappings term -> weight, got {type(queries).__name__}")
    ptr, ids, weights = [0], list[int](), list[float]()
    for i, query in enumerate(queries):
        if not isinstance(query, Mapping):
            raise KolmTypeError(f"weighted query {i} must be a mapping term -> weight, got {type(query).__name__}")
        for term, weight in query.items():
            if not isinstance(term, str):
                raise KolmTypeError(f"weighted query {i}: term {term!r} is not a string")
            if (isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight)
                    or not 0 <= weight <= _F32_MAX):
                raise KolmValueError(f"weighted query {i}: term {term!r} has weight {weight!r}; "
                                     "expected a finite number >= 0 (at most float32's maximum)")
            tid = vocab_index.get(term)
            if tid is not None and weight > 0:
                ids.append(tid)
                weights.append(float(weight))
        ptr.append(len(ids))
    return np.asarray(ptr, np.int64), np.asarray(ids, np.int64), np.asarray(weights, np.float32)


def check_weighted(q_ptr: npt.ArrayLike, q_ids: npt.ArrayLike, q_weights: npt.ArrayLike, n_terms: int,
                   vocab: Sequence[str] | None = None,
                   ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Checked CSR weighted queries, zero weights removed.

    Parameters
    ----------
    q_ptr : int (m + 1,)
        Query ``q``'s entries are ``[q_ptr[q], q_ptr[q + 1])``.
    q_ids : int (nnz,)
        Term ids in ``[0, n_terms)``.
    q_weights : float (nnz,)
        Finite, ``>= 0``; cast to float32 (the kernel's precision) before the check, so a
        weight that overflows float32 is refused too.
    vocab : sequence of str, optional
        Names the term in error messages.

    Raises
    ------
    KolmValueError
        Naming the query (row) and the term of the first bad entry, or the bad pointer.
    """
    ptr = np.asarray(q_ptr)
    ids = np.asarray(q_ids)
    if ids.ndim == 1 and ids.size == 0:  # [] is float64 to numpy: no queries, or empty ones
        ids = ids.astype(np.int64)
    if ptr.ndim != 1 or len(ptr) < 1 or ptr.dtype.kind not in "iu" or ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise KolmValueError(f"weighted queries need 1-D integer q_ptr and q_ids, got {ptr.dtype}{ptr.shape} "
                             f"and {ids.dtype}{ids.shape}")
    ptr, ids = ptr.astype(np.int64), ids.astype(np.int64)
    if ptr[0] != 0 or ptr[-1] != len(ids) or np.any(np.diff(ptr) < 0):
        raise KolmValueError(f"q_ptr must start at 0, never decrease and end at len(q_ids) = {len(ids)}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.asarray(q_weights, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise KolmValueError(f"q_weights must be numbers (one float per term id): {exc}") from exc
    if w.shape != ids.shape:
        raise KolmValueError(f"q_weights has shape {w.shape}, expected one weight per term id {ids.shape}")
    bad_id = (ids < 0) | (ids >= n_terms)
    bad = bad_id | ~np.isfinite(w) | (w < 0)
    if bad.any():
        j = int(np.argmax(bad))
        q = int(np.searchsorted(ptr, j, side="right") - 1)
        if bad_id[j]:
            raise KolmValueError(f"weighted query {q}: term id {int(ids[j])} is outside the vocabulary [0, {n_terms})")
        term = repr(vocab[int(ids[j])]) if vocab is not None else f"id {int(ids[j])}"
        raise KolmValueError(f"weighted query {q}: term {term} has weight {np.asarray(q_weights).ravel()[j]!r}; "
                             "expected a finite number >= 0 (float32)")
    keep = w > 0
    if keep.all():
        return ptr, ids, np.ascontiguousarray(w)
    rows = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    new_ptr = np.zeros_like(ptr)
    np.cumsum(np.bincount(rows[keep], minlength=len(ptr) - 1), out=new_ptr[1:])
    return new_ptr, ids[keep], np.ascontiguousarray(w[keep])


def term_bounds(t_ptr: npt.ArrayLike, t_w: npt.ArrayLike, nonocc: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The largest score a unit weight of each term can add, float64 (V,): its largest
    posting weight in absolute value plus its non-occurrence constant's (``t_ptr`` int (V + 1,),
    ``t_w`` float (nnz,), ``nonocc`` float (V,))."""
    ptr = np.asarray(t_ptr, dtype=np.int64)
    n_terms = len(ptr) - 1
    weights = np.abs(np.asarray(t_w, dtype=np.float64))
    out = np.zeros(n_terms, np.float64)
    has = np.diff(ptr) > 0
    if has.any():
        out[has] = np.maximum.reduceat(weights, ptr[:-1][has])  # non-empty segments only
    return out + np.abs(np.asarray(nonocc, dtype=np.float64))


def check_bound(q_ptr: npt.NDArray[np.int64], q_ids: npt.NDArray[np.int64], q_weights: npt.NDArray[np.float32],
                bounds: npt.NDArray[np.float64], vocab: Sequence[str] | None = None) -> None:
    """Refuse weighted queries whose score could leave float32's range.

    Parameters
    ----------
    q_ptr, q_ids, q_weights
        Checked CSR weighted queries (:func:`check_weighted`).
    bounds : float64 (V,)
        :func:`term_bounds` of the index.

    Raises
    ------
    KolmValueError
        Naming the first query whose ``sum w * bound`` exceeds :data:`SCORE_BOUND`, its
        heaviest term (by ``w * bound``), that term's weight, and the bound.
    """
    if not len(q_ids):
        return
    contrib = q_weights.astype(np.float64) * bounds[q_ids]
    padded = np.append(contrib, 0.0)
    totals = np.where(np.diff(q_ptr) > 0, np.add.reduceat(padded, q_ptr[:-1]), 0.0)
    over = totals > SCORE_BOUND
    if not over.any():
        return
    q = int(np.argmax(over))
    lo, hi = int(q_ptr[q]), int(q_ptr[q + 1])
    j = lo + int(np.argmax(contrib[lo:hi]))
    term = repr(vocab[int(q_ids[j])]) if vocab is not None else f"id {int(q_ids[j])}"
    raise KolmValueError(
        f"weighted query {q}: term {term} has weight {float(q_weights[j]):.7g}; the query's scores could reach "
        f"{float(totals[q]):.4g} (sum of weight x largest posting weight per term), above the bound "
        f"{SCORE_BOUND:.4g} (half of float32's maximum): scale the weights down")
