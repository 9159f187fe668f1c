"""Pseudo-relevance feedback (RM3, Bo1, KL) against plain-Python oracles, in the pipeline, on Cranfield.

The oracles below are written from the formulas (Anserini's ``Rm3Reranker``, Terrier's
``DFRBagExpansionTerms`` with ``Bo1``/``KL``), with dicts and loops, independently of the numpy
code; ties go to the term first in text order, as documented. Weighted BM25 itself: test_weighted_bm25.py.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import evaluate
from kolm_search.contract.client import SearchClient
from kolm_search.contract.config import SearchPipelineModules
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers import BM25Retriever, FeedbackRetriever
from kolm_search.retrievers.prf_weights import row_topk
from kolm_search.types import SearchDocument
from tests.conftest import synthetic_corpus
from tests.test_weighted_bm25 import SETTINGS, WORDS, corpora, make_retriever


def _text_rank(ret: BM25Retriever) -> dict[str, int]:
    """Each term's position in code-point order (the documented tie order)."""
    return {t: i for i, t in enumerate(sorted(ret.vocab))}


def _eligible(term: str, df: int, n_docs: int, ratio: float) -> bool:
    return re.fullmatch(r"[^\W_]{2,20}", term) is not None and df <= ratio * n_docs


def rm3_oracle(query: list[str], feedback: list[tuple[list[str], float]], df: Counter[str], n_docs: int,
               tid: dict[str, int], fb_terms: int, weight: float, ratio: float) -> dict[str, float]:
    rm: dict[str, float] = {}
    for toks, score in feedback:
        vec = Counter(t for t in toks if _eligible(t, df[t], n_docs, ratio))
        kept = sorted(vec, key=lambda t: (-vec[t], tid[t]))[:fb_terms]
        norm = sum(vec[t] for t in kept)
        for t in kept:
            rm[t] = rm.get(t, 0.0) + vec[t] / norm * score
    top = sorted(rm, key=lambda t: (-rm[t], tid[t]))[:fb_terms]
    total = sum(rm[t] for t in top)
    rm = {t: rm[t] / total for t in top} if total > 0 else {}
    q = Counter(query)
    out = {t: weight * q[t] / sum(q.values()) + (1 - weight) * rm.get(t, 0.0) for t in set(q) | set(rm)}
    return {t: w for t, w in out.items() if w > 0}


def dfr_oracle(model: str, query: list[str], feedback: list[list[str]], cf: Counter[str], n_docs: int,
               coll_len: int, tid: dict[str, int], fb_terms: int) -> dict[str, float]:
    tfx: Counter[str] = Counter()
    dfx: Counter[str] = Counter()
    for toks in feedback:
        tfx.update(toks)
        dfx.update(set(toks))
    size, qset = sum(len(t) for t in feedback), set(query)
    w: dict[str, float] = {}
    for t in tfx:
        if len(feedback) >= 2 and dfx[t] < 2 and t not in qset:
            w[t] = 0.0
        elif model == "bo1":
            pn = cf[t] / n_docs
            w[t] = tfx[t] * math.log2((1 + pn) / pn) + math.log2(1 + pn)
        else:
            px, pc = tfx[t] / size, cf[t] / coll_len
            w[t] = 0.0 if px < pc else px * math.log2(px / pc)
    out = {t: c / max(Counter(query).values()) for t, c in Counter(query).items()}
    if not w:
        return out
    best = min(w, key=lambda t: (-w[t], tid[t]))
    m = tfx[best]
    if model == "bo1":
        norm = m * math.log2((1 + m / n_docs) / (m / n_docs)) + math.log2(1 + m / n_docs)
    else:
        norm = m * math.log2(coll_len / size) / size if coll_len != size else 0.0
    if w[best] <= 0 or norm <= 0:
        return out
    for t in sorted(w, key=lambda t: (-w[t], tid[t]))[:max(fb_terms, len(qset))]:
        if w[t] > 0:
            out[t] = out.get(t, 0.0) + w[t] / norm
    return out


def _assert_same_weights(got: dict[str, float], want: dict[str, float]) -> None:
    assert set(got) == set(want), (got, want)
    for t in want:
        assert got[t] == pytest.approx(want[t], rel=1e-9, abs=1e-12), t


# -- expansion oracles -----------------------------------------------------------------
@SETTINGS
@given(corpora(), st.integers(1, 4), st.integers(1, 6), st.sampled_from([0.0, 0.3, 0.5, 1.0]),
       st.sampled_from([0.1, 0.5, 1.0]))
