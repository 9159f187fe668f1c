"""SearchPipeline: stage order, sync/async ports, embeddings, pagination, cache, telemetry."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import numpy as np
import pytest

from kolm_search import (
    PIPELINE_STAGES,
    DefaultQueryPlanner,
    ExpandingQueryPlanner,
    SearchDocument,
    SearchError,
    SearchPipeline,
    SearchPipelineContext,
    SearchPipelineModules,
    SearchPipelineOptions,
    SearchRequest,
    SearchResponse,
)
from kolm_search.contract.pipeline import cache_key
from tests.fakes import (
    CORPUS,
    AsyncBoom,
    AsyncHashEmbedder,
    AsyncListRetriever,
    AsyncMemoryCache,
    BatchHashEmbedder,
    Boom,
    HashEmbedder,
    ListLogger,
    ListRetriever,
    ListTelemetry,
    MemoryCache,
)


class Expander:
    def expand(self, query: str) -> list[str]:
        return [query + " alpha", query + " beta"]


class OrderLog:
    """Ports that append their stage to a shared list."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.contexts: list[Any] = []

    def modules(self) -> SearchPipelineModules:
        log = self

        class Planner(DefaultQueryPlanner):
            def plan(self, request: SearchRequest) -> Any:
                log.order.append("planner")
                return super().plan(request)

        class Intent:
            async def classify(self, query: str) -> str:
                log.order.append("intent-classifier")
                return "howto"

        class Emb(HashEmbedder):
            def embed(self, text: str) -> list[float]:
                log.order.append("embedder")
                return super().embed(text)

        class Ret(ListRetriever):
            def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
                log.order.append("retriever")
                log.contexts.append(("retriever", context.request.filters, context.request.context, context.plan.intent))
                return super().retrieve(context)

        class Dedup:
            def deduplicate(self, docs: list[SearchDocument]) -> list[SearchDocument]:
                log.order.append("deduplicator")
                return [d for d in docs if d.id != "d1"]

        class Rerank:
            async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
                log.order.append("reranker")
                log.contexts.append(("reranker", context.request.filters, context.request.context, None))
                return list(reversed(docs))

        class Synth:
            def synthesize(self, context: SearchPipelineContext) -> str:
                log.order.append("synthesizer")
                log.contexts.append(("synthesizer", [d.id for d in context.results], context.request.context, None))
                return "an answer"

        return SearchPipelineModules(
            planner=Planner(), retriever=Ret(), embedder=Emb(), deduplicator=Dedup(),
            reranker=Rerank(), synthesizer=Synth(), intent_classifier=Intent(),
        )


async def test_stage_order_pagination_and_forwarding() -> None:
    log = OrderLog()
    telemetry = ListTelemetry()
    modules = log.modules()
    modules.telemetry = telemetry
    pipe = SearchPipeline(modules)
    filters = {"tag": ["even"], "nested": {"a": 1}}
    context = {"user": "u1"}
    resp = await pipe.search({"query": "  Find  Docs ", "limit": 3, "offset": 2, "filters": filters, "context": context})
    assert log.order == ["planner", "intent-classifier", "embedder", "retriever", "deduplicator", "reranker", "synthesizer"]
    # target_limit = offset + limit = 5 candidates; dedup drops d1 -> d0 d2 d3 d4; reversed -> d4 d3 d2 d0
    assert [d.id for d in resp.results] == ["d2", "d0"]
    assert resp.pagination.offset == 2 and resp.pagination.limit == 3 and resp.pagination.total_candidates == 4
    assert resp.answer == "an answer"
    assert resp.plan.intent == "howto" and resp.plan.normalized_query == "find docs"
    assert resp.metadata is not None and resp.metadata.result_count == 2 and resp.metadata.cache_hit is False
    assert resp.duration_ms > 0
    assert ("retriever", filters, context, "howto") in log.contexts
    assert ("reranker", filters, context, None) in log.contexts
    assert ("synthesizer", ["d2", "d0"], context, None) in log.contexts  # synthesizer sees the final page
    ((event, payload),) = telemetry.calls
    assert event == "search.completed"
    assert set(payload) == {"duration_ms", "mode", "result_count", "stage_durations"}
    assert payload["mode"] == "hybrid" and payload["result_count"] == 2
    assert set(payload["stage_durations"]) == {
        "planner", "intent-classifier", "embedder", "retriever", "deduplicator", "reranker", "synthesizer"
    }
    assert all(v >= 0 for v in payload["stage_durations"].values())


