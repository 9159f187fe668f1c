"""Hostile review of the caches an Experiment keeps (issue 27): the measure table read back
lazily, the pipelines' shared first stage fingerprinted once, and a best-effort fusion missing a
failed child, which must be neither written nor served once the child is back. Oracles: an
Experiment without a cache made afresh, and the fusion of every child."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kolm_search import BM25Retriever, Fuse, as_stage
from kolm_search.evaluation import Experiment
from kolm_search.io import load_dataset
from tests.fakes import FlakyShard

#: the development collections, beside the project as in a checkout (or ``KOLM_DEV_DATA``), as tests/test_readme.py finds them
DEV_DATA = Path(os.environ.get("KOLM_DEV_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture(scope="module")
def ds() -> Any:
    data = load_dataset("cranfield")
    keep = set(data.judged_queries()["qid"].iloc[:30])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    data.qrels = data.qrels[data.qrels["qid"].isin(keep)].reset_index(drop=True)
    return data


class _ByLength:
    """A reranker port (reads the candidates' documents): shorter text first, then the id."""

    def rerank(self, documents: Any, context: Any) -> Any:
        ordered = sorted(documents, key=lambda d: (len(d.content or ""), d.id))
        return [replace(d, score=float(len(ordered) - i)) for i, d in enumerate(ordered)]

    def fingerprint(self) -> str:
        return "by-length"


def _sorted(run: pd.DataFrame) -> pd.DataFrame:
    return run.sort_values(["qid", "rank"]).reset_index(drop=True)[["qid", "doc_id", "rank"]]


@pytest.mark.parametrize("cached", [False, True])
def test_a_second_run_after_the_child_is_back_fuses_every_child(ds: Any, tmp_path: Any, cached: bool) -> None:
    """The fusion made while a child was down is that run's answer only: the same Experiment run
    again (its runs dropped) with the child back fuses every child, and a reranker over it reads
    the documents of the complete candidates, not those of the degraded ones."""
    bm25, title = BM25Retriever(ds.corpus), BM25Retriever(ds.corpus, fields=["title"])
    down = [True]
    fused = Fuse(as_stage(FlakyShard(bm25, down)), title % 50, strategy="best-effort")
    pipes = {"f": fused, "r": fused % 20 >> as_stage(_ByLength())}
    exp = Experiment(pipes, ds, ["ndcg@10"], cache_dir=tmp_path if cached else None, progress=False)
    exp.run()
    down[0] = False
    for name in list(exp.runs):
        del exp.runs[name]
    table = exp.run()
    fresh = Experiment(pipes, ds, ["ndcg@10"], progress=False)
    expected = fresh.run()
    for name in pipes:
        pd.testing.assert_frame_equal(_sorted(exp.runs[name]), _sorted(fresh.runs[name]))
    pd.testing.assert_frame_equal(pd.DataFrame(table).set_index("run").loc[list(pipes)],
                                  pd.DataFrame(expected).set_index("run").loc[list(pipes)], check_exact=True)


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_degraded_response_is_not_written_to_the_clients_response_cache(ds: Any, tmp_path: Any,
                                                                          timeout: float | None) -> None:
    """A SearchClient with a response cache (a SQLite file): the answer a best-effort composite
    made while a child was down is not stored, so with the child back the same request is
    searched again and fuses every child (the oracle: a client without a cache); a complete
    answer is still stored and read back. Also with a stage deadline (the retriever then runs
    as a task of its own)."""
    from kolm_search import CompositeRetriever, SearchClient
    from kolm_search.adapters import SqliteCache
    from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
    from kolm_search.contract.planners import DefaultQueryPlanner

    bm25, title = BM25Retriever(ds.corpus), BM25Retriever(ds.corpus, fields=["title"])
    down = [True]

    class Shard:
        name = "shard"

        def retrieve(self, context: Any) -> Any:
            if down[0]:
                raise RuntimeError("shard down")
            return bm25.retrieve(context)

    fused = CompositeRetriever([Shard(), title], strategy="best-effort")

    def client(cache: bool) -> SearchClient:
        return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=fused,
                                                  cache=SqliteCache(tmp_path / "responses.sqlite") if cache else None),
                            SearchPipelineOptions(stage_timeout_seconds=timeout))  # (a deadline: the port runs as a task)

    _degraded_then_whole(client, {"query": ds.queries["query"].iloc[0], "limit": 10}, down)