def test_rm3_matches_the_plain_python_relevance_model(corpus: tuple[list[str], str], fb_docs: int, fb_terms: int,
                                                      weight: float, ratio: float) -> None:
    docs, query = corpus
    ret = make_retriever(docs)
    fr = FeedbackRetriever(ret, "rm3", fb_docs=fb_docs, fb_terms=fb_terms, original_weight=weight,
                           max_df_ratio=ratio)
    tokens = [ret.tokenizer(t) for t in ret.table.texts(ret.fields)]
    df = Counter(t for toks in tokens for t in set(toks))
    d, s, c = ret.score_texts([query], fb_docs)
    feedback = [(tokens[int(d[0, j])], float(s[0, j])) for j in range(int(c[0]))]
    known = [t for t in ret.tokenizer(query) if t in ret._vocab_index]
    want = rm3_oracle(known, feedback, df, len(docs), _text_rank(ret), fb_terms, weight, ratio)
    _assert_same_weights(fr.expand([query])[0], want)


@SETTINGS
@given(corpora(), st.sampled_from(["bo1", "kl"]), st.integers(1, 4), st.integers(1, 6))
def test_bo1_and_kl_match_plain_python_terrier(corpus: tuple[list[str], str], model: str, fb_docs: int,
                                               fb_terms: int) -> None:
    docs, query = corpus
    ret = make_retriever(docs)
    fr = FeedbackRetriever(ret, model, fb_docs=fb_docs, fb_terms=fb_terms)  # type: ignore[arg-type]
    tokens = [ret.tokenizer(t) for t in ret.table.texts(ret.fields)]
    cf = Counter(t for toks in tokens for t in toks)
    d, _, c = ret.score_texts([query], fb_docs)
    feedback = [tokens[int(d[0, j])] for j in range(int(c[0]))]
    known = [t for t in ret.tokenizer(query) if t in ret._vocab_index]
    want = dfr_oracle(model, known, feedback, cf, len(docs), sum(cf.values()), _text_rank(ret), fb_terms)
    _assert_same_weights(fr.expand([query])[0], want)


@SETTINGS
@given(corpora(), st.lists(st.lists(st.sampled_from([*WORDS, "unknownword"]), max_size=4), min_size=1, max_size=6),
       st.sampled_from(["rm3", "bo1", "kl"]))
def test_a_batch_expands_each_query_as_alone(corpus: tuple[list[str], str], queries: list[list[str]],
                                             model: str) -> None:
    docs, _ = corpus
    fr = FeedbackRetriever(make_retriever(docs), model, fb_docs=2, fb_terms=3)  # type: ignore[arg-type]
    texts = [" ".join(q) for q in queries]
    assert fr.expand(texts) == [fr.expand([t])[0] for t in texts]


@SETTINGS
@given(st.lists(st.lists(st.integers(0, 3), max_size=6), min_size=1, max_size=5), st.integers(0, 4))
def test_row_topk_is_a_sorted_cut(rows: list[list[int]], k: int) -> None:
    import scipy.sparse as sp

    dense = np.zeros((len(rows), 6))
    for i, r in enumerate(rows):
        dense[i, : len(r)] = r
    got = row_topk(sp.csr_matrix(dense), k).toarray()
    for i in range(len(rows)):
        keep = sorted((j for j in range(6) if dense[i, j] > 0), key=lambda j: (-dense[i, j], j))[:k]
        want = np.zeros(6)
        want[keep] = dense[i, keep]
        np.testing.assert_array_equal(got[i], want)


# -- the retriever in a pipeline ---------------------------------------------------------
def _client(fr: FeedbackRetriever) -> SearchClient:
    return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=fr), {"default_mode": "fulltext"})


