"""The contract layer's declarations: one list of stage names, errors that carry their context,
capabilities found through Protocols."""

from __future__ import annotations

from typing import ClassVar

import pytest

from kolm_search import PIPELINE_STAGES
from kolm_search.contract.config import TIMED_STAGES, SearchPipelineOptions
from kolm_search.contract.stages import STAGE_ORDER
from kolm_search.errors import DEDUPLICATOR_STAGE, PipelineStage


def test_one_list_of_stage_names() -> None:
    spec = {key: getattr(PIPELINE_STAGES, key) for key in PIPELINE_STAGES}
    assert all(isinstance(v, PipelineStage) for v in spec.values())
    assert set(spec.values()) | {PipelineStage.DEDUPLICATOR, PipelineStage.PAGINATION,
                                 PipelineStage.TELEMETRY} == set(PipelineStage)
    assert DEDUPLICATOR_STAGE is PipelineStage.DEDUPLICATOR == "deduplicator"
    assert all(isinstance(s, PipelineStage) for s in (*TIMED_STAGES, *STAGE_ORDER))
    assert set(TIMED_STAGES) < set(STAGE_ORDER)
    assert [s.value for s in STAGE_ORDER] == ["planner", "cache.get", "intent-classifier", "embedder", "retriever",
                                              "deduplicator", "reranker", "pagination", "synthesizer", "cache.set",
                                              "telemetry"]


def test_timeouts_take_stage_members_and_names_alike() -> None:
    opts = SearchPipelineOptions(stage_timeouts={PipelineStage.RERANKER: 2.0, "retriever": None})
    assert opts.timeout_for("reranker") == 2.0 and opts.timeout_for(PipelineStage.RETRIEVER) is None
    with pytest.raises(ValueError, match=r"stage_timeouts key must be one of \['planner', 'intent-classifier'.*got 'cache.get'"):
        SearchPipelineOptions(stage_timeouts={"cache.get": 1.0})


def test_reranking_jobs_report_the_reranker_stage() -> None:
    import pandas as pd

    from kolm_search.errors import SearchError
    from kolm_search.jobs.rerank import rerank_run

    class Broken:
        def rerank(self, docs: object, context: object) -> object:
            raise RuntimeError("down")

    run = pd.DataFrame({"qid": ["q"], "doc_id": ["a"], "score": [1.0]})
    corpus = pd.DataFrame({"id": ["a"], "content": ["x"]})
    with pytest.raises(SearchError) as info:
        rerank_run(run, corpus, Broken(), queries={"q": "x"}, progress=False)
    assert info.value.stage is PipelineStage.RERANKER


# -- errors carry their context ----------------------------------------------------------------
def test_search_error_carries_detail_and_query() -> None:
    import pickle

    from kolm_search.errors import FilterError, SearchError

    cause = ValueError("bad")
    err = SearchError("retriever", "index offline", cause)
    assert (err.stage, err.detail, err.query, err.cause) == ("retriever", "index offline", None, cause)
    located = FilterError("retriever", "field 'year', operator '$gt'", cause, row=1).at_query(4, by_position=True)
    assert isinstance(located, FilterError) and located.row == 1 and located.query == 4
    assert located.message == "[retriever] query 4 (position in the batch): field 'year', operator '$gt'"
    assert located.detail == "field 'year', operator '$gt'" and located.cause is cause
    assert SearchError("client", "limit bad", query="q7").message == "[client] query 'q7': limit bad"
    for e in (err, located):  # travels between processes (Dask workers) with its context
        back = pickle.loads(pickle.dumps(e))
        assert (type(back), back.message, back.detail, back.query, back.stage) == (
            type(e), e.message, e.detail, e.query, e.stage)


def test_batch_errors_name_the_query_as_an_attribute() -> None:
    from kolm_search import SearchError, presets
    from tests.fakes import CORPUS

    client = presets.bm25(CORPUS)
    with pytest.raises(SearchError) as single:
        client.search_sync({"query": "w1", "limit": 0})
    assert single.value.query is None
    with pytest.raises(SearchError) as batch:
        client.search_batch(["w1", {"query": "w2", "limit": 0}])
    assert batch.value.query == 1 and batch.value.detail == single.value.detail
    with pytest.raises(SearchError) as filtered:
        client.search_batch([{"query": "w1"}, {"query": "w2", "filters": {"year": {"$bad": 1}}}])
    assert filtered.value.query == 1 and filtered.value.stage == "retriever"
    assert filtered.value.message.endswith(filtered.value.detail) and "query 1" not in filtered.value.detail


# -- one bridge ----------------------------------------------------------------------------------
class ThreadEmbedder:
    """A sync embedder that records the thread of every call."""

    dim = 8

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def embed(self, text: str) -> list[float]:
        import threading

        self.threads.add(threading.get_ident())
        return [float((hash(text) >> i) & 1) + 0.5 for i in range(self.dim)]


