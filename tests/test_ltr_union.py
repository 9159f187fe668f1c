"""The recommended learning-to-rank feature union (``recipes.ltr_union.hybrid_features``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kolm_search import evaluate
from kolm_search.adapters import LSAEmbedder
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.recipes.ltr_union import HYBRID_FEATURES, hybrid_features
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.retrievers.ltr import LTRReranker, cross_validated_run
from kolm_search.retrievers.ltr_scores import BM25Score, DenseScore
from kolm_search.retrievers.ltr_terms import TermCoverage

pytest.importorskip("lightgbm")


@pytest.fixture(scope="module")
def small(cranfield: dict[str, pd.DataFrame]) -> dict[str, object]:
    table = DocumentTable.from_frame(cranfield["corpus"])
    bm = BM25Retriever(table)
    dense = DenseRetriever(table, LSAEmbedder(table.texts(("title", "content")), n_components=24, seed=1),
                           embed_queries=True)
    queries = cranfield["queries"].head(40).reset_index(drop=True)
    qrels = cranfield["qrels"][cranfield["qrels"]["qid"].isin(queries["qid"].astype(str))]
    return {"table": table, "bm25": bm, "dense": dense, "queries": queries, "qrels": qrels}


def test_the_union_is_its_documented_columns(small) -> None:  # type: ignore[no-untyped-def]
    bm, dense, queries, table = small["bm25"], small["dense"], small["queries"].head(5), small["table"]
    X, keys = LTRReranker(hybrid_features(bm, dense, depth=30, lsa_components=16)).candidate_features(queries)
    assert X.shape == (5 * 30, len(HYBRID_FEATURES))
    by_hand = ((((Fuse(bm, dense, k=60) % 30) ** BM25Score(bm)) ** FeedbackRetriever(bm, "bo1")) ** DenseScore(dense))
    Y, same = LTRReranker(by_hand ** BM25Score(BM25Retriever(table, k1=0.9, b=0.4))
                          ** TermCoverage(bm)).candidate_features(queries)
    assert same[["qid", "doc_id"]].equals(keys[["qid", "doc_id"]])
    np.testing.assert_array_equal(X[:, [0, 1, 2, 3]], Y[:, :4])
    np.testing.assert_array_equal(X[:, HYBRID_FEATURES.index("bm25_0.9_0.4")], Y[:, 4])
    np.testing.assert_array_equal(X[:, HYBRID_FEATURES.index("coverage_idf")], Y[:, 5])
    lsa = X[:, HYBRID_FEATURES.index("lsa")]
    assert np.all(np.abs(lsa) <= 1 + 1e-6) and lsa.std() > 0
    cover = X[:, HYBRID_FEATURES.index("coverage")]  # shares of the query's terms
    assert cover.min() >= 0 and 0 < cover.max() <= 1


def test_the_recipe_runs_under_cross_validation(small) -> None:  # type: ignore[no-untyped-def]
    """On a small corpus: fitted per fold, every query ranked once, no fold's judgements seen."""
    bm, dense, queries, qrels = small["bm25"], small["dense"], small["queries"], small["qrels"]
    stage = LTRReranker(hybrid_features(bm, dense, depth=30, lsa_components=16), n_estimators=20, min_data_in_leaf=20)
    run = cross_validated_run(stage, queries, qrels, folds=4, seed=0, limit=30)
    assert set(run["qid"]) == set(queries["qid"].astype(str))
    assert run.groupby("qid").size().max() == 30
    assert 0 < evaluate(run, qrels)["ndcg@10"] <= 1


def test_the_recipe_checks_its_input(small) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KolmTypeError, match="BM25Retriever"):
        hybrid_features(small["dense"], small["dense"])  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match="DenseRetriever"):
        hybrid_features(small["bm25"], small["bm25"])  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="depth"):
        hybrid_features(small["bm25"], small["dense"], depth=0)
