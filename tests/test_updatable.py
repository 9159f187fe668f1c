"""Updates declared and owned by the index (issue 26, step 2): ``Updatable`` / ``HoldsIndexes`` /
``Persistable``, deferred changes merged by the next search (never by reading an attribute), a
lock per index, copies that own their pending state. Oracle: the index rebuilt from scratch."""

from __future__ import annotations

import copy
import inspect
import threading
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import presets
from kolm_search.contract.client import SearchClient
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.contract.ports import HoldsIndexes, Persistable, Updatable, implements
from kolm_search.errors import KolmTypeError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.composite import CompositeRetriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from tests.fakes import HashEmbedder, ListRetriever
from tests.test_incremental import QUERIES, Model, assert_same_bm25, doc_spec

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "zeta"]


def _docs(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"d{i}", "content": " ".join(WORDS[j % 6] for j in range(i, i + 1 + i % 4))}
            for i in range(start, start + n)]


def _client(retriever: Any) -> SearchClient:
    return SearchClient({"planner": DefaultQueryPlanner(), "retriever": retriever}, {"default_mode": "fulltext"})


def test_the_built_in_retrievers_declare_their_capabilities() -> None:
    emb = HashEmbedder()
    bm25, dense = BM25Retriever(_docs(4)), DenseRetriever(_docs(4), emb)
    for r in (bm25, dense, FeedbackRetriever(bm25), CompositeRetriever([bm25, dense])):
        assert implements(r, Updatable) and isinstance(r, Updatable) and implements(r, HoldsIndexes), r
        assert isinstance(r, Persistable), r
    assert not implements(ListRetriever(), Updatable) and not isinstance(ListRetriever(), Persistable)
    assert not {"_arrays", "_vocab"} & set(inspect.signature(BM25Retriever).parameters)  # __init__ only builds


def test_deferred_changes_wait_for_a_search_and_reading_never_merges() -> None:
    r = BM25Retriever(_docs(6))
    table, vocab = r.table, r.vocab
    r.add(_docs(3, start=6), defer=True)
    r.delete(["d1"], defer=True)
    assert r.revision != "" and r.table is table and r.vocab is vocab  # still the index before the changes
    live = [d for d in _docs(9) if d["id"] != "d1"]
    want = _client(BM25Retriever(live)).search_batch(QUERIES, limit=20).run
    pd.testing.assert_frame_equal(_client(r).search_batch(QUERIES, limit=20).run, want)  # the runner merged first
    assert r.table is not table
    assert_same_bm25(r, live, clients=True)


@settings(max_examples=15, deadline=None)
@given(st.lists(doc_spec, max_size=5),
       st.lists(st.one_of(st.tuples(st.just("add"), st.lists(doc_spec, max_size=3)),
                          st.tuples(st.just("delete"), st.lists(st.integers(0, 99), max_size=2)),
                          st.tuples(st.just("search"), st.none())), max_size=6))
def test_deferred_changes_merged_by_search_equal_a_rebuild(initial: list[Any], ops: list[Any]) -> None:
    model = Model(initial)
    inc = BM25Retriever(list(model.live))
    for kind, arg in ops:
        if kind == "add":
            inc.add(model.add(arg), defer=True)
        elif kind == "delete":
            inc.delete(model.delete(arg), defer=True)
        else:
            single = _client(inc).search_sync({"query": "alpha beta", "limit": 50}).results if model.live else []
            want = _client(BM25Retriever(list(model.live))).search_sync(
                {"query": "alpha beta", "limit": 50}).results if model.live else []
            assert [(d.id, d.score) for d in single] == [(d.id, d.score) for d in want]
    inc.merge()
    assert_same_bm25(inc, model.live)


def test_a_copy_owns_its_pending_changes() -> None:
    r = BM25Retriever(_docs(5))
    r.add(_docs(2, start=5), defer=True)
    twin = copy.copy(r)
    twin.delete(["d5", "d0"])  # marks rows dead in its own copy of the pending masks
    r.merge()
    assert r.table.ids.tolist() == [f"d{i}" for i in range(7)]
    assert twin.table.ids.tolist() == ["d1", "d2", "d3", "d4", "d6"]
    assert_same_bm25(twin, [d for d in _docs(7) if d["id"] not in ("d5", "d0")])


def test_threads_searching_one_index_with_deferred_changes_merge_it_once() -> None:
    base = _docs(30)
    r = BM25Retriever(base)
    r.add(_docs(30, start=30), defer=True)
    r.delete([f"d{i}" for i in range(0, 60, 7)], defer=True)
    live = [d for d in _docs(60) if int(d["id"][1:]) % 7]
    want = BM25Retriever(live).score_texts(QUERIES, 60)
    got: list[Any] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def search() -> None:
        try:
            start.wait(timeout=30)
            got.append(r.score_texts(QUERIES, 60))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[0]
    for result in got:
        for a, b in zip(result, want, strict=True):
            assert np.array_equal(a, b)


def test_a_composite_holding_one_index_twice_changes_it_once() -> None:
    """[bm25, FeedbackRetriever(bm25)] share one index: it takes the documents once (before,
    the second commit added them again and every later search failed on duplicate ids)."""
    bm25 = BM25Retriever(_docs(8))
    comp = CompositeRetriever([bm25, FeedbackRetriever(bm25, "bo1")])
    comp.add(_docs(2, start=8))
    comp.delete(["d3"])
    assert_same_bm25(bm25, [d for d in _docs(10) if d["id"] != "d3"])


def test_a_composite_refuses_children_that_cannot_change_with_the_others() -> None:
    class Mine(ListRetriever):
        revision = ""

        def add(self, documents: Any, embeddings: Any = None) -> None:
            raise AssertionError("never reached: the composite refuses first")

        def delete(self, ids: Any) -> None:
            raise AssertionError("never reached")

        def merge(self) -> None:
            pass

    bm25 = BM25Retriever(_docs(4))
    comp = CompositeRetriever([bm25, Mine()])
    with pytest.raises(KolmTypeError, match=r"retrievers\[1\] \(Mine\) cannot change together"):
        comp.add(_docs(1, start=4))
    assert len(bm25.table) == 4 and bm25.revision == ""


def test_a_loaded_dense_index_is_configured_as_a_built_one(tmp_path: Any) -> None:
    emb = HashEmbedder()
    DenseRetriever(_docs(5), emb).save(tmp_path / "d")
    loaded = DenseRetriever.load(tmp_path / "d", emb)
    assert loaded.embed_queries is False and loaded.revision == ""
    loaded.add(_docs(2, start=5))
    ref = DenseRetriever(_docs(7), emb)
    assert np.array_equal(loaded.embeddings, ref.embeddings)


def test_client_add_changes_a_copy_through_the_protocol() -> None:
    client = presets.bm25(_docs(5))
    before = client.pipeline.modules.retriever
    client.add(_docs(1, start=5))
    after = client.pipeline.modules.retriever
    assert after is not before and len(before.table) == 5 and len(after.table) == 6
    assert before.revision == "" and after.revision != ""
