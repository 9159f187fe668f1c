"""``presets.hybrid_plus``: single search equals batch search, it pickles, it is the RRF of its
children's runs; on Cranfield with the packaged MiniLM (extra ``onnx``), its cross-validated
nDCG@10 beats ``presets.hybrid``'s by at least 0.02."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import fuse, presets
from kolm_search.adapters import LSAEmbedder, RM3Expander
from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.planners import DefaultQueryPlanner, ExpandingQueryPlanner
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from tests.conftest import cached_copy, synthetic_corpus
from tests.fakes import BatchHashEmbedder
from tests.test_batch import assert_same

TEXTS = synthetic_corpus(300, 50, seed=11)
CORPUS = pd.DataFrame({"id": [f"d{i}" for i in range(len(TEXTS))], "title": [t.split()[0] for t in TEXTS],
                       "content": TEXTS})
QUERIES = ["w1 w4", "w10 w2 w33", "w5", "w0 w0 w7", "nothing-matches", "w12 w13 w14 w15"]


def children(table: DocumentTable, embedder: Any, feedback: str | None, lsa: int, limit: int,
             planner: Any = None) -> list[pd.DataFrame]:
    """The three children's runs, each through its own one-retriever preset (the oracle)."""
    model = LSAEmbedder(table.texts(("title", "content")), n_components=lsa)
    return [presets.bm25(table, planner=planner, feedback=feedback).search_batch(QUERIES, limit=limit).run,
            presets.dense(table, embedder, planner=planner).search_batch(QUERIES, limit=limit).run,
            presets.dense(table, model, planner=planner).search_batch(QUERIES, limit=limit).run]


def rm3_text_planner(table: DocumentTable) -> ExpandingQueryPlanner:
    return ExpandingQueryPlanner(RM3Expander(BM25Retriever(table), fb_docs=5, fb_terms=10), max_queries=2)


@pytest.mark.parametrize("feedback", [None, "bo1", "rm3"])
@pytest.mark.parametrize("depth", [None, 40])
def test_is_the_rrf_of_its_children(feedback: str | None, depth: int | None) -> None:
    table = DocumentTable.from_frame(CORPUS)
    client = presets.hybrid_plus(table, BatchHashEmbedder(), k=20, depth=depth, lsa_components=16, feedback=feedback)
    got = client.search_batch(QUERIES, limit=10).run
    expected = fuse(children(table, BatchHashEmbedder(), feedback, 16, depth or 10), "rrf", k=20, limit=10)
    assert list(got["qid"]) == list(expected["qid"]) and list(got["doc_id"]) == list(expected["doc_id"])
    np.testing.assert_allclose(got["score"], expected["score"], rtol=1e-9)


def test_feedback_kwargs_and_a_text_planner_reach_their_children() -> None:
    table = DocumentTable.from_frame(CORPUS)
    kw = {"fb_docs": 5, "fb_terms": 20}
    client = presets.hybrid_plus(table, BatchHashEmbedder(), depth=30, lsa_components=16, feedback="kl",
                                 feedback_kwargs=kw, planner=rm3_text_planner(table))
    sparse = client.pipeline.modules.retriever.retrievers[0]
    assert (sparse.model, sparse.fb_docs, sparse.fb_terms) == ("kl", 5, 20)
    runs = children(table, BatchHashEmbedder(), None, 16, 30, planner=rm3_text_planner(table))
    runs[0] = presets.bm25(table, planner=rm3_text_planner(table), feedback="kl",
                           feedback_kwargs=kw).search_batch(QUERIES, limit=30).run
    pd.testing.assert_frame_equal(client.search_batch(QUERIES, limit=10).run,
                                  fuse(runs, "rrf", k=60, limit=10), check_dtype=False)
    with pytest.raises(KolmValueError, match="feedback_kwargs"):
        presets.hybrid_plus(table, BatchHashEmbedder(), feedback=None, feedback_kwargs=kw)
    with pytest.raises(KolmValueError, match="model must be one of"):
        presets.hybrid_plus(table, BatchHashEmbedder(), feedback="rocchio")


@pytest.mark.parametrize("paging", [(10, 0), (7, 5), (3, 60)])
def test_single_equals_batch(paging: tuple[int, int]) -> None:
    client = presets.hybrid_plus(CORPUS, BatchHashEmbedder(), depth=50, lsa_components=16)
    limit, offset = paging
    batch = client.search_batch(QUERIES, limit=limit, offset=offset)
    assert_same(batch, [client.search_sync({"query": q, "limit": limit, "offset": offset}) for q in QUERIES])


