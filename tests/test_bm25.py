"""BM25Retriever against bm25s (the oracle) for every variant, plus kernel twin and filters."""

from __future__ import annotations

import itertools
from pathlib import Path

import bm25s
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError, SearchDocument, Tokenizer
from kolm_search._kernels import load
from kolm_search.engine.candidate_frame import QueryBatch
from tests.conftest import synthetic_corpus
from tests.reliability.indexes import file_of, reseal

PLAIN = Tokenizer(stopwords=None, stemmer=None)


def corpus_frame(texts: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": [f"doc{i}" for i in range(len(texts))], "content": texts})


def bm25s_scores(texts: list[str], queries: list[str], method: str, k1: float, b: float, delta: float) -> np.ndarray:
    model = bm25s.BM25(method=method, k1=k1, b=b, delta=delta)
    model.index([PLAIN(t) for t in texts], show_progress=False)
    out = []
    for q in queries:
        toks = [t for t in PLAIN(q) if t in model.vocab_dict]
        out.append(model.get_scores(toks) if toks else np.zeros(len(texts), np.float32))
    return np.array(out)


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize("seed", [0, 1])
def test_scores_equal_bm25s(method: str, seed: int) -> None:
    texts = synthetic_corpus(300, 80, seed)
    rng = np.random.default_rng(seed + 100)
    queries = [" ".join(f"w{t}" for t in rng.integers(0, 90, rng.integers(1, 6))) for _ in range(40)]
    k1, b, delta = (1.2, 0.6, 0.7) if seed else (1.5, 0.75, 0.5)
    ret = BM25Retriever(corpus_frame(texts), method=method, k1=k1, b=b, delta=delta, tokenizer=PLAIN, fields=("content",))
    want = bm25s_scores(texts, queries, method, k1, b, delta)
    docs, scores, counts = ret.score_texts(queries, k=len(texts))
    for q in range(len(queries)):
        got = np.full(len(texts), np.nan)
        got[docs[q, : counts[q]]] = scores[q, : counts[q]]
        matched = ~np.isnan(got)
        np.testing.assert_allclose(got[matched], want[q][matched], rtol=2e-6, atol=1e-6)
        # unreturned documents hold no query token: bm25s gives them the empty-match baseline
        q_tokens = set(PLAIN(queries[q]))
        for d in np.flatnonzero(~matched):
            assert not q_tokens & set(PLAIN(texts[d]))
        # order: descending score, ties by document code
        s, d = scores[q, : counts[q]], docs[q, : counts[q]]
        assert np.all((np.diff(s) < 0) | ((np.diff(s) == 0) & (np.diff(d) > 0)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dense_ratio", [0, 16, 10**9])  # always sparse, adaptive, always dense
@pytest.mark.parametrize("row_cost", [0, 16, 10**9])  # row selections: always, adaptively or never row by row
def test_sparse_kernel_matches_numpy_twin(seed: int, threads: int, dense_ratio: int, row_cost: int) -> None:
    from kolm_search.engine.selection import Selection, Selections

    rng = np.random.default_rng(seed)
    n_docs, vocab = 60, 25
    t_docs_l, t_w_l, t_ptr = [], [], [0]
    for _ in range(vocab):
        d = np.sort(rng.choice(n_docs, size=int(rng.integers(0, 15)), replace=False))
        t_docs_l.append(d)
        t_w_l.append(np.round(rng.random(d.size), 2).astype(np.float32))  # rounded: ties
        t_ptr.append(t_ptr[-1] + d.size)
    t_ptr_a, t_docs, t_w = np.array(t_ptr), np.concatenate(t_docs_l).astype(np.int32), np.concatenate(t_w_l)
    q_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 5, 30))]).astype(np.int64)
    q_terms = rng.integers(0, vocab, q_ptr[-1]).astype(np.int64)
    offsets = np.round(rng.random(30), 1).astype(np.float32)
    chosen = [Selection.of_mask(rng.random(n_docs) < 0.6) for _ in range(2)]  # masks
    chosen += [Selection(n_docs, rows=np.sort(rng.choice(n_docs, int(rng.integers(0, 4)), replace=False)))
               for _ in range(3)]  # a few rows each
    sel = Selections.build(rng.integers(-1, len(chosen), 30), chosen)
    weights = rng.choice([1.0, 0.5, 2.25], q_ptr[-1]).astype(np.float32)  # weighted query terms
    kernels = load("sparse")
    got = kernels.sparse_topk(q_ptr, q_terms, weights, t_ptr_a, t_docs, t_w, offsets, *sel.arrays(), n_docs, 7,
                              n_threads=threads, dense_ratio=dense_ratio, row_cost=row_cost)
    want = kernels.sparse_topk_numpy(q_ptr, q_terms, weights, t_ptr_a, t_docs, t_w, offsets, *sel.arrays(), n_docs, 7)
    np.testing.assert_array_equal(got[2], want[2])
    for q in range(30):
        c = got[2][q]
        np.testing.assert_array_equal(got[0][q, :c], want[0][q, :c])
        np.testing.assert_allclose(got[1][q, :c], want[1][q, :c], rtol=1e-6)
    # row by row or by scanning the postings: the same float32 sums, bit for bit
    scanned = kernels.sparse_topk(q_ptr, q_terms, weights, t_ptr_a, t_docs, t_w, offsets, *sel.arrays(), n_docs, 7,
                                  n_threads=threads, dense_ratio=dense_ratio, row_cost=10**9)
    for a, b in zip(got, scanned, strict=True):
        assert a.tobytes() == b.tobytes()


