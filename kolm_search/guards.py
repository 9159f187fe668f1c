"""Request guards (stage ``client``): coerce, check and resolve defaults."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kolm_search.config import SearchPipelineOptions
from kolm_search.errors import KolmTypeError, KolmValueError, PipelineStage, SearchError
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


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


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
    limit = options.default_limit if request.limit is None else request.limit
    if not _is_int(limit) or limit <= 0:
        raise SearchError(_STAGE, f"limit must be a positive integer, got {request.limit!r}")
    offset = request.offset
    if not _is_int(offset) or offset < 0:
        raise SearchError(_STAGE, f"offset must be a non-negative integer, got {offset!r}")
    for name, value in (("limit", limit), ("offset", offset)):  # ranks and counts are int64
        if value > _INT64_MAX:
            raise SearchError(_STAGE, f"{name} must be at most 2**63 - 1, got {value!r}")
    mode = options.default_mode if request.mode is None else request.mode
    if mode not in SEARCH_MODES:
        raise SearchError(_STAGE, f"mode must be one of {list(SEARCH_MODES)}, got {request.mode!r}")
    for name in ("filters", "context"):
        value = getattr(request, name)
        if not isinstance(value, Mapping):
            raise SearchError(_STAGE, f"{name} must be a dict, got {type(value).__name__} {value!r}")
    return replace(request, limit=int(limit), offset=int(offset), mode=mode)
