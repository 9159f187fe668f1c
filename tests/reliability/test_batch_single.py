"""Batch and single search agree: what one accepts the other accepts with the same results,
what one rejects the other rejects at the same stage (and the batch names the query).

A hypothesis property draws hostile requests (empty, stopword-only, unknown and unicode
queries; zero, negative, huge, float and bool limits and offsets; unknown modes; good, bad and
numpy-valued filters) and runs each through ``search_sync``, through ``search_batch`` alone and
inside a batch of other valid queries with other limits, over BM25, dense and hybrid pipelines
(with and without query expansion).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import (
    DefaultQueryPlanner,
    ExpandingQueryPlanner,
    QueryPlan,
    SchemaIssue,
    SchemaValidationError,
    SearchClient,
    SearchDocument,
    SearchError,
    SearchResponse,
    presets,
)
from kolm_search.contract.batch import BatchResult
from tests.conftest import synthetic_corpus
from tests.fakes import BatchHashEmbedder, HashEmbedder

TEXTS = synthetic_corpus(120, 30, seed=5)
UNICODE = ["naïve café", "日本語 テキスト", "Ünïcödé straße", "emoji ✓ 🙂"]
DOCS = [SearchDocument(id=f"doc-{i}", content=t + (" " + UNICODE[i % 4] if i % 7 == 0 else ""),
                       title="the" if i % 5 == 0 else None, tags=["even" if i % 2 == 0 else "odd"],
                       metadata={"year": 1990 + i % 25, "bucket": i % 5, **({"lang": "en"} if i % 3 else {})})
        for i, t in enumerate(TEXTS)]


class Expander:
    """Expansions with and without indexed terms (the last one has none)."""

    def expand(self, query: str) -> list[str]:
        return [query + " w3", "zzzunknown qqq"]


def make(kind: str, expanding: bool, single_embed: bool = False) -> SearchClient:
    planner = ExpandingQueryPlanner(Expander()) if expanding else DefaultQueryPlanner()
    embedder = HashEmbedder() if single_embed else BatchHashEmbedder()
    if kind == "bm25":
        return presets.bm25(DOCS, planner=planner)
    if kind == "dense":
        return presets.dense(DOCS, embedder, planner=planner)
    return presets.hybrid(DOCS, embedder, planner=planner)


CLIENTS = {(kind, expanding): make(kind, expanding, single_embed=(kind == "dense" and expanding))
           for kind in ("bm25", "dense", "hybrid") for expanding in (False, True)}
COMPANIONS = [{"query": "w1 w2", "limit": 3}, {"query": "w4 w0 w9", "limit": 12, "offset": 2}]

# -- hostile requests --------------------------------------------------------------------------
QUERIES = st.one_of(
    st.sampled_from(["w1", "w2 w7", "w0 w0 w5", "W3, w11!", "the", "the and of", "zzzunknown", "w1 zzzunknown",
                     "", "   ", "\t\n", "naïve", "日本語", "🙂", "THE W4"]),
    st.text(alphabet=st.sampled_from(list("w0123 thé日🙂\u200b")), max_size=12),
    st.sampled_from([5, None, b"w1", ["w1"]]),
)
INTS = st.one_of(st.integers(0, 15), st.sampled_from([0, 1, 119, 120, 121, 10**6, 2**62, 2**63 - 1, 2**63, 2**64, -1, -(2**63)]))
ODD_NUMBERS = st.sampled_from([2.0, 2.5, math.nan, math.inf, True, False, "3", np.int64(4), np.uint64(2**63), np.float32(1)])
FILTERS = st.sampled_from([
    {}, {}, {}, {"tags": "odd"}, {"tags": ["odd", "even"]}, {"bucket": [1, 3]}, {"bucket": np.array([1, 3])}, {"bucket": (2,)}, {"bucket": {0, 4}},
    {"lang": {"$ne": "en"}}, {"year": {"$gte": 2000}, "tags": {"$ne": "odd"}},
    {"$or": [{"bucket": 1}, {"lang": {"$exists": False}}]}, {"$not": {"year": {"$lt": 2010}}},
    {"bucket": {"$in": np.array([9])}}, {"year": {"$gt": "2000"}}, {"colour": "red"}, {"lang": {"$regex": "e"}},
    {"bucket": {"$in": 3}}, {"year": {"$gt": {"a": 1}}}, [1], "tags", None,
])
SMALL = st.integers(1, 15)
GOOD_QUERIES = st.sampled_from(["w1", "w2 w7", "w0 w0 w5", "W3, w11!", "w1 zzzunknown", "THE W4", "naïve w2"])
REQUESTS = st.fixed_dictionaries(  # about half of them valid
    {"query": st.one_of(GOOD_QUERIES, GOOD_QUERIES, QUERIES)},
    optional={"limit": st.one_of(SMALL, SMALL, SMALL, SMALL, INTS, ODD_NUMBERS, st.none()),
              "offset": st.one_of(st.just(0), SMALL, SMALL, SMALL, INTS, ODD_NUMBERS),
              "mode": st.sampled_from([None, None, "fulltext", "vector", "hybrid", "hybrid", "bogus", 3]),
              "filters": FILTERS},
)


def outcome(fn: Any) -> Any:
    """The call's result, or the SearchError it raised (anything else fails the test)."""
    try:
        return fn()
    except SearchError as exc:
        return exc