def test_filters_mask_before_topk_and_never_pad() -> None:
    docs = [SearchDocument(id=f"d{i}", content="alpha beta" if i % 3 else "alpha", tags=["x"] if i % 2 else ["y"],
                           metadata={"lang": "en" if i < 10 else "fr"}) for i in range(30)]
    ret = BM25Retriever(docs)
    batch = QueryBatch(texts=["alpha", "alpha", "alpha"], owner=np.arange(3), n_queries=3, limit=5,
                       filters=[{}, {"tags": "x", "lang": "fr"}, {"lang": ["de"]}], mode="fulltext")
    frame = ret.retrieve_batch(batch)
    ptr = frame.ptr
    assert ptr[1] - ptr[0] == 5
    got = ret.table.ids[frame.doc[ptr[1]:ptr[2]]]
    assert len(got) == 5 and all(int(g[1:]) % 2 == 1 and int(g[1:]) >= 10 for g in got)
    assert ptr[3] - ptr[2] == 0  # nothing matches: no padding
    with pytest.raises(Exception, match="unknown filter field 'colour'"):
        ret.retrieve_batch(QueryBatch(texts=["alpha"], owner=[0], n_queries=1, limit=3, filters=[{"colour": 1}]))


def test_vector_mode_returns_nothing_and_empty_queries() -> None:
    ret = BM25Retriever(corpus_frame(["a bb cc", "bb dd"]), tokenizer=PLAIN)
    assert len(ret.retrieve_batch(QueryBatch(texts=["bb"], owner=[0], n_queries=1, limit=3, filters=[{}], mode="vector"))) == 0
    frame = ret.retrieve_batch(QueryBatch(texts=["zz", "bb"], owner=[0, 1], n_queries=2, limit=3, filters=[{}, {}], mode="fulltext"))
    assert list(frame.ptr) == [0, 0, 2]


def test_save_load_round_trip_and_errors(tmp_path: Path) -> None:
    texts = synthetic_corpus(200, 50, 3)
    ret = BM25Retriever(corpus_frame(texts), method="bm25+", k1=1.1, tokenizer=Tokenizer(stopwords=["w0"]))
    ret.save(tmp_path / "idx")
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert loaded.method == "bm25+" and loaded.k1 == 1.1 and loaded.tokenizer.to_config() == ret.tokenizer.to_config()
    qs = ["w1 w2 w0", "w7", "w3 w3 w9"]
    for a, b in zip(ret.score_texts(qs, 20), loaded.score_texts(qs, 20), strict=True):
        np.testing.assert_array_equal(a, b)
    file_of(tmp_path / "idx", "t_w").write_bytes(b"garbage")
    with pytest.raises(KolmValueError, match=r"t_w\.[0-9a-f]{32}\.npy: holds 7 bytes, manifest.json records"):
        BM25Retriever.load(tmp_path / "idx")
    reseal(tmp_path / "idx")  # the manifest rewritten too: the file itself is refused
    with pytest.raises(KolmValueError, match=r"t_w\.[0-9a-f]{32}\.npy: not a readable \.npy file"):
        BM25Retriever.load(tmp_path / "idx")
    with pytest.raises(KolmValueError, match="no manifest"):
        BM25Retriever.load(tmp_path / "nothing")
    ret.save(tmp_path / "idx2")
    np.save(file_of(tmp_path / "idx2", "t_docs"), np.zeros(3, np.int64))
    reseal(tmp_path / "idx2")
    with pytest.raises(KolmValueError, match=r"t_w\.[0-9a-f]{32}\.npy: has \d+ entries, expected 3 .*t_docs"):
        BM25Retriever.load(tmp_path / "idx2")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefg"), max_size=8), max_size=12), st.integers(1, 5))
