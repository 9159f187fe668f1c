"""What the README's operator table and ``Fuse``'s docstring state, checked on a small corpus of
two queries (issue 27, item 6): ``Fuse`` takes every unsupervised method of ``fuse`` and gives
``fuse``'s ranking of the stages' runs (the oracle), ``gmnz`` and ``rbc`` with their ``params``
(the supervised methods: ``tests/test_fuse_params.py``); a retrieving right operand of ``**`` is
asked the union's page."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kolm_search import BM25Retriever, Fuse, KolmError, QueryBatch
from kolm_search.fusion import FUSION_METHODS, fuse
from kolm_search.fusion.methods import ALIASES, METHODS

DOCS = pd.DataFrame({
    "id": [f"d{i}" for i in range(8)],
    "title": ["wing lift", "drag wing", "heat flow", "lift drag", "boundary layer", "shock wave", "wing heat",
              "layer flow"],
    "content": ["lift of a wing", "drag of wings at speed", "heat transfer flow", "lift and drag ratio",
                "boundary layer flow", "shock wave boundary", "heat on wing surface", "laminar layer flow"]})
QUERIES = pd.DataFrame({"qid": ["q1", "q2"], "query": ["wing lift drag", "boundary layer heat flow"]})
A = BM25Retriever(DOCS)
B = BM25Retriever(DOCS, fields=["title"])
UNSUPERVISED = [m for m in FUSION_METHODS if not METHODS[ALIASES.get(m, m)].supervised]
NEEDS_PARAMS = sorted(m for m in UNSUPERVISED if METHODS[ALIASES.get(m, m)].required)
PLAIN = sorted(m for m in UNSUPERVISED if not METHODS[ALIASES.get(m, m)].required)


def test_the_methods_needing_params_are_the_documented_ones() -> None:
    assert NEEDS_PARAMS == ["gmnz", "rbc"]  # the README's table and Fuse's docstring name them


@pytest.mark.parametrize("method", PLAIN)
def test_fuse_stage_ranks_as_fuse_of_the_stages_runs(method: str) -> None:
    got = Fuse(A, B, method=method)(QUERIES, limit=100)
    want = fuse([A(QUERIES, limit=100), B(QUERIES, limit=100)], method=method, limit=100)
    assert got["qid"].tolist() == want["qid"].tolist()
    assert got["doc_id"].tolist() == want["doc_id"].tolist()
    np.testing.assert_allclose(got["score"].to_numpy(), want["score"].to_numpy(), rtol=1e-9)


@pytest.mark.parametrize("method", NEEDS_PARAMS)
def test_fuse_stage_takes_a_method_that_needs_params_with_them(method: str) -> None:
    with pytest.raises(KolmError, match=method):
        Fuse(A, B, method=method)  # without them: refused, naming the method
    params = {"gmnz": {"gamma": 2.0}, "rbc": {"phi": 0.6}}[method]
    got = Fuse(A, B, method=method, params=params)(QUERIES, limit=100)
    want = fuse([A(QUERIES, limit=100), B(QUERIES, limit=100)], method=method, params=params, limit=100)
    assert got["doc_id"].tolist() == want["doc_id"].tolist()
    np.testing.assert_allclose(got["score"].to_numpy(), want["score"].to_numpy(), rtol=1e-9)


@pytest.mark.parametrize("limit", [1, 2, 100])
def test_a_retrieving_feature_is_its_score_in_its_own_list_of_the_page_asked(limit: int) -> None:
    batch = QueryBatch(texts=list(QUERIES["query"]), owner=np.arange(2), n_queries=2, limit=limit,
                       filters=[{}] * 2, table=A.table)
    frame = ((A % 3) ** B).transform(batch, None)
    run_b = B(QUERIES, limit=limit)
    own = {(q, d): s for q, d, s in zip(run_b["qid"], run_b["doc_id"], run_b["score"], strict=True)}
    ids = A.table.ids  # document codes -> ids
    want = [own.get((QUERIES["qid"][q], str(ids[d])), 0.0) for q, d in zip(frame.query, frame.doc, strict=True)]
    np.testing.assert_allclose(frame.features[:, 1], want, rtol=1e-12)
    np.testing.assert_allclose(frame.features[:, 0], frame.score)
