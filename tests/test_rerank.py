"""rerank_run (batch re-ranking jobs), FusionReranker, and the rerank CLI."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import KolmValueError, SearchError, evaluate
from kolm_search.adapters import FusionReranker
from kolm_search.cli import main
from kolm_search.io import load_beir, read_run, write_run
from kolm_search.jobs.rerank import rerank_run

CORPUS = pd.DataFrame({"id": [f"d{i}" for i in range(8)], "content": [f"text {i}" for i in range(8)]})
QUERIES = pd.DataFrame({"qid": ["q1", "q2"], "query": ["one", "two"]})
RUN = pd.DataFrame({"qid": ["q1"] * 5 + ["q2"] * 3, "doc_id": ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"],
                    "score": [5.0, 4, 3, 2, 1, 3, 2, 1]})


class Reverse:
    """Reverses the block; async to check awaiting."""

    async def rerank(self, docs, context):  # type: ignore[no-untyped-def]
        return list(reversed(docs))


class Scored:
    def rerank(self, docs, context):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        return [replace(d, score=10.0 - i) for i, d in enumerate(sorted(docs, key=lambda d: d.id, reverse=True))]


@pytest.mark.parametrize("batch_size", [1, 64])
def test_block_reranked_tail_kept(batch_size: int) -> None:
    out = rerank_run(RUN, CORPUS, Reverse(), top_k=3, queries=QUERIES, batch_size=batch_size, progress=False)
    q1 = out[out.qid == "q1"]
    assert list(q1.doc_id) == ["d2", "d1", "d0", "d3", "d4"] and list(q1["rank"]) == [0, 1, 2, 3, 4]
    assert q1.score.is_monotonic_decreasing and q1.score.is_unique
    assert list(out[out.qid == "q2"].doc_id) == ["d7", "d6", "d5"]
    # the new order is what trec_eval sees
    qrels = pd.DataFrame({"qid": ["q1"], "doc_id": ["d2"], "relevance": [1]})
    assert evaluate(out, qrels, ["mrr"]) == {"mrr": 1.0}


def test_reranker_scores_are_kept_when_monotone() -> None:
    out = rerank_run(RUN, CORPUS, Scored(), top_k=2, queries=QUERIES, progress=False)
    q1 = out[out.qid == "q1"]
    assert list(q1.doc_id[:2]) == ["d1", "d0"] and list(q1.score[:2]) == [10.0, 9.0]
    assert q1.score.is_monotonic_decreasing


def test_missing_documents_reported_not_dropped(caplog: pytest.LogCaptureFixture) -> None:
    run = pd.concat([RUN, pd.DataFrame({"qid": ["q2"], "doc_id": ["ghost"], "score": [9.0]})], ignore_index=True)
    out = rerank_run(run, CORPUS, Reverse(), top_k=10, queries=QUERIES, progress=False)
    assert len(out) == len(run) and "ghost" in set(out.doc_id)
    assert out.attrs["missing"] == [("q2", "ghost")]
    assert "not in the corpus" in caplog.text


def test_errors() -> None:
    with pytest.raises(KolmValueError, match="query texts"):
        rerank_run(RUN, CORPUS, Reverse())
    with pytest.raises(KolmValueError, match="no text"):
        rerank_run(RUN, CORPUS, Reverse(), queries={"q1": "one"})

    class Dropper:
        def rerank(self, docs, context):  # type: ignore[no-untyped-def]
            return docs[1:]

    with pytest.raises(SearchError, match="same documents") as info:
        rerank_run(RUN, CORPUS, Dropper(), queries=QUERIES, progress=False)
    assert info.value.stage == "reranker"

    class Boom:
        def rerank(self, docs, context):  # type: ignore[no-untyped-def]
            raise RuntimeError("model crashed")

    with pytest.raises(SearchError, match="query 'q1': model crashed"):
        rerank_run(RUN, CORPUS, Boom(), queries=QUERIES, progress=False)


async def test_fusion_reranker() -> None:
    from kolm_search import DefaultQueryPlanner, SearchDocument, SearchPipelineContext, SearchRequest

    docs = [SearchDocument("a", "x", score=3.0), SearchDocument("b", "y", score=2.0), SearchDocument("c", "z", score=1.0)]
    req = SearchRequest(query="q", limit=3)
    ctx = SearchPipelineContext(request=req, plan=DefaultQueryPlanner().plan(req), started_at=0.0)
    flip = FusionReranker(["original", lambda ds, c: np.arange(len(ds))], weights=[1.0, 3.0])
    out = await flip.rerank(docs, ctx)
    assert [d.id for d in out] == ["c", "b", "a"] and out[0].score == pytest.approx(3.0)
    with pytest.raises(KolmValueError):
        await FusionReranker([lambda ds, c: [1.0]]).rerank(docs, ctx)
    with pytest.raises(KolmValueError):
        FusionReranker([])


def test_cli_rerank(cranfield_dir: Path, tmp_path: Path) -> None:
    ds = load_beir(cranfield_dir)
    from kolm_search import presets

    run = presets.bm25(ds.corpus).search_batch(ds.queries.head(30), limit=50).run
    write_run(run, tmp_path / "in.trec")
    cache = tmp_path / "cache"
    base = ["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "mmr", "--model", "lsa",
            "--top-k", "10", "--batch-size", "7", "--cache-dir", str(cache), "--quiet"]
    assert main([*base, "-o", str(tmp_path / "out.trec")]) == 0
    out = read_run(tmp_path / "out.trec")
    assert len(out) == len(run) and set(out.qid) == set(run.qid)
    for qid in list(run.qid.unique())[:5]:  # the tail below top-k keeps its order
        assert list(out[out.qid == qid].doc_id[10:]) == list(run[run.qid == qid].doc_id[10:])
    assert len(list((tmp_path / "out.trec.parts").glob("part-*.parquet"))) == 5  # 30 queries, 7 a part
    pd.testing.assert_frame_equal(read_run(tmp_path / "out.trec.parts"), out)
    # only the run's documents were embedded (and the queries), through the cache: not the corpus
    with sqlite3.connect(cache / "embeddings.sqlite") as db:
        stored = db.execute("SELECT COUNT(*) FROM emb").fetchone()[0]
    assert stored <= run.groupby("qid").head(10).doc_id.nunique() + 30 < len(ds.corpus)
    assert main(["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "cross-encoder",
                 "-o", str(tmp_path / "x.trec"), "--no-cache"]) == 1


def test_cli_rerank_refuses_another_job_unless_restarted(cranfield_dir: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from tests.reliability._servers import ChatModel, RawServer

    ds = load_beir(cranfield_dir)
    from kolm_search import presets

    write_run(presets.bm25(ds.corpus).search_batch(ds.queries.head(6), limit=12).run, tmp_path / "in.trec")
    server = RawServer(ChatModel())
    try:
        base = ["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "llm-listwise",
                "--llm-url", server.url() + "/v1", "--llm-model", "fake", "--window", "4", "--step", "2",
                "--no-cache", "--quiet", "-o", str(tmp_path / "job")]
        assert main([*base, "--top-k", "5"]) == 0
        assert main([*base, "--top-k", "8"]) == 1
        assert "top_k differs (recorded '5', now '8')" in capsys.readouterr().err
        assert main([*base, "--top-k", "8", "--restart"]) == 0
        out = read_run(tmp_path / "job")  # a folder: the parts themselves
        assert len(out) == 6 * 12 and out.groupby("qid").size().eq(12).all()
        assert main([*base[:-2], "-o", str(tmp_path / "missing-args"), "--llm-url", ""]) == 1
    finally:
        server.close()


def test_cli_rerank_help_shows_a_resumable_job_the_cache_and_an_llm(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["rerank", "--help"])
    text = capsys.readouterr().out
    for phrase in ("computes only the parts", "--restart", "--cache-dir", "scores.sqlite", "--no-cache",
                   "llm-listwise", "--llm-url", "onnx-cross-encoder", "examples:"):
        assert phrase in text, phrase


def test_cli_llm_reranker_reads_the_score_cache_the_second_time(cranfield_dir: Path, tmp_path: Path) -> None:
    from kolm_search import presets
    from tests.reliability._servers import ChatModel, RawServer

    ds = load_beir(cranfield_dir)
    write_run(presets.bm25(ds.corpus).search_batch(ds.queries.head(3), limit=6).run, tmp_path / "in.trec")
    model = ChatModel()
    server = RawServer(model)
    try:
        base = ["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "llm-pointwise",
                "--llm-url", server.url() + "/v1", "--llm-model", "fake", "--top-k", "4", "--quiet",
                "--cache-dir", str(tmp_path / "cache")]
        assert main([*base, "-o", str(tmp_path / "a.trec")]) == 0
        assert len(model.prompts) == 12
        assert main([*base, "-o", str(tmp_path / "b.trec")]) == 0  # another job, the same pairs: all cached
        assert len(model.prompts) == 12
        assert main([*base, "--no-cache", "-o", str(tmp_path / "c.trec")]) == 0
        assert len(model.prompts) == 24
        pd.testing.assert_frame_equal(read_run(tmp_path / "a.trec"), read_run(tmp_path / "c.trec"))
    finally:
        server.close()
