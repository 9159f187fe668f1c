"""A quick load checks each term's postings when a search first reads them
(:mod:`kolm_search.retrievers.postings_gate`): the load reads no posting; searches answer as
after a full load, bit for bit, in any order, on threads and after a pickle; a damaged term
fails every search that reads it, naming the file and position, and no other; whatever reads
the whole arrays (a save, an update, the public attributes) checks every term first."""

from __future__ import annotations

import pickle
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError
from kolm_search._kernels import load
from kolm_search.retrievers import _blocks, postings_gate
from tests.reliability.indexes import file_of, reseal, save_synthetic_bm25

BOUNDS = ("t_min", "t_max", "b_max", "b_last")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_synthetic_bm25(tmp_path_factory.mktemp("gate") / "i", 900, 120, seed=3)


@pytest.fixture(scope="module")
def full(saved: Path) -> BM25Retriever:
    return BM25Retriever.load(saved, verify="full")


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        assert np.array_equal(x, y)


def _queries(ret: BM25Retriever, terms: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.concatenate([[0], np.cumsum([len(t) for t in terms])]).astype(np.int64)
    return ptr, np.asarray([i for t in terms for i in t], np.int64)


def test_a_quick_load_reads_no_posting(saved: Path, full: BM25Retriever, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a quick load read the postings")

    monkeypatch.setattr(postings_gate, "check_postings", refuse)
    quick = BM25Retriever.load(saved, verify="quick")
    assert quick._postings_gate is not None and not quick._postings_gate.done
    texts = ["w0 w1", "w7 w33 w90", "w5"]
    _same(quick.score_texts(texts, 10), full.score_texts(texts, 10))  # term by term: no whole check either


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.lists(st.lists(st.integers(0, 119), min_size=0, max_size=4), min_size=1, max_size=5),
                          st.sampled_from([1, 5, 50, 1000]), st.sampled_from(["auto", "none"])), min_size=1,
                max_size=6))
def test_searches_in_any_order_answer_as_a_full_load(saved: Path, full: BM25Retriever,
                                                     searches: list[tuple[list[list[int]], int, str]]) -> None:
    quick = BM25Retriever.load(saved, verify="quick")
    gate = quick._postings_gate
    assert gate is not None
    seen: set[int] = set()
    for words, k, pruning in searches:
        texts = [" ".join(f"w{i}" for i in q) for q in words]
        _same(quick.score_texts(texts, k, pruning=pruning), full.score_texts(texts, k, pruning=pruning))  # type: ignore[arg-type]
        seen.update(quick._vocab_index[f"w{i}"] for q in words for i in q if f"w{i}" in quick._vocab_index)
        terms = np.asarray(sorted(seen), np.int64)
        assert np.array_equal(quick._t_max[terms], full.t_max[terms])  # the bounds of the terms read
        assert np.array_equal(quick._t_min[terms], full.t_min[terms])
    for name in BOUNDS:  # the public arrays: every term checked first
        assert np.array_equal(getattr(quick, name), getattr(full, name))
    assert gate.done


def test_the_gate_checks_on_threads_and_after_a_pickle(saved: Path, full: BM25Retriever) -> None:
    quick = BM25Retriever.load(saved, verify="quick")
    rng = np.random.default_rng(0)
    batches = [[" ".join(f"w{i}" for i in rng.choice(120, 3)) for _ in range(20)] for _ in range(8)]
    errors: list[BaseException] = []

    def run(texts: list[str]) -> None:
        try:
            _same(quick.score_texts(texts, 20), full.score_texts(texts, 20))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    back = pickle.loads(pickle.dumps(quick))  # part checked: the rest checks in the copy
    assert back._postings_gate is not None and not back._postings_gate.done
    _same(back.score_texts(["w100 w101 w119", "w2"], 10), full.score_texts(["w100 w101 w119", "w2"], 10))
    _same(back.score_terms([{"w3": 2.5, "w110": 0.5}], 10), full.score_terms([{"w3": 2.5, "w110": 0.5}], 10))


def _damaged(saved: Path, tmp_path: Path, term: str, how: str) -> tuple[Path, int]:
    d = tmp_path / "bad"
    shutil.copytree(saved, d)
    ref = BM25Retriever.load(saved, verify="full")
    t = ref._vocab_index[term]
    pos = int(ref.t_ptr[t]) + 1  # the term's second posting
    key = "t_docs" if how == "row" else "t_w"
    path = file_of(d, key)
    a = np.load(path).copy()
    a[pos] = len(ref.table) if how == "row" else np.nan
    np.save(path, a)
    reseal(d)
    return d, pos


