"""Loading indexes with ``verify="quick" | "full" | "auto"``: quick loads answer exactly as full
loads do, check the postings block by block with a kernel equal to its numpy twin, leave the
term frequencies to their first use and the documents to their first read; older formats load."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError, presets
from kolm_search._kernels import load
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import MappedDocumentTable
from kolm_search.errors import ParameterError
from kolm_search.retrievers import _blocks, _saved
from kolm_search.retrievers.dense import DenseRetriever
from tests.reliability.indexes import documents_as_parquet, file_of, reseal

METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


@pytest.fixture(scope="module")
def cranfield_index(tmp_path_factory: pytest.TempPathFactory, cranfield: dict[str, Any]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("quick")
    out = {}
    for method in METHODS:
        BM25Retriever(cranfield["corpus"], method=method).save(root / method)  # type: ignore[arg-type]
        out[method] = root / method
    emb = np.random.default_rng(0).standard_normal((len(cranfield["corpus"]), 16)).astype(np.float32)
    DenseRetriever(cranfield["corpus"], embeddings=emb).save(root / "dense")
    out["dense"] = root / "dense"
    return out


@pytest.mark.parametrize("method", METHODS)
def test_quick_loads_answer_as_full_loads(cranfield_index: dict[str, Path], cranfield: dict[str, Any], method: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)  # many blocks
    full = BM25Retriever.load(cranfield_index[method], verify="full")
    quick = BM25Retriever.load(cranfield_index[method], verify="quick")
    assert isinstance(quick.table, MappedDocumentTable) and quick._tf_unchecked is not None
    texts = cranfield["queries"]["query"].tolist()
    for k in (1, 10, 1000):
        for pruning in ("auto", "none"):
            for a, b in zip(full.score_texts(texts, k, pruning=pruning), quick.score_texts(texts, k, pruning=pruning),
                            strict=True):
                assert np.array_equal(a, b)
    assert np.array_equal(full.t_max, quick.t_max)
    queries = cranfield["queries"][["qid", "query"]]

    run_full = presets.bm25(full).search_batch(queries, limit=20).run
    run_quick = presets.bm25(quick).search_batch(queries, limit=20).run
    assert run_full.equals(run_quick)
    assert np.array_equal(quick.tf, full.tf) and quick._tf_unchecked is None  # checked on first read


def test_quick_dense_load_answers_as_a_full_one(cranfield_index: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 1024)
    full = DenseRetriever.load(cranfield_index["dense"], verify="full")
    quick = DenseRetriever.load(cranfield_index["dense"], verify="quick")
    q = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    for a, b in zip(full.search_vectors(q, 10), quick.search_vectors(q, 10), strict=True):
        assert np.array_equal(a, b)


def test_a_quick_load_pickles_and_keeps_its_deferred_check(cranfield_index: dict[str, Path]) -> None:
    quick = BM25Retriever.load(cranfield_index["lucene"], verify="quick")
    back = pickle.loads(pickle.dumps(quick))
    texts = ["boundary layer", "heat transfer at high speed"]
    for a, b in zip(quick.score_texts(texts, 10), back.score_texts(texts, 10), strict=True):
        assert np.array_equal(a, b)
    assert back._tf_unchecked is not None and np.array_equal(back.tf, quick.tf)
    assert back.table.documents([3, 1]) == quick.table.documents([3, 1])


def test_term_frequencies_are_checked_when_first_read(cranfield_index: dict[str, Path], tmp_path: Path) -> None:
    d = tmp_path / "bad_tf"
    shutil.copytree(cranfield_index["lucene"], d)
    path = file_of(d, "tf")
    tf = np.load(path).copy()
    tf[10] += 1  # counts that no longer give the weights
    np.save(path, tf)
    reseal(d)
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: term frequencies of document row"):
        BM25Retriever.load(d, verify="full")
    quick = BM25Retriever.load(d, verify="quick")
    assert quick.score_texts(["boundary layer"], 5)[2][0] == 5  # searches never read them
    with pytest.raises(KolmValueError, match=r"tf\.[0-9a-f]{32}\.npy: term frequencies of document row"):
        quick.add([{"id": "new", "content": "boundary layer"}])
    with pytest.raises(KolmValueError, match="term frequencies"):  # and again: the check stays until it passes
        quick.save(tmp_path / "copy")


def test_auto_checks_small_indexes_in_full_and_large_ones_quickly(cranfield_index: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    d = tmp_path / "flipped"
    shutil.copytree(cranfield_index["lucene"], d)
    path = file_of(d, "t_w")
    a = np.load(path).copy()
    a[7] = np.nextafter(a[7], np.float32(0))  # a weight off by one unit, below its term's maximum: only the digest tells
    np.save(path, a)
    with pytest.raises(KolmValueError, match="differs from the sha256"):
        BM25Retriever.load(d)  # 'auto': this index is small
    monkeypatch.setattr(_saved, "AUTO_FULL_BYTES", 0)
    assert BM25Retriever.load(d)._tf_unchecked is not None  # 'auto' of a "large" index: quick, no digests
    with pytest.raises(ParameterError, match="verify"):
        BM25Retriever.load(d, verify="fast")  # type: ignore[arg-type]


def test_arrays_read_into_memory_are_checked_in_full(cranfield_index: dict[str, Path]) -> None:
    ret = BM25Retriever.load(cranfield_index["bm25+"], mmap=False, verify="quick")
    assert type(ret.table) is DocumentTable and ret._tf_unchecked is None


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_indexes_with_parquet_documents_still_load(cranfield_index: dict[str, Path], tmp_path: Path, kind: str) -> None:
    """Format versions before documents files (BM25 4, dense 2) held a parquet table."""
    source = cranfield_index["lucene" if kind == "bm25" else "dense"]
    d = tmp_path / kind
    shutil.copytree(source, d)
    documents_as_parquet(d, version=4 if kind == "bm25" else 2)
    assert json.loads((d / "manifest.json").read_text())["files"]["documents"]["name"].endswith(".parquet")
    cls: Any = BM25Retriever if kind == "bm25" else DenseRetriever
    old, new = cls.load(d), cls.load(source)
    assert type(old.table) is DocumentTable and old.table.frame.equals(new.table.frame)
    if kind == "bm25":
        for a, b in zip(old.score_texts(["shock wave"], 10), new.score_texts(["shock wave"], 10), strict=True):
            assert np.array_equal(a, b)
    old.save(d)  # a save writes today's format
    assert json.loads((d / "manifest.json").read_text())["files"]["documents"]["name"].endswith(".arrow")


def test_read_rows_reads_the_file_not_the_mapping(tmp_path: Path) -> None:
    a = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "a.npy", a)
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    for lo, hi in ((0, 20), (3, 7), (19, 20), (5, 5)):
        got = _blocks.read_rows(mapped, lo, hi)
        assert not isinstance(got, np.memmap) and np.array_equal(got, a[lo:hi])


@st.composite
def _postings(draw: st.DrawFn) -> tuple[Any, ...]:
    n_docs = draw(st.sampled_from([1, 3, 12, 70, 200]))
    lengths = draw(st.lists(st.sampled_from([0, 1, 2, 5, 6, 63, 64, 65, 130]), min_size=1, max_size=8))  # blocks of 64
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    docs = np.concatenate([np.sort(rng.choice(n_docs, n, replace=False)) if n <= n_docs else np.arange(n)
                           for n in lengths] + [np.zeros(0)]).astype(np.int32)
    weights = (rng.integers(0, 40, len(docs)) / np.float32(4.0) + rng.random(len(docs)) * draw(st.sampled_from([0, 1]))
               ).astype(np.float32)  # ties (a block's maximum twice) and zeros, or all distinct
    if len(docs) and draw(st.booleans()):  # break one posting
        i = draw(st.integers(0, len(docs) - 1))
        how = draw(st.sampled_from(["row", "order", "nan", "neg", "inf"]))
        if how == "row":
            docs[i] = draw(st.sampled_from([-1, n_docs, 2**31 - 1]))
        elif how == "order" and i:
            docs[i] = docs[i - 1]
        else:
            weights[i] = {"nan": np.nan, "neg": -0.5, "inf": np.inf}.get(how, weights[i])
    t0 = draw(st.integers(0, len(lengths) - 1))
    t1 = draw(st.integers(t0 + 1, len(lengths)))
    return ptr, docs, weights, t0, t1, n_docs


@settings(max_examples=300, deadline=None)
@given(case=_postings())
def test_the_postings_kernel_equals_its_numpy_twin(case: tuple[Any, ...]) -> None:
    ptr, docs, weights, t0, t1, n_docs = case
    kernels = load("postings_check")
    lo, hi = int(ptr[t0]), int(ptr[t1])
    b_ptr = load("blocks").block_pointers(ptr)
    n_terms, n_blocks = len(ptr) - 1, int(b_ptr[-1])

    def outputs() -> list[np.ndarray]:  # t_min, t_max, b_max, b_last: -1 where not written
        return [np.full(n_terms, -1, np.float32), np.full(n_terms, -1, np.float32), np.full(n_blocks, -1, np.float32),
                np.full(n_blocks, -1, np.int32)]

    got_b, want_b = outputs(), outputs()
    got = kernels.first_bad_posting(ptr, b_ptr, docs[lo:hi].copy(), weights[lo:hi].copy(), t0, t1, n_docs, *got_b)
    want = kernels.first_bad_posting_numpy(ptr, b_ptr, docs[lo:hi], weights[lo:hi], t0, t1, n_docs, *want_b)
    assert got == want
    if got[0] == 0:
        for g, w in zip(got_b, want_b, strict=True):
            assert np.array_equal(g, w)
        if t0 == 0 and t1 == n_terms:  # the whole postings: the bounds of the resident arrays' kernel
            for g, w in zip(got_b, load("blocks").posting_bounds(ptr, docs, weights), strict=True):
                assert np.array_equal(g, w)