def core(exc: SearchError) -> str:
    """The innermost message: past every ``[stage]`` prefix and ``query N:`` label."""
    text = exc.message
    return text[text.rindex("] ") + 2:] if "] " in text else text


def assert_same_ranking(got_ids: list[str], got_scores: np.ndarray, ids: list[str], scores: np.ndarray) -> None:
    """Same ids in the same order, scores to 1e-6; documents whose scores tie within 1e-6 may
    trade places (a one-row and a many-row float32 product can differ in the last bit)."""
    assert len(got_ids) == len(ids), (got_ids, ids)
    if not ids:
        return
    np.testing.assert_allclose(got_scores, scores, rtol=1e-6, atol=1e-7)
    runs = np.concatenate([[0], np.cumsum(np.abs(np.diff(np.asarray(scores, np.float64))) > 1e-6)])
    for run in np.unique(runs):
        at = np.flatnonzero(runs == run)
        if at[-1] < len(ids) - 1 or len(at) == 1:  # a tie group cut by the page may hold other ties
            assert sorted(got_ids[i] for i in at) == sorted(ids[i] for i in at), (got_ids, ids)


def assert_page(batch: BatchResult, qid: Any, single: SearchResponse) -> None:
    sub = batch.run[batch.run.qid == qid]
    assert_same_ranking(list(sub.doc_id), sub.score.to_numpy(), [d.id for d in single.results],
                        np.array([d.score for d in single.results], dtype=np.float64))
    offset = single.pagination.offset
    assert list(sub["rank"]) == list(range(offset, offset + len(sub)))
    response = batch.responses[batch.qids.index(qid)]
    assert response.pagination == single.pagination
    assert response.plan.expanded_queries == single.plan.expanded_queries


