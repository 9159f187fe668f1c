"""Ready-made clients: ``bm25()``, ``dense()`` and ``hybrid()``.

Each takes the corpus (``SearchDocument``s, a DataFrame with ``id`` and ``content``, or a
:class:`DocumentTable`) and returns a :class:`SearchClient` whose retriever has the columnar
batch path. Every built pipeline is plain arrays plus configuration, so it pickles and
travels to worker processes.
"""

from __future__ import annotations

from typing import Any

from kolm_search.client import SearchClient
from kolm_search.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.planners import DefaultQueryPlanner
from kolm_search.ports import Embedder, QueryPlanner
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever

__all__ = ["bm25", "dense", "hybrid"]


def _table(documents: Any) -> DocumentTable:
    if isinstance(documents, DocumentTable):
        return documents
    import pandas as pd

    if isinstance(documents, pd.DataFrame):
        return DocumentTable.from_frame(documents)
    return DocumentTable.from_documents(documents)


def _options(options: SearchPipelineOptions | dict[str, Any] | None, mode: str) -> SearchPipelineOptions:
    opts = SearchPipelineOptions.coerce(options)
    if options is None or (isinstance(options, dict) and "default_mode" not in options):
        opts.default_mode = mode  # type: ignore[assignment]
    return opts


def bm25(documents: Any, *, planner: QueryPlanner | None = None,
         options: SearchPipelineOptions | dict[str, Any] | None = None, feedback: Any = None,
         feedback_kwargs: dict[str, Any] | None = None, **bm25_kwargs: Any) -> SearchClient:
    """A BM25 client (default mode ``"fulltext"``); ``bm25_kwargs`` go to :class:`BM25Retriever`.

    ``feedback`` (``"rm3"``, ``"bo1"`` or ``"kl"``) adds pseudo-relevance feedback: the
    retriever is then a :class:`FeedbackRetriever` (``feedback_kwargs``: ``fb_docs``,
    ``fb_terms``, ...) around the BM25 one.
    """
    sparse = BM25Retriever(_table(documents), **bm25_kwargs)
    retriever: BM25Retriever | FeedbackRetriever = sparse
    if feedback is not None:
        retriever = FeedbackRetriever(sparse, feedback, **(feedback_kwargs or {}))
    elif feedback_kwargs:
        raise KolmValueError(f"feedback_kwargs {sorted(feedback_kwargs)} need feedback='rm3', 'bo1' or 'kl'")
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever),
                        _options(options, "fulltext"))


def dense(documents: Any, embedder: Embedder, *, planner: QueryPlanner | None = None,
          options: SearchPipelineOptions | dict[str, Any] | None = None, **dense_kwargs: Any) -> SearchClient:
    """A dense client (default mode ``"vector"``); ``dense_kwargs`` go to :class:`DenseRetriever`."""
    retriever = DenseRetriever(_table(documents), embedder, **dense_kwargs)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "vector"))


def hybrid(documents: Any, embedder: Embedder, k: float = 60, *, weights: list[float] | None = None,
           planner: QueryPlanner | None = None, options: SearchPipelineOptions | dict[str, Any] | None = None,
           bm25_kwargs: dict[str, Any] | None = None, dense_kwargs: dict[str, Any] | None = None,
           embeddings: Any = None) -> SearchClient:
    """BM25 + dense fused by RRF (``k``; optional ``weights`` [bm25, dense]); mode ``"hybrid"``.

    ``embeddings`` (n_docs, d) skips embedding the corpus when already computed.
    """
    table = _table(documents)
    sparse = BM25Retriever(table, **(bm25_kwargs or {}))
    vec = DenseRetriever(table, embedder, embeddings=embeddings, **(dense_kwargs or {}))
    retriever = CompositeRetriever([sparse, vec], k=k, weights=weights)
    return SearchClient(SearchPipelineModules(planner=planner or DefaultQueryPlanner(), retriever=retriever,
                                              embedder=embedder), _options(options, "hybrid"))
