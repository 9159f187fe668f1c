"""The stages of a search, written once: single search and batch search both run them.

:data:`STAGE_ORDER` is the order; :class:`Stages` runs them over a list of pipeline contexts
(one context for ``search``, many for ``search_batch``), every stage for every query before
the next stage starts:

planner -> (cache lookup, single search only) -> intent classifier -> embedder (one call for
every expanded query of every query) -> retriever -> deduplicator -> reranker -> pagination
-> synthesizer -> (cache write) -> telemetry; :mod:`kolm_search.contract.pipeline` says which run when.

The retriever stage calls ``retrieve_batch`` once for the whole batch when the retriever is a
:class:`~kolm_search.contract.ports.BatchRetriever` and the caller asks for the columnar path, and the
spec's ``retrieve(context)`` per query otherwise (concurrently). Candidates stay columnar
(document-table codes) until a deduplicator, reranker or synthesizer needs documents, or the
response is built. Any exception a port raises becomes ``SearchError(stage=...)``.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np

from kolm_search._bridge import TimedOut, call_with_deadline, resolve
from kolm_search._logging import log, warn
from kolm_search.contract.candidates import Candidates, Outcome, Run, check_plan, dedup_report
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.port_calls import embed_all, embedding_matrix
from kolm_search.contract.ports import (
    BatchRetriever,
    FusesChildren,
    NonBlockingCache,
    ReportsDuplicates,
    Updatable,
    implements,
)
from kolm_search.contract.reranking import rerank_all
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.errors import FilterError, PipelineStage, SearchError
from kolm_search.types import (
    QueryPlan,
    SearchDocument,
    SearchPipelineContext,
    SearchRequest,
    SearchResponse,
    as_documents,
)

__all__ = ["STAGE_ORDER", "Stages", "is_batch_retriever"]

S = PipelineStage
#: The stages in the order a search runs them (``client`` checks come first, a composite's
#: children run inside ``retriever``).
STAGE_ORDER = tuple(s for s in PipelineStage if s not in (S.CLIENT, S.COMPOSITE_RETRIEVER))


def is_batch_retriever(retriever: Any) -> TypeGuard[BatchRetriever]:
    """True when ``retriever`` offers the columnar path (``retrieve_batch`` over a ``table``)."""
    return isinstance(retriever, BatchRetriever) and retriever.table is not None


class Stages:
    """The stage runner over a pipeline's modules (see the module docstring): the one place
    that dispatches on the capabilities of :mod:`kolm_search.contract.ports`. It holds no state of a
    run (that is :class:`Run`), so one runner serves every search of a pipeline."""

    def __init__(self, modules: SearchPipelineModules, options: SearchPipelineOptions) -> None:
        self.modules = modules
        self.options = options

    async def port(self, run: Run, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, awaited if needed, within the stage's deadline
        (``options.timeout_for(stage)``, shared by every call of the stage in this run);
        ``SearchError(stage, "... timed out after Xs")`` when it passes."""
        timeout = self.options.timeout_for(stage)
        if timeout is None:
            return await resolve(fn(*args))
        deadline = run.deadlines.setdefault(stage, asyncio.get_running_loop().time() + timeout)
        value = await call_with_deadline(fn, args, timeout, deadline=deadline)
        if isinstance(value, TimedOut):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise SearchError(stage, f"{name} timed out after {timeout:g}s (call abandoned){value.note}")
        return value

    async def call(self, stage: str, run: Run, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, awaited if needed, timed into ``durations[stage]``; an exception becomes
        ``SearchError(stage)``."""
        t0 = time.perf_counter()
        try:
            return await self.port(run, stage, fn, *args)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(stage, exc) from exc
        finally:
            run.timed(stage, t0)

    async def documents(self, stage: str, run: Run, fn: Callable[..., Any],
                        *args: Any) -> list[SearchDocument]:
        """:meth:`call` for a port that returns documents, checked."""
        raw = await self.call(stage, run, fn, *args)
        try:
            return as_documents(raw, what=stage)
        except (TypeError, ValueError) as exc:
            raise SearchError(stage, str(exc), cause=exc) from exc

    # -- cache and telemetry: bounded, never failing a search ------------------------------
    async def _bounded(self, stage: str, message: str, timeout: float | None, fn: Any,
                       *args: Any) -> tuple[bool, Any]:
        """``(True, value)`` of ``fn(*args)`` within ``timeout``; ``(False, None)`` and a warning
        (``message`` with a ``SearchError(stage)`` payload) when it raises or is late (then it
        is abandoned)."""
        try:
            value = await call_with_deadline(fn, args, timeout)
        except Exception as exc:
            log(self.options.logger, "warning", message, SearchError.wrap(stage, exc))
            return False, None
        if isinstance(value, TimedOut):
            name = getattr(fn, "__name__", "call")
            warn(self.options.logger, message,
                 SearchError(stage, f"{name} timed out after {timeout:g}s (abandoned){value.note}"))
            return False, None
        return True, value

    async def cache_get(self, key: str) -> SearchResponse | None:
        """The cached response of ``key``, or ``None`` (a miss, or a warning when the cache
        fails, is late or returns garbage). A :class:`~kolm_search.contract.ports.NonBlockingCache` is
        called inline, any other within ``cache_timeout_seconds``."""
        cache = self.modules.cache
        if cache is None:
            return None
        message = "cache read failed; searching without cache"
        fn, timeout = ((cache.get_nowait, None) if implements(cache, NonBlockingCache)
                       else (cache.get, self.options.cache_timeout_seconds))
        ok, value = await self._bounded(S.CACHE_GET, message, timeout, fn, key)
        if not ok or value is None:
            return None
        try:  # the caller's own response: a store may keep (and give again) the very object it was given
            # (``InMemoryCache``), and a write into a response's documents or plan must not reach the
            # next hit (a deep copy: ~25 us for 10 documents, a fifth of a hit)
            value = copy.deepcopy(value)
            return value if isinstance(value, SearchResponse) else SearchResponse.from_dict(value)
        except Exception as exc:
            log(self.options.logger, "warning", message, SearchError.wrap(S.CACHE_GET, exc))
            return None

    async def cache_set(self, key: str, response: SearchResponse) -> None:
        """Store ``response`` under ``key`` (as :meth:`cache_get` calls the cache; a failure is
        a warning and the response is not stored)."""
        cache = self.modules.cache
        if cache is None:
            return
        try:
            body = response.to_dict()
        except Exception as exc:
            log(self.options.logger, "warning", "cache write failed", SearchError.wrap(S.CACHE_SET, exc))
            return
        fn, timeout = ((cache.set_nowait, None) if implements(cache, NonBlockingCache)
                       else (cache.set, self.options.cache_timeout_seconds))
        await self._bounded(S.CACHE_SET, "cache write failed; response not stored", timeout, fn, key, body,
                            self.options.cache_ttl_seconds)

    async def track(self, event: str, payload: dict[str, Any]) -> None:
        """``telemetry.track(event, payload)`` within ``telemetry_timeout_seconds`` (a failure
        is a warning)."""
        telemetry = self.modules.telemetry
        if telemetry is not None:
            await self._bounded(S.TELEMETRY, "telemetry.track failed (ignored)", self.options.telemetry_timeout_seconds,
                                telemetry.track, event, payload)

    # -- the stages, in order ------------------------------------------------------------
    async def plan(self, requests: list[SearchRequest], run: Run) -> list[QueryPlan]:
        plans = await asyncio.gather(*(self.call(S.PLANNER, run, self.modules.planner.plan, r)
                                       for r in requests))
        for plan in plans:
            check_plan(plan)
        return list(plans)

    async def execute(self, contexts: list[SearchPipelineContext], run: Run, *,
                      columnar: bool) -> list[Outcome]:
        """Every stage after planning and caching, for every context."""
        await self.classify(contexts, run)
        await self.embed(contexts, run)
        candidates = await self.retrieve(contexts, run, columnar=columnar)
        return await self.finish(contexts, candidates, run)

    async def classify(self, contexts: list[SearchPipelineContext], run: Run) -> None:
        classifier = self.modules.intent_classifier
        if classifier is None:
            return
        intents = await asyncio.gather(*(self.call(S.INTENT_CLASSIFIER, run, classifier.classify,
                                                   c.plan.normalized_query) for c in contexts))
        for context, intent in zip(contexts, intents, strict=True):
            if intent is not None and not isinstance(intent, str):
                raise SearchError(S.INTENT_CLASSIFIER, f"classify must return a str or None, got {intent!r}")
            context.plan.intent = intent

    async def embed(self, contexts: list[SearchPipelineContext], run: Run) -> None:
        """One embedding call for every expanded query of every non-fulltext query: ``embed``
        for a single text, :func:`~kolm_search.contract.port_calls.embed_all` (``embed_many``, or concurrent
        ``embed`` calls) for several."""
        rows = [c for c in contexts if c.plan.mode != "fulltext"]
        embedder = self.modules.embedder
        if not rows:
            return
        if embedder is None:
            vector = [i for i, c in enumerate(contexts) if c.plan.mode == "vector"]
            if vector:
                raise SearchError(S.EMBEDDER, "mode 'vector' needs an embedder, but none is configured",
                                  query=vector[0] if len(contexts) > 1 else None, by_position=True)
            return
        texts = [q for c in rows for q in c.plan.expanded_queries]
        t0 = time.perf_counter()

        def invalid(message: str) -> SearchError:
            return SearchError(S.EMBEDDER, message)

        async def call(fn: Callable[..., Any], *args: Any) -> Any:
            return await self.port(run, S.EMBEDDER, fn, *args)

        try:
            if len(texts) == 1:  # the spec's embed(text)
                mat = embedding_matrix(await call(embedder.embed, texts[0]), 1, what="embed", invalid=invalid)
            else:
                mat = await embed_all(embedder, texts, call=call, invalid=invalid)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.EMBEDDER, exc) from exc
        finally:
            run.timed(S.EMBEDDER, t0)
        start = 0
        for c in rows:
            n = len(c.plan.expanded_queries)
            block = mat[start:start + n]
            start += n
            c.embeddings = block[0]
            c.expanded_embeddings = block if n > 1 else None

    async def retrieve(self, contexts: list[SearchPipelineContext], run: Run, *,
                       columnar: bool) -> list[Candidates]:
        retriever = self.modules.retriever
        t0 = time.perf_counter()
        try:
            if implements(retriever, Updatable):  # deferred add/delete applied before the table is read
                await self._merge(retriever, run)
            if columnar and is_batch_retriever(retriever):
                out: list[Candidates] = [Candidates(docs=[]) for _ in contexts]
                # one sub-batch per mode, and per target limit where lists are fused (expansions, a
                # composite's children): each query's lists are then cut at its own limit before
                # fusion, as in single search; unfused lists are cut after, which is the same
                children = isinstance(retriever, FusesChildren)
                keys = [(c.plan.mode, c.plan.target_limit if children or len(c.plan.expanded_queries) > 1 else None)
                        for c in contexts]
                for key in dict.fromkeys(keys):
                    rows = [i for i, k in enumerate(keys) if k == key]
                    target = max(contexts[i].plan.target_limit for i in rows)
                    try:
                        found = await self._retrieve_batch(retriever, [contexts[i] for i in rows], target, run)
                    except FilterError as exc:
                        if len(contexts) == 1:
                            raise
                        raise exc.at_query(rows[exc.row], by_position=True) from exc
                    for i, cands in zip(rows, found, strict=True):
                        out[i] = cands
                return out
            return list(await asyncio.gather(*(self._retrieve_one(retriever, c, run) for c in contexts)))
        finally:
            run.timed(S.RETRIEVER, t0)

    async def _merge(self, retriever: Updatable, run: Run) -> None:
        try:
            await self.port(run, S.RETRIEVER, retriever.merge)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc

    async def _retrieve_one(self, retriever: Any, context: SearchPipelineContext, run: Run) -> Candidates:
        try:
            raw = await self.port(run, S.RETRIEVER, retriever.retrieve, context)
            return Candidates(docs=as_documents(raw, what="retriever"))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc

    async def _retrieve_batch(self, retriever: BatchRetriever, contexts: list[SearchPipelineContext],
                              target: int, run: Run) -> list[Candidates]:
        table = retriever.table
        assert table is not None  # is_batch_retriever
        # no retriever returns more than the table; a sub-batch has one mode
        batch = QueryBatch.from_contexts(contexts, limit=max(1, min(target, len(table))))
        try:
            frame: CandidateFrame = await self.port(run, S.RETRIEVER, retriever.retrieve_batch, batch)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc
        if not isinstance(frame, CandidateFrame) or frame.n_queries != len(contexts):
            raise SearchError(S.RETRIEVER, f"retrieve_batch must return a CandidateFrame of {len(contexts)} queries, "
                                           f"got {frame!r}")
        table = retriever.table  # again: a composed stage merges its indexes' deferred changes as it searches
        n_docs = len(table) if table is not None else 0
        if len(frame) and (int(frame.doc.max()) >= n_docs or frame.score.dtype.kind not in "iuf"
                           or np.isnan(frame.score).any()):
            raise SearchError(S.RETRIEVER, f"retrieve_batch returned document codes beyond its table "
                                           f"({n_docs} rows) or non-numeric or NaN scores")
        ptr = frame.ptr
        cut = [min(int(ptr[j + 1]), int(ptr[j]) + c.plan.target_limit) for j, c in enumerate(contexts)]
        return [Candidates(table, frame.doc[ptr[j]:cut[j]], frame.score[ptr[j]:cut[j]]) for j in range(len(contexts))]

    async def finish(self, contexts: list[SearchPipelineContext], candidates: list[Candidates],
                     run: Run) -> list[Outcome]:
        """Deduplicator (per query), reranker (one ``rerank_batch`` call for a batch when the
        reranker has it, else per query), pagination and synthesizer (per query)."""
        m = self.modules
        if m.deduplicator is None and m.reranker is None and m.synthesizer is None:
            return [self._page(c, cands) for c, cands in zip(contexts, candidates, strict=True)]
        lists = []
        for context, cands in zip(contexts, candidates, strict=True):
            context.candidates = cands.docs()
            lists.append(context.candidates)
        if m.deduplicator is not None:
            lists = list(await asyncio.gather(*(self._deduplicate(c, docs, run)
                                                for c, docs in zip(contexts, lists, strict=True))))
        if m.reranker is not None:
            lists = await self._rerank(contexts, lists, run)
        return list(await asyncio.gather(*(self._synthesize(c, docs, run)
                                           for c, docs in zip(contexts, lists, strict=True))))

    @staticmethod
    def _page(context: SearchPipelineContext, cands: Candidates) -> Outcome:
        request = context.request
        assert request.limit is not None
        return Outcome(cands.slice(request.offset, request.offset + request.limit), len(cands), None)

    async def _deduplicate(self, context: SearchPipelineContext, docs: list[SearchDocument],
                           run: Run) -> list[SearchDocument]:
        deduplicator = self.modules.deduplicator
        assert deduplicator is not None
        if not implements(deduplicator, ReportsDuplicates):
            kept = await self.documents(S.DEDUPLICATOR, run, deduplicator.deduplicate, list(docs))
            context.metadata["deduplicator"] = dedup_report(docs, kept)
            return kept
        raw = await self.call(S.DEDUPLICATOR, run, deduplicator.deduplicate_pairs, list(docs))
        try:
            found, pairs = raw
            kept = as_documents(found, what=S.DEDUPLICATOR)
            pairs = [(str(a), str(b)) for a, b in pairs]
        except (TypeError, ValueError) as exc:
            raise SearchError(S.DEDUPLICATOR, f"deduplicate_pairs must return (documents, [(dropped_id, kept_id)]), "
                                              f"got {raw!r:.80}", cause=exc) from exc
        context.metadata["deduplicator"] = dedup_report(docs, kept, pairs)
        return kept

    async def _rerank(self, contexts: list[SearchPipelineContext], lists: list[list[SearchDocument]],
                      run: Run) -> list[list[SearchDocument]]:
        async def call(fn: Callable[..., Any], *args: Any) -> Any:
            return await self.call(S.RERANKER, run, fn, *args)

        batch = len(contexts) > 1
        return await rerank_all(self.modules.reranker, list(zip(lists, contexts, strict=True)), call=call,
                                queries=range(len(contexts)) if batch else None, by_position=True)

    async def _synthesize(self, context: SearchPipelineContext, docs: list[SearchDocument],
                          run: Run) -> Outcome:
        request = context.request
        assert request.limit is not None
        context.results = docs[request.offset:request.offset + request.limit]
        synthesizer = self.modules.synthesizer
        if synthesizer is not None:
            answer = await self.call(S.SYNTHESIZER, run, synthesizer.synthesize, context)
            if answer is not None and not isinstance(answer, str):
                raise SearchError(S.SYNTHESIZER, f"synthesize must return a str or None, got {type(answer).__name__}")
            context.answer = answer
        return Outcome(Candidates(docs=context.results), len(docs), context.answer)
