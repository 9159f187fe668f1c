"""rerank_run (batch re-ranking jobs), FusionReranker, and the rerank CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kolm_search import KolmValueError, SearchError, evaluate
from kolm_search.adapters import FusionReranker
from kolm_search.cli import main
from kolm_search.io import load_beir, read_run, write_run
from kolm_search.rerank import rerank_run

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
    assert main(["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "mmr", "--model", "lsa",
                 "--top-k", "10", "-o", str(tmp_path / "out.trec"), "--quiet"]) == 0
    out = read_run(tmp_path / "out.trec")
    assert len(out) == len(run) and set(out.qid) == set(run.qid)
    for qid in list(run.qid.unique())[:5]:  # the tail below top-k keeps its order
        assert list(out[out.qid == qid].doc_id[10:]) == list(run[run.qid == qid].doc_id[10:])
    assert main(["rerank", str(tmp_path / "in.trec"), "--dataset", str(cranfield_dir), "--reranker", "cross-encoder",
                 "-o", str(tmp_path / "x.trec")]) == 1
