"""``SearchPipeline``: single and batch search over one stage runner, with thin sync shells.

Both paths run :class:`kolm_search.contract.stages.Stages` (stage order in
:data:`~kolm_search.contract.stages.STAGE_ORDER`); single search adds the response cache around it and
both report to telemetry. Every port may be sync or async; any exception a port raises
becomes ``SearchError(stage=...)`` with the original as ``cause``.

Never failing a search: the response cache is keyed by content (:func:`cache_key`; a request
holding a value with no faithful encoding is not cached); cache and telemetry calls are
bounded by ``cache_timeout_seconds`` / ``telemetry_timeout_seconds`` (1 s by default) and a
late, failing or garbage-returning call is abandoned with a warning; stages can be bounded by
``stage_timeout_seconds`` / ``stage_timeouts`` (see :class:`SearchPipelineOptions`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from kolm_search._bridge import run_sync
from kolm_search._logging import warn
from kolm_search.contract.batch import BatchResult
from kolm_search.contract.cachekey import canonical_digest, request_key
from kolm_search.contract.candidates import Run
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.guards import BatchRequests, batch_requests, coerce_request, resolve_request
from kolm_search.contract.incomplete import mark_incomplete, watching_incomplete
from kolm_search.contract.ports import CachesScores, HasIndexRevision, Updatable, implements
from kolm_search.contract.stages import Stages
from kolm_search.errors import KolmTypeError, KolmValueError, PipelineStage
from kolm_search.types import (
    QueryPlan,
    SearchPagination,
    SearchPipelineContext,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
)

__all__ = ["SearchPipeline", "cache_key"]

S = PipelineStage
SEARCH_COMPLETED = "search.completed"
SEARCH_BATCH_COMPLETED = "search.batch_completed"
def _feedback(plan: QueryPlan) -> dict[str, Any] | None:
    """The plan's pseudo-relevance feedback report (``plan.metadata["feedback"]``), if any."""
    meta = plan.metadata
    found = meta.get("feedback") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else None


def cache_key(plan: QueryPlan, request: SearchRequest) -> str:
    """Content-addressed cache key of the normalised query, mode, limit, offset, filters and
    context (see :mod:`kolm_search.contract.cachekey`: types kept, arrays by dtype, shape and bytes).

    Raises
    ------
    KolmTypeError
        When a value has no faithful encoding (an arbitrary object):
        such a request is searched without the cache.
    """
    return request_key(plan.normalized_query, plan.mode, request.limit, request.offset,
                       request.filters, request.context)


