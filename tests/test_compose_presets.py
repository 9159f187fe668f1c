"""Presets as expressions (issue 27, item 3): ``presets.hybrid`` is ``Fuse(bm25, dense)`` and gives
the results of the old wiring (a ``CompositeRetriever`` of the same children), computed here on
Cranfield, by batch and by single search."""

from __future__ import annotations

import pandas as pd
import pytest

from kolm_search import (
    BM25Retriever,
    CompositeRetriever,
    DenseRetriever,
    Fuse,
    SearchClient,
    Stage,
    fuse,
    presets,
)
from kolm_search.adapters import MMRReranker
from kolm_search.adapters.lsa import LSAEmbedder
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.engine.doctable import DocumentTable
from kolm_search.retrievers.feedback import FeedbackRetriever
from tests.fakes import BatchHashEmbedder


def _old(retriever, embedder=None, mode="hybrid"):  # type: ignore[no-untyped-def]
    return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=retriever, embedder=embedder),
                        SearchPipelineOptions(default_mode=mode))


@pytest.fixture(scope="module")
def cran(cranfield):  # type: ignore[no-untyped-def]
    table = DocumentTable.coerce(cranfield["corpus"])
    return table, cranfield["queries"].iloc[:60].reset_index(drop=True), BatchHashEmbedder()


@pytest.mark.parametrize("kwargs", [{}, {"depth": 100}, {"k": 10, "weights": [1.0, 0.5]}])
def test_hybrid_is_a_fuse_expression_with_todays_results(cran, kwargs) -> None:  # type: ignore[no-untyped-def]
    table, queries, emb = cran
    new = presets.hybrid(table, emb, **kwargs)
    assert isinstance(new.modules.retriever, Fuse) and isinstance(new.modules.retriever, Stage)
    old = _old(CompositeRetriever([BM25Retriever(table), DenseRetriever(table, emb)], k=kwargs.get("k", 60),
                                  weights=kwargs.get("weights"), depth=kwargs.get("depth")), emb)
    for limit, offset in ((10, 0), (20, 5)):
        pd.testing.assert_frame_equal(new.search_batch(queries, limit=limit, offset=offset).run,
                                      old.search_batch(queries, limit=limit, offset=offset).run)
    for text in queries["query"][:5]:
        a = new.search_sync({"query": text, "limit": 10})
        b = old.search_sync({"query": text, "limit": 10})
        assert [(d.id, d.score) for d in a.results] == [(d.id, d.score) for d in b.results]
    # and an oracle outside the composite: the children's runs fused by the run-level ``fuse``
    depth = max(10, kwargs.get("depth") or 10)
    runs = [_old(BM25Retriever(table), mode="hybrid").search_batch(queries, limit=depth).run,
            _old(DenseRetriever(table, emb), emb).search_batch(queries, limit=depth).run]
    fused = fuse(runs, "rrf", k=kwargs.get("k", 60), weights=kwargs.get("weights"), limit=10)
    got = new.search_batch(queries, limit=10).run
    order = {q: i for i, q in enumerate(queries["qid"])}
    fused = fused.sort_values(["qid", "rank"], key=lambda c: c.map(order) if c.name == "qid" else c, kind="stable")
    assert list(zip(got["qid"], got["doc_id"], strict=True)) == list(zip(fused["qid"], fused["doc_id"], strict=True))
    assert got["score"].to_numpy() == pytest.approx(fused["score"].to_numpy(), abs=1e-12)
    # the stage itself, called on the queries, gives search_batch's run
    stage_run = new.modules.retriever(queries, limit=10)
    pd.testing.assert_frame_equal(stage_run, new.search_batch(queries, limit=10).run, check_dtype=False)


def test_bm25_and_feedback_presets_are_stages(cran) -> None:  # type: ignore[no-untyped-def]
    table, queries, _ = cran
    client = presets.bm25(table, feedback="bo1")
    assert isinstance(client.modules.retriever, Stage)
    old = _old(FeedbackRetriever(BM25Retriever(table), "bo1"), mode="fulltext")
    pd.testing.assert_frame_equal(client.search_batch(queries, limit=10).run, old.search_batch(queries, limit=10).run)


def test_hybrid_plus_is_a_fuse_of_three(cran) -> None:  # type: ignore[no-untyped-def]
    table, queries, emb = cran
    with pytest.warns(DeprecationWarning):
        new = presets.hybrid_plus(table, emb, lsa_components=16)
    bm = BM25Retriever(table)
    vec = DenseRetriever(table, emb)
    lsa = DenseRetriever(table, LSAEmbedder(table.texts(vec.fields), n_components=16, seed=0), fields=vec.fields,
                         embed_queries=True)
    old = _old(CompositeRetriever([FeedbackRetriever(bm, "bo1"), vec, lsa], k=60, depth=1000), emb)
    assert isinstance(new.modules.retriever, Fuse)
    pd.testing.assert_frame_equal(new.search_batch(queries, limit=10).run, old.search_batch(queries, limit=10).run)


def test_fuse_of_cutoffs_is_hybrid_at_that_depth(cran) -> None:  # type: ignore[no-untyped-def]
    table, queries, emb = cran
    bm25, dense = BM25Retriever(table), DenseRetriever(table, emb)
    composed = _old(Fuse(bm25 % 100, dense % 100), emb)
    preset = presets.hybrid(table, emb, depth=100)
    for limit in (10, 30):
        pd.testing.assert_frame_equal(composed.search_batch(queries, limit=limit).run,
                                      preset.search_batch(queries, limit=limit).run)
    for text in queries["query"][:5]:
        a = composed.search_sync({"query": text, "limit": 10})
        b = preset.search_sync({"query": text, "limit": 10})
        assert [d.id for d in a.results] == [d.id for d in b.results]
        assert [d.score for d in a.results] == pytest.approx([d.score for d in b.results], abs=1e-12)


def test_a_fuse_prints_as_its_expression_with_its_settings(cran) -> None:  # type: ignore[no-untyped-def]
    # was CompositeRetriever([bm25, dense], k=60, ...) without the weights: two hybrids of other
    # weights printed alike, and the stages were not shown
    table, _, emb = cran
    bm25, dense = BM25Retriever(table), DenseRetriever(table, emb)
    assert repr(Fuse(bm25, dense)) == f"Fuse({bm25!r}, {dense!r})"
    weighted = presets.hybrid(table, emb, k=10, weights=[1, 0.5], depth=100).modules.retriever
    assert repr(weighted) == f"Fuse({bm25!r}, {dense!r}, k=10, weights=[1.0, 0.5], depth=100)"
    assert repr(Fuse(bm25 % 5, dense, method="combsum", norm="min-max") >> MMRReranker(emb)) == \
        f"(Fuse(({bm25!r} % 5), {dense!r}, method='sum', norm='min-max') >> {MMRReranker(emb)!r})"
