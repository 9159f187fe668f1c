"""Query planners: ``DefaultQueryPlanner`` and ``ExpandingQueryPlanner``."""

from __future__ import annotations

import re
from typing import Any

from kolm_search._bridge import TimedOut, call_with_deadline
from kolm_search._logging import log
from kolm_search._params import positive_int, seconds
from kolm_search.contract.incomplete import mark_incomplete
from kolm_search.contract.ports import Logger, QueryExpander, missing_methods
from kolm_search.errors import KolmValueError
from kolm_search.types import QueryPlan, SearchRequest

__all__ = ["DefaultQueryPlanner", "ExpandingQueryPlanner", "normalize_query"]

_WHITESPACE = re.compile(r"\s+")


def normalize_query(query: str) -> str:
    """Strip, lowercase, and collapse every run of Unicode whitespace to one space."""
    return _WHITESPACE.sub(" ", query.strip().lower())


def _base_plan(request: SearchRequest) -> QueryPlan:
    limit = request.limit if request.limit is not None else 10
    normalized = normalize_query(request.query)
    return QueryPlan(
        normalized_query=normalized,
        expanded_queries=[normalized],
        mode=request.mode or "hybrid",
        target_limit=int(request.offset) + int(limit),
    )


class DefaultQueryPlanner:
    """Stateless planner: normalise the query, no expansion.

    ``target_limit = offset + limit``: enough candidates to fill the requested page.
    The pipeline resolves ``limit`` and ``mode`` defaults before calling ``plan``.
    """

    def plan(self, request: SearchRequest) -> QueryPlan:
        return _base_plan(request)

    def __repr__(self) -> str:
        return "DefaultQueryPlanner()"


class ExpandingQueryPlanner:
    """Multi-query planner over an injected :class:`QueryExpander`.

    Parameters
    ----------
    expander : QueryExpander
        Returns alternative phrasings of the normalised query.
    max_queries : int, default 4
        Maximum total queries in ``expanded_queries``, primary query included.
    logger : Logger, optional
        Receives a warning when the expander fails, times out or returns nothing.
    timeout_seconds : float or None, default 30
        Time allowed for one expansion; a late expander is abandoned (a warning) and the
        primary query used alone. A synchronous expander then runs on a worker thread, so
        one that blocks cannot hold the event loop (nor a stage deadline); ``None``: inline,
        no limit.

    The primary query stays at index 0; expansions are normalised, deduplicated against
    each other and the primary, and capped. A failing or empty expander degrades to the
    primary query alone (degraded relevance beats a failed search); a failed or late one marks
    the answer incomplete (:func:`~kolm_search.contract.incomplete.mark_incomplete`), so that
    no cache keeps it (the response cache keys a request by its query, not its expansions).
    """

    def __init__(self, expander: QueryExpander, max_queries: int = 4, logger: Logger | None = None,
                 timeout_seconds: float | None = 30.0) -> None:
        if missing_methods(expander, QueryExpander):
            raise KolmValueError(f"expander must have an 'expand' method, got {type(expander).__name__}")
        self.expander: QueryExpander = expander
        self.max_queries: int = positive_int("max_queries", max_queries)
        self.logger: Logger | None = logger
        self.timeout_seconds: float | None = seconds("timeout_seconds", timeout_seconds)

    async def plan(self, request: SearchRequest) -> QueryPlan:
        plan = _base_plan(request)
        primary = plan.normalized_query
        try:
            raw: Any = await call_with_deadline(self.expander.expand, (primary,), self.timeout_seconds)
        except Exception as exc:  # degrade, never fail the search (nor cache its answer)
            log(self.logger, "warning", "query expansion failed; using the primary query alone", exc)
            mark_incomplete()
            return plan
        if isinstance(raw, TimedOut):
            mark_incomplete()
            log(self.logger, "warning", f"query expansion timed out after {self.timeout_seconds:g}s{raw.note}; "
                "using the primary query alone", {"query": primary})
            return plan
        if raw is None or isinstance(raw, str):
            raw = [] if raw is None else [raw]
        queries = [primary]
        seen = {primary}
        for item in raw:
            if not isinstance(item, str):
                continue
            q = normalize_query(item)
            if q and q not in seen:
                seen.add(q)
                queries.append(q)
            if len(queries) >= self.max_queries:
                break
        if len(queries) == 1:
            log(self.logger, "warning", "query expander returned no usable expansion", {"query": primary})
        plan.expanded_queries = queries
        return plan

    def __repr__(self) -> str:
        return f"ExpandingQueryPlanner(expander={self.expander!r}, max_queries={self.max_queries})"
