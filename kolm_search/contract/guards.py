"""What a search takes, checked (stage ``client``): one request, or ``search_batch``'s queries.

A single search's request: :func:`coerce_request` (a ``SearchRequest`` from a request or a
dict) and :func:`resolve_request` (every field checked, ``limit`` and ``mode`` defaults filled
in). ``search_batch``'s queries: :func:`batch_requests` checks the list or DataFrame (ids,
items), then, when given, an ``input_schema`` on each query as single search would see it,
then each request as :func:`resolve_request` does, so a batch fails where single search would.
"""

from __future__ import annotations

import reprlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import pandas as pd

from kolm_search._params import mapping, non_negative_int, one_of, positive_int
from kolm_search.contract.config import SearchPipelineOptions
from kolm_search.contract.schema import validate_each
from kolm_search.errors import ParameterError, PipelineStage, SearchError
from kolm_search.types import SEARCH_MODES, SearchRequest

__all__ = ["BatchRequests", "batch_requests", "coerce_request", "resolve_request"]

_STAGE = S = PipelineStage.CLIENT
_INT64_MAX = 2**63 - 1
_REQUEST_FIELDS = tuple(f.name for f in fields(SearchRequest))


def coerce_request(request: Any) -> SearchRequest:
    """A ``SearchRequest`` from a ``SearchRequest`` or a dict with its fields (a ``None`` value
    but ``query``'s taking the field's default); ``SearchError(client)`` for anything else, an unknown field or
    a missing ``query``."""
    if isinstance(request, SearchRequest):
        return request
    if not isinstance(request, Mapping):
        raise SearchError(_STAGE, f"a request must be a SearchRequest or a dict, got {type(request).__name__}")
    unknown = [str(k) for k in request if k not in _REQUEST_FIELDS]
    if unknown:
        raise SearchError(_STAGE, f"unknown request field(s) {sorted(unknown)}; known: {list(_REQUEST_FIELDS)}")
    if "query" not in request:
        raise SearchError(_STAGE, "request field 'query' is missing")
    return SearchRequest(**{k: v for k, v in request.items() if v is not None or k == "query"})  # query: checked later


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


@dataclass(frozen=True)
class BatchRequests:
    """``search_batch``'s queries, checked (:func:`batch_requests`).

    Attributes
    ----------
    qids : list
        Query ids in input order (the DataFrame's ``qid``, else the list positions).
    requests : list of SearchRequest
        Each query's request as given (keyword defaults applied as documented).
    resolved : list of SearchRequest
        The same requests checked, ``limit`` and ``mode`` filled in (:func:`resolve_request`).
    started : float
        ``time.perf_counter()`` when the queries arrived (the batch's duration counts from it).
    """

    qids: list[Any]
    requests: list[SearchRequest]
    resolved: list[SearchRequest]
    started: float = field(default_factory=time.perf_counter, compare=False)


def batch_requests(queries: Any, options: SearchPipelineOptions, *, limit: int | None = None, offset: int = 0,
                   mode: str | None = None, filters: dict[str, Any] | None = None,
                   input_schema: Any = None) -> BatchRequests:
    """``queries`` (list of str / SearchRequest / dict, or DataFrame with ``qid`` and ``query``)
    checked as ``search_batch`` takes them.

    Strings and DataFrame rows take ``limit``, ``offset``, ``mode`` and ``filters`` from the
    keywords; requests keep their own fields (``limit``/``mode`` fall back to the keywords, then
    to ``options``). Raises ``SearchError(stage="client")`` naming the row or position for the
    list itself (a DataFrame without ``qid``/``query``, a missing, unhashable or duplicate qid,
    an item that is not a request, ``filters`` that are not a dict); then
    ``SchemaValidationError`` from ``input_schema`` (each query as the dict single search would
    get; the issue's path starts with the qid); then ``SearchError(client)`` for a request's
    field, its ``query`` the qid.
    """
    started = time.perf_counter()
    qids, requests = _parse(queries, limit=limit, offset=offset, mode=mode, filters=filters)
    if input_schema is not None:
        validate_each(input_schema, zip(qids, _raw_requests(queries, limit=limit, offset=offset, mode=mode,
                                                            filters=filters), strict=True), "input")
    resolved = []
    for qid, req in zip(qids, requests, strict=True):
        try:
            resolved.append(resolve_request(req, options))
        except SearchError as exc:
            raise exc.at_query(qid) from exc
    return BatchRequests(qids, requests, resolved, started)