async def test_async_adapters_never_block_the_loop_on_a_sync_embedder(tmp_path: object) -> None:
    import threading
    from pathlib import Path

    from kolm_search import SearchDocument, SearchPipelineContext, SearchRequest
    from kolm_search.adapters import (
        CachedEmbedder,
        EmbeddingIntentClassifier,
        MMRReranker,
        NearDuplicateDeduplicator,
    )
    from kolm_search.contract.planners import DefaultQueryPlanner

    loop_thread = threading.get_ident()
    emb = ThreadEmbedder()
    docs = [SearchDocument(str(i), f"text {i}") for i in range(4)]
    req = SearchRequest(query="text", limit=4)
    ctx = SearchPipelineContext(request=req, plan=DefaultQueryPlanner().plan(req), started_at=0.0)
    await NearDuplicateDeduplicator(emb).deduplicate(docs)
    await MMRReranker(emb).rerank(docs, ctx)
    await EmbeddingIntentClassifier(emb, {"a": ["text one"]}).classify("text two")
    await CachedEmbedder(emb, Path(str(tmp_path)) / "e.sqlite").embed_many_async(["fresh one", "fresh two"])
    assert emb.threads and loop_thread not in emb.threads


def test_sync_and_async_twins_are_named_alike() -> None:
    import inspect

    from kolm_search import SearchClient, SearchPipeline
    from kolm_search.adapters import CachedEmbedder, OpenAICompatibleClient

    for cls, bare in ((SearchPipeline, "search"), (SearchClient, "search"), (SearchPipeline, "search_batch"),
                      (SearchClient, "search_batch"), (OpenAICompatibleClient, "chat"), (CachedEmbedder, "embed_many")):
        coro, blocking = getattr(cls, f"{bare}_async"), getattr(cls, f"{bare}_sync")
        assert inspect.iscoroutinefunction(coro) and not inspect.iscoroutinefunction(blocking), (cls, bare)
        assert getattr(cls, bare) in (coro, blocking), (cls, bare)


# -- capabilities are declared (Protocols), the stage runner dispatches on them ---------------
class TableRetriever:
    """A user-written BatchRetriever over CORPUS: every query gets the documents in order."""

    def __init__(self) -> None:
        from kolm_search import DocumentTable
        from tests.fakes import CORPUS

        self.table = DocumentTable.from_documents(CORPUS)
        self.limits: list[tuple[int, int]] = []

    def retrieve(self, context: object) -> list[object]:
        raise AssertionError("the batch path is expected")

    def retrieve_batch(self, batch: object) -> object:
        import numpy as np

        from kolm_search import CandidateFrame

        n, k = batch.n_queries, batch.limit  # type: ignore[attr-defined]
        self.limits.append((n, k))
        return CandidateFrame.from_ptr(np.arange(n + 1) * k, np.tile(np.arange(k), n), np.tile(-np.arange(k, dtype=float), n))


class FusingTableRetriever(TableRetriever):
    """The same, declaring that it fuses child lists (FusesChildren)."""

    def __init__(self) -> None:
        super().__init__()
        self.retrievers: list[object] = []


@pytest.mark.parametrize(("cls", "calls"), [(TableRetriever, [(3, 7)]), (FusingTableRetriever, [(2, 3), (1, 7)])])
def test_a_fusing_retriever_gets_one_sub_batch_per_target_limit(cls: type, calls: list[tuple[int, int]]) -> None:
    from kolm_search import DefaultQueryPlanner, SearchPipeline

    retriever = cls()
    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": retriever})
    result = pipe.search_batch([{"query": "a", "limit": 3}, {"query": "b", "limit": 7}, {"query": "c", "limit": 3}])
    assert sorted(retriever.limits) == sorted(calls)
    assert result.run.groupby("qid").size().tolist() == [3, 7, 3]


def test_a_deduplicator_reports_pairs_by_declaring_deduplicate_pairs() -> None:
    from kolm_search import DefaultQueryPlanner, SearchDocument, SearchPipeline
    from tests.fakes import ListRetriever

    docs = [SearchDocument("a", "x"), SearchDocument("b", "x"), SearchDocument("c", "y")]

    class Tagged:  # an attribute named like the old convention is not a capability
        last_dropped: ClassVar[list[tuple[str, str]]] = [("b", "a")]

        def deduplicate(self, found: list[SearchDocument]) -> list[SearchDocument]:
            return [d for d in found if d.id != "b"]

    class Declared(Tagged):
        def deduplicate_pairs(self, found: list[SearchDocument]) -> tuple[list[SearchDocument], list[tuple[str, str]]]:
            return self.deduplicate(found), [("b", "a")]

    seen: list[dict[str, object]] = []

    class Spy:
        def rerank(self, found: list[SearchDocument], context: object) -> list[SearchDocument]:
            seen.append(dict(context.metadata["deduplicator"]))  # type: ignore[attr-defined]
            return found

    for dedup in (Tagged(), Declared()):
        pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(docs),
                               "deduplicator": dedup, "reranker": Spy()})
        pipe.search_sync({"query": "q"})
    assert seen == [{"kept": ["a", "c"], "dropped": ["b"]},
                    {"kept": ["a", "c"], "dropped": ["b"], "pairs": [("b", "a")]}]