@pytest.mark.parametrize("model", ["rm3", "bo1", "kl"])
def test_batch_equals_single_and_shows_the_expanded_query(model: str) -> None:
    docs = synthetic_corpus(150, 40, seed=3)
    ret = make_retriever(docs)
    fr = FeedbackRetriever(ret, model)  # type: ignore[arg-type]
    client = _client(fr)
    queries = ["w1 w7", "w3 w12 w20", "w0", "nothinghere", "w5 w5 w9"]
    batch = client.search_batch(queries, limit=20)
    expanded = fr.expand(queries)
    for i, q in enumerate(queries):
        single = client.search_sync({"query": q, "limit": 20})
        assert [d.id for d in single.results] == batch.run[batch.run.qid == i].doc_id.tolist()
        np.testing.assert_allclose([d.score for d in single.results], batch.run[batch.run.qid == i].score, rtol=1e-6)
        for meta in (single.plan.metadata, batch.plans[i].metadata):
            assert meta["feedback"] == {"model": model, "expanded": [expanded[i]]}
        assert single.metadata is not None and single.metadata.feedback == {"model": model, "expanded": [expanded[i]]}
        # the second pass is exactly BM25 on the visible weighted query
        d, s, c = ret.score_terms([expanded[i]], 20)
        assert ret.table.ids[d[0, :c[0]]].tolist() == [x.id for x in single.results]
    assert expanded[3] == {} and len(batch.run[batch.run.qid == 3]) == 0
    frame = fr.expanded_queries(pd.DataFrame({"qid": ["a", "b"], "query": queries[:2]}))
    assert list(frame.columns) == ["qid", "term", "weight"]
    assert dict(zip(frame[frame.qid == "b"].term, frame[frame.qid == "b"].weight, strict=True)) == expanded[1]
    shown = batch.expanded_queries()
    assert list(shown.columns) == ["qid", "position", "query", "term", "weight"] and set(shown.position) == {0}
    assert (shown["query"] == [batch.plans[q].expanded_queries[0] for q in shown.qid]).all()  # the text searched
    for i in range(len(queries)):
        mine = shown[shown.qid == i]
        assert dict(zip(mine.term, mine.weight, strict=True)) == expanded[i]
    assert len(_client_for(ret).search_batch(queries, limit=5).expanded_queries()) == 0  # no feedback, no rows
    assert single.to_dict()["plan"]["metadata"]["feedback"]["model"] == model  # JSON-ready (caches)


def test_expansions_of_one_query_are_fused_and_each_shown() -> None:
    ret = make_retriever(synthetic_corpus(80, 30, seed=5))
    fr = FeedbackRetriever(ret, "bo1")
    meta: dict[str, object] = {}
    frame = fr.retrieve_batch(QueryBatch(texts=["w1", "w2 w3"], owner=[0, 0], n_queries=1, limit=10, filters=[{}],
                                         mode="fulltext", metadata=[meta]))
    assert meta["feedback"] == {"model": "bo1", "expanded": fr.expand(["w1", "w2 w3"])}
    assert len(frame) == 10 and frame.n_queries == 1
    assert len(fr.retrieve_batch(QueryBatch(texts=["w1"], owner=[0], n_queries=1, limit=5, filters=[{}],
                                            mode="vector"))) == 0


def test_feedback_inside_a_composite_shows_its_query() -> None:
    from kolm_search import CompositeRetriever

    ret = make_retriever(synthetic_corpus(80, 30, seed=6))
    fr = FeedbackRetriever(ret, "rm3", max_df_ratio=0.5)
    client = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=CompositeRetriever([fr, ret])),
                          {"default_mode": "fulltext"})
    batch = client.search_batch(["w4 w9", "w2"], limit=10)
    single = client.search_sync({"query": "w4 w9", "limit": 10})
    assert batch.plans[0].metadata["feedback"]["expanded"] == single.plan.metadata["feedback"]["expanded"] \
        == fr.expand(["w4 w9"])
    assert batch.run[batch.run.qid == 0].doc_id.tolist() == [d.id for d in single.results]


def test_feedback_documents_respect_the_filter() -> None:
    docs = [SearchDocument(id=f"x{i}", content="alpha beta gamma", tags=["x"]) for i in range(6)]
    docs += [SearchDocument(id=f"y{i}", content="alpha alpha zebra", tags=["y"]) for i in range(6)]
    docs += [SearchDocument(id=f"n{i}", content=f"filler{i} words") for i in range(40)]
    fr = FeedbackRetriever(BM25Retriever(docs), "rm3", max_df_ratio=1.0)
    meta: dict[str, object] = {}
    frame = fr.retrieve_batch(QueryBatch(texts=["alpha"], owner=[0], n_queries=1, limit=20, filters=[{"tags": "x"}],
                                         mode="fulltext", metadata=[meta]))
    (weights,) = meta["feedback"]["expanded"]  # type: ignore[index]
    assert "zebra" not in weights and "beta" in weights
    assert set(fr.table.ids[frame.doc].tolist()) == {f"x{i}" for i in range(6)}
    assert "zebra" in fr.expand(["alpha"])[0]  # unfiltered, the y documents rank first