@pytest.mark.parametrize("how", ["row", "nan"])
def test_a_damaged_term_fails_the_searches_that_read_it_and_no_other(saved: Path, full: BM25Retriever, tmp_path: Path,
                                                                     how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 256)  # the whole check in many blocks
    d, pos = _damaged(saved, tmp_path, "w40", how)
    with pytest.raises(KolmValueError, match=f"position {pos}"):
        BM25Retriever.load(d, verify="full")
    quick = BM25Retriever.load(d, verify="quick")
    message = rf"{'t_docs' if how == 'row' else 't_w'}\.[0-9a-f]{{32}}\.npy: .*position {pos}"
    _same(quick.score_texts(["w1 w2", "w41"], 10), full.score_texts(["w1 w2", "w41"], 10))
    for _ in range(2):  # the term stays unchecked: every search of it fails
        with pytest.raises(KolmValueError, match=message):
            quick.score_texts(["w3", "w40 w1"], 10)
    with pytest.raises(KolmValueError, match=message):
        quick.score_terms([{"w40": 1.0}], 10)
    _same(quick.score_texts(["w1 w2", "w3"], 10), full.score_texts(["w1 w2", "w3"], 10))  # the others still answer
    for read in (lambda: quick.t_docs, lambda: quick.t_max, lambda: quick.save(tmp_path / "copy"),
                 lambda: quick.add([{"id": "new", "content": "w1"}])):
        with pytest.raises(KolmValueError, match=message):
            read()
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize("name", ["term_max", "block_max"])
def test_a_damaged_maximum_fails_its_terms_searches(saved: Path, full: BM25Retriever, tmp_path: Path,
                                                    name: str) -> None:
    d = tmp_path / "bad"
    shutil.copytree(saved, d)
    path = file_of(d, name)
    a = np.load(path).copy()
    i = 0  # term 0 ("w0" or the first term), or its first block
    a[i] = np.nextafter(a[i], np.float32(0))
    np.save(path, a)
    reseal(d)
    quick = BM25Retriever.load(d, verify="quick")
    word = quick.vocab[0]
    other = quick.vocab[1]
    _same(quick.score_texts([other], 10), full.score_texts([other], 10))
    where = "term 0" if name == "term_max" else "block 0 of term 0"
    with pytest.raises(KolmValueError, match=rf"{name}\.[0-9a-f]{{32}}\.npy: {where} records maximum"):
        quick.score_texts([word], 10)


def test_updates_after_a_quick_load_equal_a_rebuild(saved: Path, tmp_path: Path) -> None:
    quick = BM25Retriever.load(saved, verify="quick")
    quick.score_texts(["w1 w5"], 5)  # part checked
    full = BM25Retriever.load(saved, verify="full")
    new = [{"id": "n1", "content": "w1 w2 w2 w119"}, {"id": "n2", "content": "w5 zeta"}]
    for ret in (quick, full):
        ret.add(new)
        ret.merge()
    texts = ["w1 w2", "zeta w5", "w119"]
    _same(quick.score_texts(texts, 10), full.score_texts(texts, 10))
    assert quick._postings_gate is None  # a merge builds checked arrays
    quick.save(tmp_path / "again")
    _same(BM25Retriever.load(tmp_path / "again", verify="full").score_texts(texts, 10), full.score_texts(texts, 10))


@st.composite
def _postings(draw: st.DrawFn) -> tuple[Any, ...]:
    n_docs = draw(st.sampled_from([1, 3, 12, 70, 200]))
    lengths = draw(st.lists(st.sampled_from([0, 1, 2, 5, 63, 64, 65, 130]), min_size=1, max_size=8))
    ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    docs = np.concatenate([np.sort(rng.choice(n_docs, n, replace=False)) if n <= n_docs else np.arange(n)
                           for n in lengths] + [np.zeros(0)]).astype(np.int32)
    weights = (rng.integers(0, 40, len(docs)) / np.float32(4.0)).astype(np.float32)
    if len(docs) and draw(st.booleans()):
        i = draw(st.integers(0, len(docs) - 1))
        how = draw(st.sampled_from(["row", "order", "nan", "neg"]))
        if how == "row":
            docs[i] = draw(st.sampled_from([-1, n_docs]))
        elif how == "order" and i:
            docs[i] = docs[i - 1]
        else:
            weights[i] = np.nan if how == "nan" else -0.5
    terms = np.asarray(draw(st.lists(st.integers(0, len(lengths) - 1), unique=True)), np.int64)
    return ptr, docs, weights, terms, n_docs


@settings(max_examples=300, deadline=None)
@given(case=_postings())
def test_the_terms_kernel_equals_its_numpy_twin(case: tuple[Any, ...]) -> None:
    ptr, docs, weights, terms, n_docs = case
    kernels = load("postings_check")
    b_ptr = load("blocks").block_pointers(ptr)
    n_terms, n_blocks = len(ptr) - 1, int(b_ptr[-1])

    def outputs() -> list[np.ndarray]:
        return [np.full(n_terms, -1, np.float32), np.full(n_terms, -1, np.float32), np.full(n_blocks, -1, np.float32),
                np.full(n_blocks, -1, np.int32)]

    got_b, want_b = outputs(), outputs()
    got = kernels.first_bad_term(ptr, b_ptr, docs, weights, terms, n_docs, *got_b)
    want = kernels.first_bad_term_numpy(ptr, b_ptr, docs, weights, terms, n_docs, *want_b)
    assert got == want
    if got[0] == 0:
        for g, w in zip(got_b, want_b, strict=True):
            assert np.array_equal(g, w)
        whole = load("blocks").posting_bounds(ptr, docs, weights)  # a checked term's bounds: the resident kernel's
        blocks = np.concatenate([np.arange(b_ptr[t], b_ptr[t + 1]) for t in terms] + [np.zeros(0, np.int64)])
        for g, w, at in zip(got_b, whole, (terms, terms, blocks, blocks), strict=True):
            assert np.array_equal(g[at], w[at])