@pytest.mark.parametrize("kind, expanding", sorted(CLIENTS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=REQUESTS)
def test_batch_and_single_agree(kind: str, expanding: bool, request: dict[str, Any]) -> None:
    client = CLIENTS[(kind, expanding)]
    single = outcome(lambda: client.search_sync(dict(request)))
    alone = outcome(lambda: client.search_batch([dict(request)]))
    mixed = outcome(lambda: client.search_batch([COMPANIONS[0], dict(request), COMPANIONS[1]]))
    if isinstance(single, SearchError):
        for batch in (alone, mixed):
            assert isinstance(batch, SearchError), (single, batch)
            assert batch.stage == single.stage, (single, batch)
            assert core(single) in batch.message, (single, batch)
        assert "query 1" in mixed.message, mixed  # the batch names the query
        return
    assert isinstance(alone, BatchResult), (request, alone)
    assert isinstance(mixed, BatchResult), (request, mixed)
    assert_page(alone, 0, single)
    assert_page(mixed, 1, single)
    for qid, companion in ((0, COMPANIONS[0]), (2, COMPANIONS[1])):
        assert_page(mixed, qid, client.search_sync(companion))


# -- the defects one by one ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
@pytest.mark.parametrize("last", ["the and of", "zzzunknown", "日本"])
def test_a_last_query_without_indexed_terms_does_not_fail_the_batch(kind: str, last: str) -> None:
    for client in (CLIENTS[(kind, False)], presets.bm25(DOCS, method="bm25+")):
        batch = client.search_batch(["w1 w2", last], limit=5)
        assert_page(batch, 0, client.search_sync({"query": "w1 w2", "limit": 5}))
        assert_page(batch, 1, client.search_sync({"query": last, "limit": 5}))


def test_an_expansion_without_indexed_terms_in_bm25_plus() -> None:
    client = presets.bm25(DOCS, method="bm25l", planner=ExpandingQueryPlanner(Expander()))
    single = client.search_sync({"query": "w1", "limit": 4})
    assert len(single.results) == 4
    assert_page(client.search_batch(["w1"], limit=4), 0, single)


@pytest.mark.parametrize("qid", [None, math.nan, np.nan, pd.NA, pd.NaT, float("nan")])
def test_a_missing_qid_is_a_client_error_naming_the_row(qid: Any) -> None:
    frame = pd.DataFrame({"qid": pd.Series(["a", qid, "c"], dtype=object), "query": ["w1", "w2", "w3"]})
    with pytest.raises(SearchError, match="row 1 has a missing qid") as info:
        CLIENTS[("bm25", False)].search_batch(frame)
    assert info.value.stage == "client"


def test_unhashable_and_tuple_qids() -> None:
    client = CLIENTS[("bm25", False)]
    with pytest.raises(SearchError, match="row 0: qid .* is not hashable") as info:
        client.search_batch(pd.DataFrame({"qid": [["a"], ["b"]], "query": ["w1", "w2"]}))
    assert info.value.stage == "client"
    with pytest.raises(SearchError, match="duplicate qid 'a' \\(rows 0 and 2\\)"):
        client.search_batch(pd.DataFrame({"qid": ["a", "b", "a"], "query": ["w1", "w2", "w3"]}))
    qids = [("a", 1), ("b", 2)]
    batch = client.search_batch(pd.DataFrame({"qid": pd.Series(qids, dtype=object), "query": ["w1", "w2"]}), limit=3)
    assert batch.qids == qids and set(batch.run.qid) == set(qids)


@pytest.mark.parametrize("value", [5, b"howto", ["a"], {"a": 1}, 1.5])
def test_intent_classifier_garbage_fails_both_alike(value: Any) -> None:
    class Classifier:
        def classify(self, query: str) -> Any:
            return value if query.startswith("w2") else "ok"

    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": CLIENTS[("bm25", False)].modules.retriever,
                           "intent_classifier": Classifier()})
    with pytest.raises(SearchError) as single:
        client.search_sync({"query": "w2"})
    with pytest.raises(SearchError) as batch:
        client.search_batch(["w1", "w2"])
    assert single.value.stage == batch.value.stage == "intent-classifier"
    assert client.search_batch(["w1"]).run.shape[0] > 0


@pytest.mark.parametrize("change", [{"target_limit": 0}, {"target_limit": 2.5}, {"target_limit": True},
                                    {"target_limit": 2**70}, {"mode": "bogus"}, {"expanded_queries": [3]}])
def test_a_planner_returning_a_bad_plan_fails_both_alike(change: dict[str, Any]) -> None:
    class Planner:
        def plan(self, request: Any) -> QueryPlan:
            plan = DefaultQueryPlanner().plan(request)
            for key, value in change.items():
                setattr(plan, key, value)
            return plan

    client = SearchClient({"planner": Planner(), "retriever": CLIENTS[("hybrid", False)].modules.retriever,
                           "embedder": BatchHashEmbedder()})
    if change.get("target_limit") == 2**70:  # a huge but valid limit: every candidate, no overflow
        single = client.search_sync({"query": "w1"})
        assert_page(client.search_batch(["w1", "w2"]), 0, single)
        return
    with pytest.raises(SearchError) as single_error:
        client.search_sync({"query": "w1"})
    with pytest.raises(SearchError) as batch_error:
        client.search_batch(["w1", "w2"])
    assert single_error.value.stage == batch_error.value.stage == "planner"


