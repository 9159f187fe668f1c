"""Adapters for the ports: real implementations a user would pick.

Those needing third-party packages import them lazily and name the extra to install.
"""

from kolm_search.adapters.caches import InMemoryCache, SqliteCache
from kolm_search.adapters.embedders import SentenceTransformerEmbedder, packaged_minilm_path
from kolm_search.adapters.lsa import LSAEmbedder
from kolm_search.adapters.mmr import MMRReranker
from kolm_search.adapters.rerankers import CrossEncoderReranker, FusionReranker
from kolm_search.adapters.simple import (
    EmbeddingIntentClassifier,
    ExactDeduplicator,
    LoggingTelemetry,
    SynonymExpander,
)

__all__ = [
    "CrossEncoderReranker",
    "EmbeddingIntentClassifier",
    "ExactDeduplicator",
    "FusionReranker",
    "InMemoryCache",
    "LSAEmbedder",
    "LoggingTelemetry",
    "MMRReranker",
    "SentenceTransformerEmbedder",
    "SqliteCache",
    "SynonymExpander",
    "packaged_minilm_path",
]
