"""Query-term features of learning to rank (TermCoverage, TermPairs, TermProximity) and their
kernels (:mod:`kolm_search._kernels.proximity`), against plain-Python oracles."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels import load
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, KolmValueError, SearchError
from kolm_search.retrievers import ltr_terms
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.ltr import LTRReranker
from kolm_search.retrievers.ltr_terms import TermCoverage, TermPairs, TermProximity, forward_index
from tests.fakes import BatchHashEmbedder

kernels = load("proximity")


# -- kernels against their twins ----------------------------------------------------------------

@st.composite
def worlds(draw: st.DrawFn) -> dict[str, np.ndarray]:
    """A small forward index, queries (distinct sorted terms, weights, pairs) and candidates."""
    n_terms = draw(st.integers(1, 6))
    docs = draw(st.lists(st.lists(st.integers(0, n_terms - 1), max_size=14), min_size=1, max_size=6))
    queries = draw(st.lists(st.sets(st.integers(0, n_terms - 1), max_size=4), min_size=1, max_size=3))
    pairs = draw(st.lists(st.lists(st.tuples(st.integers(0, n_terms - 1), st.integers(0, n_terms - 1)), max_size=3),
                          min_size=len(queries), max_size=len(queries)))
    cands = draw(st.lists(st.tuples(st.integers(0, len(queries) - 1), st.integers(0, len(docs) - 1)), max_size=8))
    terms = [sorted(q) for q in queries]
    flat_pairs = [p for ps in pairs for p in ps]
    return {
        "doc_ptr": np.r_[0, np.cumsum([len(d) for d in docs])].astype(np.int64),
        "tokens": np.asarray([t for d in docs for t in d], np.int64),
        "q_ptr": np.r_[0, np.cumsum([len(t) for t in terms])].astype(np.int64),
        "q_terms": np.asarray([t for ts in terms for t in ts], np.int64),
        "q_weight": np.asarray(draw(st.lists(st.floats(0.1, 5), min_size=sum(map(len, terms)),
                                             max_size=sum(map(len, terms)))), np.float64),
        "p_ptr": np.r_[0, np.cumsum([len(p) for p in pairs])].astype(np.int64),
        "pair_a": np.asarray([a for a, _ in flat_pairs], np.int64),
        "pair_b": np.asarray([b for _, b in flat_pairs], np.int64),
        "cand_query": np.asarray([q for q, _ in cands], np.int64),
        "cand_doc": np.asarray([d for _, d in cands], np.int64),
        "n_terms": np.asarray(n_terms),
    }


@settings(max_examples=150, deadline=None)
@given(worlds(), st.integers(1, 4), st.booleans())
def test_proximity_kernels_match_their_twins(w: dict[str, np.ndarray], window: int, ordered: bool) -> None:
    docs = (w["doc_ptr"], w["tokens"])
    cands = (w["cand_query"], w["cand_doc"])
    np.testing.assert_array_equal(
        kernels.match_stats(*docs, *cands, w["q_ptr"], w["q_terms"], w["q_weight"]),
        kernels.match_stats_numpy(*docs, *cands, w["q_ptr"], w["q_terms"], w["q_weight"]))
    pairs = (w["p_ptr"], w["pair_a"], w["pair_b"])
    got, want = (f(*docs, *cands, *pairs, window=window, ordered=ordered)
                 for f in (kernels.pair_counts, kernels.pair_counts_numpy))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    n_terms, n_docs = int(w["n_terms"]), len(w["doc_ptr"]) - 1
    postings = [[d for d in range(n_docs) if t in w["tokens"][w["doc_ptr"][d]:w["doc_ptr"][d + 1]]]
                for t in range(n_terms)]
    t_ptr = np.r_[0, np.cumsum([len(p) for p in postings])].astype(np.int64)
    t_docs = np.asarray([d for p in postings for d in p], np.int32)
    np.testing.assert_array_equal(
        kernels.pair_document_frequency(t_ptr, t_docs, *docs, w["pair_a"], w["pair_b"], window=window,
                                        ordered=ordered),
        kernels.pair_document_frequency_numpy(*docs, w["pair_a"], w["pair_b"], window=window, ordered=ordered))


def test_match_stats_by_hand() -> None:
    # document: a x b a c ; query terms {a, b, c} (ids 0, 1, 2; x is 3)
    stats = kernels.match_stats([0, 5], [0, 3, 1, 0, 2], [0], [0], [0, 3], [0, 1, 2], [1.0, 2.0, 4.0])
    # all three found (weight 7), closest different terms b-a at distance 1, shortest span
    # holding a, b, c is "b a c" (3 tokens), first query term at offset 0
    np.testing.assert_array_equal(stats, [[3, 7, 1, 3, 0]])
    counts = kernels.pair_counts([0, 5], [0, 3, 1, 0, 2], [0], [0], [0, 2], [1, 0], [0, 2], window=1, ordered=True)
    np.testing.assert_array_equal(counts[1], [1, 1])  # "b a" and "a c" side by side


def test_kernels_refuse_bad_input() -> None:
    with pytest.raises(KolmValueError, match="doc_ptr"):
        kernels.match_stats([0, 9], [0, 1], [0], [0], [0, 1], [0], [1.0])
    with pytest.raises(KolmValueError, match="cand_doc"):
        kernels.match_stats([0, 2], [0, 1], [0], [3], [0, 1], [0], [1.0])
    with pytest.raises(KolmValueError, match="distinct and ascending"):
        kernels.match_stats([0, 2], [0, 1], [0], [0], [0, 2], [1, 0], [1.0, 1.0])
    with pytest.raises(KolmValueError, match=r"\[0, 2\*\*31\)"):
        kernels.match_stats([0, 2], [0, -1], [0], [0], [0, 1], [0], [1.0])
    with pytest.raises(KolmValueError, match="term ids"):
        kernels.match_stats([0, 2], [0.0, 1.5], [0], [0], [0, 1], [0], [1.0])
    with pytest.raises(KolmValueError, match="window"):
        kernels.pair_counts([0, 2], [0, 1], [0], [0], [0, 1], [0], [1], window=0, ordered=True)
    with pytest.raises(KolmValueError, match="pair terms"):
        kernels.pair_document_frequency([0, 1], [0], [0, 2], [0, 0], [0], [5], window=1, ordered=True)


# -- the stages against plain Python over the tokenizer's output --------------------------------

CORPUS = pd.DataFrame({
    "id": [f"d{i}" for i in range(8)],
    "title": ["wing flow", "", "heat transfer", "", "", "boundary layer", "", "flow"],
    "content": ["the flow over a wing in a slipstream", "wing wing flow flow of heat", "transfer of heat in slabs",
                "boundary layer flow over the wing", "layer boundary heat", "flow in the boundary layer",
                "slipstream and wing flow", "heat flow wing boundary layer transfer"],
})
QUERIES = pd.DataFrame({"qid": ["1", "2", "3", "4"],
                        "query": ["wing flow", "boundary layer flow over a wing", "heat transfer in slabs", "the a"]})


@pytest.fixture(scope="module")
def bm() -> BM25Retriever:
    return BM25Retriever(CORPUS)


def _tokens(bm: BM25Retriever, text: str) -> list[str]:
    return [t for t in bm.tokenizer(text) if t in set(bm.vocab)]


def _candidates(bm: BM25Retriever, stage: object) -> tuple[np.ndarray, pd.DataFrame]:
    """Every document as a candidate of every query (a dense index's top 8 of the 8, over
    another table object of the same documents), and the feature's column."""
    every = DenseRetriever(CORPUS, BatchHashEmbedder(), embed_queries=True) % len(CORPUS)
    X, keys = LTRReranker(every ** stage).candidate_features(QUERIES)  # type: ignore[operator]
    assert len(keys) == len(QUERIES) * len(CORPUS)
    return X[:, 1], keys


