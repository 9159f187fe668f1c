"""``SearchPipelineModules`` and ``SearchPipelineOptions``: what a pipeline is built from."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kolm_search._params import one_of, positive_int, real, seconds
from kolm_search.contract.ports import (
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
    missing_methods,
)
from kolm_search.errors import KolmTypeError, PipelineStage
from kolm_search.types import SEARCH_MODES, SearchMode

__all__ = ["SearchPipelineModules", "SearchPipelineOptions", "TIMED_STAGES"]

#: Stage names that :attr:`SearchPipelineOptions.stage_timeouts` accepts (the stages that
#: call a port; cache and telemetry have their own options).
TIMED_STAGES = tuple(PipelineStage(s) for s in ("planner", "intent-classifier", "embedder", "retriever", "deduplicator",
                                                  "reranker", "synthesizer"))

@dataclass
class SearchPipelineModules:
    """The port implementations a pipeline wires together.

    ``planner`` and ``retriever`` are required; every other port is optional. Each port is
    checked against the Protocol its field names (:mod:`kolm_search.contract.ports`) when the dataclass
    is built: a clear ``KolmTypeError`` naming the first missing method.
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
        for name, protocol in _ports().items():
            port = getattr(self, name)
            if port is None:
                if name in ("planner", "retriever"):
                    raise KolmTypeError(f"SearchPipelineModules.{name} is required")
                continue
            missing = missing_methods(port, protocol)
            if missing:
                raise KolmTypeError(f"SearchPipelineModules.{name} must have a '{missing[0]}' method "
                                    f"({protocol.__name__}), got {type(port).__name__}")

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


@functools.cache
def _ports() -> dict[str, type]:
    """Field name -> the Protocol its annotation names (what the port must implement)."""
    hints = typing.get_type_hints(SearchPipelineModules)
    return {f.name: next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
            for f in dataclasses.fields(SearchPipelineModules)}


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
    stage_timeout_seconds : float, optional
        Deadline of every port-calling stage (planner, intent classifier, embedder,
        retriever, deduplicator, reranker, synthesizer); ``None`` (default): no limit. A
        stage still running at its deadline raises ``SearchError(stage, "... timed out
        after Xs")``; the late call is abandoned, not awaited. The deadline covers the stage
        as a whole: in ``search_batch``, all of the batch's calls to that port.
    stage_timeouts : Mapping[str, float or None], default {}
        Per-stage overrides of ``stage_timeout_seconds``, keyed by the names in
        :data:`TIMED_STAGES` (``{"reranker": 2.0, "retriever": None}``).
    cache_timeout_seconds : float, optional
        Deadline of each ``cache.get`` / ``cache.set`` call (1.0). A late call is abandoned
        with a warning and the search goes on (a miss; the response is not stored).
        ``None``: no limit (the call is made inline, as before).
    telemetry_timeout_seconds : float, optional
        Deadline of each ``telemetry.track`` call (1.0); a late call is abandoned with a
        warning, never failing the search. ``None``: no limit.

    Notes
    -----
    How deadlines are enforced: an ``async`` port method runs as a task that is cancelled
    and left behind at the deadline; a plain (sync) method runs on a daemon worker thread
    (so even a call that never returns cannot block ``search_sync`` or interpreter exit)
    and is abandoned at the deadline. Without a timeout a port is called inline, so the
    default options cost normal searches nothing but the thread hop of a *sync* cache or
    telemetry port (a :class:`~kolm_search.contract.ports.NonBlockingCache`, such as the built-in
    ``InMemoryCache``, is called inline).

    Limits: an ``async`` method that blocks the event loop itself (``time.sleep`` inside
    ``async def``) cannot be interrupted, nor can a sync dependency that an async port calls
    inline (a blocking expander of ``ExpandingQueryPlanner``). A sync method under a
    deadline must tolerate being called from a worker thread.

    Warnings go to ``logger``, or become a ``RuntimeWarning`` when there is none; a logger
    that raises never fails a search.
    """

    default_limit: int = 10
    default_mode: SearchMode = "hybrid"
    cache_ttl_seconds: float = 60
    logger: Logger | None = None
    input_schema: Any = None
    output_schema: Any = None
    max_query_length: int | None = None
    stage_timeout_seconds: float | None = None
    stage_timeouts: Mapping[str, float | None] = field(default_factory=dict)
    cache_timeout_seconds: float | None = 1.0
    telemetry_timeout_seconds: float | None = 1.0

    def __post_init__(self) -> None:
        self.default_limit = positive_int("default_limit", self.default_limit)
        one_of("default_mode", self.default_mode, SEARCH_MODES)
        self.cache_ttl_seconds = real("cache_ttl_seconds", self.cache_ttl_seconds, low=0, finite=False)
        self.max_query_length = positive_int("max_query_length", self.max_query_length, none=True)
        self.stage_timeout_seconds = seconds("stage_timeout_seconds", self.stage_timeout_seconds)
        self.cache_timeout_seconds = seconds("cache_timeout_seconds", self.cache_timeout_seconds)
        self.telemetry_timeout_seconds = seconds("telemetry_timeout_seconds", self.telemetry_timeout_seconds)
        if not isinstance(self.stage_timeouts, Mapping):
            raise KolmTypeError(f"stage_timeouts must be a mapping of stage name to seconds, got "
                                f"{type(self.stage_timeouts).__name__}")
        self.stage_timeouts = {one_of("stage_timeouts key", stage, TIMED_STAGES): seconds(f"stage_timeouts[{stage!r}]", t)
                               for stage, t in self.stage_timeouts.items()}

    def timeout_for(self, stage: str) -> float | None:
        """Seconds allowed for ``stage`` (its override, else ``stage_timeout_seconds``)."""
        if stage in self.stage_timeouts:
            return self.stage_timeouts[stage]
        return self.stage_timeout_seconds

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

