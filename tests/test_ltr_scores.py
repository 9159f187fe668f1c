"""BM25Score and DenseScore: a retriever's own score of exactly the candidates they are given."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from kolm_search.adapters import LSAEmbedder
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, SearchError
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.retrievers.ltr import LTRReranker
from kolm_search.retrievers.ltr_scores import BM25Score, DenseScore


@pytest.fixture(scope="module")
def parts(cranfield: dict[str, pd.DataFrame]) -> dict[str, object]:
    table = DocumentTable.from_frame(cranfield["corpus"])
    lsa = LSAEmbedder(table.texts(("title", "content")), n_components=32, seed=0)
    return {"table": table, "bm25": BM25Retriever(table), "dense": DenseRetriever(table, lsa, embed_queries=True),
            "queries": cranfield["queries"].head(12).reset_index(drop=True)}


def _everything(run: pd.DataFrame, keys: pd.DataFrame) -> np.ndarray:
    """Each candidate's score in ``run`` (0 where the run lacks it)."""
    got = keys[["qid", "doc_id"]].merge(run.astype({"qid": str, "doc_id": str}), on=["qid", "doc_id"], how="left")
    return got["score"].fillna(0.0).to_numpy()


@pytest.mark.parametrize("params", [{}, {"k1": 0.9, "b": 0.4}, {"method": "bm25+", "delta": 1.0},
                                    {"fields": ("title",)}])
def test_bm25_score_is_the_retrievers_score_of_every_candidate(parts, params) -> None:  # type: ignore[no-untyped-def]
    table, queries = parts["table"], parts["queries"]
    other = BM25Retriever(table, **params)
    hybrid = Fuse(parts["bm25"], parts["dense"], k=60)
    X, keys = LTRReranker((hybrid % 100) ** BM25Score(other)).candidate_features(queries)
    # the oracle: the retriever's own run over every document it scores
    want = _everything(other(queries, limit=len(table)), keys)
    np.testing.assert_allclose(X[:, 1], want, rtol=1e-6)
    assert (want == 0).any() and (want > 0).any()  # candidates without any query term score 0


def test_dense_score_is_the_similarity_of_every_candidate(parts) -> None:  # type: ignore[no-untyped-def]
    table, queries, dense = parts["table"], parts["queries"], parts["dense"]
    X, keys = LTRReranker((parts["bm25"] % 100) ** DenseScore(dense)).candidate_features(queries)
    want = _everything(dense(queries, limit=len(table)), keys)
    np.testing.assert_allclose(X[:, 1], want, rtol=1e-5, atol=1e-6)
    # a plain numpy cosine as a second oracle
    emb = np.asarray(dense.embedder.embed_many(list(queries["query"])), np.float64)
    docs = np.asarray(dense.embedder.embed_many(table.texts(("title", "content"))), np.float64)
    row = {d: i for i, d in enumerate(table.ids)}
    qrow = {q: i for i, q in enumerate(queries["qid"].astype(str))}
    a = docs[[row[d] for d in keys["doc_id"]]]
    b = emb[[qrow[q] for q in keys["qid"]]]
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    np.testing.assert_allclose(X[:, 1], cos, atol=1e-5)


def test_a_union_gives_every_operand_the_first_ones_candidates_however_grouped(parts) -> None:  # type: ignore[no-untyped-def]
    """``a ** b ** c`` (Python: ``a ** (b ** c)``) is the flat union ``(a ** b) ** c``: with
    retrieving ``b`` and ``c``, ``c`` counts wherever it retrieved the candidate itself, not only
    where ``b`` did; score stages give every candidate its score."""
    bm, dense, queries = parts["bm25"], parts["dense"], parts["queries"]
    first = Fuse(bm, dense, k=60) % 50
    right = LTRReranker(first ** BM25Score(bm) ** DenseScore(dense)).candidate_features(queries)[0]
    left = LTRReranker((first ** BM25Score(bm)) ** DenseScore(dense)).candidate_features(queries)[0]
    np.testing.assert_array_equal(right, left)
    retrieved = LTRReranker(first ** (bm % 20) ** (dense % 20)).candidate_features(queries)[0]
    grouped = LTRReranker((first ** (bm % 20)) ** (dense % 20)).candidate_features(queries)[0]
    np.testing.assert_array_equal(retrieved, grouped)
    alone = LTRReranker(first ** (dense % 20)).candidate_features(queries)[0]
    np.testing.assert_array_equal(retrieved[:, 2], alone[:, 1])  # dense's score whether BM25 found it or not
    assert ((retrieved[:, 1] == 0) & (retrieved[:, 2] != 0)).any()
    assert (retrieved[:, 2] == 0).sum() > (left[:, 2] == 0).sum()  # what the score stage avoids


def test_score_stages_check_their_input(parts) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KolmTypeError, match="BM25Retriever"):
        BM25Score(parts["dense"])  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match="DenseRetriever"):
        DenseScore(parts["bm25"])  # type: ignore[arg-type]
    stage = BM25Score(parts["bm25"])
    other = BM25Retriever(parts["table"], k1=0.9)
    stage.set_params(bm25=other)
    assert stage.bm25 is other and stage.get_params()["bm25__k1"] == 0.9
    with pytest.raises(KolmTypeError):
        stage.set_params(bm25="x")
    assert stage.bm25 is other
    batch = QueryBatch(["wing"], np.zeros(1, np.int64), 1, 10, [{}])
    frame = CandidateFrame.from_ptr([0, 1], [0], [1.0])
    for s in (stage, DenseScore(parts["dense"])):
        with pytest.raises(SearchError, match="needs candidates"):
            s.transform(batch, None)
        small = DocumentTable.from_frame(pd.DataFrame({"id": ["a"], "title": [""], "content": ["wing"]}))
        with pytest.raises(SearchError, match="not this feature's index"):
            s.transform(replace(batch, table=small), frame)
    # no candidates: no scores, no error
    empty = CandidateFrame.empty(1)
    assert len(stage.transform(batch, empty)) == 0 and len(DenseScore(parts["dense"]).transform(batch, empty)) == 0