def _check_qids(qids: pd.Series) -> None:
    """``SearchError(client)`` naming the row of a missing (None/NaN/NA) or unhashable qid, or a
    duplicate."""
    missing = qids.isna().to_numpy()
    if missing.any():
        row = int(np.argmax(missing))
        raise SearchError(S.CLIENT, f"queries DataFrame row {row} has a missing qid ({qids.iloc[row]!r}); "
                                    "every query needs an id")
    if qids.dtype == object:  # typed columns (int, str, ...) hold hashable values only
        for row, qid in enumerate(qids):
            if not _hashable(qid):
                raise SearchError(S.CLIENT, f"queries DataFrame row {row}: qid {reprlib.repr(qid)[:60]} is not hashable "
                                            f"({type(qid).__name__}); use str or int ids")
    dup = qids.duplicated().to_numpy()
    if dup.any():
        row = int(np.argmax(dup))
        first = next(i for i, q in enumerate(qids) if q == qids.iloc[row])
        raise SearchError(S.CLIENT, f"queries DataFrame has duplicate qid {qids.iloc[row]!r} (rows {first} and {row})")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _parse(queries: Any, *, limit: int | None, offset: int, mode: str | None,
           filters: dict[str, Any] | None) -> tuple[list[Any], list[SearchRequest]]:
    """Query ids and requests from a list of str / SearchRequest / dict, or a DataFrame (the
    list's own checks of :func:`batch_requests`)."""
    try:
        mapping("filters", {} if filters is None else filters)
    except ParameterError as exc:
        raise SearchError(S.CLIENT, str(exc), cause=exc) from exc
    defaults = {"limit": limit, "offset": offset, "mode": mode, "filters": dict(filters or {})}
    if isinstance(queries, pd.DataFrame):
        missing = [c for c in ("qid", "query") if c not in queries.columns]
        if missing:
            raise SearchError(S.CLIENT, f"queries DataFrame lacks column(s) {missing}; has {list(queries.columns)}")
        _check_qids(queries["qid"])
        return list(queries["qid"]), [SearchRequest(query=q, **defaults) for q in queries["query"]]  # type: ignore[arg-type]
    if isinstance(queries, (str, bytes, Mapping)) or not isinstance(queries, Sequence):
        raise SearchError(S.CLIENT, f"queries must be a list or a DataFrame with qid and query, got {type(queries).__name__}")
    requests = []
    for i, q in enumerate(queries):
        if isinstance(q, str):
            requests.append(SearchRequest(query=q, **defaults))  # type: ignore[arg-type]
            continue
        try:
            req = coerce_request(q)
        except SearchError as exc:
            raise SearchError(S.CLIENT, f"queries[{i}]: {exc.detail}", cause=exc) from exc
        requests.append(replace(req, limit=req.limit if req.limit is not None else limit,
                                mode=req.mode if req.mode is not None else mode))  # type: ignore[arg-type]
    return list(range(len(requests))), requests


def _raw_requests(queries: Any, *, limit: int | None, offset: Any, mode: Any, filters: Any) -> list[dict[str, Any]]:
    """Each query as the dict single search would get (what an ``input_schema`` checks): a
    request's own fields, the keywords it falls back to, and for strings and DataFrame rows the
    keywords given (``offset`` when not 0). Call after :func:`_parse` accepted ``queries``."""
    given = {k: v for k, v in (("limit", limit), ("mode", mode), ("filters", filters)) if v is not None}
    if offset != 0:
        given["offset"] = offset
    texts = list(queries["query"]) if isinstance(queries, pd.DataFrame) else list(queries)
    out = []
    for q in texts:
        if isinstance(q, str) or isinstance(queries, pd.DataFrame):
            out.append({"query": q, **given})
            continue
        raw = q.to_dict() if isinstance(q, SearchRequest) else dict(q)
        out.append(raw | {k: given[k] for k in ("limit", "mode") if k in given and raw.get(k) is None})
    return out
