from __future__ import annotations

import pytest

from kolm_search import (
    PIPELINE_STAGES,
    CompositeRetriever,
    DefaultQueryPlanner,
    SearchDocument,
    SearchError,
    SearchPipelineContext,
    SearchRequest,
)
from tests.fakes import AsyncListRetriever, FailingRetriever, ListLogger, ListRetriever, SlowRetriever
from tests.test_rrf import oracle_rrf


def ctx(limit: int = 10) -> SearchPipelineContext:
    req = SearchRequest(query="q", limit=limit, mode="hybrid")
    return SearchPipelineContext(request=req, plan=DefaultQueryPlanner().plan(req), started_at=0.0)


def d(ids: str) -> list[SearchDocument]:
    return [SearchDocument(id=c, content=c) for c in ids]


async def test_fuses_children_with_rrf() -> None:
    a, b = ListRetriever(d("abcde")), AsyncListRetriever(d("edxa"))
    out = await CompositeRetriever([a, b], k=10).retrieve(ctx(4))
    expected = oracle_rrf([list("abcd"), list("edxa")], 10)[:4]  # children cut at target_limit 4
    assert [x.id for x in out] == [e[0] for e in expected]
    assert [x.score for x in out] == pytest.approx([e[1] for e in expected])


async def test_weighted_rrf() -> None:
    out = await CompositeRetriever([ListRetriever(d("ab")), ListRetriever(d("ba"))], weights=[1.0, 3.0]).retrieve(ctx())
    assert [x.id for x in out] == ["b", "a"]


async def test_fail_fast_raises_composite_stage_and_cancels() -> None:
    slow = SlowRetriever(5.0, d("ab"))
    boom = RuntimeError("index offline")
    comp = CompositeRetriever([slow, FailingRetriever(boom)])
    with pytest.raises(SearchError) as info:
        await comp.retrieve(ctx())
    assert info.value.stage == PIPELINE_STAGES.COMPOSITE_RETRIEVER
    assert info.value.cause is boom
    assert str(info.value).startswith("[composite-retriever]")
    assert slow.cancelled


async def test_best_effort_skips_and_logs_index_and_name() -> None:
    logger = ListLogger()
    failing = FailingRetriever()
    failing.name = "vector-db"  # type: ignore[attr-defined]
    comp = CompositeRetriever([failing, ListRetriever(d("xy"))], strategy="best-effort", logger=logger)
    out = await comp.retrieve(ctx())
    assert [x.id for x in out] == ["x", "y"]
    (record,) = logger.warnings()
    assert "retrievers[0]" in record[1] and "vector-db" in record[1]
    assert isinstance(record[2], SearchError) and record[2].stage == "composite-retriever"


async def test_best_effort_all_fail() -> None:
    comp = CompositeRetriever([FailingRetriever(), FailingRetriever()], strategy="best-effort")
    with pytest.raises(SearchError, match="all 2 retrievers failed") as info:
        await comp.retrieve(ctx())
    assert info.value.stage == "composite-retriever"


async def test_child_returning_garbage_is_an_error() -> None:
    class Bad:
        def retrieve(self, context: object) -> object:
            return "not a list"

    with pytest.raises(SearchError, match="retrievers\\[0\\]"):
        await CompositeRetriever([Bad()]).retrieve(ctx())  # type: ignore[list-item]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"retrievers": []}, "at least one"), ({"strategy": "yolo"}, "strategy"), ({"k": -5}, "k must"), ({"weights": [1, 2]}, "weights")],
)
def test_bad_construction(kwargs: dict[str, object], match: str) -> None:
    args = {"retrievers": [ListRetriever()], **kwargs}
    with pytest.raises(ValueError, match=match):
        CompositeRetriever(**args)  # type: ignore[arg-type]


def test_child_without_retrieve_is_type_error() -> None:
    with pytest.raises(TypeError, match="retrievers\\[0\\]"):
        CompositeRetriever([object()])  # type: ignore[list-item]