def test_bad_parameters_are_named() -> None:
    ret = make_retriever(["alpha beta", "beta gamma"])
    cases = [({"model": "rm4"}, "model must be one of"), ({"fb_docs": 0}, "fb_docs must be an integer"),
             ({"fb_docs": True}, "fb_docs must be"), ({"fb_terms": 2.5}, "fb_terms must be"),
             ({"original_weight": 1.5}, "original_weight must be"),
             ({"original_weight": float("nan")}, "original_weight must be"),
             ({"model": "bo1", "original_weight": 0.3}, "original_weight applies to model 'rm3' only"),
             ({"model": "kl", "max_df_ratio": 0.2}, "max_df_ratio applies"),
             ({"max_df_ratio": 0.0}, "max_df_ratio must be")]
    for kwargs, message in cases:
        with pytest.raises(KolmValueError, match=message):
            FeedbackRetriever(ret, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match="BM25Retriever"):
        FeedbackRetriever("bm25")  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match="sequence of str"):
        FeedbackRetriever(ret).expand("alpha")
    assert FeedbackRetriever(ret).fb_docs == 10 and FeedbackRetriever(ret, "kl").fb_docs == 3


def test_counts_must_match_the_index_and_follow_a_rebuild() -> None:
    from kolm_search.retrievers.postings import Postings

    ret = make_retriever(["alpha beta", "beta gamma", "gamma delta alpha"])
    wrong = Postings.from_tokens([["alpha"], ["beta", "delta"], ["gamma"]])
    with pytest.raises(KolmValueError, match="do not match the BM25 index"):
        FeedbackRetriever(ret, postings=wrong).expand(["beta"])
    fr = FeedbackRetriever(ret, "bo1", fb_docs=1)
    before = fr.expand(["alpha"])
    assert FeedbackRetriever(ret, "kl")._counts()[0] is fr._counts()[0]  # counted once per index
    other = [["gamma", "delta"], ["beta"], ["alpha", "alpha", "beta"]]
    ret.index_tokens(other)  # a rebuilt index, other terms: never stale counts, the index's own
    fresh = make_retriever(["alpha beta", "beta gamma", "gamma delta alpha"])
    fresh.index_tokens(other)
    assert fr.expand(["alpha"]) == FeedbackRetriever(fresh, "bo1", fb_docs=1).expand(["alpha"]) != before
    ret.index_tokens([ret.tokenizer(t) for t in ret.table.texts(ret.fields)])
    assert fr.expand(["alpha"]) == before


# -- effectiveness -----------------------------------------------------------------------
def test_each_model_improves_bm25_on_cranfield(cranfield: dict[str, pd.DataFrame]) -> None:
    bm25 = BM25Retriever(cranfield["corpus"])
    q, qrels = cranfield["queries"], cranfield["qrels"]
    metrics = ["map", "recall@100"]
    base = evaluate(_client_for(bm25).search_batch(q, limit=1000), qrels, metrics)
    for model in ("rm3", "bo1", "kl"):
        got = evaluate(_client(FeedbackRetriever(bm25, model)).search_batch(q, limit=1000), qrels, metrics)  # type: ignore[arg-type]
        # measured: BM25 0.310 / 0.738; RM3 0.326 / 0.755; Bo1 0.337 / 0.770; KL 0.337 / 0.766
        assert got["map"] > base["map"] + 0.01, (model, got, base)
        assert got["recall@100"] > base["recall@100"] + 0.01, (model, got, base)


def _client_for(bm25: BM25Retriever) -> SearchClient:
    return SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=bm25), {"default_mode": "fulltext"})


def test_preset_wraps_bm25_in_feedback() -> None:
    from kolm_search import presets

    docs = [SearchDocument(id=f"d{i}", content=t) for i, t in enumerate(synthetic_corpus(60, 20, seed=9))]
    client = presets.bm25(docs, feedback="kl", feedback_kwargs={"fb_terms": 4}, k1=1.2)
    fr = client.modules.retriever
    assert isinstance(fr, FeedbackRetriever) and fr.model == "kl" and fr.fb_terms == 4 and fr.bm25.k1 == 1.2
    response = client.search_sync({"query": "w1 w2", "limit": 5})
    assert response.plan.metadata["feedback"]["expanded"] == fr.expand(["w1 w2"])
    with pytest.raises(KolmValueError, match="need feedback="):
        presets.bm25(docs, feedback_kwargs={"fb_terms": 4})


def test_cli_eval_runs_the_feedback_pipelines(cranfield_dir: object, capsys: pytest.CaptureFixture[str]) -> None:
    from kolm_search.cli import main

    assert main(["eval", str(cranfield_dir), "--pipeline", "bm25-bo1", "--metrics", "map", "--limit", "1000",
                 "--quiet"]) == 0
    assert "cranfield/bm25-bo1" in (out := capsys.readouterr().out) and "0.3366" in out  # benchmarks/README.md


