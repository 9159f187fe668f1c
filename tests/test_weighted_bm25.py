"""Weighted BM25 queries (analysed term -> weight) against a plain-Python BM25 sum.

The oracle is written from the BM25 variants' table (``kolm_search.retrievers.bm25``) with dicts
and loops; a weighted query scores ``sum w * bm25(term, doc)``.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers import BM25Retriever
from kolm_search.types import SearchDocument

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "iota", "kappa", "x1", "y22", "foo_bar",
         "supercalifragilisticexpialidocious"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def corpora(draw: st.DrawFn) -> tuple[list[str], str]:
    n = draw(st.integers(2, 14))
    docs = [" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=12))) for _ in range(n)]
    query = " ".join(draw(st.lists(st.sampled_from([*WORDS, "unknownword"]), min_size=1, max_size=4)))
    return docs, query


def make_retriever(docs: list[str], **kwargs: object) -> BM25Retriever:
    return BM25Retriever([SearchDocument(id=f"d{i}", content=t) for i, t in enumerate(docs)], **kwargs)  # type: ignore[arg-type]


def bm25_oracle(tokens: list[list[str]], query: dict[str, float], method: str, k1: float, b: float,
                delta: float) -> dict[int, float]:
    """Score of every document holding a positive-weight query term: sum w * idf * tf part."""
    n = len(tokens)
    avgdl = sum(len(t) for t in tokens) / n or 1.0
    df = Counter(t for toks in tokens for t in set(toks))
    out: dict[int, float] = {}
    for d, toks in enumerate(tokens):
        if not any(w > 0 and t in toks for t, w in query.items()):
            continue
        tf_d, norm, score = Counter(toks), 1 - b + b * len(toks) / avgdl, 0.0
        for t, w in query.items():
            if t not in df or w == 0:
                continue
            f, tf = df[t], tf_d[t]
            idf = {"robertson": math.log(max(1.0, (n - f + 0.5) / (f + 0.5))),
                   "lucene": math.log(1 + (n - f + 0.5) / (f + 0.5)), "atire": math.log(n / f),
                   "bm25l": math.log((n + 1) / (f + 0.5)), "bm25+": math.log((n + 1) / f)}[method]
            if method in ("robertson", "lucene"):
                part = tf / (k1 * norm + tf)
            elif method == "atire":
                part = (k1 + 1) * tf / (tf + k1 * norm)
            elif method == "bm25l":
                c = tf / norm
                part = (k1 + 1) * (c + delta) / (k1 + c + delta)
            else:
                part = (k1 + 1) * tf / (k1 * norm + tf) + delta
            score += w * idf * part
        out[d] = score
    return out


# -- weighted BM25 ---------------------------------------------------------------------
@SETTINGS
@given(corpora(), st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]),
       st.lists(st.floats(0, 5, allow_nan=False), min_size=4, max_size=4))
def test_weighted_bm25_equals_plain_sum_of_weighted_term_scores(corpus: tuple[list[str], str], method: str,
                                                                 weights: list[float]) -> None:
    docs, _ = corpus
    ret = make_retriever(docs, method=method)
    tokens = [ret.tokenizer(t) for t in ret.table.texts(ret.fields)]
    terms = [ret.tokenizer(w)[0] for w in WORDS[:3]] + ["unknownword"]
    query = dict(zip(terms, weights, strict=True))
    d, s, c = ret.score_terms([query], len(docs))
    as_float32 = {t: float(np.float32(w)) for t, w in query.items()}  # the kernel's precision
    want = bm25_oracle(tokens, as_float32, method, ret.k1, ret.b, ret.delta)
    got = dict(zip(d[0, :c[0]].tolist(), s[0, :c[0]].tolist(), strict=True))
    assert set(got) == set(want)
    for doc, score in want.items():
        assert got[doc] == pytest.approx(score, rel=1e-4, abs=1e-4)
    assert np.all(np.diff(s[0, :c[0]]) <= 0)


@SETTINGS
@given(corpora())
def test_unit_weights_score_exactly_like_the_text(corpus: tuple[list[str], str]) -> None:
    docs, query = corpus
    ret = make_retriever(docs, method="bm25+")
    ptr, ids = ret.encode([query])
    text = ret.score_texts([query], 5)
    weighted = ret.score_weighted(ptr, ids, np.ones(len(ids)), 5)
    for a, b in zip(text, weighted, strict=True):
        np.testing.assert_array_equal(a, b)
    repeats = Counter(ret.vocab[i] for i in ids)  # a repeated token is a weight of its count
    np.testing.assert_allclose(ret.score_terms([dict(repeats)], 5)[1], text[1], rtol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, 1e39])
def test_bad_weights_name_the_query_and_term(bad: float) -> None:
    ret = make_retriever(["alpha beta", "beta gamma"])
    with pytest.raises(KolmValueError, match=r"weighted query 1: term 'beta'"):
        ret.score_weighted([0, 1, 2], [0, 1], [1.0, bad], 2)
    if bad != 1e39:  # a Python float that overflows float32 only fails in CSR form
        with pytest.raises(KolmValueError, match=r"weighted query 1: term 'beta' has weight"):
            ret.score_terms([{"alpha": 1.0}, {"beta": bad}], 2)


def test_weighted_query_input_errors() -> None:
    ret = make_retriever(["alpha beta", "beta gamma"])
    with pytest.raises(KolmTypeError, match="weighted query 0 must be a mapping"):
        ret.score_terms(["alpha"], 2)  # type: ignore[list-item]
    with pytest.raises(KolmTypeError, match="sequence of mappings"):
        ret.score_terms({"alpha": 1.0}, 2)  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match="term 3 is not a string"):
        ret.score_terms([{3: 1.0}], 2)  # type: ignore[dict-item]
    with pytest.raises(KolmValueError, match="term 'alpha' has weight True"):
        ret.score_terms([{"alpha": True}], 2)
    with pytest.raises(KolmValueError, match="outside the vocabulary"):
        ret.score_weighted([0, 1], [99], [1.0], 2)
    with pytest.raises(KolmValueError, match="q_ptr must start at 0"):
        ret.score_weighted([0, 2], [0], [1.0], 2)
    with pytest.raises(KolmValueError, match="one weight per term id"):
        ret.score_weighted([0, 1], [0], [1.0, 2.0], 2)
    # zero weights and unknown terms are dropped: nothing matches
    d, s, c = ret.score_terms([{"alpha": 0.0, "nothere": 2.0}, {}], 2)
    assert c.tolist() == [0, 0]