def test_pickles_and_has_the_documented_parts() -> None:
    client = presets.hybrid_plus(CORPUS, BatchHashEmbedder(), lsa_components=16)
    clone = pickle.loads(pickle.dumps(client))
    pd.testing.assert_frame_equal(client.search_batch(QUERIES, limit=5).run, clone.search_batch(QUERIES, limit=5).run)
    retriever = client.pipeline.modules.retriever
    assert [type(r).__name__ for r in retriever.retrievers] == ["FeedbackRetriever", "DenseRetriever", "DenseRetriever"]
    assert retriever.method == "rrf" and retriever.k == 60 and retriever.depth == 1000 and retriever.retrievers[2].embed_queries
    sparse = retriever.retrievers[0]
    assert (sparse.model, sparse.fb_docs, sparse.fb_terms) == ("bo1", 3, 10)  # Terrier's defaults
    assert isinstance(client.pipeline.modules.planner, DefaultQueryPlanner)


def test_dense_embed_queries_ignores_the_pipelines_vectors() -> None:
    """A second dense child with its own model embeds the queries itself (the pipeline's
    vectors have another dimension), in single and batch search."""
    with pytest.raises(KolmValueError, match="embed_queries"):
        DenseRetriever(CORPUS, embeddings=np.ones((len(CORPUS), 3), np.float32), embed_queries=True)
    table = DocumentTable.from_frame(CORPUS)
    lsa = LSAEmbedder(table.texts(("title", "content")), n_components=8)
    alone = presets.dense(table, lsa).search_batch(QUERIES, limit=5).run
    inside = presets.dense(table, BatchHashEmbedder(), planner=DefaultQueryPlanner())
    inside.pipeline.modules.retriever = DenseRetriever(table, lsa, embed_queries=True)
    pd.testing.assert_frame_equal(inside.search_batch(QUERIES, limit=5).run, alone)
    single = inside.search_sync({"query": QUERIES[0], "limit": 5})
    assert [d.id for d in single.results] == list(alone[alone.qid == alone.qid.iloc[0]]["doc_id"])


# -- Cranfield with the packaged ONNX MiniLM --------------------------------------------------

GRID = {"feedback": [None, "bo1"], "k": [20, 60]}  # depth 1000, LSA 128, no text expansion


@pytest.mark.slow
def test_cross_validated_gain_over_hybrid_on_cranfield(cranfield: dict[str, pd.DataFrame], onnx_minilm,  # type: ignore[no-untyped-def]
                                                       cranfield_store, tmp_path: Path) -> None:
    from kolm_search.evaluation.crossval import cross_validate, grid_points

    corpus, queries, qrels = cranfield["corpus"], cranfield["queries"], cranfield["qrels"]
    table = DocumentTable.from_frame(corpus)
    emb = cached_copy(cranfield_store("minilm-onnx"), onnx_minilm, tmp_path)  # the session embedded the corpus once
    vectors = DenseRetriever(table, emb).embeddings  # the corpus once
    baseline = presets.hybrid(table, emb, embeddings=vectors).search_batch(queries, limit=100).run
    lsa = LSAEmbedder(table.texts(("title", "content")), n_components=128)
    dense_runs = [presets.dense(table, emb, embeddings=vectors).search_batch(queries, limit=1000).run,
                  presets.dense(table, lsa).search_batch(queries, limit=1000).run]
    sparse = {fb: presets.bm25(table, feedback=fb).search_batch(queries, limit=1000).run for fb in GRID["feedback"]}
    candidates = {str(p): fuse([sparse[p["feedback"]], *dense_runs], "rrf", k=p["k"], limit=100)
                  for p in grid_points(GRID)}
    cv = cross_validate(candidates, qrels, baseline, folds=5, seed=0)
    assert cv.delta >= 0.02 and cv.p_value < 0.05, cv.to_markdown()
    # the preset with its defaults is the fusion the folds score
    default = presets.hybrid_plus(table, emb, embeddings=vectors).search_batch(queries.head(20), limit=100).run
    expected = candidates[str({"feedback": "bo1", "k": 60})]
    expected = expected[expected["qid"].isin(set(default["qid"]))]
    assert_same_run(default, expected)


def assert_same_run(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal runs whatever the order of their queries."""
    a, b = (x.astype({"qid": str, "doc_id": str}).sort_values(["qid", "rank"]).reset_index(drop=True) for x in (a, b))
    assert list(a["qid"]) == list(b["qid"]) and list(a["doc_id"]) == list(b["doc_id"])
    np.testing.assert_allclose(a["score"], b["score"], rtol=1e-9)
