"""The learning-to-rank feature union chosen on the four development collections:
``LTRReranker(hybrid_features(bm25, dense))`` (extra ``ltr``).

:func:`hybrid_features` is the hybrid's top ``depth`` candidates (``Fuse(bm25, dense, k=60)``,
``presets.hybrid``'s expression) with eleven features, each scoring the hybrid's candidates
(a feature union is flat, however ``**`` is grouped):

===============  ====================================================================
column           feature
===============  ====================================================================
0                the hybrid's RRF score (the model's starting score by default)
1                BM25 (``bm25`` as given): :class:`~kolm_search.retrievers.ltr_scores.BM25Score`
2                Bo1 feedback around ``bm25`` (its score in its own top 1000, else 0)
3                the dense cosine (``dense``): :class:`~kolm_search.retrievers.ltr_scores.DenseScore`
4                BM25 of the title field alone (``bm25``'s tokenizer, as 8 and 9)
5, 6             log1p of the document's and the query's length in words
7                the cosine of an LSA model fitted on the corpus (``lsa_components``, ``seed``)
8, 9             BM25 with ``k1=0.9, b=0.4`` (Anserini's) and ``k1=1.2, b=0.75``
10, 11           the share of the query's distinct terms the document holds, idf-weighted
                 and not (:class:`~kolm_search.retrievers.ltr_terms.TermCoverage`)
===============  ====================================================================

It was chosen by leave-one-collection-out among ten feature sets and three learner settings
(``benchmarks/bench_ltr_features.py``; every held-out collection's choice was this set with
the :class:`~kolm_search.retrievers.ltr.LTRReranker` defaults); the figures are in
``benchmarks/README.md``, "Learning to rank". Term-pair, proximity, title-embedding and RM3/KL
features did not add to it on the mean of the four.
"""

from __future__ import annotations

from kolm_search.adapters.lsa import LSAEmbedder
from kolm_search.compose.stage import Stage
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.retrievers.ltr_features import DocumentLength, QueryLength
from kolm_search.retrievers.ltr_scores import BM25Score, DenseScore
from kolm_search.retrievers.ltr_terms import TermCoverage

__all__ = ["HYBRID_FEATURES", "hybrid_features"]

#: The names of :func:`hybrid_features`'s columns, in order.
HYBRID_FEATURES = ("rrf", "bm25", "bo1", "dense", "title_bm25", "doc_length", "query_length", "lsa",
                   "bm25_0.9_0.4", "bm25_1.2_0.75", "coverage_idf", "coverage")


def hybrid_features(bm25: BM25Retriever, dense: DenseRetriever, *, depth: int = 100, lsa_components: int = 128,
                    seed: int = 0) -> Stage:
    """The feature union of the module doc over ``bm25``'s documents.

    Parameters
    ----------
    bm25 : BM25Retriever
    dense : DenseRetriever
        Over the same documents (e.g. MiniLM, ``embed_queries=True``).
    depth : int, default 100
        Candidates per query (the hybrid's top ``depth``).
    lsa_components, seed : int
        The LSA model's dimensions and seed.

    Returns
    -------
    Stage
        A retrieving stage whose candidates carry 12 features (:data:`HYBRID_FEATURES`).
    """
    if not isinstance(bm25, BM25Retriever):
        raise KolmTypeError(f"hybrid_features: bm25 must be a BM25Retriever, got {type(bm25).__name__}")
    if not isinstance(dense, DenseRetriever):
        raise KolmTypeError(f"hybrid_features: dense must be a DenseRetriever, got {type(dense).__name__}")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise KolmValueError(f"hybrid_features: depth must be a positive int, got {depth!r}")
    table = bm25.table
    lsa = DenseRetriever(table, LSAEmbedder(table.texts(("title", "content")), n_components=lsa_components, seed=seed),
                         embed_queries=True)
    features: list[Stage] = [
        BM25Score(bm25), FeedbackRetriever(bm25, "bo1"), DenseScore(dense),
        BM25Score(BM25Retriever(table, fields=("title",), tokenizer=bm25.tokenizer)), DocumentLength(), QueryLength(),
        DenseScore(lsa), BM25Score(BM25Retriever(table, k1=0.9, b=0.4, tokenizer=bm25.tokenizer)),
        BM25Score(BM25Retriever(table, k1=1.2, b=0.75, tokenizer=bm25.tokenizer)),
        TermCoverage(bm25), TermCoverage(bm25, weighted=False)]
    union: Stage = Fuse(bm25, dense, k=60) % depth
    for feature in features:
        union = union ** feature  # one flat union: every feature sees the hybrid's candidates
    return union
