"""Deferred changes (``add``/``delete`` with ``defer=True``) reach a composed pipeline: the stage
runner reads a retrieving stage's table to look its codes up, so the indexes in the pipeline
merge first. Oracle: the same pipeline over indexes whose changes were merged before the call."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kolm_search import BM25Retriever, DefaultQueryPlanner, DenseRetriever, Experiment, Fuse, SearchClient
from kolm_search.adapters import MMRReranker
from kolm_search.compose import as_stage
from kolm_search.errors import SearchError
from tests.fakes import FingerprintedEmbedder, judged_cranfield


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    return judged_cranfield(20)


def _changed(ds: Any, *, defer: bool) -> tuple[BM25Retriever, DenseRetriever]:
    """BM25 and dense over the first 1200 documents, then the rest added and 300 deleted."""
    head, tail = ds.corpus.iloc[:1200], ds.corpus.iloc[1200:]
    gone = list(ds.corpus["id"].iloc[100:400])
    out = BM25Retriever(head), DenseRetriever(head, FingerprintedEmbedder())
    for index in out:
        index.add(tail, defer=defer)
        index.delete(gone, defer=defer)
    return out


PIPES = {
    "cutoff": lambda b, d: b % 10,
    "reranked": lambda b, d: b % 20 >> MMRReranker(FingerprintedEmbedder(), lambda_=0.5),
    "sum": lambda b, d: b % 10 + d % 10,
    "fused": lambda b, d: Fuse(b % 20, d % 20),
}


@pytest.mark.parametrize("name", sorted(PIPES))
def test_a_pipeline_over_deferred_changes_equals_one_over_merged_ones(ds, name: str) -> None:  # type: ignore[no-untyped-def]
    queries = ds.judged_queries()
    want = PIPES[name](*_changed(ds, defer=False))(queries, limit=10)
    assert not want["doc_id"].isin(ds.corpus["id"].iloc[100:400]).any()
    got = PIPES[name](*_changed(ds, defer=True))(queries, limit=10)
    pd.testing.assert_frame_equal(got, want)


def test_an_experiment_and_a_client_over_deferred_changes(ds) -> None:  # type: ignore[no-untyped-def]
    queries = ds.judged_queries()
    merged = {name: make(*_changed(ds, defer=False)) for name, make in PIPES.items()}
    deferred = {name: make(*_changed(ds, defer=True)) for name, make in PIPES.items()}
    exp = Experiment(deferred, ds, ["ndcg@10"], limit=10, progress=False, drop_self_hits=False)
    exp.run_pipelines()
    for name, pipe in merged.items():
        pd.testing.assert_frame_equal(exp.runs[name], pipe(queries, limit=10), obj=name)
    stage = PIPES["reranked"](*_changed(ds, defer=True))
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": stage})
    oracle = SearchClient({"planner": DefaultQueryPlanner(), "retriever": merged["reranked"]})
    query = str(queries["query"].iloc[0])
    got = [d.id for d in client.search_sync({"query": query, "limit": 10}).results]  # the port, one query
    assert got == [d.id for d in oracle.search_sync({"query": query, "limit": 10}).results] and len(got) == 10
    stage = PIPES["reranked"](*_changed(ds, defer=True))
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": stage})
    pd.testing.assert_frame_equal(client.search_batch(queries, limit=10).run, oracle.search_batch(queries, limit=10).run)


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_an_index_copied_before_its_merge_is_not_served_another_copys_codes(ds, kind: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A copy made while changes wait holds them too, under the same revision: the keys of the
    caches are made of the merged index (its fingerprint merges first), so the copy's run read
    from the cache is looked up in its own merged table, never in the table before the changes.
    (300 documents deleted and 300 added: a table of the same size, which the run cache's own
    check does not tell apart.)"""
    gone = list(ds.corpus["id"].iloc[:300])
    new = ds.corpus.iloc[:300].assign(id=lambda f: "n" + f["id"].astype(str))

    def changed(defer: bool) -> Any:
        index = BM25Retriever(ds.corpus) if kind == "bm25" else DenseRetriever(ds.corpus, FingerprintedEmbedder())
        index.delete(gone, defer=defer)
        index.add(new, defer=defer)
        return index

    first = changed(defer=True)
    second = copy.copy(first)
    want = (changed(defer=False) % 10)(ds.judged_queries(), limit=10)
    for index in (first, second):
        exp = Experiment({"p": index % 10}, ds, ["ndcg@10"], limit=10, progress=False, cache_dir=tmp_path,
                         drop_self_hits=False)
        pd.testing.assert_frame_equal(exp.run_pipelines()["p"], want)
    assert exp.run_cache is not None and exp.run_cache.reads == 1  # the copy's run was read from the cache