@pytest.mark.parametrize("field, value", [("offset", 2**63), ("limit", 2**63), ("offset", 2**100), ("limit", 10**30)])
def test_out_of_range_limits_and_offsets_are_client_errors(field: str, value: int) -> None:
    client = CLIENTS[("hybrid", False)]
    with pytest.raises(SearchError, match=f"{field} must be at most 2\\*\\*63 - 1") as single:
        client.search_sync({"query": "w1", field: value})
    with pytest.raises(SearchError, match=f"query 0: {field} must be at most") as batch:
        client.search_batch(["w1"], **{field: value})
    assert single.value.stage == batch.value.stage == "client"
    edge = 2**63 - 1
    for req in ({"query": "w1", "limit": edge}, {"query": "w1", "offset": edge}, {"query": "w1", "limit": edge, "offset": edge}):
        assert_page(client.search_batch([req]), 0, client.search_sync(req))


@pytest.mark.parametrize("filters", [[1], "tags", ("tags", "odd")])
def test_batch_filters_keyword_must_be_a_dict(filters: Any) -> None:
    client = CLIENTS[("bm25", False)]
    with pytest.raises(SearchError, match="filters must be a dict") as single:
        client.search_sync({"query": "w1", "filters": filters})
    with pytest.raises(SearchError, match="filters must be a dict") as batch:
        client.search_batch(["w1"], filters=filters)
    assert single.value.stage == batch.value.stage == "client"


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
def test_array_tuple_and_set_filter_values_mean_membership(kind: str) -> None:
    client = CLIENTS[(kind, False)]
    want = client.search_sync({"query": "w1 w2", "limit": 8, "filters": {"bucket": [1, 3]}})
    assert want.results and all(d.metadata and d.metadata["bucket"] in (1, 3) for d in want.results)
    for values in (np.array([1, 3]), (1, 3), {1, 3}, frozenset({3, 1}), pd.Series([3, 1]), np.array([1.0, 3.0])):
        req = {"query": "w1 w2", "limit": 8, "filters": {"bucket": values}}
        assert [d.id for d in client.search_sync(req).results] == [d.id for d in want.results]
        assert_page(client.search_batch([req, {"query": "w3", "filters": {"bucket": values}}]), 0, want)


def test_schemas_check_what_single_search_checks() -> None:
    """A strict input schema sees each query as single search would (no added keys); an output
    schema is checked on every response; the issue's path starts with the query's id."""
    def strict_input(req: dict[str, Any]) -> list[SchemaIssue]:
        extra = sorted(set(req) - {"query", "limit"})
        issues = [SchemaIssue(f"unexpected {extra}", [])] if extra else []
        return issues + ([SchemaIssue("limit above 5", ["limit"])] if (req.get("limit") or 0) > 5 else [])

    def few_results(resp: dict[str, Any]) -> list[SchemaIssue]:
        return [SchemaIssue("too many", ["results"])] if len(resp["results"]) > 3 else []

    base = CLIENTS[("bm25", False)].modules
    client = SearchClient(base, {"input_schema": strict_input, "output_schema": few_results, "default_mode": "fulltext"})
    assert len(client.search_sync({"query": "w1", "limit": 3}).results) == 3
    assert len(client.search_batch(["w1", {"query": "w2"}], limit=3).run) == 6
    for request, target, path in (({"query": "w1", "limit": 9}, "input", ["limit"]), ({"query": "w1", "offset": 1}, "input", []),
                                  ({"query": "w1", "limit": 4}, "output", ["results"])):
        with pytest.raises(SchemaValidationError) as single:
            client.search_sync(request)
        with pytest.raises(SchemaValidationError) as batch:
            client.search_batch([{"query": "w2", "limit": 2}, request])
        assert single.value.target == batch.value.target == target
        assert [list(i.path) for i in single.value.issues] == [path]
        assert [list(i.path) for i in batch.value.issues] == [[1, *path]]
    with pytest.raises(SchemaValidationError) as info:
        client.search_batch(pd.DataFrame({"qid": ["a", "b"], "query": ["w1", "w2"]}), limit=9)
    assert list(info.value.issues[0].path) == ["a", "limit"]
