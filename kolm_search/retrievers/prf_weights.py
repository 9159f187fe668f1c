"""Pseudo-relevance feedback weights (RM3, Bo1, KL) as array functions, for a batch at once.

Inputs are sparse matrices over the index's terms (``V`` columns): the term counts of the
feedback documents (one row per document, ``owner`` giving its query) and each query's own
term counts. Outputs are weighted queries, one CSR row per query (column -> weight), ready for
:meth:`~kolm_search.retrievers.bm25.BM25Retriever.score_weighted`. Ties in every top-``k``
selection go to the smaller column (Anserini's and Terrier's hash order is not reproducible),
and sums along a row run in column order: :class:`~kolm_search.retrievers.feedback.FeedbackRetriever`
numbers the columns in the terms' text (code-point) order, so ties go to the term first in that
order and no weight depends on how the vocabulary happens to be numbered.
A query is its indexed terms: a term the index lacks can match nothing and is left out of the
query's normalisation and term count (Anserini and Terrier keep it there).

RM3 (Abdul-Jaleel et al., TREC 2004), as Anserini's ``Rm3Reranker`` (fbDocs 10, fbTerms 10,
originalQueryWeight 0.5):

1. each feedback document ``d`` keeps its ``fb_terms`` most frequent *eligible* terms
   (Anserini: 2 to 20 characters of ``[a-z0-9]``, here Unicode letters and digits; document
   frequency at most 10% of the collection), ``P(t|d) = tf(t, d) / sum of the kept tf``;
2. ``R(t) = sum_d P(t|d) * score(d)`` with the raw first-pass scores; the ``fb_terms`` best
   terms are kept and ``R`` is scaled to sum 1;
3. ``q'(t) = w * q(t) + (1 - w) * R(t)``, ``q`` the query's term counts scaled to sum 1.

Bo1 and KL (Amati's divergence from randomness), as Terrier's ``QueryExpansion`` with
``DFRBagExpansionTerms`` and its defaults (``expansion.documents`` 3, ``expansion.terms`` 10,
``expansion.mindocuments`` 2, ``parameter.free.expansion`` true); the feedback set is one bag:
``tfx`` a term's count in it, ``T`` its length, ``F`` the term's collection frequency, ``N``
documents, ``C`` tokens in the collection, logarithms base 2:

- Bo1: ``w = tfx log2((1 + Pn) / Pn) + log2(1 + Pn)``, ``Pn = F / N``;
- KL: ``w = Px log2(Px / Pc)`` if ``Px >= Pc`` else 0, ``Px = tfx / T``, ``Pc = F / C``;
- with two or more feedback documents, a term in fewer than 2 of them gets ``w = 0`` unless
  it is a query term;
- parameter-free normalisation: with ``m`` the ``tfx`` of the best term, Bo1 divides by
  ``m log2((1 + f) / f) + log2(1 + f)``, ``f = m / N``; KL by ``m log2(C / T) / T``;
- the ``max(fb_terms, query terms)`` best terms are added to the query's term counts scaled
  to a maximum of 1 (a query term among them gets the sum).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kolm_search.errors import KolmValueError

__all__ = ["bo1_weights", "dfr_expand", "feedback_counts", "kl_weights", "rm3_expand", "rm3_weights", "row_topk"]



def _ptr(rows: npt.NDArray[np.int64], n_rows: int) -> npt.NDArray[np.int64]:
    ptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=ptr[1:])
    return ptr


def _rows(m: sp.csr_matrix) -> npt.NDArray[np.int64]:
    return np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))


def _canonical(m: sp.spmatrix) -> sp.csr_matrix:
    out = sp.csr_matrix(m, dtype=np.float64, copy=True)
    out.sum_duplicates()
    out.eliminate_zeros()
    return out


def row_topk(m: sp.spmatrix, k: int | npt.ArrayLike) -> sp.csr_matrix:
    """The ``k`` largest entries of each row (``k`` int or int (n_rows,)), ties to the smaller column."""
    m = _canonical(m)
    rows = _rows(m)
    order = np.lexsort((m.indices, -m.data, rows))
    rank = np.arange(m.nnz) - m.indptr[rows[order]]
    limit = np.broadcast_to(np.asarray(k, dtype=np.int64), (m.shape[0],))
    keep = np.sort(order[rank < limit[rows[order]]])
    return sp.csr_matrix((m.data[keep], m.indices[keep], _ptr(rows[keep], m.shape[0])), shape=m.shape)


def _scale_rows(m: sp.csr_matrix, by: npt.NDArray[np.float64]) -> sp.csr_matrix:
    """Each row divided by ``by[row]`` (rows with ``by <= 0`` emptied)."""
    ok = by > 0
    factor = np.where(ok, 1.0 / np.where(ok, by, 1.0), 0.0)
    out = m.copy()
    out.data = out.data * factor[_rows(out)]
    out.eliminate_zeros()
    return out


def _row_max(m: sp.csr_matrix) -> npt.NDArray[np.float64]:
    return np.asarray(m.max(axis=1).todense(), dtype=np.float64).ravel() if m.shape[1] else np.zeros(m.shape[0])


def rm3_weights(fb_tf: sp.spmatrix, owner: npt.ArrayLike, scores: npt.ArrayLike, n_queries: int, *,
                fb_terms: int = 10, eligible: npt.NDArray[np.bool_] | None = None) -> sp.csr_matrix:
    """Relevance models ``R`` (steps 1-2 of the module doc): float64 CSR (n_queries, V), rows sum to 1.

    Parameters
    ----------
    fb_tf : sparse (n_fb, V)
        Term counts of the feedback documents.
    owner : int (n_fb,)
        Query row of each feedback document.
    scores : float (n_fb,)
        Their first-pass retrieval scores (non-negative).
    eligible : bool (V,), optional
        Terms allowed as feedback terms (default: all).
    """
    x = _canonical(fb_tf)
    own = np.asarray(owner, dtype=np.int64)
    sc = np.asarray(scores, dtype=np.float64)
    if own.shape != (x.shape[0],) or sc.shape != (x.shape[0],):
        raise KolmValueError(f"owner and scores need one entry per feedback row ({x.shape[0]}), "
                             f"got {own.shape} and {sc.shape}")
    if eligible is not None:
        x.data = x.data * np.asarray(eligible, dtype=bool)[x.indices]
        x.eliminate_zeros()
    x = row_topk(x, fb_terms)
    norms = np.asarray(x.sum(axis=1), dtype=np.float64).ravel()
    use = norms > 0.001  # Anserini skips empty documents
    weight = np.where(use, sc / np.where(use, norms, 1.0), 0.0)
    a = sp.csr_matrix((weight, (own, np.arange(x.shape[0]))), shape=(n_queries, x.shape[0]))
    rm = row_topk(a @ x, fb_terms)
    return _scale_rows(rm, np.asarray(rm.sum(axis=1), dtype=np.float64).ravel())


def rm3_expand(query_tf: sp.spmatrix, rm: sp.spmatrix, original_weight: float = 0.5) -> sp.csr_matrix:
    """``w * q + (1 - w) * R`` with ``q`` the query counts scaled to sum 1 (step 3): CSR (n_queries, V)."""
    q = _canonical(query_tf)
    q = _scale_rows(q, np.asarray(q.sum(axis=1), dtype=np.float64).ravel())
    return _canonical(original_weight * q + (1.0 - original_weight) * _canonical(rm))


def feedback_counts(fb_tf: sp.spmatrix, owner: npt.ArrayLike, n_queries: int,
                    ) -> tuple[sp.csr_matrix, sp.csr_matrix, npt.NDArray[np.int64]]:
    """The feedback set of each query as one bag: ``tfx`` (n_queries, V) summed counts, ``df``
    (same sparsity) number of its feedback documents holding the term, ``n_fb`` (n_queries,)."""
    x = _canonical(fb_tf)
    own = np.asarray(owner, dtype=np.int64)
    if own.shape != (x.shape[0],):
        raise KolmValueError(f"owner needs one entry per feedback row ({x.shape[0]}), got {own.shape}")
    n_terms = x.shape[1]
    keys, inverse = np.unique(own[_rows(x)] * n_terms + x.indices, return_inverse=True)
    tfx = np.bincount(inverse, weights=x.data, minlength=len(keys))
    df = np.bincount(inverse, minlength=len(keys)).astype(np.float64)
    rows, cols = keys // max(n_terms, 1), keys % max(n_terms, 1)
    ptr = _ptr(rows, n_queries)
    shape = (n_queries, n_terms)
    return (sp.csr_matrix((tfx, cols, ptr), shape=shape), sp.csr_matrix((df, cols.copy(), ptr.copy()), shape=shape),
            np.bincount(own, minlength=n_queries))


def _coll_freq(tfx: sp.csr_matrix, coll_freq: npt.ArrayLike) -> npt.NDArray[np.float64]:
    freq = np.asarray(coll_freq, dtype=np.float64)[tfx.indices]
    if np.any(freq < tfx.data):
        j = int(np.argmax(freq < tfx.data))
        raise KolmValueError(f"term id {int(tfx.indices[j])} occurs {tfx.data[j]:g} times in the feedback "
                             f"documents but {freq[j]:g} times in the collection")
    return freq


def bo1_weights(tfx: sp.csr_matrix, coll_freq: npt.ArrayLike, n_docs: int) -> sp.csr_matrix:
    """Bo1 weight of every feedback term (``tfx`` from :func:`feedback_counts`; ``coll_freq``
    float (V,) collection frequencies; ``n_docs`` documents): CSR of ``tfx``'s sparsity."""
    pn = _coll_freq(tfx, coll_freq) / float(n_docs)
    out = tfx.copy()
    out.data = tfx.data * np.log2((1.0 + pn) / pn) + np.log2(1.0 + pn)
    return out


