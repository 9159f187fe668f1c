"""CachedEmbedder, RM3Expander, NearDuplicateDeduplicator."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import ExpandingQueryPlanner, SearchDocument, evaluate, presets
from kolm_search.adapters import CachedEmbedder, NearDuplicateDeduplicator, RM3Expander
from tests.fakes import BatchHashEmbedder, HashEmbedder, ListLogger


def test_cached_embedder_reuses_and_matches(tmp_path: Path) -> None:
    inner = BatchHashEmbedder()
    cached = CachedEmbedder(inner, tmp_path / "e.sqlite", model_id="hash-8")
    texts = ["alpha", "beta", "alpha", "gamma"]
    first = cached.embed_many(texts)
    np.testing.assert_allclose(first, np.array([inner.vector(t) for t in texts]), rtol=1e-6)
    assert cached.misses == 4 and inner.calls[-1] == ("embed_many", ["alpha", "beta", "gamma"])
    inner.calls.clear()
    again = CachedEmbedder(inner, tmp_path / "e.sqlite", model_id="hash-8")  # a new process, same file
    np.testing.assert_array_equal(again.embed_many(texts), first)
    assert inner.calls == [] and again.hits == 4
    other = CachedEmbedder(inner, tmp_path / "e.sqlite", model_id="another-model")
    other.embed_many(["alpha"])
    assert inner.calls == [("embed_many", ["alpha"])]  # model identity is part of the key
    np.testing.assert_array_equal(cached.embed("beta"), first[1])


def test_cached_embedder_corrupt_entry_recomputed(tmp_path: Path) -> None:
    logger = ListLogger()
    cached = CachedEmbedder(HashEmbedder(), tmp_path / "e.sqlite", model_id="m", logger=logger)
    good = cached.embed("alpha")
    with sqlite3.connect(tmp_path / "e.sqlite") as db:
        db.execute("UPDATE emb SET vec = ?", (b"\x00\x01",))
    np.testing.assert_array_equal(cached.embed("alpha"), good)
    assert logger.warnings()


def test_cached_embedder_concurrent_writers(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            c = CachedEmbedder(BatchHashEmbedder(), tmp_path / "e.sqlite", model_id="m")
            c.embed_many([f"text {j}" for j in range(i, i + 40)])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i * 10,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with sqlite3.connect(tmp_path / "e.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM emb").fetchone()[0] == 70


def test_rm3_improves_bm25_on_cranfield(cranfield: dict[str, pd.DataFrame]) -> None:
    base = presets.bm25(cranfield["corpus"])
    bm25 = base.modules.retriever
    rm3 = presets.bm25(bm25.table, planner=ExpandingQueryPlanner(RM3Expander(bm25), max_queries=2))
    q, qrels = cranfield["queries"], cranfield["qrels"]
    plain = evaluate(base.search_batch(q, limit=100), qrels, ["ndcg@10", "recall@100"])
    expanded = evaluate(rm3.search_batch(q, limit=100), qrels, ["ndcg@10", "recall@100"])
    assert expanded["recall@100"] > plain["recall@100"] + 0.01  # measured 0.768 vs 0.738
    assert expanded["ndcg@10"] > plain["ndcg@10"]  # measured 0.381 vs 0.373
    terms = RM3Expander(bm25, fb_docs=5, fb_terms=3).expand("supersonic flow")
    assert len(terms) == 1 and terms[0].startswith("supersonic flow ") and len(terms[0].split()) == 5
    assert RM3Expander(bm25).expand("qqqzzz") == []


async def test_near_duplicate_deduplicator() -> None:
    docs = [SearchDocument("a", "the quick brown fox"), SearchDocument("b", "The quick brown fox"),
            SearchDocument("c", "completely different text here"), SearchDocument("d", "the quick brown fox!")]
    dedup = NearDuplicateDeduplicator(HashEmbedder(), threshold=0.99)
    out = await dedup.deduplicate(docs)
    assert [d.id for d in out] == ["a", "c"]
    assert dedup.last_dropped == [("b", "a"), ("d", "a")]
    with pytest.raises(ValueError):
        NearDuplicateDeduplicator(HashEmbedder(), threshold=0)
