"""search_batch equals per-query search, for every preset and the fallback path."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import (
    BatchResult,
    CompositeRetriever,
    DefaultQueryPlanner,
    ExpandingQueryPlanner,
    SearchClient,
    SearchDocument,
    SearchError,
    presets,
)
from tests.conftest import synthetic_corpus
from tests.fakes import BatchHashEmbedder, HashEmbedder, ListRetriever, ListTelemetry

TEXTS = synthetic_corpus(400, 60, seed=7)
DOCS = [SearchDocument(id=f"doc-{i}", content=t, tags=["even" if i % 2 == 0 else "odd"],
                       metadata={"bucket": i % 5}) for i, t in enumerate(TEXTS)]
QUERIES = ["w1 w4", "w10 w2 w33", "w5", "w0 w0 w7", "nothing-matches", "w12 w13 w14 w15"]


class Expander:
    def expand(self, query: str) -> list[str]:
        return [query + " w3", "w8 " + query.split()[0]]


def make(kind: str, expanding: bool = False) -> SearchClient:
    planner = ExpandingQueryPlanner(Expander()) if expanding else DefaultQueryPlanner()
    if kind == "bm25":
        return presets.bm25(DOCS, planner=planner)
    if kind == "dense":
        return presets.dense(DOCS, BatchHashEmbedder(), planner=planner)
    return presets.hybrid(DOCS, BatchHashEmbedder(), planner=planner)


def assert_same(batch: BatchResult, singles: list[Any]) -> None:
    for qid, single in zip(batch.qids, singles, strict=True):
        sub = batch.run[batch.run.qid == qid]
        assert list(sub.doc_id) == [d.id for d in single.results], qid
        np.testing.assert_allclose(sub.score.to_numpy(), [d.score for d in single.results], rtol=1e-6)
        assert list(sub["rank"]) == list(range(single.pagination.offset, single.pagination.offset + len(sub)))


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
@pytest.mark.parametrize("expanding", [False, True])
@pytest.mark.parametrize("paging", [(10, 0), (7, 5)])
def test_batch_equals_single(kind: str, expanding: bool, paging: tuple[int, int]) -> None:
    client = make(kind, expanding)
    limit, offset = paging
    batch = client.search_batch(QUERIES, limit=limit, offset=offset)
    singles = [client.search_sync({"query": q, "limit": limit, "offset": offset}) for q in QUERIES]
    assert_same(batch, singles)
    for resp, single in zip(batch.responses, singles, strict=True):
        strip = lambda docs: [{k: v for k, v in d.to_dict().items() if k != "score"} for d in docs]  # noqa: E731
        assert strip(resp.results) == strip(single.results)
        # BLAS may round a 1-row product differently from a batched one (float32 ulps)
        np.testing.assert_allclose([d.score for d in resp.results], [d.score for d in single.results], rtol=1e-6)
        assert resp.pagination == single.pagination
        assert resp.plan.expanded_queries == single.plan.expanded_queries


@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
def test_filters_in_batch(kind: str) -> None:
    client = make(kind)
    filters = {"tags": "odd", "bucket": [1, 3]}
    batch = client.search_batch(QUERIES, limit=8, filters=filters)
    singles = [client.search_sync({"query": q, "limit": 8, "filters": filters}) for q in QUERIES]
    assert_same(batch, singles)
    ids = batch.run.doc_id.str.slice(4).astype(int)
    assert ((ids % 2 == 1) & (ids % 5).isin([1, 3])).all()
    with pytest.raises(SearchError, match="unknown filter field") as info:
        client.search_batch(QUERIES, filters={"colour": "red"})
    # a composite wraps its child's failure (spec: fail-fast), keeping it as the cause
    assert info.value.stage == ("retriever" if kind == "bm25" else "composite-retriever")


def test_hybrid_modes_degrade_to_one_side() -> None:
    client = make("hybrid")
    sparse = make("bm25").search_batch(QUERIES, limit=5, mode="fulltext").run
    full = client.search_batch(QUERIES, limit=5, mode="fulltext").run
    assert list(full.doc_id) == list(sparse.doc_id)
    mixed = client.search_batch([{"query": "w1", "mode": "vector"}, {"query": "w1", "mode": "fulltext"}], limit=3)
    singles = [client.search_sync({"query": "w1", "mode": m, "limit": 3}) for m in ("vector", "fulltext")]
    assert_same(mixed, singles)


def test_dataframe_input_and_qids() -> None:
    df = pd.DataFrame({"qid": ["a", "b", "c"], "query": QUERIES[:3]})
    batch = make("bm25").search_batch(df, limit=4)
    assert batch.qids == ["a", "b", "c"] and list(batch.run.qid.unique()) == ["a", "b", "c"]
    assert list(batch.run.columns) == ["qid", "doc_id", "rank", "score"]
    with pytest.raises(SearchError, match="duplicate qid"):
        make("bm25").search_batch(pd.DataFrame({"qid": [1, 1], "query": ["a", "b"]}))
    with pytest.raises(SearchError, match="lacks column"):
        make("bm25").search_batch(pd.DataFrame({"query": ["a"]}))


def test_fallback_retriever_without_batch_path() -> None:
    tel = ListTelemetry()
    retriever = CompositeRetriever([ListRetriever(DOCS[:20]), ListRetriever(list(reversed(DOCS[:20])))])
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": retriever, "telemetry": tel})
    assert retriever.table is None  # no shared table: the per-query path
    batch = client.search_batch(["a", "b"], limit=5, offset=2)
    singles = [client.search_sync({"query": q, "limit": 5, "offset": 2}) for q in ["a", "b"]]
    assert_same(batch, singles)
    assert tel.calls[0][0] == "search.batch_completed" and tel.calls[0][1]["query_count"] == 2


def test_bad_query_names_its_position() -> None:
    with pytest.raises(SearchError, match="query 1.*empty") as info:
        make("bm25").search_batch(["ok", "  "])
    assert info.value.stage == "client"
    with pytest.raises(SearchError, match="queries\\[1\\]"):
        make("bm25").search_batch(["ok", 5])
    with pytest.raises(SearchError, match="list or a DataFrame"):
        make("bm25").search_batch("just a string")


def test_vector_batch_without_embedder() -> None:
    with pytest.raises(SearchError) as info:
        make("bm25").search_batch(["w1"], mode="vector")
    assert info.value.stage == "embedder"


def test_embed_many_called_once_for_the_whole_batch() -> None:
    emb = BatchHashEmbedder()
    client = presets.hybrid(DOCS, emb, planner=ExpandingQueryPlanner(Expander()))
    emb.calls.clear()
    client.search_batch(QUERIES, limit=3)
    assert [c[0] for c in emb.calls] == ["embed_many"] and len(emb.calls[0][1]) == 3 * len(QUERIES)


def test_built_pipelines_pickle() -> None:
    for kind in ("bm25", "dense", "hybrid"):
        client = make(kind)
        clone = pickle.loads(pickle.dumps(client))
        a = client.search_batch(QUERIES, limit=5).run
        b = clone.search_batch(QUERIES, limit=5).run
        pd.testing.assert_frame_equal(a, b)


async def test_async_batch_and_sync_shell_inside_a_loop() -> None:
    client = make("bm25")
    res = await client.search_batch_async(QUERIES[:2], limit=3)
    assert len(res) == 2
    # as in a notebook: the sync batch shell works inside a running loop (worker thread)
    inside = client.search_batch(QUERIES[:2], limit=3)
    pd.testing.assert_frame_equal(inside.run, res.run)


def test_dense_preset_with_single_embed_only() -> None:
    client = presets.dense(DOCS[:50], HashEmbedder())
    batch = client.search_batch(QUERIES[:3], limit=4)
    singles = [client.search_sync({"query": q, "limit": 4}) for q in QUERIES[:3]]
    assert_same(batch, singles)


def test_client_search_batch_builds_responses_only_for_an_output_schema() -> None:
    """Per-query responses cost more than the whole batch: without an output schema they wait
    until ``.responses`` is read (sync and async twins alike)."""
    import asyncio

    from kolm_search import presets

    client = presets.bm25([{"id": "a", "content": "red fox"}, {"id": "b", "content": "blue sky"}])
    for result in (client.search_batch(["fox", "sky"]), asyncio.run(client.search_batch_async(["fox", "sky"]))):
        assert result._responses is None
        assert [r.results[0].id for r in result.responses] == ["a", "b"]