def test_postings_match_a_counter_oracle(docs: list[list[str]], chunk: int) -> None:
    from collections import Counter

    from kolm_search.retrievers.postings import Postings

    post = Postings.from_tokens(iter(docs), chunk=chunk)  # any iterable, any chunking
    assert post.p_doc.dtype == np.int32 and post.tf.dtype == np.int32
    got = {(post.vocab[t], int(d)): int(f) for t, d, f in zip(post.p_term, post.p_doc, post.tf, strict=True)}
    want = {(t, i): c for i, toks in enumerate(docs) for t, c in Counter(toks).items()}
    assert got == want
    assert list(post.lengths) == [len(d) for d in docs]
    for t in range(len(post.vocab)):  # documents ascending within a term
        assert np.all(np.diff(post.p_doc[post.t_ptr[t]:post.t_ptr[t + 1]]) > 0)
    stats = post.stats()
    assert stats.df == {t: len({i for i, d in enumerate(docs) if t in d}) for t in post.vocab}
    assert stats.n_docs == len(docs)


def test_index_from_postings_equals_index_from_texts(tmp_path: Path) -> None:
    from kolm_search.retrievers.postings import Postings

    texts = synthetic_corpus(300, 40, 5)
    direct = BM25Retriever(corpus_frame(texts), method="bm25l", tokenizer=PLAIN)
    post = Postings.from_tokens(PLAIN(t) for t in texts)
    via = BM25Retriever(corpus_frame(texts), method="bm25l", tokenizer=PLAIN, postings=post)
    assert direct.t_docs.dtype == np.int32
    for name in ("t_ptr", "t_docs", "t_w", "nonocc", "doc_len"):
        np.testing.assert_array_equal(getattr(direct, name), getattr(via, name))
    with pytest.raises(KolmValueError, match="postings cover 300 documents but the table has 10"):
        BM25Retriever(corpus_frame(texts[:10]), tokenizer=PLAIN, postings=post)
    direct.save(tmp_path / "idx")  # an index written with int64 postings still loads, as int32
    np.save(file_of(tmp_path / "idx", "t_docs"), direct.t_docs.astype(np.int64))
    reseal(tmp_path / "idx")
    old = BM25Retriever.load(tmp_path / "idx")
    assert old.t_docs.dtype == np.int32
    for a, b in zip(direct.score_texts(texts[:5], 10), old.score_texts(texts[:5], 10), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("kwargs, match", [({"method": "bm26"}, "method"), ({"k1": -1}, "k1"), ({"b": 2}, "b must"),
                                           ({"k1": float("nan")}, "k1"),
                                           ({"fusion_k": -1}, "fusion_k"), ({"k1": 10**400}, "k1"), ({"fusion_k": float("inf")}, "fusion_k"),
                                           ({"method": "bm25+", "k1": 0}, "'bm25\\+' needs k1 > 0"),
                                           ({"method": "bm25l", "k1": 0, "delta": 0}, "'bm25l' needs k1 > 0 or delta > 0")])
def test_bad_parameters(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(KolmValueError, match=match):
        BM25Retriever(corpus_frame(["a b"]), **kwargs)  # type: ignore[arg-type]


def test_inconsistent_collection_stats_refused() -> None:
    from kolm_search.retrievers.postings import CollectionStats

    stats = CollectionStats(df={"aa": 5, "bb": 1}, n_docs=3, avgdl=2.0)  # df above n_docs: negative idf
    with pytest.raises(KolmValueError, match="token 'aa' document frequency 5 above their n_docs 3"):
        BM25Retriever(corpus_frame(["aa bb", "aa"]), tokenizer=PLAIN, stats=stats, method="atire")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["aa", "bb", "cc", "dd", "ee"]), max_size=30), min_size=1, max_size=12),
       st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]), st.sampled_from([0.0, 1e-6, 0.9, 3.0]),
       st.sampled_from([0.0, 0.75, 1.0]), st.sampled_from([0.0, 1e-6, 0.5, 2.0]), st.booleans())
