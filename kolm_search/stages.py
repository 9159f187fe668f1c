"""The stages of a search, written once: single search and batch search both run them.

:data:`STAGE_ORDER` is the order; :class:`Stages` runs them over a list of pipeline contexts
(one context for ``search``, many for ``search_batch``), every stage for every query before
the next stage starts:

planner -> (cache lookup, single search only) -> intent classifier -> embedder (one call for
every expanded query of every query) -> retriever -> deduplicator -> reranker -> pagination
-> synthesizer -> (cache write, telemetry: in :mod:`kolm_search.pipeline`).

The retriever stage calls ``retrieve_batch`` once for the whole batch when the retriever is a
:class:`~kolm_search.ports.BatchRetriever` and the caller asks for the columnar path, and the
spec's ``retrieve(context)`` per query otherwise (concurrently). Candidates stay columnar
(document-table codes) until a deduplicator, reranker or synthesizer needs documents, or the
response is built. Any exception a port raises becomes ``SearchError(stage=...)``.
"""

from __future__ import annotations

import asyncio
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import TIMED_OUT, call_with_deadline, resolve
from kolm_search.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.errors import FilterError, PipelineStage, SearchError
from kolm_search.frame import CandidateFrame, QueryBatch
from kolm_search.ports import BatchRetriever, embed_all, embedding_matrix
from kolm_search.types import (
    SEARCH_MODES,
    QueryPlan,
    SearchDocument,
    SearchPipelineContext,
    SearchRequest,
    as_documents,
)

__all__ = ["Candidates", "Outcome", "STAGE_ORDER", "Stages", "check_plan", "dedup_report", "is_batch_retriever"]

S = PipelineStage
#: The stages in the order a search runs them (``client`` checks come first, a composite's
#: children run inside ``retriever``).
STAGE_ORDER = tuple(s for s in PipelineStage if s not in (S.CLIENT, S.COMPOSITE_RETRIEVER))


def is_batch_retriever(retriever: Any) -> TypeGuard[BatchRetriever]:
    """True when ``retriever`` offers the columnar path (``retrieve_batch`` over a ``table``)."""
    return isinstance(retriever, BatchRetriever) and getattr(retriever, "table", None) is not None


def check_plan(plan: Any) -> None:
    """``SearchError(stage="planner")`` unless ``plan`` is a ``QueryPlan`` whose mode is known,
    whose ``target_limit`` is a positive int and whose queries are strings (single and batch
    search then read it alike)."""
    if not isinstance(plan, QueryPlan):
        raise SearchError(S.PLANNER, f"planner must return a QueryPlan, got {type(plan).__name__}")
    target = plan.target_limit
    if isinstance(target, bool) or not isinstance(target, numbers.Integral) or target < 1:
        raise SearchError(S.PLANNER, f"planner returned target_limit {target!r}; expected a positive integer")
    if plan.mode not in SEARCH_MODES:
        raise SearchError(S.PLANNER, f"planner returned mode {plan.mode!r}; expected one of {list(SEARCH_MODES)}")
    queries = plan.expanded_queries
    if not isinstance(plan.normalized_query, str) or not isinstance(queries, list) or not queries or \
            not all(isinstance(q, str) for q in queries):
        raise SearchError(S.PLANNER, f"planner returned queries {plan.normalized_query!r}, {queries!r:.80}; "
                                     "expected a string and a non-empty list of strings")


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


