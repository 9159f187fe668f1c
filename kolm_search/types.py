"""The spec's shared types as dataclasses (``src/contracts/types.ts``, ported).

``SearchDocument`` and ``SearchResponse`` are edge objects: what a user hands in and what a
response hands back. Inside the engine candidates travel as columnar frames.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = [
    "QueryPlan",
    "SEARCH_MODES",
    "SearchDocument",
    "SearchMode",
    "SearchPagination",
    "SearchPipelineContext",
    "SearchRequest",
    "SearchResponse",
    "SearchResponseMetadata",
]

SearchMode = Literal["vector", "fulltext", "hybrid"]
"""Retrieval strategy: ``"vector"``, ``"fulltext"`` or ``"hybrid"`` (the default)."""

SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)

_DOC_KEYS = ("id", "content", "title", "source", "tags", "metadata", "score")


@dataclass
class SearchDocument:
    """A document at the edge of the pipeline.

    Attributes
    ----------
    id : str
        Unique identifier.
    content : str
        Document text.
    title, source : str, optional
    tags : list of str, optional
    metadata : dict, optional
        Arbitrary metadata (filters match its keys as well as the fields above).
    score : float, optional
        Relevance score, higher is better (a fused RRF score for fused lists).
    """

    id: str
    content: str
    title: str | None = None
    source: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, without the keys whose value is ``None``."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchDocument:
        """Build from a mapping with the spec's keys; unknown keys are a ``KolmValueError``."""
        if isinstance(data, SearchDocument):
            return data
        if not isinstance(data, Mapping):
            raise KolmTypeError(f"a SearchDocument must be a mapping, got {type(data).__name__}")
        extra = set(data) - set(_DOC_KEYS)
        if extra:
            raise KolmValueError(f"unknown SearchDocument field(s) {sorted(extra)}")
        if not isinstance(data.get("id"), str) or not isinstance(data.get("content"), str):
            raise KolmValueError(
                f"SearchDocument needs string 'id' and 'content', got id={data.get('id')!r}"
            )
        return cls(**{k: data[k] for k in _DOC_KEYS if k in data})


@dataclass
class SearchRequest:
    """An incoming search.

    ``limit`` and ``mode`` default to the pipeline options when ``None``.
    ``filters`` and ``context`` are forwarded unchanged to every stage.
    """

    query: str
    limit: int | None = None
    offset: int = 0
    mode: SearchMode | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``None`` values dropped)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchRequest:
        """Inverse of :meth:`to_dict` (a ``None`` value but ``query``'s takes the field's default). Requests from
        users are checked by the client (:func:`kolm_search.contract.guards.coerce_request`)."""
        return cls(**{k: v for k, v in data.items() if v is not None or k == "query"})


@dataclass
class QueryPlan:
    """The planner's output, read by every downstream stage."""

    normalized_query: str
    mode: SearchMode
    target_limit: int
    expanded_queries: list[str] = field(default_factory=list)
    intent: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.expanded_queries:
            self.expanded_queries = [self.normalized_query]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(**dict(data))


@dataclass
class SearchPagination:
    """``total_candidates > offset + limit`` tells whether a next page exists."""

    offset: int
    limit: int
    total_candidates: int


@dataclass
class SearchResponseMetadata:
    """Library-owned metadata attached to every response.

    ``feedback`` (an extension of the spec) is the expanded weighted query of
    pseudo-relevance feedback, ``{"model": ..., "expanded": [{term: weight}, ...]}`` with one
    dict per planned query, when a :class:`~kolm_search.retrievers.feedback.FeedbackRetriever`
    searched; otherwise ``None``.
    """

    result_count: int
    cache_hit: bool = False
    feedback: dict[str, Any] | None = None


@dataclass
class SearchResponse:
    """The result of one search."""

    request: SearchRequest
    plan: QueryPlan
    results: list[SearchDocument]
    pagination: SearchPagination
    duration_ms: float
    answer: str | None = None
    metadata: SearchResponseMetadata | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (what caches store and output schemas validate)."""
        return {
            "request": self.request.to_dict(),
            "plan": self.plan.to_dict(),
            "results": [d.to_dict() for d in self.results],
            "pagination": asdict(self.pagination),
            "answer": self.answer,
            "duration_ms": self.duration_ms,
            "metadata": None if self.metadata is None else asdict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchResponse:
        """Inverse of :meth:`to_dict`; raises ``KolmValueError`` on a malformed dict."""
        try:
            meta = data.get("metadata")
            return cls(
                request=SearchRequest.from_dict(data["request"]),
                plan=QueryPlan.from_dict(data["plan"]),
                results=[SearchDocument.from_dict(d) for d in data["results"]],
                pagination=SearchPagination(**data["pagination"]),
                duration_ms=float(data["duration_ms"]),
                answer=data.get("answer"),
                metadata=None if meta is None else SearchResponseMetadata(**meta),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise KolmValueError(f"malformed SearchResponse dict: {exc!r}") from exc


@dataclass
class SearchPipelineContext:
    """Mutable state threaded through the stages of one search.

    Attributes
    ----------
    embeddings : numpy.ndarray of float32, shape (d,), optional
        The primary query's embedding; ``None`` in fulltext mode.
    expanded_embeddings : numpy.ndarray of float32, shape (n_queries, d), optional
        One row per ``plan.expanded_queries`` entry (row 0 equals ``embeddings``); set
        when the plan has more than one query.
    started_at : float
        Wall-clock start, milliseconds since the epoch.
    """

    request: SearchRequest
    plan: QueryPlan
    started_at: float
    embeddings: npt.NDArray[np.float32] | None = None
    expanded_embeddings: npt.NDArray[np.float32] | None = None
    candidates: list[SearchDocument] = field(default_factory=list)
    results: list[SearchDocument] = field(default_factory=list)
    answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def as_documents(items: Sequence[Any], *, what: str) -> list[SearchDocument]:
    """Coerce a port's output to a list of ``SearchDocument`` (dicts accepted).

    Raises ``KolmTypeError``/``KolmValueError`` naming ``what`` on anything else.
    """
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise KolmTypeError(f"{what} must return a list of SearchDocument, got {type(items).__name__}")
    out: list[SearchDocument] = []
    for i, item in enumerate(items):
        if isinstance(item, SearchDocument):
            doc = item
        elif isinstance(item, Mapping):
            doc = SearchDocument.from_dict(item)
        else:
            raise KolmTypeError(
                f"{what} returned item {i} of type {type(item).__name__}, expected SearchDocument"
            )
        if doc.score is not None and isinstance(doc.score, float) and math.isnan(doc.score):
            raise KolmValueError(f"{what} returned document {doc.id!r} with a NaN score")
        out.append(doc)
    return out
