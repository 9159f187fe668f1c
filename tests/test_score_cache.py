"""The score cache: a second job, search_batch or Experiment over the same pairs calls the model
zero times; cached output equals uncached; two processes writing one file lose nothing;
damaged entries and NaN scores are never served."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import KolmTypeError, presets
from kolm_search.adapters import CachedReranker, PointwiseReranker, ScoreCache
from kolm_search.adapters.listwise import rerank_windows
from kolm_search.errors import KolmValueError
from kolm_search.jobs.rerank import rerank_run
from kolm_search.types import SearchDocument
from tests.reliability.rerank_child import inputs

RUN, CORPUS, QUERIES = inputs()


class Overlap(PointwiseReranker):
    """Scores a pair by word overlap plus a hash-like tie-breaker; counts the pairs it scores."""

    def __init__(self, score_cache: ScoreCache | None = None, nan_for: str | None = None) -> None:
        self.score_cache, self.nan_for, self.pairs = score_cache, nan_for, 0

    def fingerprint(self) -> str:
        return "Overlap/1"

    def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> np.ndarray:
        self.pairs += len(pairs)
        out = [len(set(q.split()) & set(d.content.split())) + (sum(map(ord, d.id)) % 97) / 97.0 for q, d in pairs]
        return np.asarray([np.nan if d.id == self.nan_for else s for s, (_, d) in zip(out, pairs, strict=True)],
                          dtype=np.float32)


class Windows:
    """A listwise ranker ordering each window by document id, descending; counts its calls."""

    window, step, max_concurrency = 3, 2, 4

    def __init__(self) -> None:
        self.calls = 0

    def fingerprint(self) -> str:
        return "Windows/1"

    def rank_window(self, query: str, docs: Sequence[SearchDocument]) -> list[int]:
        self.calls += 1
        return sorted(range(len(docs)), key=lambda i: docs[i].id, reverse=True)

    async def rerank_batch(self, items: Any) -> list[list[SearchDocument]]:
        return await rerank_windows(self, items)

    async def rerank(self, docs: Any, context: Any) -> list[SearchDocument]:
        return (await self.rerank_batch([(docs, context)]))[0]


def job(reranker: Any, **kw: Any) -> pd.DataFrame:
    return rerank_run(RUN, CORPUS, reranker, top_k=5, batch_size=7, queries=QUERIES, progress=False, **kw)


def test_second_job_calls_the_model_zero_times_and_equals_uncached(tmp_path: Path) -> None:
    plain = Overlap()
    want = job(plain)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    first = Overlap()
    got = job(first, score_cache=cache)
    assert first.pairs == plain.pairs == len(QUERIES) * 5 and cache.misses == first.pairs and cache.hits == 0
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    second = Overlap()
    again = job(second, score_cache=ScoreCache(tmp_path / "scores.sqlite"))  # a new process would open it so
    assert second.pairs == 0
    pd.testing.assert_frame_equal(again, want, check_exact=True)
    built_with = Overlap(score_cache=ScoreCache(tmp_path / "scores.sqlite"))  # the option on the reranker itself
    pd.testing.assert_frame_equal(job(built_with), want, check_exact=True)
    assert built_with.pairs == 0 and len(cache) == len(QUERIES) * 5


def test_keys_cover_reranker_query_and_document_content(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path / "s.sqlite")
    job(Overlap(), score_cache=cache)

    class Other(Overlap):
        def fingerprint(self) -> str:
            return "Overlap/2"

    other = Other()
    job(other, score_cache=cache)
    assert other.pairs == len(QUERIES) * 5  # another model never reads this one's scores
    edited = CORPUS.assign(content=CORPUS["content"].where(CORPUS["id"] != "d7", "new text"))
    counted = Overlap()
    rerank_run(RUN, edited, counted, top_k=5, batch_size=7, queries=QUERIES, progress=False, score_cache=cache)
    assert counted.pairs == int((RUN.groupby("qid").head(5)["doc_id"] == "d7").sum())  # only the edited document


def test_nan_scores_are_ranked_last_and_never_cached(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path / "s.sqlite")
    top = RUN.groupby("qid").head(5)
    target = top["doc_id"].iloc[0]
    out = job(Overlap(nan_for=target), score_cache=cache)
    for _, block in out.groupby("qid"):
        head = list(block["doc_id"][:5])
        if target in head:
            assert head[-1] == target  # after every scored document
            assert block["score"].is_monotonic_decreasing
    again = Overlap()
    job(again, score_cache=cache)
    assert again.pairs == int((top["doc_id"] == target).sum())  # only the unscored pairs are asked again


def test_a_listwise_reranker_is_cached_by_window(tmp_path: Path) -> None:
    plain = Windows()
    want = job(plain)
    cache = ScoreCache(tmp_path / "w.sqlite")
    first = Windows()
    pd.testing.assert_frame_equal(job(CachedReranker(first, cache)), want, check_exact=True)
    assert first.calls == plain.calls > len(QUERIES)
    second = Windows()
    pd.testing.assert_frame_equal(job(second, score_cache=cache), want, check_exact=True)
    assert second.calls == 0


def test_search_batch_and_experiment_take_the_cache(tmp_path: Path) -> None:
    from kolm_search.evaluation import Experiment
    from kolm_search.io import Dataset

    client = presets.bm25(CORPUS)
    scorer = Overlap()
    client.modules.reranker = scorer
    cache = ScoreCache(tmp_path / "s.sqlite")
    want = client.search_batch(QUERIES, limit=5).run
    first = client.search_batch(QUERIES, limit=5, score_cache=cache).run
    pd.testing.assert_frame_equal(first, want)
    asked = scorer.pairs
    second = client.search_batch(QUERIES, limit=5, score_cache=cache).run
    assert scorer.pairs == asked  # no pair scored again
    pd.testing.assert_frame_equal(second, want)
    qrels = pd.DataFrame({"qid": QUERIES["qid"], "doc_id": ["d1"] * len(QUERIES), "relevance": 1})
    ds = Dataset(name="tiny", corpus=CORPUS, queries=QUERIES, qrels=qrels)
    table = Experiment({"bm25+overlap": client}, ds, ["ndcg@10"], limit=5, progress=False, score_cache=cache).run()
    assert scorer.pairs == asked and len(table) == 1  # the experiment read every score
    with pytest.raises(KolmValueError, match="no reranker"):
        presets.bm25(CORPUS).search_batch(QUERIES, limit=5, score_cache=cache)
    with pytest.raises(KolmTypeError, match="score_cache must be a ScoreCache .CachesScores: in_front_of., got str"):
        client.search_batch(QUERIES, limit=5, score_cache=str(tmp_path / "s.sqlite"))
    assert type(cache.in_front_of(scorer)) is CachedReranker  # what score_cache= puts before the reranker


def test_any_score_store_backs_a_cached_reranker() -> None:
    """``CachedReranker`` takes any ``ScoreStore`` (get/put), not only the SQLite one."""
    from kolm_search.adapters.score_keys import ScoreStore

    class Memory:
        def __init__(self) -> None:
            self.data: dict[str, Any] = {}

        def get(self, keys: Sequence[str]) -> dict[str, Any]:
            return {k: self.data[k] for k in keys if k in self.data}

        def put(self, entries: Any) -> None:
            self.data.update(entries)

    store = Memory()
    assert isinstance(store, ScoreStore)
    want = job(Overlap())
    first, second = Overlap(), Overlap()
    pd.testing.assert_frame_equal(job(CachedReranker(first, store)), want, check_exact=True)
    pd.testing.assert_frame_equal(job(CachedReranker(second, store)), want, check_exact=True)
    assert first.pairs > 0 and second.pairs == 0  # the second read every score from the store


def test_what_the_cache_refuses(tmp_path: Path) -> None:
    cache = ScoreCache(tmp_path / "s.sqlite")

    class Plain:
        def rerank(self, docs: Any, context: Any) -> list[Any]:
            return docs

    with pytest.raises(KolmTypeError, match="scores pairs.*ranks windows"):
        CachedReranker(Plain(), cache)

    class Anonymous(Overlap):
        fingerprint = None  # type: ignore[assignment]

    with pytest.raises(KolmTypeError, match="declares no fingerprint"):
        CachedReranker(Anonymous(), cache)
    CachedReranker(Anonymous(), cache, fingerprint="anonymous/1")
    with pytest.raises(KolmTypeError, match="must be a ScoreCache"):
        CachedReranker(Overlap(), "scores.sqlite")  # type: ignore[arg-type]


def test_damaged_entries_are_recomputed_never_served(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.sqlite"
    want = job(Overlap())
    job(Overlap(), score_cache=ScoreCache(path))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE scores SET vec = ? WHERE rowid IN (SELECT rowid FROM scores LIMIT 3)",
                   (np.float32([1e6]).tobytes(),))
    again = Overlap()
    pd.testing.assert_frame_equal(job(again, score_cache=ScoreCache(path)), want, check_exact=True)
    assert again.pairs == 3 and "corrupt entry" in caplog.text
    path.write_bytes(b"not a database at all" * 100)
    third = Overlap()
    pd.testing.assert_frame_equal(job(third, score_cache=ScoreCache(path)), want, check_exact=True)
    assert third.pairs == len(QUERIES) * 5 and list(tmp_path.glob("s.sqlite.corrupt-*"))


def _writer(path: str, start: int, n: int, barrier: Any) -> None:
    cache = ScoreCache(path)
    barrier.wait()
    for i in range(start, start + n, 10):  # many small transactions, interleaved with the other process
        cache.put({f"k{j}": np.float32([j]) for j in range(i, i + 10)})


def test_two_processes_writing_one_cache_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ScoreCache(path)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["kolm_search.adapters.scorecache"])
    barrier = context.Barrier(2)
    procs = [context.Process(target=_writer, args=(path, start, 600, barrier)) for start in (0, 400)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    cache = ScoreCache(path)
    found = cache.get([f"k{j}" for j in range(1000)])
    assert len(found) == len(cache) == 1000
    assert all(float(found[f"k{j}"][0]) == j for j in range(1000))
