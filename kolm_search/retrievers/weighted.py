"""Weighted queries for BM25: each query a bag of analysed terms with a weight per term.

A weighted query scores ``sum_t w_t * bm25(t, d)`` (Lucene's ``BoostQuery``, Terrier's
``term^w``), so pseudo-relevance feedback (:mod:`kolm_search.retrievers.feedback`) can pass its
expanded queries straight to the kernel. Terms are the analyser's output (vocabulary entries),
never re-tokenised: a weighted query is ``{"stem": weight}``, not text.

Rules shared by :meth:`BM25Retriever.score_weighted` and :meth:`BM25Retriever.score_terms`:
weights must be finite and ``>= 0`` (else :class:`KolmValueError` naming the query and the term);
a zero weight and a term absent from the index are dropped (they could only match documents
with score 0); a term given twice in CSR form counts twice (repeats sum, as in a text query).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["check_weighted", "encode_weighted"]

_F32_MAX = float(np.finfo(np.float32).max)


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
