"""``Fuse``/``CompositeRetriever`` ``params=`` under hostile input: tables that are not tables of
numbers, windows past any list, parameters set again from a retrained ``fit_fusion``. Oracles:
``fuse`` of the same runs, and the fusion built whole with the new parameters."""

from __future__ import annotations

from typing import Any

import pytest

from kolm_search import BM25Retriever, CompositeRetriever, KolmError, fuse
from kolm_search.io import load_dataset
from tests.fakes import ListRetriever
from tests.test_composite import as_run, ctx, scored


@pytest.fixture(scope="module")
def cranfield() -> Any:
    ds = load_dataset("cranfield")
    return ds, BM25Retriever(ds.corpus), BM25Retriever(ds.corpus, fields=["title"]), ds.judged_queries()


@pytest.mark.parametrize("tables", [
    {"a": [0.5], "b": [0.3]},  # by run name: fuse takes them in the runs' order, a list
    [["0.5"], [0.3]],
    [[{}], [0.3]],
    [[None], [0.3]],
    [[True, 0.2], [0.3]],
])
def test_tables_that_are_not_lists_of_numbers_are_refused_by_name(tables: Any) -> None:
    a, b = ListRetriever(scored(["x"], [1.0])), ListRetriever(scored(["y"], [1.0]))
    with pytest.raises(KolmError, match=r"params\['probs'\]"):
        CompositeRetriever([a, b], method="probfuse", params={"probs": tables})
    with pytest.raises(KolmError, match=r"params\['probs'\]"):
        fuse([as_run(scored(["x"], [1.0])), as_run(scored(["y"], [1.0]))], "probfuse", params={"probs": tables})


@pytest.mark.parametrize("w", [3, 2**40, 2**63 - 1, 10**30])
async def test_a_slidefuse_window_past_every_list_is_the_whole_list(w: int) -> None:
    lists = [scored(list("xywv"), [4.0, 3.0, 2.0, 1.0]), scored(list("yzx"), [3.0, 2.0, 1.0])]
    tables = [[0.9, 0.5, 0.3, 0.1], [0.6, 0.2, 0.1]]
    got = await CompositeRetriever([ListRetriever(x) for x in lists], method="slidefuse",
                                   params={"probs": tables, "w": w}).retrieve(ctx(10))
    want = fuse([as_run(x) for x in lists], "slidefuse", params={"probs": tables, "w": 3}, limit=10)
    assert [d.id for d in got] == list(want["doc_id"])
    assert [d.score for d in got] == pytest.approx(list(want["score"]), rel=1e-12)
