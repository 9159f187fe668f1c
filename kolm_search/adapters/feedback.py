"""``RM3Expander``: pseudo-relevance feedback (Abdul-Jaleel et al., TREC 2004) over BM25."""

from __future__ import annotations

from typing import Any

import numpy as np

from kolm_search.errors import KolmValueError

__all__ = ["RM3Expander"]


class RM3Expander:
    """A ``QueryExpander`` adding the strongest feedback terms of the top BM25 documents.

    The relevance model weights a term by ``sum_d P(t|d) P(d|q)`` over the ``fb_docs`` top
    documents (``P(d|q)`` from their BM25 scores, normalised); the ``fb_terms`` best terms not
    already in the query are appended to it. Returned as one alternative phrasing, so
    :class:`~kolm_search.planners.ExpandingQueryPlanner` fuses the original and the expanded
    query by RRF.

    This is a text-level approximation kept for planners: the appended terms are stems that
    the tokenizer stems again, a term counts by presence, and the lists are fused by RRF.
    RM3 as Anserini defines it (term frequencies, interpolation with the original query,
    weighted query terms) is :class:`~kolm_search.retrievers.feedback.FeedbackRetriever`.

    Parameters
    ----------
    bm25 : BM25Retriever
    fb_docs : int, default 10
    fb_terms : int, default 10
    """

    def __init__(self, bm25: Any, fb_docs: int = 10, fb_terms: int = 10) -> None:
        if fb_docs < 1 or fb_terms < 1:
            raise KolmValueError(f"fb_docs and fb_terms must be >= 1, got {fb_docs}, {fb_terms}")
        self.bm25 = bm25
        self.fb_docs = int(fb_docs)
        self.fb_terms = int(fb_terms)
        # document-major term counts, built once from the index (term-major CSR)
        import scipy.sparse as sp

        t_ptr = np.asarray(bm25.t_ptr)
        n_terms = len(t_ptr) - 1
        terms = np.repeat(np.arange(n_terms), np.diff(t_ptr))
        docs = np.asarray(bm25.t_docs)
        self._doc_terms = sp.csr_matrix((np.ones(len(docs)), (docs, terms)), shape=(len(bm25.table), n_terms))
        self._doc_len = np.maximum(np.asarray(bm25.doc_len, dtype=np.float64), 1.0)

    def expand(self, query: str) -> list[str]:
        docs, scores, counts = self.bm25.score_texts([query], self.fb_docs)
        n = int(counts[0])
        if n == 0:
            return []
        d, s = docs[0, :n], scores[0, :n].astype(np.float64)
        w = s / s.sum() if s.sum() > 0 else np.full(n, 1.0 / n)
        rows = self._doc_terms[d]
        weights = np.asarray(rows.multiply((w / self._doc_len[d])[:, None]).sum(axis=0)).ravel()
        q_ptr, q_ids = self.bm25.encode([query])
        weights[q_ids] = 0.0
        top = np.argsort(-weights, kind="stable")[: self.fb_terms]
        terms = [self.bm25.vocab[t] for t in top if weights[t] > 0]
        return [f"{query} {' '.join(terms)}"] if terms else []
