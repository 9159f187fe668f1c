from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import (
    PIPELINE_STAGES,
    CompositeRetriever,
    DefaultQueryPlanner,
    SearchDocument,
    SearchError,
    SearchPipelineContext,
    SearchRequest,
    fuse,
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


# -- fusion methods, normalisations and depth beyond RRF ---------------------------------------

def scored(ids: list[str], scores: list[float]) -> list[SearchDocument]:
    return [SearchDocument(id=i, content=i, score=s) for i, s in zip(ids, scores, strict=True)]


def as_run(docs: list[SearchDocument]) -> pd.DataFrame:
    return pd.DataFrame({"qid": "q", "doc_id": [x.id for x in docs], "score": [x.score for x in docs],
                         "rank": range(len(docs))})


@settings(max_examples=40, deadline=None)
@given(data=st.data(), method=st.sampled_from(["rrf", "sum", "mnz", "max", "med", "isr", "bordafuse"]),
       norm=st.sampled_from([None, "min-max", "zmuv", "sum", "max"]), limit=st.integers(1, 12),
       depth=st.one_of(st.none(), st.integers(1, 15)), weighted=st.booleans())
async def test_methods_and_depth_match_fuse(data: st.DataObject, method: str, norm: str | None, limit: int,
                                            depth: int | None, weighted: bool) -> None:
    """Each child gives ``max(depth, limit)`` documents; the fused list is ``fuse`` of those runs."""
    lists = []
    for _ in range(data.draw(st.integers(1, 3))):
        ids = data.draw(st.lists(st.sampled_from("abcdefghijklmnop"), min_size=0, max_size=15, unique=True))
        vals = sorted(data.draw(st.lists(st.integers(-5, 20), min_size=len(ids), max_size=len(ids))), reverse=True)
        lists.append(scored(ids, [float(v) for v in vals]))
    weights = [float(w) for w in data.draw(st.lists(st.integers(1, 4), min_size=len(lists), max_size=len(lists)))] \
        if weighted and method not in ("max", "med") else None
    comp = CompositeRetriever([ListRetriever(x) for x in lists], k=7, method=method, norm=norm, depth=depth,
                              weights=weights)
    got = await comp.retrieve(ctx(limit))
    wanted = max(depth or 0, limit)
    runs = [as_run(x[:wanted]) for x in lists]
    expected = fuse(runs, method, k=7 if method == "rrf" else None, weights=weights, norm=norm, limit=limit)
    assert [x.id for x in got] == list(expected["doc_id"])
    assert [x.score for x in got] == pytest.approx(list(expected["score"]), rel=1e-9, abs=1e-12)


def test_default_keeps_the_spec_path_and_repr() -> None:
    comp = CompositeRetriever([ListRetriever(d("ab"))])
    assert comp.method == "rrf" and comp.norm is None and comp.depth is None
    assert "method" not in repr(comp)
    assert "norm='zmuv'" in repr(CompositeRetriever([ListRetriever(d("ab"))], method="sum", norm="z-score"))


async def test_score_methods_need_scores() -> None:
    comp = CompositeRetriever([ListRetriever(d("ab")), ListRetriever(d("ba"))], method="sum", norm="min-max")
    with pytest.raises(SearchError, match="without a score") as info:
        await comp.retrieve(ctx())
    assert info.value.stage == "composite-retriever"
    ranked = await CompositeRetriever([ListRetriever(d("ab")), ListRetriever(d("ba"))], method="isr",
                                      depth=5).retrieve(ctx())  # rank-based: no scores needed
    assert sorted(x.id for x in ranked) == ["a", "b"]


@pytest.mark.parametrize(
    "kwargs, match",
    [({"depth": 0}, "depth"), ({"depth": 2.5}, "depth"), ({"depth": True}, "depth"), ({"method": "nope"}, "method"),
     ({"norm": "nope"}, "norm"), ({"method": "probfuse"}, "trained|training|fit_fusion|requires|needs"),
     ({"method": "max", "weights": [1.0]}, "weight")],
)
def test_bad_fusion_options(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CompositeRetriever([ListRetriever()], **kwargs)  # type: ignore[arg-type]
