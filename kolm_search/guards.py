"""Request guards (stage ``client``): coerce, check and resolve defaults."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kolm_search._params import mapping, non_negative_int, one_of, positive_int
from kolm_search.config import SearchPipelineOptions
from kolm_search.errors import KolmTypeError, KolmValueError, ParameterError, PipelineStage, SearchError
from kolm_search.types import SEARCH_MODES, SearchRequest

__all__ = ["coerce_request", "resolve_request"]

_STAGE = PipelineStage.CLIENT
_INT64_MAX = 2**63 - 1


def coerce_request(request: Any) -> SearchRequest:
    """A ``SearchRequest`` from a ``SearchRequest`` or a dict; ``SearchError(client)`` if neither."""
    try:
        return SearchRequest.from_dict(request)
    except (KolmTypeError, KolmValueError, TypeError) as exc:
        raise SearchError(_STAGE, str(exc), cause=exc) from exc


def resolve_request(request: SearchRequest, options: SearchPipelineOptions) -> SearchRequest:
    """Check every field and return a copy with ``limit`` and ``mode`` defaults filled in.

    Raises
    ------
    SearchError
        ``stage="client"``, the message naming the field and value, for an empty or
        whitespace-only query, a query over ``max_query_length``, a ``limit`` that is not a
        positive int, an ``offset`` that is not a non-negative int (either above ``2**63 - 1``),
        an unknown ``mode``, or
        ``filters``/``context`` that are not dicts.
    """
    query = request.query
    if not isinstance(query, str):
        raise SearchError(_STAGE, f"query must be a string, got {type(query).__name__} {query!r}")
    if not query.strip():
        raise SearchError(_STAGE, f"query must not be empty, got {query!r}")
    if options.max_query_length is not None and len(query) > options.max_query_length:
        raise SearchError(
            _STAGE,
            f"query length {len(query)} exceeds max_query_length={options.max_query_length}",
        )
    try:
        limit = positive_int("limit", options.default_limit if request.limit is None else request.limit)
        offset = non_negative_int("offset", request.offset)
        mode = one_of("mode", options.default_mode if request.mode is None else request.mode, SEARCH_MODES)
        mapping("filters", request.filters)
        mapping("context", request.context)
    except ParameterError as exc:
        raise SearchError(_STAGE, str(exc), cause=exc) from exc
    for name, value in (("limit", limit), ("offset", offset)):  # ranks and counts are int64
        if value > _INT64_MAX:
            raise SearchError(_STAGE, f"{name} must be at most 2**63 - 1, got {value!r}")
    return replace(request, limit=limit, offset=offset, mode=mode)
