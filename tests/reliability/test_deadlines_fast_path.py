"""Deadlines cost normal searches nothing: no thread hop and no task unless a deadline needs one."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kolm_search import DefaultQueryPlanner, SearchPipeline
from kolm_search._bridge import DAEMON_POOL
from kolm_search.adapters import InMemoryCache
from tests.fakes import (
    AsyncHashEmbedder,
    AsyncListRetriever,
    AsyncMemoryCache,
    HashEmbedder,
    ListRetriever,
    ListTelemetry,
)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Records every call sent to the daemon pool."""
    seen: list[Any] = []
    submit = DAEMON_POOL.submit

    def recording(fn: Any, args: tuple[Any, ...]) -> Any:
        seen.append(fn)
        return submit(fn, args)

    monkeypatch.setattr(DAEMON_POOL, "submit", recording)
    return seen


@pytest.mark.parametrize("mods", [
    {"retriever": ListRetriever(), "embedder": HashEmbedder(), "cache": InMemoryCache()},
    {"retriever": AsyncListRetriever(), "embedder": AsyncHashEmbedder(), "cache": AsyncMemoryCache()},
], ids=["sync", "async"])
def test_default_options_hop_no_thread_without_sync_cache_or_telemetry(mods: dict[str, Any], hops: list[Any]) -> None:
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), **mods})
    for _ in range(2):  # a miss, then a hit
        pipe.search_sync({"query": "document number 3", "limit": 3})
    pipe.search_batch(["a b", "document"], limit=3)
    assert hops == []


def test_only_a_sync_telemetry_hops_and_stage_ports_stay_inline(hops: list[Any]) -> None:
    telemetry = ListTelemetry()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "telemetry": telemetry})
    pipe.search_sync({"query": "q"})
    pipe.search_batch(["a", "b"])
    assert hops == [telemetry.track, telemetry.track]
    hops.clear()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "telemetry": telemetry},
                          {"telemetry_timeout_seconds": None})
    pipe.search_sync({"query": "q"})
    assert hops == []


async def test_inline_path_creates_no_task() -> None:
    created: list[Any] = []
    loop = asyncio.get_running_loop()
    factory = loop.get_task_factory()

    def counting(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=lp, **kw) if factory is None else factory(lp, coro, **kw)

    loop.set_task_factory(counting)  # type: ignore[arg-type]
    try:
        pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": AsyncListRetriever(),
                               "cache": InMemoryCache()})
        await pipe.search({"query": "q", "limit": 2})
    finally:
        loop.set_task_factory(factory)
    gathered = [c for c in created if "AsyncListRetriever.retrieve" in repr(c) or "_await_within" in repr(c)]
    assert gathered == []