def stage_modules(stage: str, bad: object) -> SearchPipelineModules:
    mods: dict[str, Any] = {"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "embedder": HashEmbedder()}
    key = {"planner": "planner", "intent-classifier": "intent_classifier", "embedder": "embedder",
           "retriever": "retriever", "deduplicator": "deduplicator", "reranker": "reranker",
           "synthesizer": "synthesizer"}[stage]
    mods[key] = bad
    return SearchPipelineModules(**mods)


@pytest.mark.parametrize("stage", ["planner", "intent-classifier", "embedder", "retriever", "deduplicator", "reranker", "synthesizer"])
@pytest.mark.parametrize("boom_cls", [Boom, AsyncBoom])
async def test_every_port_failure_is_search_error_with_stage(stage: str, boom_cls: type[Boom]) -> None:
    cause = ConnectionError("service unavailable")
    pipe = SearchPipeline(stage_modules(stage, boom_cls(cause)))
    with pytest.raises(SearchError) as info:
        await pipe.search({"query": "hello", "mode": "hybrid"})
    assert info.value.stage == stage
    assert info.value.cause is cause
    assert str(info.value).startswith(f"[{stage}] ")
    assert "service unavailable" in str(info.value)


@pytest.mark.parametrize(
    "stage, bad_return",
    [("retriever", "nope"), ("retriever", [1, 2]), ("reranker", None), ("deduplicator", {"id": "x"}),
     ("planner", {"normalized_query": "x"}), ("synthesizer", 42), ("intent-classifier", 3)],
)
async def test_bad_port_return_values(stage: str, bad_return: object) -> None:
    class Port:
        def _ret(self, *a: object) -> object:
            return bad_return

        plan = retrieve = deduplicate = rerank = synthesize = classify = _ret

    with pytest.raises(SearchError) as info:
        await SearchPipeline(stage_modules(stage, Port())).search({"query": "q"})
    assert info.value.stage == stage


class CaptureRetriever(ListRetriever):
    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        self.context = context
        return super().retrieve(context)


@pytest.mark.parametrize("emb_cls", [HashEmbedder, AsyncHashEmbedder])
async def test_single_query_embedding(emb_cls: type[HashEmbedder]) -> None:
    ret, emb = CaptureRetriever(), emb_cls()
    await SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ret, "embedder": emb}).search({"query": "Abc", "mode": "vector"})
    e = ret.context.embeddings
    assert isinstance(e, np.ndarray) and e.dtype == np.float32 and e.shape == (8,)
    np.testing.assert_allclose(e, HashEmbedder().embed("abc"), rtol=1e-6)
    assert ret.context.expanded_embeddings is None


@pytest.mark.parametrize("emb_cls, method", [(BatchHashEmbedder, "embed_many"), (HashEmbedder, "embed"), (AsyncHashEmbedder, "embed")])
async def test_expanded_embeddings(emb_cls: type[HashEmbedder], method: str) -> None:
    ret, emb = CaptureRetriever(), emb_cls()
    planner = ExpandingQueryPlanner(Expander())
    await SearchPipeline({"planner": planner, "retriever": ret, "embedder": emb}).search({"query": "q", "mode": "hybrid"})
    mat = ret.context.expanded_embeddings
    assert mat.dtype == np.float32 and mat.shape == (3, 8)
    np.testing.assert_array_equal(mat[0], ret.context.embeddings)
    np.testing.assert_allclose(mat[2], HashEmbedder().embed("q beta"), rtol=1e-6)
    if method == "embed_many":
        assert emb.calls == [("embed_many", ["q", "q alpha", "q beta"])]
    else:
        assert sorted(c[1] for c in emb.calls) == ["q", "q alpha", "q beta"]