def test_run_pipelines_then_run_stores_the_table(ds: Any, tmp_path: Any) -> None:
    """``run_pipelines()`` and then ``run()`` measure complete runs made under the table's key:
    the table is stored, and a second Experiment reads it (equal to the first's) measuring
    nothing; a pipeline changed in between still keeps its table out."""
    from kolm_search.evaluation.table_cache import same_table

    bm25 = BM25Retriever(ds.corpus)
    pipes = {"a": bm25 % 20, "b": bm25 % 10}
    exp = Experiment(pipes, ds, ["ndcg@10", "P@5"], cache_dir=tmp_path, progress=False)
    exp.run_pipelines()
    first = exp.run()
    assert len(list((tmp_path / "tables").glob("*.arrow"))) == 1
    again = Experiment(pipes, ds, ["ndcg@10", "P@5"], cache_dir=tmp_path, progress=False)
    assert same_table(again.run(), first) and not again.shared.computed and not again.shared.reused  # no run read
    other = tmp_path / "other"
    changed = Experiment(dict(pipes), ds, ["ndcg@10"], cache_dir=other, progress=False)
    changed.run_pipelines()
    changed.pipelines["b"] = bm25 % 5  # its run (held) was made for another pipeline
    changed.run()
    assert not list((other / "tables").glob("*.arrow"))


def test_the_shared_first_stage_changed_between_runs_is_measured_again(tmp_path: Any) -> None:
    """Five pipelines sharing ``bm25 % 30`` (fingerprinted once per table key): its k1 changed
    in place between two run()s of one Experiment, the second measures the changed pipelines
    (equal to a fresh Experiment without a cache), not the table of the first; the table read
    back from the cache equals the fresh one whole, also pickled and rendered (med)."""
    import pickle

    from kolm_search.evaluation.report import to_latex, to_markdown
    from kolm_search.evaluation.table_cache import same_table
    from tests.fakes import Prior

    if not (DEV_DATA / "med").is_dir():
        pytest.skip(f"needs the development collection med: {DEV_DATA / 'med'} is absent (KOLM_DEV_DATA)")
    data = load_dataset(str(DEV_DATA / "med"))
    keep = set(data.judged_queries()["qid"].iloc[:20])
    data.queries = data.queries[data.queries["qid"].isin(keep)].reset_index(drop=True)
    data.qrels = data.qrels[data.qrels["qid"].isin(keep)].reset_index(drop=True)
    bm25 = BM25Retriever(data.corpus)
    first = bm25 % 30
    pipes = {f"p{w}": first >> Prior(w, modulus=5, rounded=False) for w in (0.1, 0.2, 0.3, 0.4, 0.5)}
    metrics = ["ndcg@10", "P@5"]
    exp = Experiment(pipes, data, metrics, cache_dir=tmp_path, progress=False)
    before = exp.run()
    bm25.set_params(k1=0.4)
    for name in list(exp.runs):
        del exp.runs[name]
    after = exp.run()
    fresh = Experiment(pipes, data, metrics, progress=False).run()
    assert same_table(after, fresh) and not same_table(before, fresh)
    read = Experiment(pipes, data, metrics, cache_dir=tmp_path, progress=False).run()
    assert same_table(read, fresh) and not read.equals(before)
    assert same_table(pickle.loads(pickle.dumps(read)), fresh)
    assert to_markdown(read) == to_markdown(fresh) and to_latex(read) == to_latex(fresh)


