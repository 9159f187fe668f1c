from __future__ import annotations

import asyncio

import pytest

from kolm_search import DefaultQueryPlanner, ExpandingQueryPlanner, QueryPlan, SearchRequest
from tests.fakes import AsyncBoom, Boom, ListLogger


def test_default_planner_normalises_unicode_whitespace() -> None:
    plan = DefaultQueryPlanner().plan(SearchRequest(query="  Hello\u00a0\tWORLD \u2003 Foo\n", limit=7, offset=3, mode="fulltext"))
    assert isinstance(plan, QueryPlan)
    assert plan.normalized_query == "hello world foo"
    assert plan.expanded_queries == ["hello world foo"]
    assert plan.mode == "fulltext"
    assert plan.target_limit == 10
    assert plan.intent is None


class Expander:
    def __init__(self, out: object) -> None:
        self.out = out
        self.seen: list[str] = []

    def expand(self, query: str) -> object:
        self.seen.append(query)
        return self.out


class AsyncExpander(Expander):
    async def expand(self, query: str) -> object:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().expand(query)


@pytest.mark.parametrize("cls", [Expander, AsyncExpander])
async def test_expanding_planner_dedup_and_cap(cls: type[Expander]) -> None:
    exp = cls(["  Kolm SEARCH setup", "kolm search setup", "Install   kolm", "QUERY one", "a", "b"])
    planner = ExpandingQueryPlanner(exp, max_queries=3)
    plan = await planner.plan(SearchRequest(query="Query  One", limit=5))
    assert exp.seen == ["query one"]
    assert plan.expanded_queries == ["query one", "kolm search setup", "install kolm"]
    assert plan.normalized_query == "query one"


async def test_expanding_planner_default_cap_is_four() -> None:
    plan = await ExpandingQueryPlanner(Expander([f"q{i}" for i in range(10)])).plan(SearchRequest(query="x", limit=1))
    assert len(plan.expanded_queries) == 4


@pytest.mark.parametrize("expander", [Boom(), AsyncBoom(), Expander([]), Expander(None), Expander(["  X "])])
async def test_expanding_planner_degrades_with_warning(expander: object) -> None:
    logger = ListLogger()
    plan = await ExpandingQueryPlanner(expander, logger=logger).plan(SearchRequest(query=" X ", limit=2))  # type: ignore[arg-type]
    assert plan.expanded_queries == ["x"]
    assert len(logger.warnings()) == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_expanding_planner_bad_max_queries(bad: object) -> None:
    with pytest.raises(ValueError, match="max_queries"):
        ExpandingQueryPlanner(Expander([]), max_queries=bad)  # type: ignore[arg-type]


def test_expanding_planner_needs_expand() -> None:
    with pytest.raises(ValueError, match="expand"):
        ExpandingQueryPlanner(object())  # type: ignore[arg-type]