def _analysed(bm: BM25Retriever) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each document's and each query's tokens as ``bm`` analyses them, in order."""
    docs = dict(zip(CORPUS["id"], (_tokens(bm, f"{t} {c}") for t, c in zip(CORPUS["title"], CORPUS["content"],
                                                                           strict=True)), strict=True))
    return docs, dict(zip(QUERIES["qid"], (_tokens(bm, q) for q in QUERIES["query"]), strict=True))


def _idf(docs: dict[str, list[str]], term: str) -> float:
    df = sum(term in d for d in docs.values())
    return math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))


@pytest.mark.parametrize("weighted", [True, False])
def test_term_coverage_is_the_share_of_query_terms_found(bm: BM25Retriever, weighted: bool) -> None:
    got, keys = _candidates(bm, TermCoverage(bm, weighted=weighted))
    docs, queries = _analysed(bm)
    for value, q, d in zip(got, keys["qid"], keys["doc_id"], strict=True):
        terms = set(queries[q])
        w = {t: (_idf(docs, t) if weighted else 1.0) for t in terms}
        want = sum(w[t] for t in terms if t in docs[d]) / sum(w.values()) if terms else 0.0
        assert value == pytest.approx(want, abs=1e-12)


def _pair_count(doc: list[str], a: str, b: str, window: int, ordered: bool) -> int:
    return sum(1 for p, x in enumerate(doc) for r, y in enumerate(doc)
               if x == a and y == b and (1 <= r - p <= window if ordered else 1 <= abs(r - p) <= window))


@pytest.mark.parametrize(("window", "ordered", "weighting"),
                         [(1, True, "count"), (7, False, "count"), (1, True, "bm25"), (7, False, "bm25"),
                          (2, True, "bm25")])
def test_term_pairs_count_the_query_pairs(bm: BM25Retriever, window: int, ordered: bool, weighting: str) -> None:
    got, keys = _candidates(bm, TermPairs(bm, window=window, ordered=ordered, weighting=weighting))
    docs, queries = _analysed(bm)
    avgdl = np.mean([len(d) for d in docs.values()])
    for value, q, d in zip(got, keys["qid"], keys["doc_id"], strict=True):
        seq = queries[q]
        pairs = {(a, b) if ordered else tuple(sorted((a, b))) for a, b in itertools.pairwise(seq) if a != b}
        want = 0.0
        for a, b in pairs:
            c = _pair_count(docs[d], a, b, window, ordered)
            if weighting == "count":
                want += c
            elif c:
                df = sum(_pair_count(o, a, b, window, ordered) > 0 for o in docs.values())
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                want += idf * c * (bm.k1 + 1) / (c + bm.k1 * (1 - bm.b + bm.b * len(docs[d]) / avgdl))
        assert value == pytest.approx(want, rel=1e-12, abs=1e-12), (q, d)
    assert got.max() > 0


def test_term_proximity_measures(bm: BM25Retriever) -> None:
    docs, queries = _analysed(bm)
    for measure in ("min_distance", "min_window", "first_match"):
        got, keys = _candidates(bm, TermProximity(bm, measure=measure))
        for value, q, d in zip(got, keys["qid"], keys["doc_id"], strict=True):
            doc, terms = docs[d], set(queries[q])
            hits = [(p, t) for p, t in enumerate(doc) if t in terms]
            found = {t for _, t in hits}
            if measure == "min_distance":
                dist = min((abs(p - r) for p, t in hits for r, u in hits if t != u), default=math.inf)
                want = math.log(0.3 + math.exp(-dist))
            elif measure == "min_window":
                spans = [r - p + 1 for p, _ in hits for r, _ in hits if r >= p and found <= set(doc[p:r + 1])]
                want = len(found) / min(spans) if len(found) >= 2 else 0.0
            else:
                want = 1 - hits[0][0] / len(doc) if hits else 0.0
            assert value == pytest.approx(want, abs=1e-12), (measure, q, d)


def test_forward_index_follows_the_index(bm: BM25Retriever, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ltr_terms, "_CHUNK", 3)  # built a few documents at a time: the same arrays
    index = BM25Retriever(CORPUS)
    ptr, tokens = forward_index(index)
    whole_ptr, whole = index.encode(index.table.texts(index.fields))
    np.testing.assert_array_equal(ptr, whole_ptr)
    np.testing.assert_array_equal(tokens, whole)
    assert tokens.dtype == np.int32
    assert forward_index(index)[1] is tokens  # built once
    vocab = index.vocab
    assert [vocab[t] for t in tokens[ptr[1]:ptr[2]]] == _tokens(index, "wing wing flow flow of heat")
    index.add(pd.DataFrame({"id": ["new"], "title": [""], "content": ["slabs slabs wing"]}))
    ptr2, tokens2 = forward_index(index)
    assert len(ptr2) == len(ptr) + 1
    assert [index.vocab[t] for t in tokens2[ptr2[-2]:ptr2[-1]]] == _tokens(index, "slabs slabs wing")


def test_feature_stages_check_their_parameters_and_input(bm: BM25Retriever) -> None:
    with pytest.raises(KolmTypeError, match="BM25Retriever"):
        TermCoverage("bm25")  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="window"):
        TermPairs(bm, window=0)
    with pytest.raises(KolmValueError, match="weighting"):
        TermPairs(bm, weighting="tf")
    with pytest.raises(KolmValueError, match="measure"):
        TermProximity(bm, measure="span")
    stage = TermPairs(bm)
    stage.set_params(window=3, ordered=False)
    assert stage.get_params(deep=False) == {"bm25": bm, "window": 3, "ordered": False, "weighting": "count"}
    with pytest.raises(KolmValueError):
        stage.set_params(window=-1)
    assert stage.window == 3  # a refused change leaves the stage as it was
    assert TermPairs(bm).fingerprint() != TermPairs(bm, window=2).fingerprint()
    batch = QueryBatch(["wing"], np.zeros(1, np.int64), 1, 10, [{}])
    with pytest.raises(SearchError, match="needs candidates"):
        stage.transform(batch, None)
    other = DocumentTable.from_frame(CORPUS.head(3))
    frame = CandidateFrame.from_ptr([0, 1], [0], [1.0])
    from dataclasses import replace
    with pytest.raises(SearchError, match="not this feature's index"):
        stage.transform(replace(batch, table=other), frame)
