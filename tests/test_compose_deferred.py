"""Deferred changes (``add``/``delete`` with ``defer=True``) reach a composed pipeline: the stage
runner reads a retrieving stage's table to look its codes up, so the indexes in the pipeline
merge first. Oracle: the same pipeline over indexes whose changes were merged before the call."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kolm_search import BM25Retriever, DefaultQueryPlanner, DenseRetriever, Experiment, Fuse, SearchClient
from kolm_search.adapters import MMRReranker
from kolm_search.io import load_dataset
from tests.fakes import BatchHashEmbedder


class Embedder(BatchHashEmbedder):
    def fingerprint(self) -> str:
        return "hash-embedder-8"


@pytest.fixture(scope="module")
def ds():  # type: ignore[no-untyped-def]
    data = load_dataset("cranfield")
    keep = set(data.judged_queries()["qid"].iloc[:20])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    data.qrels = data.qrels[data.qrels["qid"].isin(keep)].reset_index(drop=True)
    return data


def _changed(ds: Any, *, defer: bool) -> tuple[BM25Retriever, DenseRetriever]:
    """BM25 and dense over the first 1200 documents, then the rest added and 300 deleted."""
    head, tail = ds.corpus.iloc[:1200], ds.corpus.iloc[1200:]
    gone = list(ds.corpus["id"].iloc[100:400])
    out = BM25Retriever(head), DenseRetriever(head, Embedder())
    for index in out:
        index.add(tail, defer=defer)
        index.delete(gone, defer=defer)
    return out


PIPES = {
    "cutoff": lambda b, d: b % 10,
    "reranked": lambda b, d: b % 20 >> MMRReranker(Embedder(), lambda_=0.5),
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
        index = BM25Retriever(ds.corpus) if kind == "bm25" else DenseRetriever(ds.corpus, Embedder())
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