def test_an_answer_made_while_the_query_expander_failed_is_not_cached(ds: Any, tmp_path: Any) -> None:
    """ExpandingQueryPlanner degrades to the primary query when its expander fails; the response
    cache is keyed by the normalised query, not the expansions, so that answer stored would be
    served for the expanded search once the expander is back. It is not stored: with the
    expander back the request is searched (expanded) again; the oracle is a client without a
    cache."""
    from kolm_search import SearchClient
    from kolm_search.adapters import SqliteCache
    from kolm_search.contract.config import SearchPipelineModules
    from kolm_search.contract.planners import ExpandingQueryPlanner

    bm25 = BM25Retriever(ds.corpus)
    down = [True]

    class Expander:
        def expand(self, query: str) -> list[str]:
            if down[0]:
                raise RuntimeError("expander down")
            return ["shock wave boundary layer interaction"]

    def client(cache: bool) -> SearchClient:
        return SearchClient(SearchPipelineModules(planner=ExpandingQueryPlanner(Expander()), retriever=bm25,
                                                  cache=SqliteCache(tmp_path / "responses.sqlite") if cache else None))

    _degraded_then_whole(client, {"query": ds.queries["query"].iloc[0], "limit": 10}, down)


def _degraded_then_whole(client: Any, request: dict[str, Any], down: list[bool]) -> None:
    """``client(cache)`` searched with a part down (``down[0]`` set), then with it back: the
    degraded answer differs from a cacheless client's, was not stored (the second search is no
    cache hit and equals the cacheless answer), and the complete answer was stored (read back)."""
    degraded = client(True).search_sync(request)
    down[0] = False
    again = client(True).search_sync(request)
    whole = client(False).search_sync(request)
    assert [d.id for d in degraded.results] != [d.id for d in whole.results]
    assert not again.metadata.cache_hit and [d.id for d in again.results] == [d.id for d in whole.results]
    read = client(True).search_sync(request)  # the complete answer was stored
    assert read.metadata.cache_hit and [d.id for d in read.results] == [d.id for d in whole.results]


def test_a_write_into_a_cached_response_reaches_no_later_response() -> None:
    """A response served from an in-memory response cache (which keeps the stored dict itself) is
    the caller's own: writing into its documents' tags, metadata or the results list, or its
    plan, changes neither the cache nor the next response (the oracle: the first, a miss)."""
    from kolm_search import SearchClient
    from kolm_search.adapters import InMemoryCache
    from kolm_search.contract.config import SearchPipelineModules
    from kolm_search.contract.planners import DefaultQueryPlanner

    corpus = pd.DataFrame({"id": ["a", "b", "c"], "content": ["apple pie", "apple tart", "cherry"],
                           "tags": [["x"], ["y"], None], "metadata": [{"k": 1}, {"k": 2}, None]})
    client = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=BM25Retriever(corpus),
                                                cache=InMemoryCache()))
    first = client.search_sync({"query": "apple", "limit": 5})
    expected = first.to_dict()["results"], first.plan.to_dict()
    for _ in range(2):
        hit = client.search_sync({"query": "apple", "limit": 5})
        assert hit.metadata is not None and hit.metadata.cache_hit
        assert (hit.to_dict()["results"], hit.plan.to_dict()) == expected
        for doc in hit.results:
            if doc.tags is not None:
                doc.tags.append("junk")
            if doc.metadata is not None:
                doc.metadata["junk"] = True
        hit.results.append(hit.results[0])
        hit.plan.expanded_queries.append("junk")
        hit.plan.metadata["junk"] = True


def test_a_cached_value_that_cannot_be_copied_is_a_miss() -> None:
    """A store giving back what ``copy.deepcopy`` refuses (here a generator inside the dict) is
    read as garbage: a miss, searched as without a cache (the oracle), never an exception."""
    from kolm_search import SearchClient
    from kolm_search.contract.config import SearchPipelineModules
    from kolm_search.contract.planners import DefaultQueryPlanner

    class Odd:
        def get(self, key: str) -> Any:
            return {"results": (d for d in [])}

        def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> None:
            pass

    corpus = pd.DataFrame({"id": ["a", "b", "c"], "content": ["apple pie", "apple tart", "cherry"]})
    bare = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=BM25Retriever(corpus)))
    odd = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=BM25Retriever(corpus),
                                             cache=Odd()))
    got = odd.search_sync({"query": "apple", "limit": 5})
    assert got.metadata is not None and not got.metadata.cache_hit
    assert got.to_dict()["results"] == bare.search_sync({"query": "apple", "limit": 5}).to_dict()["results"]