class Candidates:
    """One query's ranked candidates: document-table codes and scores, or documents."""

    __slots__ = ("_docs", "codes", "scores", "table")

    def __init__(self, table: Any = None, codes: Any = None, scores: Any = None,
                 docs: list[SearchDocument] | None = None) -> None:
        self.table, self.codes, self.scores, self._docs = table, codes, scores, docs

    def __len__(self) -> int:
        return len(self._docs) if self._docs is not None else len(self.codes)

    def docs(self) -> list[SearchDocument]:
        if self._docs is None:
            self._docs = self.table.documents(self.codes, self.scores)
        return self._docs

    def slice(self, start: int, stop: int) -> Candidates:
        if self._docs is not None:
            return Candidates(docs=self._docs[start:stop])
        return Candidates(self.table, self.codes[start:stop], self.scores[start:stop])

    def ids_scores(self) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.float64]]:
        """Document ids (object) and scores (float64, NaN where a document has none)."""
        if self._docs is None:
            return self.table.ids[self.codes], np.asarray(self.scores, dtype=np.float64)
        ids = np.array([d.id for d in self._docs], dtype=object)
        return ids, np.array([np.nan if d.score is None else d.score for d in self._docs], dtype=np.float64)


@dataclass
class Outcome:
    """What the stages produce for one query: its page, how many candidates survived
    deduplication and re-ranking, and the synthesizer's answer."""

    page: Candidates
    total: int
    answer: str | None


