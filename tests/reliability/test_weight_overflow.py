"""Weighted BM25 queries with huge weights: a clear error naming the query, term, weight and
bound, or finite scores equal to a float64 sum; never ``inf`` or ``nan`` (issue 25, defect 9).

A score is ``offset + sum_t w_t * bm25(t, d)`` in float32, so the refusal must account for the
sum of a query's weights times each term's largest posting weight, not for one weight alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search.errors import KolmValueError
from kolm_search.retrievers import BM25Retriever
from kolm_search.retrievers.bm25 import BM25_METHODS
from kolm_search.retrievers.weighted import SCORE_BOUND

WORDS = ["alpha", "beta", "gamma", "delta", "omega"]
F32_MAX = float(np.finfo(np.float32).max)


def _index(method: str = "lucene", n_filler: int = 60) -> BM25Retriever:
    docs = [{"id": f"f{i}", "content": "beta gamma delta"} for i in range(n_filler)]
    docs += [{"id": "a", "content": "alpha beta"}, {"id": "o", "content": "omega alpha omega"}]
    return BM25Retriever(docs, method=method)  # type: ignore[arg-type]


def test_one_huge_weight_is_refused_naming_query_term_and_bound() -> None:
    """On main, ``score_terms([{"alpha": 3e38}], k)`` scored ``inf`` (alpha's idf exceeds 1)."""
    ret = _index()
    with pytest.raises(KolmValueError, match=r"weighted query 1: term 'alpha' has weight 3e\+38.*above the bound 1\.701e\+38"):
        ret.score_terms([{"beta": 1.0}, {"alpha": 3e38}], 3)
    # below float32's max one by one, but the sum of a query's terms overflows
    half = F32_MAX / 3
    with pytest.raises(KolmValueError, match="weighted query 0: term '(alpha|omega)'"):
        ret.score_terms([{"alpha": half, "omega": half}], 3)
    with pytest.raises(KolmValueError, match="above the bound"):
        alpha = ret._vocab_index["alpha"]  # a term twice in CSR form: the repeats sum
        ret.score_weighted(np.array([0, 2]), np.array([alpha, alpha]), np.array([1e38, 1e38], np.float32), 3)


@pytest.mark.parametrize("method", BM25_METHODS)
def test_weights_just_under_the_bound_score_finite(method: str) -> None:
    ret = _index(method)
    bounds = ret._term_bounds()
    tid = ret._vocab_index["alpha"]
    w = SCORE_BOUND / bounds[tid] * (1 - 1e-6)
    docs, scores, counts = ret.score_terms([{"alpha": w}], 5)
    assert counts[0] >= 2 and np.isfinite(scores[0, :counts[0]]).all() and scores[0, 0] > 1e37


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BM25_METHODS),
       st.lists(st.dictionaries(st.sampled_from([*WORDS, "unknown"]),
                                st.one_of(st.floats(0, F32_MAX), st.floats(1e30, F32_MAX),
                                          st.integers(0, 60).map(lambda e: 10.0 ** (e - 20))),
                                max_size=5), min_size=1, max_size=4),
       st.integers(5, 80))
def test_huge_weights_give_a_clear_error_or_finite_scores(method: str, queries: list[dict[str, float]],
                                                          n_filler: int) -> None:
    ret = _index(method, n_filler)
    tokens = [ret.tokenizer(t) for t in ret.table.texts(ret.fields)]
    try:
        docs, scores, counts = ret.score_terms(queries, len(tokens))
    except KolmValueError as exc:
        message = str(exc)  # past float32's maximum one by one, or past the bound as a sum
        assert "weighted query" in message and ("above the bound" in message or "float32's maximum" in message), exc
        return
    valid = np.arange(scores.shape[1])[None, :] < counts[:, None]
    assert np.isfinite(scores[valid]).all()
    # and equal to the float64 sum w * posting weight (the kernel's float32 sum, rel. 1e-5)
    for q, query in enumerate(queries):
        for j in range(int(counts[q])):
            d = int(docs[q, j])
            want = 0.0
            for term, w in query.items():
                tid = ret._vocab_index.get(term)
                if tid is None or w == 0:
                    continue
                want += float(np.float32(w)) * float(ret.nonocc[tid])
                lo, hi = int(ret.t_ptr[tid]), int(ret.t_ptr[tid + 1])
                hits = np.nonzero(np.asarray(ret.t_docs[lo:hi]) == d)[0]
                if len(hits):
                    want += float(np.float32(w)) * float(ret.t_w[lo + hits[0]])
            assert math.isclose(float(scores[q, j]), want, rel_tol=1e-5, abs_tol=1e-30), (q, d)