def test_every_built_index_saves_and_loads_bit_exact(docs: list[list[str]], method: str, k1: float, b: float,
                                                     delta: float, mmap: bool) -> None:
    """The load-time checks (finite non-negative weights, pointers, rows) accept every index the
    builder makes, whatever the corpus and parameters; the loaded index scores identically."""
    import tempfile

    try:
        ret = BM25Retriever(corpus_frame([" ".join(d) for d in docs]), method=method, k1=k1, b=b,  # type: ignore[arg-type]
                            delta=delta, tokenizer=PLAIN)
    except KolmValueError as exc:
        assert k1 == 0 and method in ("bm25l", "bm25+"), exc  # the only refused combinations (0/0 weights)
        return
    assert np.all(np.isfinite(ret.t_w)) and ret.t_w.min(initial=0) >= 0 and ret.nonocc.min(initial=0) >= 0
    with tempfile.TemporaryDirectory() as tmp:
        ret.save(tmp)
        loaded = BM25Retriever.load(tmp, mmap=mmap)
        for q in ["aa bb", "cc", "ee ee dd", "zz aa"]:  # one by one: a batch ending in a query without
            for a, b_ in zip(ret.score_texts([q], 5), loaded.score_texts([q], 5), strict=True):  # terms is h16-batch's
                np.testing.assert_array_equal(a, b_)


def test_tokenizer_defaults_and_errors() -> None:
    t = Tokenizer()
    assert t("The Flows of Supersonic aircraft, é x") == ["flow", "superson", "aircraft"]
    with pytest.raises(KolmValueError, match="stemmer"):
        Tokenizer(stemmer="klingon")
    with pytest.raises(KolmValueError, match="stopword"):
        Tokenizer(stopwords="elvish")
    with pytest.raises(KolmValueError, match="regex"):
        Tokenizer(pattern="(")
    import pickle

    assert pickle.loads(pickle.dumps(t))("flows") == ["flow"]


def test_cranfield_scores_equal_bm25s(cranfield: dict[str, pd.DataFrame]) -> None:
    corpus, queries = cranfield["corpus"], cranfield["queries"]
    ret = BM25Retriever(corpus)
    tok = ret.tokenizer
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    model.index([tok(t) for t in ret.table.texts()], show_progress=False)
    docs, scores, counts = ret.score_texts(list(queries["query"]), k=100)
    for q, text in enumerate(queries["query"][:60]):
        want = model.get_scores([t for t in tok(text) if t in model.vocab_dict])
        np.testing.assert_allclose(scores[q, : counts[q]], want[docs[q, : counts[q]]], rtol=2e-6)
        assert scores[q, counts[q] - 1] >= np.sort(want)[-100] - 1e-5  # nothing better was left out


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=40), st.integers(1, 5))
def test_merged_stats_equal_whole_collection_stats(lengths: list[int], n_parts: int) -> None:
    from kolm_search.retrievers.postings import CollectionStats, Postings

    docs = [[f"t{(i + j) % 7}" for j in range(n)] for i, n in enumerate(lengths)]
    bounds = np.linspace(0, len(docs), n_parts + 1).astype(int)
    parts = [Postings.from_tokens(docs[a:b]).stats() for a, b in itertools.pairwise(bounds)]
    merged, whole = CollectionStats.merge(parts), Postings.from_tokens(docs).stats()
    assert merged.avgdl == whole.avgdl  # exact: integer totals are merged, not rounded means
    assert dict(merged.df) == dict(whole.df) and merged.n_docs == whole.n_docs