def test_a_cache_that_never_blocks_says_so_and_is_called_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    from kolm_search import DefaultQueryPlanner, SearchPipeline
    from kolm_search._bridge import DAEMON_POOL
    from kolm_search.adapters import InMemoryCache
    from kolm_search.contract.ports import NonBlockingCache
    from tests.fakes import ListRetriever, MemoryCache

    class Nowait(MemoryCache):
        get_nowait = MemoryCache.get
        set_nowait = MemoryCache.set

    hops: list[object] = []
    submit = DAEMON_POOL.submit
    monkeypatch.setattr(DAEMON_POOL, "submit", lambda fn, args: hops.append(fn) or submit(fn, args))
    assert isinstance(InMemoryCache(), NonBlockingCache) and not isinstance(MemoryCache(), NonBlockingCache)
    for cache, hopped in ((Nowait(), False), (MemoryCache(), True)):
        hops.clear()
        pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "cache": cache})
        first, second = pipe.search_sync({"query": "q"}), pipe.search_sync({"query": "q"})
        assert not first.metadata.cache_hit and second.metadata.cache_hit
        assert bool(hops) is hopped, (cache, hops)


def test_ports_are_checked_against_their_protocols() -> None:
    from kolm_search import DefaultQueryPlanner, KolmTypeError, SearchPipelineModules
    from tests.fakes import ListRetriever

    class HalfCache:
        def get(self, key: str) -> None:
            return None

    with pytest.raises(KolmTypeError, match=r"cache must have a 'set' method \(CacheStore\), got HalfCache"):
        SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=ListRetriever(), cache=HalfCache())
    with pytest.raises(KolmTypeError, match=r"reranker must have a 'rerank' method \(Reranker\), got int"):
        SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=ListRetriever(), reranker=5)  # type: ignore[arg-type]


def test_the_stage_runner_is_built_once_per_modules_and_options() -> None:
    from kolm_search import DefaultQueryPlanner, SearchPipeline
    from kolm_search.contract.config import SearchPipelineModules
    from tests.fakes import ListRetriever

    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()})
    runner = pipe.stages
    assert pipe.stages is runner
    pipe.search_sync({"query": "q"})
    assert pipe.stages is runner
    pipe.modules = SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=ListRetriever([]))
    assert pipe.stages is not runner and pipe.search_sync({"query": "q"}).results == []


def test_a_shared_runner_gives_each_search_its_own_deadlines() -> None:
    import time

    from kolm_search import DefaultQueryPlanner, SearchPipeline
    from tests.fakes import ListRetriever

    pipe = SearchPipeline({"planner": DefaultQueryPlanner(), "retriever": ListRetriever()},
                          {"stage_timeouts": {"retriever": 0.2}})
    pipe.search_sync({"query": "q"})
    time.sleep(0.3)  # past the first search's retriever deadline
    assert len(pipe.search_sync({"query": "q"}).results) == 10
    assert len(pipe.search_batch(["a", "b"]).run) == 20


def test_the_readme_port_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's "Writing a port" example: a user-written retriever gains batch search by
    implementing BatchRetriever (run in-process here; test_readme also runs it as a script)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "class ShortestFirst" in b]
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_port"})
    assert capsys.readouterr().out.split() == "qid doc_id rank score 0 0 a 0 -7.0 1 0 b 1 -15.0 2 1 c 0 -8.0".split()


def test_one_rm3_the_text_expander_has_its_own_name() -> None:
    from kolm_search import BM25Retriever
    from kolm_search.adapters import FeedbackTermExpander, RM3Expander
    from tests.fakes import CORPUS

    bm25 = BM25Retriever(CORPUS)
    with pytest.warns(DeprecationWarning, match="renamed FeedbackTermExpander.*FeedbackRetriever"):
        old = RM3Expander(bm25, fb_docs=3, fb_terms=2)
    assert isinstance(old, FeedbackTermExpander)
    assert old.expand("document number 3") == FeedbackTermExpander(bm25, fb_docs=3, fb_terms=2).expand("document number 3")


def test_implements_agrees_with_isinstance() -> None:
    from kolm_search.adapters import ExactDeduplicator, InMemoryCache, MMRReranker, SqliteCache
    from kolm_search.contract.ports import (
        BatchReranker,
        EmbedsMany,
        NonBlockingCache,
        ReportsDuplicates,
        implements,
    )
    from tests.fakes import BatchHashEmbedder, HashEmbedder, MemoryCache

    class OnInstance:  # methods set on the instance, not the class: found by the slow path
        def __init__(self) -> None:
            self.get = self.set = self.get_nowait = self.set_nowait = lambda *a: None

    objects = [InMemoryCache(), MemoryCache(), OnInstance(), ExactDeduplicator(), MMRReranker(HashEmbedder()),
               BatchHashEmbedder(), HashEmbedder(), object(), SqliteCache.__new__(SqliteCache)]
    for protocol in (NonBlockingCache, ReportsDuplicates, BatchReranker, EmbedsMany):
        for obj in objects * 2:  # the second round reads the per-class answers
            assert implements(obj, protocol) == isinstance(obj, protocol), (obj, protocol)
