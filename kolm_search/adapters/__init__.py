"""Adapters for the ports: real implementations a user would pick.

Those needing third-party packages import them lazily and name the extra to install.
"""

from kolm_search.adapters.cached import CachedEmbedder
from kolm_search.adapters.caches import InMemoryCache, SqliteCache
from kolm_search.adapters.embedders import SentenceTransformerEmbedder, packaged_minilm_path
from kolm_search.adapters.feedback import FeedbackTermExpander, RM3Expander
from kolm_search.adapters.listwise import LLMListwiseReranker
from kolm_search.adapters.llm import (
    ChatReply,
    LLMRequestError,
    OpenAICompatibleClient,
    OpenAICompatibleExpander,
    OpenAICompatibleSynthesizer,
)
from kolm_search.adapters.llm_rerank import LLMPointwiseReranker
from kolm_search.adapters.lsa import LSAEmbedder
from kolm_search.adapters.mmr import MMRReranker
from kolm_search.adapters.models import available_model, load_embedder
from kolm_search.adapters.onnx import OnnxEmbedder, packaged_minilm_onnx
from kolm_search.adapters.onnx_rerank import OnnxCrossEncoderReranker
from kolm_search.adapters.otel import OpenTelemetryTelemetry
from kolm_search.adapters.prompts import PromptTemplate
from kolm_search.adapters.rerankers import CrossEncoderReranker, FusionReranker
from kolm_search.adapters.scorecache import ScoreCache
from kolm_search.adapters.scoring import CachedReranker, PointwiseReranker
from kolm_search.adapters.simple import (
    EmbeddingIntentClassifier,
    ExactDeduplicator,
    LoggingTelemetry,
    NearDuplicateDeduplicator,
    SynonymExpander,
)

__all__ = [
    "CachedEmbedder",
    "CachedReranker",
    "ChatReply",
    "CrossEncoderReranker",
    "EmbeddingIntentClassifier",
    "ExactDeduplicator",
    "FeedbackTermExpander",
    "FusionReranker",
    "InMemoryCache",
    "LLMListwiseReranker",
    "LLMPointwiseReranker",
    "LLMRequestError",
    "LSAEmbedder",
    "LoggingTelemetry",
    "MMRReranker",
    "NearDuplicateDeduplicator",
    "OnnxCrossEncoderReranker",
    "OnnxEmbedder",
    "OpenAICompatibleClient",
    "OpenAICompatibleExpander",
    "OpenAICompatibleSynthesizer",
    "OpenTelemetryTelemetry",
    "PointwiseReranker",
    "PromptTemplate",
    "RM3Expander",
    "ScoreCache",
    "SentenceTransformerEmbedder",
    "SqliteCache",
    "SynonymExpander",
    "available_model",
    "load_embedder",
    "packaged_minilm_onnx",
    "packaged_minilm_path",
]
