"""Retrievers: the composite (RRF fan-out) and the built-in BM25 and dense retrievers."""

from kolm_search.retrievers.composite import CompositeRetriever

__all__ = ["CompositeRetriever"]