class FixedEmbedder:
    def __init__(self, single: object, many: object) -> None:
        self.single, self.many = single, many

    def embed(self, text: str) -> object:
        return self.single

    def embed_many(self, texts: list[str]) -> object:
        return self.many


@pytest.mark.parametrize(
    "single, many, expanded, match",
    [
        ([1.0, 2.0], [[1.0, 2.0]], True, "2 inputs|1 embeddings for 3"),  # count mismatch
        ([1.0, 2.0], [[1.0, 2.0], [1.0], [3.0, 4.0]], True, "dimensions"),
        ([1.0, float("nan")], None, False, "NaN"),
        ([1.0, 2.0], [[1.0, 2.0], [1.0, 2.0], [float("inf"), 0.0]], True, "NaN or infinite"),
        ("text", None, False, "dimensions|non-numbers|shape"),
        ([], None, False, "empty"),
    ],
)
async def test_bad_embeddings_are_embedder_errors(single: object, many: object, expanded: bool, match: str) -> None:
    planner = ExpandingQueryPlanner(Expander()) if expanded else DefaultQueryPlanner()
    pipe = SearchPipeline({"planner": planner, "retriever": ListRetriever(), "embedder": FixedEmbedder(single, many)})
    with pytest.raises(SearchError, match=match) as info:
        await pipe.search({"query": "q", "mode": "vector"})
    assert info.value.stage == PIPELINE_STAGES.EMBEDDER


async def test_fulltext_never_calls_embedder() -> None:
    emb = Boom()
    resp = await SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "embedder": emb}).search(
        {"query": "q", "mode": "fulltext"})
    assert len(resp.results) == 10


async def test_vector_mode_without_embedder_is_an_error_hybrid_is_not() -> None:
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()})
    with pytest.raises(SearchError) as info:
        await pipe.search({"query": "q", "mode": "vector"})
    assert info.value.stage == "embedder"
    resp = await pipe.search({"query": "q"})
    assert resp.plan.mode == "hybrid" and len(resp.results) == 10


async def test_defaults_from_options() -> None:
    ret = CaptureRetriever()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ret}, SearchPipelineOptions(default_limit=4, default_mode="fulltext"))
    req = SearchRequest(query="q")
    resp = await pipe.search(req)
    assert len(resp.results) == 4 and resp.plan.mode == "fulltext" and resp.plan.target_limit == 4
    assert resp.request is req  # the original request, unresolved


@pytest.mark.parametrize("cache_cls", [MemoryCache, AsyncMemoryCache])
async def test_cache_hit_round_trip(cache_cls: type[MemoryCache]) -> None:
    cache, ret, tel = cache_cls(), ListRetriever(), ListTelemetry()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ret, "cache": cache, "telemetry": tel},
                          {"cache_ttl_seconds": 30})
    first = await pipe.search({"query": "Hello  World", "limit": 5, "filters": {"a": 1}})
    second = await pipe.search({"query": "hello world", "limit": 5, "filters": {"a": 1}})
    assert len(ret.calls) == 1
    assert first.metadata.cache_hit is False and second.metadata.cache_hit is True
    assert [d.to_dict() for d in second.results] == [d.to_dict() for d in first.results]
    assert second.pagination == first.pagination and second.plan == first.plan
    assert second.metadata.result_count == 5
    assert ("set", (next(iter(cache.store)), 30)) in cache.calls
    assert [c[0] for c in tel.calls] == ["search.completed", "search.completed"]  # hits tracked too
    await pipe.search({"query": "hello world", "limit": 5, "filters": {"a": 2}})
    await pipe.search({"query": "hello world", "limit": 5, "offset": 1, "filters": {"a": 1}})
    await pipe.search({"query": "hello world", "limit": 5, "filters": {"a": 1}, "context": {"u": 1}})
    await pipe.search({"query": "hello world", "limit": 5, "filters": {"a": 1}, "mode": "fulltext"})
    assert len(ret.calls) == 5


