"""The contract layer's declarations: one list of stage names, errors that carry their context,
capabilities found through Protocols."""

from __future__ import annotations

import pytest

from kolm_search import PIPELINE_STAGES
from kolm_search.config import TIMED_STAGES, SearchPipelineOptions
from kolm_search.errors import DEDUPLICATOR_STAGE, PipelineStage
from kolm_search.stages import STAGE_ORDER


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
    with pytest.raises(ValueError, match=r"unknown stage 'cache.get'; known: \['planner', 'intent-classifier'"):
        SearchPipelineOptions(stage_timeouts={"cache.get": 1.0})


def test_reranking_jobs_report_the_reranker_stage() -> None:
    import pandas as pd

    from kolm_search.errors import SearchError
    from kolm_search.rerank import rerank_run

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
    from kolm_search.adapters import CachedEmbedder, EmbeddingIntentClassifier, MMRReranker, NearDuplicateDeduplicator
    from kolm_search.planners import DefaultQueryPlanner

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