def test_a_cached_run_is_looked_up_in_the_merged_table(ds, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The run cache keeps a run's codes (rows of the merged table): a second experiment over an
    index whose changes wait (a copy, or a pickle in another process, shares them) reads the run
    in the merged table, not in the one before the changes (same row count: 100 added, 100 deleted)."""
    head, tail = ds.corpus.iloc[:1300], ds.corpus.iloc[1300:1400]
    gone = list(ds.corpus["id"].iloc[:100])
    merged = BM25Retriever(head)
    merged.add(tail)
    merged.delete(gone)
    want = (merged % 10)(ds.judged_queries(), limit=10)
    deferred = BM25Retriever(head)
    deferred.add(tail, defer=True)
    deferred.delete(gone, defer=True)
    twins = [copy.copy(deferred), pickle.loads(pickle.dumps(deferred))]  # (a pickle: as another process loads it)
    for index in (deferred, *twins):
        exp = Experiment({"p": index % 10}, ds, ["ndcg@10"], limit=10, progress=False, drop_self_hits=False,
                         cache_dir=tmp_path)
        exp.run()
        pd.testing.assert_frame_equal(exp.runs["p"], want)


@pytest.mark.parametrize("name", sorted(PIPES))
def test_a_client_over_a_pipeline_with_deferred_changes(ds, name: str) -> None:  # type: ignore[no-untyped-def]
    """A client whose retriever is a composed stage (a fusion of cutoffs too: the composite merges
    the indexes under its children, not only children that are indexes) answers as over merged ones."""
    queries = ds.judged_queries()
    oracle = SearchClient({"planner": DefaultQueryPlanner(), "retriever": PIPES[name](*_changed(ds, defer=False))})
    want = oracle.search_batch(queries, limit=10).run
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": PIPES[name](*_changed(ds, defer=True))})
    pd.testing.assert_frame_equal(client.search_batch(queries, limit=10).run, want)
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": PIPES[name](*_changed(ds, defer=True))})
    query = str(queries["query"].iloc[0])
    got = [d.id for d in client.search_sync({"query": query, "limit": 10}).results]
    assert got == [d.id for d in oracle.search_sync({"query": query, "limit": 10}).results] and len(got) == 10


class UserIndex:
    """A user retriever over a BM25 index that forwards its changes (Updatable)."""

    def __init__(self, index: BM25Retriever) -> None:
        self.index = index

    @property
    def table(self) -> Any:
        return self.index.table

    @property
    def revision(self) -> str:
        return self.index.revision

    def add(self, documents: Any, embeddings: Any = None) -> None:
        self.index.add(documents)

    def delete(self, ids: Any) -> None:
        self.index.delete(ids)

    def merge(self) -> None:
        self.index.merge()

    def retrieve(self, context: Any) -> Any:
        return self.index.retrieve(context)

    def retrieve_batch(self, batch: Any) -> Any:
        return self.index.retrieve_batch(batch)

    def fingerprint(self) -> str:
        return "user:" + self.index.fingerprint()


@pytest.mark.parametrize("defer", [False, True])
def test_as_stage_of_a_user_index_changed_after_it_was_wrapped(ds, defer: bool) -> None:  # type: ignore[no-untyped-def]
    """``as_stage`` reads the port's table as it is at each search (it held the table of when it
    was wrapped: codes of the changed index looked up in the old table), its deferred changes merged."""
    queries = ds.judged_queries()
    want = (_changed(ds, defer=False)[0] % 10)(queries, limit=10)
    index = BM25Retriever(ds.corpus.iloc[:1200])
    stage = as_stage(UserIndex(index)) % 10
    index.add(ds.corpus.iloc[1200:], defer=defer)
    index.delete(list(ds.corpus["id"].iloc[100:400]), defer=defer)
    pd.testing.assert_frame_equal(stage(queries, limit=10), want)


class FailingMerge(UserIndex):
    def merge(self) -> None:
        raise RuntimeError("disk full while merging")


def test_a_merge_that_fails_is_named_by_its_stage(ds) -> None:  # type: ignore[no-untyped-def]
    """A port whose merge raises fails the search with a ``SearchError`` naming its stage, as a
    failure inside its search does (the runner merges before the search)."""
    stage = as_stage(FailingMerge(BM25Retriever(ds.corpus.iloc[:500])))
    with pytest.raises(SearchError, match=r"as_stage\(.*FailingMerge.*merging deferred changes failed: "
                                          r"RuntimeError: disk full while merging"):
        (stage % 10)(ds.judged_queries().iloc[:3], limit=10)


@pytest.mark.parametrize("defer", [False, True])
def test_a_cached_response_of_a_pipeline_is_not_served_after_its_index_changed(ds, defer: bool) -> None:  # type: ignore[no-untyped-def]
    """A client's response cache keys a composed retriever by the revisions of the indexes in it
    (it keyed on none: deleted documents were served from the cache)."""
    from tests.fakes import MemoryCache

    index = BM25Retriever(ds.corpus.iloc[:1200])
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": Fuse(index % 20, index % 10),
                           "cache": MemoryCache()})
    request = {"query": str(ds.judged_queries()["query"].iloc[0]), "limit": 10}
    first = [d.id for d in client.search_sync(request).results]
    index.delete(first[:5], defer=defer)
    again = [d.id for d in client.search_sync(request).results]
    assert not set(first[:5]) & set(again) and len(again) == 10