def test_cache_key_deterministic_and_order_free() -> None:
    plan = DefaultQueryPlanner().plan(SearchRequest(query="x", limit=3))
    a = cache_key(plan, SearchRequest(query="x", limit=3, filters={"a": 1, "b": [1, 2]}))
    b = cache_key(plan, SearchRequest(query="x", limit=3, filters={"b": [1, 2], "a": 1}))
    c = cache_key(plan, SearchRequest(query="x", limit=3, filters={"b": [2, 1], "a": 1}))
    assert a == b != c


@pytest.mark.parametrize("boom_cls", [Boom, AsyncBoom])
async def test_cache_failures_never_fail_a_search(boom_cls: type[Boom]) -> None:
    logger = ListLogger()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "cache": boom_cls()},
                          {"logger": logger})
    resp = await pipe.search({"query": "q"})
    assert len(resp.results) == 10
    stages = [r[2].stage for r in logger.warnings()]
    assert stages == ["cache.get", "cache.set"]


async def test_corrupt_cache_entry_is_a_miss_with_warning() -> None:
    cache, logger, ret = MemoryCache(), ListLogger(), ListRetriever()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ret, "cache": cache}, {"logger": logger})
    await pipe.search({"query": "q"})
    key = next(iter(cache.store))
    cache.store[key] = {"garbage": True}
    resp = await pipe.search({"query": "q"})
    assert resp.metadata.cache_hit is False and len(ret.calls) == 2
    assert logger.warnings()[0][2].stage == "cache.get"


async def test_failing_telemetry_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("kolm-test")
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "telemetry": AsyncBoom()},
                          {"logger": logger})
    with caplog.at_level(logging.WARNING, logger="kolm-test"):
        resp = await pipe.search({"query": "q"})
    assert len(resp.results) == 10
    assert any("telemetry" in r.getMessage() for r in caplog.records)


async def test_concurrent_searches_are_independent() -> None:
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": AsyncListRetriever(), "embedder": AsyncHashEmbedder()})
    resps = await asyncio.gather(*(pipe.search({"query": f"q{i}", "limit": i + 1}) for i in range(8)))
    assert [len(r.results) for r in resps] == list(range(1, 9))
    assert [r.plan.normalized_query for r in resps] == [f"q{i}" for i in range(8)]


def test_search_sync_outside_and_inside_loop() -> None:
    """One bridge: the blocking shells work inside a running loop too (a notebook), on a worker thread."""
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()})
    outside = pipe.search_sync({"query": "q"})
    assert isinstance(outside, SearchResponse)

    async def inside() -> SearchResponse:
        return pipe.search_sync({"query": "q"})

    assert asyncio.run(inside()).results == outside.results


async def test_modules_checked_at_construction() -> None:
    with pytest.raises(TypeError, match="retriever"):
        SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": object()})
    with pytest.raises(TypeError, match="required"):
        SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": None})
    with pytest.raises(TypeError, match="reranker"):
        SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "reranker": 5})
    with pytest.raises(TypeError):
        SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "unknown": 1})


async def test_retriever_may_return_dicts() -> None:
    class DictRet:
        def retrieve(self, context: object) -> list[dict[str, object]]:
            return [{"id": "a", "content": "x", "score": 0.5}]

    resp = await SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": DictRet()}).search({"query": "q"})
    assert resp.results == [SearchDocument(id="a", content="x", score=0.5)]
    assert CORPUS[0].id == "d0"