class SearchPipeline:
    """The execution engine behind :class:`~kolm_search.contract.client.SearchClient`.

    Parameters
    ----------
    modules : SearchPipelineModules or dict
        Port implementations; ``planner`` and ``retriever`` are required.
    options : SearchPipelineOptions or dict, optional
        Configuration (defaults as in the spec).
    """

    def __init__(self, modules: SearchPipelineModules | dict[str, Any], options: SearchPipelineOptions | dict[str, Any] | None = None) -> None:
        self.modules = SearchPipelineModules.coerce(modules)
        self.options = SearchPipelineOptions.coerce(options)
        self._unkeyable: set[str] = set()
        self._stages: Stages | None = None

    @property
    def stages(self) -> Stages:
        """The stage runner over the current modules and options: built once, and again only
        when ``modules`` or ``options`` is replaced (it reads them at each call, so changing a
        field of either, as ``SearchClient.add`` does, needs no rebuild)."""
        runner = self._stages
        if runner is None or runner.modules is not self.modules or runner.options is not self.options:
            runner = self._stages = Stages(self.modules, self.options)
        return runner

    # -- the cache key -------------------------------------------------------------------
    def _key(self, plan: QueryPlan, req: SearchRequest) -> str:
        """The cache key, or ``""`` (do not cache) when there is no cache or a value of the
        request cannot be keyed faithfully (one warning per distinct problem and pipeline)."""
        if self.modules.cache is None:
            return ""
        try:
            key = cache_key(plan, req)
            retriever = self.modules.retriever
            revision = retriever.revision if implements(retriever, Updatable) else \
                retriever.index_revision() if implements(retriever, HasIndexRevision) else ""  # add/delete: no stale hits
            return f"{key}:{canonical_digest(revision)}" if revision else key
        except KolmTypeError as exc:
            if str(exc) not in self._unkeyable:
                self._unkeyable.add(str(exc))
                warn(self.options.logger, "request not cached: a value has no faithful cache key "
                     "(later such requests are not cached either, without a warning)", exc)
            return ""

    # -- the core --------------------------------------------------------------------------
    async def search(self, request: SearchRequest | dict[str, Any]) -> SearchResponse:
        """Run one search through every configured stage.

        Raises
        ------
        SearchError
            With the failing stage (``client`` for bad requests).
        """
        t_start = time.perf_counter()
        started_at = time.time() * 1000.0
        original = coerce_request(request)
        req = resolve_request(original, self.options)
        assert req.limit is not None
        run = Run()
        stages = self.stages
        with watching_incomplete() as degraded:  # a planner whose expander failed: the primary query alone
            (plan,) = await stages.plan([req], run)
        key = self._key(plan, req)
        cached = await stages.cache_get(key) if key else None
        if cached is not None:
            response = replace(cached, request=original, duration_ms=(time.perf_counter() - t_start) * 1000.0,
                               metadata=SearchResponseMetadata(result_count=len(cached.results), cache_hit=True,
                                                               feedback=_feedback(cached.plan)))
            await stages.track(SEARCH_COMPLETED, self._payload(response, run))
            return response
        context = SearchPipelineContext(request=req, plan=plan, started_at=started_at)
        with watching_incomplete() as incomplete:  # a best-effort fusion whose child failed: not cached
            (outcome,) = await stages.execute([context], run, columnar=False)
        results = outcome.page.docs()
        response = SearchResponse(
            request=original,
            plan=plan,
            results=results,
            pagination=SearchPagination(offset=req.offset, limit=req.limit, total_candidates=outcome.total),
            answer=outcome.answer,
            duration_ms=(time.perf_counter() - t_start) * 1000.0,
            metadata=SearchResponseMetadata(result_count=len(results), cache_hit=False, feedback=_feedback(plan)),
        )
        if incomplete[0] or degraded[0]:
            mark_incomplete()  # (the caller's block learns it too)
        elif key:
            await stages.cache_set(key, response)
        await stages.track(SEARCH_COMPLETED, self._payload(response, run))
        return response

    @staticmethod
    def _payload(response: SearchResponse, run: Run) -> dict[str, Any]:
        return {"duration_ms": response.duration_ms, "mode": response.plan.mode,
                "result_count": len(response.results), "stage_durations": dict(run.durations)}

    def search_sync(self, request: SearchRequest | dict[str, Any]) -> SearchResponse:
        """Blocking :meth:`search` (inside a running event loop, on a worker thread: notebooks work)."""
        return run_sync(self.search(request))

    #: The coroutine :meth:`search` under the explicit name (see "Sync and async twins" in the README).
    search_async = search

    def _stages_with(self, score_cache: Any) -> Stages:
        """The stage runner, its reranker behind ``score_cache`` when one is given."""
        if score_cache is None:
            return self.stages
        if self.modules.reranker is None:
            raise KolmValueError("score_cache= was given but the pipeline has no reranker")
        if not implements(score_cache, CachesScores):
            raise KolmTypeError(f"score_cache must be a ScoreCache (CachesScores: in_front_of), got "
                                f"{type(score_cache).__name__}")
        modules = replace(self.modules, reranker=score_cache.in_front_of(self.modules.reranker))
        return Stages(modules, self.options)

    async def search_batch_async(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                                 mode: str | None = None, filters: dict[str, Any] | None = None,
                                 score_cache: Any = None) -> BatchResult:
        """Async :meth:`search_batch`."""
        return await self.run_batch(batch_requests(queries, self.options, limit=limit, offset=offset, mode=mode,
                                                   filters=filters), score_cache=score_cache)

    def search_batch(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                     mode: str | None = None, filters: dict[str, Any] | None = None,
                     score_cache: Any = None) -> BatchResult:
        """Search many queries at once; results equal per-query :meth:`search` calls.

        Parameters
        ----------
        queries : list of str / SearchRequest / dict, or DataFrame with ``qid`` and ``query``
            Strings and DataFrame rows take ``limit``, ``offset``, ``mode`` and ``filters``
            from the keyword arguments; requests keep their own fields (``limit``/``mode``
            fall back to the keywords, then to the options). Checked as single search checks a
            request (:func:`~kolm_search.contract.guards.batch_requests`).
        score_cache : ScoreCache, optional
            The reranker's scores are read from it where present and stored there
            (:class:`~kolm_search.adapters.CachedReranker`: the reranker must score pairs or
            rank windows, and declare a fingerprint).

        Returns
        -------
        BatchResult
            ``.run`` (``qid, doc_id, rank, score``) and ``.responses`` (built on demand).
            Query ids are the DataFrame's ``qid`` or the list positions.

        Works inside a running event loop too (a notebook): the batch then runs on a worker thread.
        """
        batch = batch_requests(queries, self.options, limit=limit, offset=offset, mode=mode, filters=filters)
        return self.run_batch_sync(batch, score_cache=score_cache)

    async def run_batch(self, batch: BatchRequests, *, score_cache: Any = None) -> BatchResult:
        """Search queries already checked by :func:`~kolm_search.contract.guards.batch_requests` (what
        :meth:`search_batch` does after checking them; ``SearchClient`` checks its
        ``input_schema`` in between); ``score_cache`` as in :meth:`search_batch`."""
        started_at = time.time() * 1000.0
        run = Run()
        stages = self._stages_with(score_cache)
        plans = await stages.plan(batch.resolved, run)
        contexts = [SearchPipelineContext(request=r, plan=p, started_at=started_at)
                    for r, p in zip(batch.resolved, plans, strict=True)]
        result = BatchResult.of(batch, plans, await stages.execute(contexts, run, columnar=True))
        await stages.track(SEARCH_BATCH_COMPLETED, {"duration_ms": result.duration_ms, "query_count": len(result),
                                                   "result_count": len(result.run), "stage_durations": dict(run.durations)})
        return result

    def run_batch_sync(self, batch: BatchRequests, *, score_cache: Any = None) -> BatchResult:
        """Blocking :meth:`run_batch` (inside a running event loop too: it then runs on a worker thread)."""
        async def searched() -> BatchResult:
            return await self.run_batch(batch, score_cache=score_cache)

        return run_sync(searched())

    #: The blocking :meth:`search_batch` under the explicit name.
    search_batch_sync = search_batch

    def __repr__(self) -> str:
        return f"SearchPipeline(planner={self.modules.planner!r}, retriever={self.modules.retriever!r})"
