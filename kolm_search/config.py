"""``SearchPipelineModules`` and ``SearchPipelineOptions``: what a pipeline is built from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.ports import (
    CacheStore,
    Deduplicator,
    Embedder,
    IntentClassifier,
    Logger,
    QueryPlanner,
    Reranker,
    Retriever,
    Synthesizer,
    Telemetry,
)
from kolm_search.types import SEARCH_MODES, SearchMode

__all__ = ["SearchPipelineModules", "SearchPipelineOptions"]

_PORT_METHODS = {
    "planner": "plan",
    "retriever": "retrieve",
    "embedder": "embed",
    "deduplicator": "deduplicate",
    "reranker": "rerank",
    "synthesizer": "synthesize",
    "intent_classifier": "classify",
    "cache": "get",
    "telemetry": "track",
}


@dataclass
class SearchPipelineModules:
    """The port implementations a pipeline wires together.

    ``planner`` and ``retriever`` are required; every other port is optional. Each port is
    checked for its method when the dataclass is built (a clear ``KolmTypeError`` if not).
    """

    planner: QueryPlanner
    retriever: Retriever
    embedder: Embedder | None = None
    deduplicator: Deduplicator | None = None
    reranker: Reranker | None = None
    synthesizer: Synthesizer | None = None
    intent_classifier: IntentClassifier | None = None
    cache: CacheStore | None = None
    telemetry: Telemetry | None = None

    def __post_init__(self) -> None:
        for name, method in _PORT_METHODS.items():
            port = getattr(self, name)
            if port is None:
                if name in ("planner", "retriever"):
                    raise KolmTypeError(f"SearchPipelineModules.{name} is required")
                continue
            if not callable(getattr(port, method, None)):
                raise KolmTypeError(
                    f"SearchPipelineModules.{name} must have a '{method}' method, "
                    f"got {type(port).__name__}"
                )
        if self.cache is not None and not callable(getattr(self.cache, "set", None)):
            raise KolmTypeError("SearchPipelineModules.cache must have a 'set' method")

    @classmethod
    def coerce(cls, modules: Any) -> SearchPipelineModules:
        """Accept a ``SearchPipelineModules`` or a dict with its field names."""
        if isinstance(modules, cls):
            return modules
        if isinstance(modules, dict):
            return cls(**modules)
        raise KolmTypeError(
            f"modules must be SearchPipelineModules or a dict, got {type(modules).__name__}"
        )


@dataclass
class SearchPipelineOptions:
    """Pipeline configuration.

    Attributes
    ----------
    default_limit : int
        Result count when a request gives none (10).
    default_mode : SearchMode
        Mode when a request gives none (``"hybrid"``).
    cache_ttl_seconds : float
        TTL passed to ``CacheStore.set`` (60).
    logger : Logger, optional
        Receives non-fatal warnings (cache and telemetry failures, degraded expansion).
    input_schema, output_schema : optional
        A pydantic model class or ``TypeAdapter``, or a callable returning a list of
        :class:`SchemaIssue` (empty when valid).
    max_query_length : int, optional
        Longer queries are rejected with ``SearchError(stage="client")``.
    """

    default_limit: int = 10
    default_mode: SearchMode = "hybrid"
    cache_ttl_seconds: float = 60
    logger: Logger | None = None
    input_schema: Any = None
    output_schema: Any = None
    max_query_length: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.default_limit, bool) or not isinstance(self.default_limit, int) or self.default_limit <= 0:
            raise KolmValueError(f"default_limit must be a positive int, got {self.default_limit!r}")
        if self.default_mode not in SEARCH_MODES:
            raise KolmValueError(f"default_mode must be one of {SEARCH_MODES}, got {self.default_mode!r}")
        if isinstance(self.cache_ttl_seconds, bool) or not isinstance(self.cache_ttl_seconds, (int, float)) or self.cache_ttl_seconds < 0:
            raise KolmValueError(f"cache_ttl_seconds must be >= 0, got {self.cache_ttl_seconds!r}")
        if self.max_query_length is not None and (
            isinstance(self.max_query_length, bool)
            or not isinstance(self.max_query_length, int)
            or self.max_query_length <= 0
        ):
            raise KolmValueError(f"max_query_length must be a positive int, got {self.max_query_length!r}")

    @classmethod
    def coerce(cls, options: Any) -> SearchPipelineOptions:
        """Accept ``None``, a ``SearchPipelineOptions`` or a dict with its field names."""
        if options is None:
            return cls()
        if isinstance(options, cls):
            return options
        if isinstance(options, dict):
            return cls(**options)
        raise KolmTypeError(
            f"options must be SearchPipelineOptions or a dict, got {type(options).__name__}"
        )
