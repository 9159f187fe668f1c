"""``FeedbackTermExpander``: query text expanded with the strongest terms of the top BM25
documents (a text-level pseudo-relevance feedback for planners).

RM3 itself (Abdul-Jaleel et al., TREC 2004, as Anserini defines it: term frequencies,
interpolation with the original query, weighted query terms) is
:class:`~kolm_search.retrievers.feedback.FeedbackRetriever` (``model="rm3"``), which the presets
and the command line use. ``RM3Expander``, this class's old name, is a deprecated alias.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from kolm_search._params import positive_int

__all__ = ["FeedbackTermExpander", "RM3Expander"]


class FeedbackTermExpander:
    """A ``QueryExpander`` appending the strongest feedback terms of the top BM25 documents.

    A term is weighted by ``sum_d P(t|d) P(d|q)`` over the ``fb_docs`` top documents (``P(d|q)``
    from their BM25 scores, normalised; a term counts by presence); the ``fb_terms`` best terms
    not already in the query are appended to it, as one alternative phrasing, so
    :class:`~kolm_search.contract.planners.ExpandingQueryPlanner` fuses the original and the expanded
    query by RRF. The appended terms are the index's analysed terms (stems), analysed again.

    Parameters
    ----------
    bm25 : BM25Retriever
    fb_docs : int, default 10
    fb_terms : int, default 10
    """

    def __init__(self, bm25: Any, fb_docs: int = 10, fb_terms: int = 10) -> None:
        self.bm25 = bm25
        self.fb_docs = positive_int("fb_docs", fb_docs)
        self.fb_terms = positive_int("fb_terms", fb_terms)
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


class RM3Expander(FeedbackTermExpander):
    """Deprecated name of :class:`FeedbackTermExpander` (it is not RM3: that is
    :class:`~kolm_search.retrievers.feedback.FeedbackRetriever` with ``model="rm3"``)."""

    def __init__(self, bm25: Any, fb_docs: int = 10, fb_terms: int = 10) -> None:
        warnings.warn("RM3Expander is renamed FeedbackTermExpander (a text-level approximation); RM3 itself is "
                      "FeedbackRetriever(bm25, 'rm3')", DeprecationWarning, stacklevel=2)
        super().__init__(bm25, fb_docs, fb_terms)