def test_response_metadata_shows_the_expanded_query_on_cache_hits_too() -> None:
    from kolm_search.adapters import InMemoryCache

    ret = make_retriever(synthetic_corpus(100, 30, seed=9))
    fr = FeedbackRetriever(ret, "rm3")
    client = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=fr, cache=InMemoryCache()),
                          {"default_mode": "fulltext"})
    first = client.search_sync({"query": "w1 w4", "limit": 10})
    again = client.search_sync({"query": "w1 w4", "limit": 10})
    assert again.metadata is not None and again.metadata.cache_hit
    assert first.metadata is not None and first.metadata.feedback == {"model": "rm3", "expanded": fr.expand(["w1 w4"])}
    assert again.metadata.feedback == first.metadata.feedback
    plain = _client_for(ret).search_sync({"query": "w1 w4", "limit": 10})
    assert plain.metadata is not None and plain.metadata.feedback is None


def test_feedback_follows_incremental_changes_of_its_index() -> None:
    """After add/delete the expansion equals that of feedback over a rebuilt index."""
    docs = synthetic_corpus(120, 30, seed=21)
    frame = pd.DataFrame({"id": [f"d{i}" for i in range(len(docs))], "content": docs})
    grown = BM25Retriever(frame.iloc[:100])
    fr = FeedbackRetriever(grown, "bo1")
    queries = ["w1 w7", "w3 w12 w20", "w0 w2"]
    fr.expand(queries)  # counts cached before the change
    grown.add(frame.iloc[100:])
    grown.delete(["d3", "d50"])
    rebuilt = BM25Retriever(frame.drop(index=[3, 50]))
    assert fr.expand(queries) == FeedbackRetriever(rebuilt, "bo1").expand(queries)
    client, fresh = _client(fr), _client(FeedbackRetriever(rebuilt, "bo1"))
    for q in queries:
        assert [(d.id, d.score) for d in client.search_sync({"query": q, "limit": 10}).results] == \
               [(d.id, d.score) for d in fresh.search_sync({"query": q, "limit": 10}).results]


# -- bit for bit after add/delete ----------------------------------------------------------
_UPDATE_WORDS = [f"w{i}" for i in range(14)]
_doc_words = st.lists(st.sampled_from(_UPDATE_WORDS), min_size=1, max_size=9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_doc_words, min_size=2, max_size=12), st.lists(_doc_words, min_size=1, max_size=8),
       st.sets(st.integers(0, 19), max_size=5), st.sampled_from(["rm3", "bo1", "kl"]),
       st.lists(st.lists(st.sampled_from(_UPDATE_WORDS), min_size=1, max_size=4), min_size=1, max_size=4))
def test_feedback_after_updates_is_bit_equal_to_a_rebuild(initial: list[list[str]], added: list[list[str]],
                                                          dead: set[int], model: str, queries: list[list[str]]) -> None:
    """Add/delete renumber the vocabulary (a merged index lists terms in another order than a
    rebuild): the expanded queries, their float32 scores and the tie order still equal feedback
    over the index rebuilt from the surviving documents, bit for bit."""
    docs = [{"id": f"d{i}", "content": " ".join(w)} for i, w in enumerate(initial + added)]
    grown = BM25Retriever(docs[:len(initial)], tokenizer=Tokenizer(stopwords=None, stemmer=None))
    grown.add(docs[len(initial):])
    gone = [docs[i]["id"] for i in sorted(dead) if i < len(docs)]
    grown.delete(gone)
    live = [d for d in docs if d["id"] not in gone]
    rebuilt = BM25Retriever(live, tokenizer=Tokenizer(stopwords=None, stemmer=None))
    texts = [" ".join(q) for q in queries]
    a = FeedbackRetriever(grown, model, fb_docs=3, fb_terms=4, **({"max_df_ratio": 1.0} if model == "rm3" else {}))  # type: ignore[arg-type]
    b = FeedbackRetriever(rebuilt, model, fb_docs=3, fb_terms=4, **({"max_df_ratio": 1.0} if model == "rm3" else {}))  # type: ignore[arg-type]
    got, want = a.expand(texts), b.expand(texts)
    assert [list(d.items()) for d in got] == [list(d.items()) for d in want]  # weights and their order
    batch = dict(texts=texts, owner=np.arange(len(texts)), n_queries=len(texts), limit=len(live), filters=[{}] * len(texts),
                 mode="fulltext")
    fa, fb = a.retrieve_batch(QueryBatch(**batch)), b.retrieve_batch(QueryBatch(**batch))  # type: ignore[arg-type]
    assert grown.table.ids[fa.doc].tolist() == rebuilt.table.ids[fb.doc].tolist()  # tie order
    assert fa.score.tobytes() == fb.score.tobytes() and np.array_equal(fa.query, fb.query)
