"""DenseRetriever and exact_topk against brute force."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import DenseRetriever, KolmValueError, SearchDocument, SearchError
from kolm_search._kernels import load
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.selection import Selection, Selections
from kolm_search.retrievers.dense import exact_topk
from tests.fakes import HashEmbedder
from tests.reliability.indexes import file_of, reseal


def brute(q: np.ndarray, d: np.ndarray, k: int, selections: Selections | None = None):
    sel = Selections.none(q.shape[0]) if selections is None else selections
    return load("dense").dense_topk_numpy((q.astype(np.float64) @ d.T.astype(np.float64)).astype(np.float32),
                                          *sel.arrays(), k)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("blocks", [(7, 50), (1024, 16384), (None, 256), (3, 1)])
def test_exact_topk_equals_brute_force(seed: int, blocks: tuple[int | None, int]) -> None:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((40, 12)).astype(np.float32)
    d = rng.standard_normal((500, 12)).astype(np.float32)
    chosen = [Selection.of_mask(rng.random(500) < 0.3) for _ in range(2)]
    chosen += [Selection(500, rows=np.sort(rng.choice(500, 3, replace=False))), Selection(500, rows=np.zeros(0, np.int64))]
    sel = Selections.build(rng.integers(-1, len(chosen), 40), chosen)
    got = exact_topk(q, d, 15, selections=sel, query_block=blocks[0], doc_block=blocks[1])
    want = brute(q, d, 15, sel)
    np.testing.assert_array_equal(got[2], want[2])
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_exact_topk_threads_and_empty_inputs(n_threads: int) -> None:
    rng = np.random.default_rng(5)
    q = rng.standard_normal((33, 8)).astype(np.float32)
    d = rng.standard_normal((301, 8)).astype(np.float32)
    got = exact_topk(q, d, 9, n_threads=n_threads, query_block=4, doc_block=64)
    want = brute(q, d, 9)
    np.testing.assert_array_equal(got[0], want[0])
    empty = exact_topk(np.zeros((0, 8), np.float32), d, 5)
    assert empty[0].shape == (0, 5)
    none = exact_topk(q, np.zeros((0, 8), np.float32), 5)
    assert list(none[2]) == [0] * 33
    with pytest.raises(ValueError, match="share d"):
        exact_topk(q, np.zeros((4, 7), np.float32), 2)


def test_ties_broken_by_document_code() -> None:
    d = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], np.float32)
    docs, scores, counts = exact_topk(np.array([[1.0, 0.0]], np.float32), d, 3, doc_block=2)
    assert list(docs[0]) == [0, 2, 3] and counts[0] == 3


def test_k_larger_than_corpus() -> None:
    d = np.eye(3, dtype=np.float32)
    docs, scores, counts = exact_topk(np.ones((2, 3), np.float32), d, 10)
    assert docs.shape == (2, 3) and list(counts) == [3, 3]


def test_retriever_cosine_vs_ip_and_persistence(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32) * rng.uniform(0.1, 10, (50, 1)).astype(np.float32)
    docs = [SearchDocument(id=f"d{i}", content=f"c{i}") for i in range(50)]
    cos = DenseRetriever(docs, embeddings=emb)
    ip = DenseRetriever(docs, embeddings=emb, metric="ip")
    qv = rng.standard_normal((3, 8)).astype(np.float32)
    want_cos = np.argsort(-(qv / np.linalg.norm(qv, axis=1, keepdims=True)) @ (emb / np.linalg.norm(emb, axis=1, keepdims=True)).T, axis=1)[:, :5]
    want_ip = np.argsort(-(qv @ emb.T), axis=1)[:, :5]
    np.testing.assert_array_equal(cos.search_vectors(qv, 5)[0], want_cos)
    np.testing.assert_array_equal(ip.search_vectors(qv, 5)[0], want_ip)
    cos.save(tmp_path / "dense")
    loaded = DenseRetriever.load(tmp_path / "dense")
    np.testing.assert_array_equal(loaded.search_vectors(qv, 5)[0], want_cos)
    np.save(file_of(tmp_path / "dense", "embeddings"), np.zeros((3, 8), np.float32))
    reseal(tmp_path / "dense")
    with pytest.raises(KolmValueError, match=r"embeddings\.[0-9a-f]{32}\.npy: has shape \(3, 8\), expected \(50, 8\)"):
        DenseRetriever.load(tmp_path / "dense")


def test_embeds_corpus_and_queries_with_embedder() -> None:
    docs = [SearchDocument(id=f"d{i}", content=w) for i, w in enumerate(["apple pie", "banana split", "cherry tart"])]
    ret = DenseRetriever(docs, HashEmbedder(), fields=("content",))
    frame = ret.retrieve_batch(QueryBatch(texts=["banana split"], owner=[0], n_queries=1, limit=2, filters=[{}], mode="vector"))
    assert ret.table.ids[frame.doc[0]] == "d1"
    assert len(ret.retrieve_batch(QueryBatch(texts=["x"], owner=[0], n_queries=1, limit=2, filters=[{}], mode="fulltext"))) == 0


def test_errors() -> None:
    docs = [SearchDocument(id="a", content="x")]
    with pytest.raises(KolmValueError, match="embedder or precomputed"):
        DenseRetriever(docs)
    with pytest.raises(KolmValueError, match="shape"):
        DenseRetriever(docs, embeddings=np.zeros((2, 3)))
    for bad in (-1, float("nan"), "60", True):
        with pytest.raises(KolmValueError, match="fusion_k must be a finite number >= 0"):
            DenseRetriever(docs, embeddings=np.zeros((1, 3)), fusion_k=bad)  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="NaN"):
        DenseRetriever(docs, embeddings=np.array([[np.nan, 1.0]]))
    with pytest.raises(KolmValueError, match="metric"):
        DenseRetriever(docs, embeddings=np.ones((1, 2)), metric="l2")  # type: ignore[arg-type]
    ret = DenseRetriever(docs, embeddings=np.ones((1, 2)))
    with pytest.raises(SearchError, match="dimension 2"):
        ret.search_vectors(np.ones((1, 3)), 1)
    with pytest.raises(SearchError, match="no query embeddings"):
        ret.retrieve_batch(QueryBatch(texts=["q"], owner=[0], n_queries=1, limit=1, filters=[{}], mode="vector"))


def test_corpus_embedded_once_per_embedder() -> None:
    """presets.dense then presets.hybrid over one corpus and one embedder embed the corpus once."""
    from kolm_search import presets
    from tests.fakes import BatchHashEmbedder

    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(30)], "content": [f"text {i} {i % 7}" for i in range(30)]})
    emb = BatchHashEmbedder()
    dense = presets.dense(corpus, emb)
    first = len(emb.calls)
    hybrid = presets.hybrid(corpus, emb)
    assert len(emb.calls) == first  # the corpus matrix was reused
    np.testing.assert_array_equal(dense.modules.retriever.embeddings, hybrid.modules.retriever.retrievers[1].embeddings)
    presets.dense(pd.DataFrame({"id": ["x"], "content": ["another corpus"]}), emb)
    assert len(emb.calls) == first + 1  # a different corpus is embedded
    presets.dense(corpus, BatchHashEmbedder())  # another embedder embeds for itself
    assert len(emb.calls) == first + 1


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 6), st.lists(st.sampled_from([0.0, 1e-44, 1e-30, 1e-20, 1.0, 1e19, 1e30, 1e38]),
                                                       min_size=12, max_size=12),
       st.sampled_from(["cosine", "ip"]), st.booleans(), st.integers(0, 2**32 - 1))
def test_every_built_index_saves_and_loads(n: int, dim: int, scales: list[float], metric: str, mmap: bool,
                                           seed: int) -> None:
    """Rows of any finite magnitude (zero, subnormal, near float32's limit): a cosine index holds
    unit rows (zero rows stay zero; none silently zeroed by overflow or left unnormalised by
    underflow), and every built index passes the load-time checks and searches identically."""
    import tempfile

    rng = np.random.default_rng(seed)
    emb = np.clip(rng.uniform(-1, 1, (n, dim)) * np.asarray(scales[:n])[:, None], -3e38, 3e38).astype(np.float32)
    ret = DenseRetriever([SearchDocument(id=f"d{i}", content="x") for i in range(n)], embeddings=emb, metric=metric)
    if metric == "cosine":
        norms = np.linalg.norm(ret.embeddings.astype(np.float64), axis=1)
        nonzero = np.any(emb != 0, axis=1)
        np.testing.assert_allclose(norms[nonzero], 1.0, rtol=1e-5)
        assert np.all(norms[~nonzero] == 0)
    q = rng.standard_normal((3, dim)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        ret.save(tmp)
        loaded = DenseRetriever.load(tmp, mmap=mmap)
        if metric == "cosine" or np.all(np.abs(emb) < 1e30):  # ip scores beyond float32 are the caller's
            for a, b in zip(ret.search_vectors(q, 4), loaded.search_vectors(q, 4), strict=True):
                np.testing.assert_array_equal(a, b)
