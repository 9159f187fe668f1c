"""Retrievers: the composite (RRF fan-out) and the built-in BM25 (with pseudo-relevance
feedback) and dense retrievers."""

from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever

__all__ = ["BM25Retriever", "CompositeRetriever", "DenseRetriever", "FeedbackRetriever"]
