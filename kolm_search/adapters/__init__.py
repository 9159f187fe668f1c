"""Adapters for the ports: real implementations a user would pick.

Those needing third-party packages import them lazily and name the extra to install.
"""

from kolm_search.adapters.cached import CachedEmbedder
from kolm_search.adapters.caches import InMemoryCache, SqliteCache
from kolm_search.adapters.embedders import SentenceTransformerEmbedder, packaged_minilm_path
from kolm_search.adapters.feedback import FeedbackTermExpander, RM3Expander
from kolm_search.adapters.llm import (
    LLMRequestError,
    OpenAICompatibleClient,
    OpenAICompatibleExpander,
    OpenAICompatibleSynthesizer,
)
from kolm_search.adapters.lsa import LSAEmbedder
from kolm_search.adapters.mmr import MMRReranker
from kolm_search.adapters.models import available_model, load_embedder
from kolm_search.adapters.onnx import OnnxEmbedder, packaged_minilm_onnx
from kolm_search.adapters.otel import OpenTelemetryTelemetry
from kolm_search.adapters.rerankers import CrossEncoderReranker, FusionReranker
from kolm_search.adapters.simple import (
    EmbeddingIntentClassifier,
    ExactDeduplicator,
    LoggingTelemetry,
    NearDuplicateDeduplicator,
    SynonymExpander,
)

__all__ = [
    "CachedEmbedder",
    "CrossEncoderReranker",
    "EmbeddingIntentClassifier",
    "ExactDeduplicator",
    "FeedbackTermExpander",
    "FusionReranker",
    "InMemoryCache",
    "LLMRequestError",
    "LSAEmbedder",
    "LoggingTelemetry",
    "MMRReranker",
    "NearDuplicateDeduplicator",
    "OnnxEmbedder",
    "OpenAICompatibleClient",
    "OpenAICompatibleExpander",
    "OpenAICompatibleSynthesizer",
    "OpenTelemetryTelemetry",
    "RM3Expander",
    "SentenceTransformerEmbedder",
    "SqliteCache",
    "SynonymExpander",
    "available_model",
    "load_embedder",
    "packaged_minilm_onnx",
    "packaged_minilm_path",
]
