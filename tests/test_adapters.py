"""The dependency-free adapters: caches, telemetry, dedup, expansion, intent, MMR."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import (
    DefaultQueryPlanner,
    ExpandingQueryPlanner,
    KolmValueError,
    SearchClient,
    SearchDocument,
    SearchPipelineContext,
    SearchRequest,
    evaluate,
    presets,
)
from kolm_search._kernels import load
from kolm_search.adapters import (
    EmbeddingIntentClassifier,
    ExactDeduplicator,
    InMemoryCache,
    LoggingTelemetry,
    LSAEmbedder,
    MMRReranker,
    SqliteCache,
    SynonymExpander,
)
from tests.fakes import HashEmbedder, ListLogger, ListRetriever


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_in_memory_cache_ttl_and_lru() -> None:
    clock = Clock()
    cache = InMemoryCache(max_entries=2, ttl_seconds=10, clock=clock)
    cache.set("a", {"v": 1})
    cache.set("b", 2, ttl_seconds=1)
    assert cache.get("a") == {"v": 1}  # a is now most recent
    cache.set("c", 3)
    assert cache.get("b") is None and cache.get("a") == {"v": 1} and cache.get("c") == 3  # b evicted (LRU)
    clock.now = 10.0
    assert cache.get("a") is None and len(cache) == 1
    with pytest.raises(KolmValueError):
        InMemoryCache(max_entries=0)


def test_in_memory_cache_concurrent_async_and_threads() -> None:
    cache = InMemoryCache(max_entries=50)

    async def worker(i: int) -> None:
        for j in range(100):
            cache.set(f"k{(i * j) % 80}", j)
            cache.get(f"k{j % 80}")
            await asyncio.sleep(0)

    async def main() -> None:
        await asyncio.gather(*(worker(i) for i in range(10)))

    threads = [threading.Thread(target=lambda: asyncio.run(main())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 50


def test_sqlite_cache_persists_expires_and_survives_corruption(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    logger = ListLogger()
    cache = SqliteCache(path, logger=logger)
    cache.set("a", {"x": [1, 2]})
    cache.set("old", 1, ttl_seconds=-1)
    assert SqliteCache(path).get("a") == {"x": [1, 2]}  # a new instance: survives restarts
    assert cache.get("old") is None and cache.get("missing") is None
    with sqlite3.connect(path) as db:
        db.execute("INSERT OR REPLACE INTO cache VALUES ('bad', '{not json', NULL)")
    assert cache.get("bad") is None and logger.warnings()
    with pytest.raises(ValueError):
        cache.set("nan", float("nan"))  # not JSON: refused rather than silently stored


def test_sqlite_cache_concurrent_writers(tmp_path: Path) -> None:
    cache = SqliteCache(tmp_path / "c.sqlite")

    def write(i: int) -> None:
        for j in range(30):
            cache.set(f"{i}-{j}", {"i": i, "j": j})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(cache.get(f"{i}-{j}") == {"i": i, "j": j} for i in range(4) for j in range(30))


@pytest.mark.parametrize("make", [lambda p: InMemoryCache(), lambda p: SqliteCache(p / "c.sqlite")])
async def test_caches_in_a_pipeline(make, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ret = ListRetriever()
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ret, "cache": make(tmp_path)})
    first = await client.search({"query": "q", "limit": 3})
    second = await client.search({"query": "q", "limit": 3})
    assert second.metadata.cache_hit and [d.id for d in second.results] == [d.id for d in first.results]
    assert len(ret.calls) == 1


def test_logging_telemetry(caplog: pytest.LogCaptureFixture) -> None:
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(),
                           "telemetry": LoggingTelemetry(logging.getLogger("kolm-tel"))})
    with caplog.at_level(logging.INFO, logger="kolm-tel"):
        client.search_sync({"query": "q"})
    (record,) = caplog.records
    assert record.event == "search.completed" and record.payload["result_count"] == 10  # type: ignore[attr-defined]
    assert '"mode": "hybrid"' in record.getMessage()


def test_exact_deduplicator_keeps_best_ranked() -> None:
    docs = [SearchDocument("a", "Hello  World"), SearchDocument("b", "other"), SearchDocument("a", "x"),
            SearchDocument("c", "hello world"), SearchDocument("d", "Other ")]
    dedup = ExactDeduplicator()
    assert [d.id for d in dedup.deduplicate(docs)] == ["a", "b"]
    assert dedup.last_dropped == [("a", "a"), ("c", "a"), ("d", "b")]
    assert [d.id for d in ExactDeduplicator(by_content=False).deduplicate(docs)] == ["a", "b", "c", "d"]


def test_synonym_expander_from_mapping_and_files(tmp_path: Path) -> None:
    exp = SynonymExpander({"Car": ["automobile", "auto"], "new york": ["nyc"]})
    assert exp.expand("cheap CAR rental in New York") == [
        "cheap automobile rental in new york", "cheap auto rental in new york", "cheap car rental in nyc"]
    assert exp.expand("carpet") == []  # whole words only
    (tmp_path / "syn.txt").write_text("# comment\ncar: automobile, auto\n")
    assert SynonymExpander(tmp_path / "syn.txt").expand("car") == ["automobile", "auto"]
    (tmp_path / "bad.txt").write_text("car automobile\n")
    with pytest.raises(KolmValueError, match="bad.txt:1"):
        SynonymExpander(tmp_path / "bad.txt")
    planner = ExpandingQueryPlanner(exp)
    plan = asyncio.run(planner.plan(SearchRequest(query="car", limit=1)))
    assert plan.expanded_queries == ["car", "automobile", "auto"]


def test_embedding_intent_classifier() -> None:
    texts = ["how to install the package", "install guide setup", "price of the plan", "how much does it cost",
             "pricing per month", "setup installation steps"]
    emb = LSAEmbedder(texts * 3, n_components=4)
    clf = EmbeddingIntentClassifier(emb, {"install": ["install setup guide", "installation steps"],
                                          "pricing": ["price cost", "pricing per month"]}, threshold=0.3)
    assert asyncio.run(clf.classify("installation guide")) == "install"
    assert asyncio.run(clf.classify("monthly price")) == "pricing"
    assert asyncio.run(clf.classify("zzzz")) is None  # unknown words: inconclusive
    strict = EmbeddingIntentClassifier(emb, {"install": ["install"]}, threshold=1.01)
    assert asyncio.run(strict.classify("install")) is None


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_mmr_kernel_matches_twin(seed: int, lam: float) -> None:
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((25, 6)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    rel = rng.random(25)
    kernels = load("mmr")
    np.testing.assert_array_equal(kernels.mmr_select(rel, emb, lam, 10), kernels.mmr_select_numpy(rel, emb, lam, 10))


async def test_mmr_reranker_diversifies() -> None:
    docs = [SearchDocument("a", "apple pie recipe"), SearchDocument("b", "apple pie recipe"),
            SearchDocument("c", "banana bread")]
    req = SearchRequest(query="apple pie", limit=3)
    ctx = SearchPipelineContext(request=req, plan=DefaultQueryPlanner().plan(req), started_at=0.0)
    emb = HashEmbedder()
    assert [d.id for d in await MMRReranker(emb, lambda_=1.0).rerank(docs, ctx)][:2] == ["a", "b"]
    out = await MMRReranker(emb, lambda_=0.3).rerank(docs, ctx)
    assert [d.id for d in out] == ["a", "c", "b"]  # the duplicate sinks
    with pytest.raises(KolmValueError):
        MMRReranker(emb, lambda_=2)


def test_wired_pipeline_on_cranfield(cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search.engine.doctable import DocumentTable

    table = DocumentTable.from_frame(cranfield["corpus"])
    emb = LSAEmbedder(table.texts(), n_components=128)
    base = presets.hybrid(table, emb)
    modules = base.modules
    modules.deduplicator = ExactDeduplicator()
    modules.reranker = MMRReranker(emb, lambda_=0.9, top_n=20)
    modules.cache = InMemoryCache()
    client = SearchClient(modules)
    queries = cranfield["queries"].head(40)
    batch = client.search_batch(queries, limit=10)
    single = client.search_sync({"query": queries["query"].iloc[0], "limit": 10})
    assert list(batch.run[batch.run.qid == queries.qid.iloc[0]].doc_id) == [d.id for d in single.results]
    ndcg = evaluate(batch, cranfield["qrels"], ["ndcg@10"])["ndcg@10"]
    assert ndcg > 0.3


async def test_dedup_report_in_context_metadata() -> None:
    seen = {}

    class Spy:
        def rerank(self, docs, context):  # type: ignore[no-untyped-def]
            seen.update(context.metadata["deduplicator"])
            return docs

    docs = [SearchDocument("a", "same text"), SearchDocument("b", "Same  text"), SearchDocument("c", "other")]
    client = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(docs),
                           "deduplicator": ExactDeduplicator(), "reranker": Spy()})
    await client.search({"query": "q"})
    assert seen == {"kept": ["a", "c"], "dropped": ["b"], "pairs": [("b", "a")]}


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def fake(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.split(".")[0] in ("onnxruntime", "sentence_transformers", "opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    import importlib

    monkeypatch.setattr(importlib, "import_module", lambda name, package=None: fake(name))
    from kolm_search.adapters import CrossEncoderReranker, OnnxEmbedder, OpenTelemetryTelemetry

    with pytest.raises(ImportError, match=r"kolm-search\[onnx\]"):
        OnnxEmbedder("m.onnx", "tokenizer.json")
    with pytest.raises(ImportError, match=r"kolm-search\[embeddings\]"):
        CrossEncoderReranker("model")
    with pytest.raises(ImportError, match=r"kolm-search\[otel\]"):
        OpenTelemetryTelemetry()