class Stages:
    """The stage runner over a pipeline's modules (see the module docstring)."""

    def __init__(self, modules: SearchPipelineModules, options: SearchPipelineOptions) -> None:
        self.modules = modules
        self.options = options
        self._deadlines: dict[str, float] = {}

    async def port(self, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, awaited if needed, within the stage's deadline
        (``options.timeout_for(stage)``, shared by every call of the stage in this run);
        ``SearchError(stage, "... timed out after Xs")`` when it passes."""
        timeout = self.options.timeout_for(stage)
        if timeout is None:
            return await resolve(fn(*args))
        deadline = self._deadlines.setdefault(stage, asyncio.get_running_loop().time() + timeout)
        value = await call_with_deadline(fn, args, timeout, deadline=deadline)
        if value is TIMED_OUT:
            name = getattr(fn, "__name__", type(fn).__name__)
            raise SearchError(stage, f"{name} timed out after {timeout:g}s (call abandoned)")
        return value

    async def call(self, stage: str, durations: dict[str, float], fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, awaited if needed, timed into ``durations[stage]``; an exception becomes
        ``SearchError(stage)``."""
        t0 = time.perf_counter()
        try:
            return await self.port(stage, fn, *args)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(stage, exc) from exc
        finally:
            durations[stage] = durations.get(stage, 0.0) + (time.perf_counter() - t0) * 1000.0

    async def documents(self, stage: str, durations: dict[str, float], fn: Callable[..., Any],
                        *args: Any) -> list[SearchDocument]:
        """:meth:`call` for a port that returns documents, checked."""
        raw = await self.call(stage, durations, fn, *args)
        try:
            return as_documents(raw, what=stage)
        except (TypeError, ValueError) as exc:
            raise SearchError(stage, str(exc), cause=exc) from exc

    # -- the stages, in order ------------------------------------------------------------
    async def plan(self, requests: list[SearchRequest], durations: dict[str, float]) -> list[QueryPlan]:
        plans = await asyncio.gather(*(self.call(S.PLANNER, durations, self.modules.planner.plan, r)
                                       for r in requests))
        for plan in plans:
            check_plan(plan)
        return list(plans)

    async def execute(self, contexts: list[SearchPipelineContext], durations: dict[str, float], *,
                      columnar: bool) -> list[Outcome]:
        """Every stage after planning and caching, for every context."""
        await self.classify(contexts, durations)
        await self.embed(contexts, durations)
        candidates = await self.retrieve(contexts, durations, columnar=columnar)
        return await self.finish(contexts, candidates, durations)

    async def classify(self, contexts: list[SearchPipelineContext], durations: dict[str, float]) -> None:
        classifier = self.modules.intent_classifier
        if classifier is None:
            return
        intents = await asyncio.gather(*(self.call(S.INTENT_CLASSIFIER, durations, classifier.classify,
                                                   c.plan.normalized_query) for c in contexts))
        for context, intent in zip(contexts, intents, strict=True):
            if intent is not None and not isinstance(intent, str):
                raise SearchError(S.INTENT_CLASSIFIER, f"classify must return a str or None, got {intent!r}")
            context.plan.intent = intent

    async def embed(self, contexts: list[SearchPipelineContext], durations: dict[str, float]) -> None:
        """One embedding call for every expanded query of every non-fulltext query: ``embed``
        for a single text, :func:`~kolm_search.ports.embed_all` (``embed_many``, or concurrent
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
            return await self.port(S.EMBEDDER, fn, *args)

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
            durations[S.EMBEDDER] = durations.get(S.EMBEDDER, 0.0) + (time.perf_counter() - t0) * 1000.0
        start = 0
        for c in rows:
            n = len(c.plan.expanded_queries)
            block = mat[start:start + n]
            start += n
            c.embeddings = block[0]
            c.expanded_embeddings = block if n > 1 else None

    async def retrieve(self, contexts: list[SearchPipelineContext], durations: dict[str, float], *,
                       columnar: bool) -> list[Candidates]:
        retriever = self.modules.retriever
        t0 = time.perf_counter()
        try:
            if columnar and is_batch_retriever(retriever):
                out: list[Candidates] = [Candidates(docs=[]) for _ in contexts]
                # one sub-batch per mode, and per target limit where lists are fused (expansions, a
                # composite's children): each query's lists are then cut at its own limit before
                # fusion, as in single search; unfused lists are cut after, which is the same
                children = isinstance(getattr(retriever, "retrievers", None), list)
                keys = [(c.plan.mode, c.plan.target_limit if children or len(c.plan.expanded_queries) > 1 else None)
                        for c in contexts]
                for key in dict.fromkeys(keys):
                    rows = [i for i, k in enumerate(keys) if k == key]
                    target = max(contexts[i].plan.target_limit for i in rows)
                    try:
                        found = await self._retrieve_batch(retriever, [contexts[i] for i in rows], key[0], target)
                    except FilterError as exc:
                        if len(contexts) == 1:
                            raise
                        raise exc.at_query(rows[exc.row], by_position=True) from exc
                    for i, cands in zip(rows, found, strict=True):
                        out[i] = cands
                return out
            return list(await asyncio.gather(*(self._retrieve_one(retriever, c) for c in contexts)))
        finally:
            durations[S.RETRIEVER] = durations.get(S.RETRIEVER, 0.0) + (time.perf_counter() - t0) * 1000.0

    async def _retrieve_one(self, retriever: Any, context: SearchPipelineContext) -> Candidates:
        try:
            raw = await self.port(S.RETRIEVER, retriever.retrieve, context)
            return Candidates(docs=as_documents(raw, what="retriever"))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc

    async def _retrieve_batch(self, retriever: BatchRetriever, contexts: list[SearchPipelineContext],
                              mode: str, target: int) -> list[Candidates]:
        texts: list[str] = []
        owner: list[int] = []
        emb_rows: list[npt.NDArray[np.float32]] = []
        for j, c in enumerate(contexts):
            queries = list(c.plan.expanded_queries) or [c.plan.normalized_query]
            texts.extend(queries)
            owner.extend([j] * len(queries))
            if c.expanded_embeddings is not None:
                emb_rows.append(c.expanded_embeddings)
            elif c.embeddings is not None:
                emb_rows.append(np.asarray(c.embeddings, dtype=np.float32)[None, :])
        emb = np.concatenate(emb_rows) if emb_rows and sum(len(e) for e in emb_rows) == len(texts) else None
        table = retriever.table
        assert table is not None  # is_batch_retriever
        limit = max(1, min(target, len(table)))  # no retriever returns more than the table
        batch = QueryBatch(texts=texts, owner=np.asarray(owner, np.int64), n_queries=len(contexts), limit=limit,
                           filters=[dict(c.request.filters) for c in contexts], embeddings=emb, mode=mode,
                           metadata=[c.plan.metadata for c in contexts])
        try:
            frame: CandidateFrame = await self.port(S.RETRIEVER, retriever.retrieve_batch, batch)
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc
        if not isinstance(frame, CandidateFrame) or frame.n_queries != len(contexts):
            raise SearchError(S.RETRIEVER, f"retrieve_batch must return a CandidateFrame of {len(contexts)} queries, "
                                           f"got {frame!r}")
        n_docs = len(retriever.table) if retriever.table is not None else 0
        if len(frame) and (int(frame.doc.max()) >= n_docs or frame.score.dtype.kind not in "iuf"
                           or np.isnan(frame.score).any()):
            raise SearchError(S.RETRIEVER, f"retrieve_batch returned document codes beyond its table "
                                           f"({n_docs} rows) or non-numeric or NaN scores")
        ptr = frame.ptr
        cut = [min(int(ptr[j + 1]), int(ptr[j]) + c.plan.target_limit) for j, c in enumerate(contexts)]
        return [Candidates(table, frame.doc[ptr[j]:cut[j]], frame.score[ptr[j]:cut[j]]) for j in range(len(contexts))]

    async def finish(self, contexts: list[SearchPipelineContext], candidates: list[Candidates],
                     durations: dict[str, float]) -> list[Outcome]:
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
            lists = list(await asyncio.gather(*(self._deduplicate(c, docs, durations)
                                                for c, docs in zip(contexts, lists, strict=True))))
        if m.reranker is not None:
            lists = await self._rerank(contexts, lists, durations)
        return list(await asyncio.gather(*(self._synthesize(c, docs, durations)
                                           for c, docs in zip(contexts, lists, strict=True))))

    @staticmethod
    def _page(context: SearchPipelineContext, cands: Candidates) -> Outcome:
        request = context.request
        assert request.limit is not None
        return Outcome(cands.slice(request.offset, request.offset + request.limit), len(cands), None)

    async def _deduplicate(self, context: SearchPipelineContext, docs: list[SearchDocument],
                           durations: dict[str, float]) -> list[SearchDocument]:
        deduplicator = self.modules.deduplicator
        assert deduplicator is not None
        kept = await self.documents(S.DEDUPLICATOR, durations, deduplicator.deduplicate, list(docs))
        context.metadata["deduplicator"] = dedup_report(docs, kept, deduplicator)
        return kept

    async def _rerank(self, contexts: list[SearchPipelineContext], lists: list[list[SearchDocument]],
                      durations: dict[str, float]) -> list[list[SearchDocument]]:
        reranker = self.modules.reranker
        assert reranker is not None
        batch = getattr(reranker, "rerank_batch", None)
        if len(contexts) == 1 or not callable(batch):
            return list(await asyncio.gather(*(self.documents(S.RERANKER, durations, reranker.rerank, list(docs), c)
                                               for c, docs in zip(contexts, lists, strict=True))))
        raw = await self.call(S.RERANKER, durations, batch, [(list(d), c) for d, c in zip(lists, contexts, strict=True)])
        if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or len(raw) != len(lists):
            raise SearchError(S.RERANKER, f"rerank_batch must return one list per query ({len(lists)}), got {raw!r:.80}")
        try:
            return [as_documents(r, what=S.RERANKER) for r in raw]
        except (TypeError, ValueError) as exc:
            raise SearchError(S.RERANKER, str(exc), cause=exc) from exc

    async def _synthesize(self, context: SearchPipelineContext, docs: list[SearchDocument],
                          durations: dict[str, float]) -> Outcome:
        request = context.request
        assert request.limit is not None
        context.results = docs[request.offset:request.offset + request.limit]
        synthesizer = self.modules.synthesizer
        if synthesizer is not None:
            answer = await self.call(S.SYNTHESIZER, durations, synthesizer.synthesize, context)
            if answer is not None and not isinstance(answer, str):
                raise SearchError(S.SYNTHESIZER, f"synthesize must return a str or None, got {type(answer).__name__}")
            context.answer = answer
        return Outcome(Candidates(docs=context.results), len(docs), context.answer)