def kl_weights(tfx: sp.csr_matrix, fb_len: npt.ArrayLike, coll_freq: npt.ArrayLike, coll_len: int) -> sp.csr_matrix:
    """KL weight of every feedback term (``fb_len`` float (n_queries,) feedback-set lengths;
    ``coll_len`` tokens in the collection): CSR of ``tfx``'s sparsity (0 where ``Px < Pc``)."""
    pc = _coll_freq(tfx, coll_freq) / float(coll_len)
    px = tfx.data / np.asarray(fb_len, dtype=np.float64)[_rows(tfx)]
    out = tfx.copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out.data = np.where(px < pc, 0.0, px * np.log2(px / pc))
    return out


def dfr_expand(query_tf: sp.spmatrix, weights: sp.csr_matrix, tfx: sp.csr_matrix, df: sp.csr_matrix, n_fb: npt.ArrayLike, *,
               model: Literal["bo1", "kl"], fb_terms: int = 10, n_docs: int, coll_len: int,
               fb_len: npt.ArrayLike) -> sp.csr_matrix:
    """Terrier's expanded queries from Bo1/KL ``weights`` (same sparsity as ``tfx`` and ``df``,
    all from :func:`feedback_counts`): CSR (n_queries, V), see the module doc."""
    q = _canonical(query_tf)
    n_q, n_terms = q.shape
    rows, cols = _rows(tfx), tfx.indices.astype(np.int64)
    w = weights.data.astype(np.float64, copy=True)
    in_query = np.isin(rows * n_terms + cols, _rows(q) * n_terms + q.indices)
    min_df = np.where(np.asarray(n_fb) >= 2, 2, 0)
    w[(df.data < min_df[rows]) & ~in_query] = 0.0
    order = np.lexsort((cols, -w, rows))  # the best term of each row first
    first = order[np.concatenate(([True], np.diff(rows[order]) > 0))] if len(order) else order
    best_w, max_tf = np.zeros(n_q), np.zeros(n_q)
    best_w[rows[first]], max_tf[rows[first]] = w[first], tfx.data[first]
    length = np.asarray(fb_len, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if model == "bo1":
            f = max_tf / float(n_docs)
            norm = max_tf * np.log2((1.0 + f) / f) + np.log2(1.0 + f)
        else:
            norm = max_tf * np.log2(float(coll_len) / length) / length
    norm = np.where((best_w > 0) & np.isfinite(norm) & (norm > 0), norm, 0.0)
    expansion = _scale_rows(sp.csr_matrix((w, tfx.indices.copy(), tfx.indptr.copy()), shape=tfx.shape), norm)
    expansion = row_topk(expansion, np.maximum(fb_terms, np.diff(q.indptr)))
    return _canonical(_scale_rows(q, _row_max(q)) + expansion)
