"""``SearchPipeline``: the one orchestration core, with a thin sync shell.

Stage order: planner -> (cache lookup) -> intent classifier -> embedder -> retriever ->
deduplicator -> reranker -> pagination -> synthesizer -> (cache write) -> telemetry.
Every port may be sync or async; any exception a port raises becomes
``SearchError(stage=...)`` with the original as ``cause``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._aio import log, resolve, run_blocking, run_sync
from kolm_search.batch import BatchResult, run_batch
from kolm_search.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.errors import DEDUPLICATOR_STAGE, PIPELINE_STAGES, SearchError
from kolm_search.guards import coerce_request, resolve_request
from kolm_search.types import (
    QueryPlan,
    SearchDocument,
    SearchPagination,
    SearchPipelineContext,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
    as_documents,
)

__all__ = ["SearchPipeline", "cache_key", "dedup_report", "embedding_matrix"]

S = PIPELINE_STAGES
SEARCH_COMPLETED = "search.completed"


def cache_key(plan: QueryPlan, request: SearchRequest) -> str:
    """Deterministic cache key from the normalised query, mode, limit, offset, filters, context."""
    body = json.dumps(
        {
            "q": plan.normalized_query,
            "mode": plan.mode,
            "limit": request.limit,
            "offset": request.offset,
            "filters": request.filters,
            "context": request.context,
        },
        sort_keys=True,
        default=repr,
        ensure_ascii=False,
    )
    return "kolm-search:v1:" + hashlib.sha256(body.encode("utf-8")).hexdigest()


def embedding_matrix(value: Any, n_expected: int, *, what: str) -> npt.NDArray[np.float32]:
    """Check an embedder's output and return it as float32 of shape ``(n_expected, d)``.

    A 1-D vector is accepted when ``n_expected == 1``. Raises ``SearchError(stage="embedder")``
    on a count mismatch, ragged or empty rows, or NaN/inf values.
    """
    try:
        mat = np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        raise SearchError(S.EMBEDDER, f"{what} returned rows of different dimensions or non-numbers: {exc}", cause=exc) from exc
    if mat.ndim == 1 and n_expected == 1:
        mat = mat[None, :]
    if mat.ndim != 2:
        raise SearchError(S.EMBEDDER, f"{what} must return a (n, d) matrix, got shape {mat.shape}")
    if mat.shape[0] != n_expected:
        raise SearchError(S.EMBEDDER, f"{what} returned {mat.shape[0]} embeddings for {n_expected} inputs")
    if mat.shape[1] == 0:
        raise SearchError(S.EMBEDDER, f"{what} returned empty vectors")
    if not np.all(np.isfinite(mat)):
        raise SearchError(S.EMBEDDER, f"{what} returned NaN or infinite values")
    return mat


def dedup_report(before: list[SearchDocument], after: list[SearchDocument], deduplicator: Any) -> dict[str, Any]:
    """``{"kept": ids, "dropped": ids[, "pairs": (dropped, kept)]}`` for ``context.metadata``."""
    kept = [d.id for d in after]
    remaining: dict[str, int] = {}
    for d in after:
        remaining[d.id] = remaining.get(d.id, 0) + 1
    dropped = []
    for d in before:
        if remaining.get(d.id, 0):
            remaining[d.id] -= 1
        else:
            dropped.append(d.id)
    report: dict[str, Any] = {"kept": kept, "dropped": dropped}
    pairs = getattr(deduplicator, "last_dropped", None)
    if isinstance(pairs, list):
        report["pairs"] = list(pairs)
    return report


class SearchPipeline:
    """The execution engine behind :class:`~kolm_search.client.SearchClient`.

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

    # -- stage helpers -------------------------------------------------------------------
    async def _stage(self, stage: str, durations: dict[str, float], fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await resolve(fn(*args))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(stage, exc) from exc
        finally:
            durations[stage] = durations.get(stage, 0.0) + (time.perf_counter() - t0) * 1000.0

    async def _embed(self, context: SearchPipelineContext, durations: dict[str, float]) -> None:
        plan = context.plan
        embedder = self.modules.embedder
        if plan.mode == "fulltext":
            return
        if embedder is None:
            if plan.mode == "vector":
                raise SearchError(S.EMBEDDER, "mode 'vector' needs an embedder, but none is configured")
            return
        queries = list(plan.expanded_queries)
        t0 = time.perf_counter()
        try:
            if len(queries) == 1:
                vec = await resolve(embedder.embed(queries[0]))
                context.embeddings = embedding_matrix(vec, 1, what="embed")[0]
                return
            embed_many = getattr(embedder, "embed_many", None)
            if callable(embed_many):
                raw = await resolve(embed_many(queries))
                what = "embed_many"
            else:
                raw = await asyncio.gather(*(resolve(embedder.embed(q)) for q in queries))
                raw = [embedding_matrix(r, 1, what="embed")[0] for r in raw]
                what = "embed"
            mat = embedding_matrix(raw, len(queries), what=what)
            context.expanded_embeddings = mat
            context.embeddings = mat[0]
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.EMBEDDER, exc) from exc
        finally:
            durations[S.EMBEDDER] = (time.perf_counter() - t0) * 1000.0

    async def _docs_stage(self, stage: str, durations: dict[str, float], fn: Callable[..., Any], *args: Any) -> list[SearchDocument]:
        raw = await self._stage(stage, durations, fn, *args)
        try:
            return as_documents(raw, what=stage)
        except (TypeError, ValueError) as exc:
            raise SearchError(stage, str(exc), cause=exc) from exc

    # -- cache and telemetry (never fail a search) ---------------------------------------
    async def _cache_get(self, key: str) -> SearchResponse | None:
        cache = self.modules.cache
        if cache is None:
            return None
        try:
            value = await resolve(cache.get(key))
            if value is None:
                return None
            if isinstance(value, SearchResponse):
                return value
            return SearchResponse.from_dict(value)
        except Exception as exc:
            log(self.options.logger, "warning", "cache read failed; searching without cache", SearchError.wrap(S.CACHE_GET, exc))
            return None

    async def _cache_set(self, key: str, response: SearchResponse) -> None:
        cache = self.modules.cache
        if cache is None:
            return
        try:
            await resolve(cache.set(key, response.to_dict(), self.options.cache_ttl_seconds))
        except Exception as exc:
            log(self.options.logger, "warning", "cache write failed", SearchError.wrap(S.CACHE_SET, exc))

    async def _track(self, response: SearchResponse, durations: dict[str, float]) -> None:
        telemetry = self.modules.telemetry
        if telemetry is None:
            return
        payload = {
            "duration_ms": response.duration_ms,
            "mode": response.plan.mode,
            "result_count": len(response.results),
            "stage_durations": dict(durations),
        }
        try:
            await resolve(telemetry.track(SEARCH_COMPLETED, payload))
        except Exception as exc:
            log(self.options.logger, "warning", "telemetry.track failed (ignored)", exc)

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
        durations: dict[str, float] = {}
        plan = await self._stage(S.PLANNER, durations, self.modules.planner.plan, req)
        if not isinstance(plan, QueryPlan):
            raise SearchError(S.PLANNER, f"planner must return a QueryPlan, got {type(plan).__name__}")

        key = cache_key(plan, req) if self.modules.cache is not None else ""
        cached = await self._cache_get(key) if key else None
        if cached is not None:
            response = replace(
                cached,
                request=original,
                duration_ms=(time.perf_counter() - t_start) * 1000.0,
                metadata=SearchResponseMetadata(result_count=len(cached.results), cache_hit=True),
            )
            await self._track(response, durations)
            return response

        context = SearchPipelineContext(request=req, plan=plan, started_at=started_at)
        m = self.modules
        if m.intent_classifier is not None:
            intent = await self._stage(S.INTENT_CLASSIFIER, durations, m.intent_classifier.classify, plan.normalized_query)
            if intent is not None and not isinstance(intent, str):
                raise SearchError(S.INTENT_CLASSIFIER, f"classify must return a str or None, got {intent!r}")
            plan.intent = intent
        await self._embed(context, durations)
        docs = await self._docs_stage(S.RETRIEVER, durations, m.retriever.retrieve, context)
        context.candidates = docs
        if m.deduplicator is not None:
            before = docs
            docs = await self._docs_stage(DEDUPLICATOR_STAGE, durations, m.deduplicator.deduplicate, list(docs))
            context.metadata["deduplicator"] = dedup_report(before, docs, m.deduplicator)
        if m.reranker is not None:
            docs = await self._docs_stage(S.RERANKER, durations, m.reranker.rerank, list(docs), context)
        total = len(docs)
        context.results = docs[req.offset : req.offset + req.limit]
        if m.synthesizer is not None:
            answer = await self._stage(S.SYNTHESIZER, durations, m.synthesizer.synthesize, context)
            if answer is not None and not isinstance(answer, str):
                raise SearchError(S.SYNTHESIZER, f"synthesize must return a str or None, got {type(answer).__name__}")
            context.answer = answer
        response = SearchResponse(
            request=original,
            plan=plan,
            results=context.results,
            pagination=SearchPagination(offset=req.offset, limit=req.limit, total_candidates=total),
            answer=context.answer,
            duration_ms=(time.perf_counter() - t_start) * 1000.0,
            metadata=SearchResponseMetadata(result_count=len(context.results), cache_hit=False),
        )
        if key:
            await self._cache_set(key, response)
        await self._track(response, durations)
        return response

    def search_sync(self, request: SearchRequest | dict[str, Any]) -> SearchResponse:
        """Blocking :meth:`search` for scripts; raises ``RuntimeError`` inside a running loop."""
        return run_sync(self.search(request), name="search")

    async def search_batch_async(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                                 mode: str | None = None, filters: dict[str, Any] | None = None) -> BatchResult:
        """Async :meth:`search_batch`."""
        return await run_batch(self, queries, limit=limit, offset=offset, mode=mode, filters=filters)

    def search_batch(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                     mode: str | None = None, filters: dict[str, Any] | None = None) -> BatchResult:
        """Search many queries at once; results equal per-query :meth:`search` calls.

        Parameters
        ----------
        queries : list of str / SearchRequest / dict, or DataFrame with ``qid`` and ``query``
            Strings and DataFrame rows take ``limit``, ``offset``, ``mode`` and ``filters``
            from the keyword arguments; requests keep their own fields (``limit``/``mode``
            fall back to the keywords, then to the options).

        Returns
        -------
        BatchResult
            ``.run`` (``qid, doc_id, rank, score``) and ``.responses`` (built on demand).
            Query ids are the DataFrame's ``qid`` or the list positions.

        Works inside a running event loop too (a notebook): the batch then runs on a worker thread.
        """
        return run_blocking(self.search_batch_async(queries, limit=limit, offset=offset, mode=mode, filters=filters))

    def __repr__(self) -> str:
        return f"SearchPipeline(planner={self.modules.planner!r}, retriever={self.modules.retriever!r})"
