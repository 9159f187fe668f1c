"""Parallel index build: Postings.from_texts on worker processes against a plain-Python oracle.

Every worker-side step (the tokenizer travelling pickled, per-chunk vocabularies, doc-major
counts, the parent's merge) is checked on many hypothesis corpora in this process; the pool
itself (spawn start-up costs about a second) on a few corpora, Cranfield and failure cases:
a document that fails names its row, a worker that dies or hangs raises instead of hanging.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmError, KolmTypeError, KolmValueError, Tokenizer
from kolm_search.engine.doctable import DocumentTable
from kolm_search.retrievers import _encode, _parallel
from kolm_search.retrievers.postings import Postings

ENGLISH = Tokenizer()
GERMAN = Tokenizer(language="german")
WORDS = ["the", "and", "of", "flow", "flows", "flowing", "wing", "Wings", "straße", "Häuser", "größer", "die",
         "und", "東京タワー", "中文字", "ｆｕｌｌ", "Ｗｉｄｔｈ", "ÉCOLE", "naïve", "x", "a1", "__", "42"]
text_st = st.one_of(
    st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), max_size=12).map(" ".join),
    st.text(max_size=30),
)
corpus_st = st.lists(text_st, max_size=14)


def oracle(token_lists: Sequence[Sequence[str]]) -> tuple[list[str], list[int], list[int], list[int], list[int]]:
    """Plain Python: vocabulary by first occurrence, then each term's (document, count) pairs."""
    vocab: dict[str, int] = {}
    counts = []
    for tokens in token_lists:
        for t in tokens:
            vocab.setdefault(t, len(vocab))
        counts.append(Counter(tokens))
    postings: dict[str, list[tuple[int, int]]] = {t: [] for t in vocab}
    for d, c in enumerate(counts):
        for term, n in c.items():
            postings[term].append((d, n))
    t_ptr, p_doc, tf = [0], [], []
    for term in vocab:
        p_doc += [d for d, _ in postings[term]]
        tf += [n for _, n in postings[term]]
        t_ptr.append(len(p_doc))
    return list(vocab), t_ptr, p_doc, tf, [len(t) for t in token_lists]


def assert_oracle(p: Postings, token_lists: Sequence[Sequence[str]]) -> None:
    vocab, t_ptr, p_doc, tf, lengths = oracle(token_lists)
    assert p.vocab == vocab
    for name, want, dtype in (("t_ptr", t_ptr, np.int64), ("p_doc", p_doc, np.int32), ("tf", tf, np.int32),
                              ("lengths", lengths, np.int64)):
        got = getattr(p, name)
        assert got.dtype == dtype, name
        assert got.tolist() == want, name


def assert_same(a: Postings, b: Postings) -> None:
    assert a.vocab == b.vocab
    for name in ("t_ptr", "p_doc", "tf", "lengths"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@settings(max_examples=120, deadline=None)
@given(corpus_st, st.integers(1, 5), st.sampled_from([ENGLISH, GERMAN, Tokenizer(stopwords=None, stemmer=None)]),
       st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_chunks_merge_to_the_oracle(texts: list[str], chunk: int, tok: Tokenizer, takers: list[int]) -> None:
    """What the workers do (tokenizer rebuilt from pickle, worker-wide term ids, chunks dealt to
    up to three workers in any way) and the parent's merge equal the oracle; so do the
    in-process paths, for any chunk size."""
    token_lists = [tok(t) for t in texts]
    for t in texts:  # words/term: the word-by-word path equals the tokenizer
        assert [x for w in tok.words(t) if (x := tok.term(w)) is not None] == tok(t)
    blob = pickle.dumps(tok)
    maps = _parallel.WorkerMaps(_parallel.Merger())
    states: list[dict[bytes, object]] = [{}, {}, {}]  # one worker process's state each
    for i, s in enumerate(range(0, len(texts), chunk)):
        state = states[takers[i % len(takers)]]
        _parallel._STATE.clear()
        _parallel._STATE.update(state)
        maps.add(*_parallel._worker(b"build", blob, texts[s:s + chunk], s))
        state.clear()
        state.update(_parallel._STATE)
    assert_oracle(Postings(*maps.merger.finish()), token_lists)
    assert_oracle(Postings.from_texts(texts, tok, n_jobs=1, chunk=chunk), token_lists)
    assert_oracle(Postings.from_tokens(token_lists, chunk=chunk), token_lists)
    assert_oracle(Postings.from_tokens(iter(token_lists)), token_lists)


def test_worker_maps_refuse_a_worker_out_of_step() -> None:
    """A chunk whose worker reports a vocabulary the parent has not seen is an error, not wrong ids."""
    maps = _parallel.WorkerMaps(_parallel.Merger())
    counted = _encode.count_ids(np.array([0, 1], np.int32), np.array([2], np.int64), 2)
    maps.add("w", 0, ["a", "b"], counted)
    with pytest.raises(KolmError, match="reported 5 known terms, the parent holds 2"):
        maps.add("w", 5, [], counted)


@settings(max_examples=2, deadline=None)
@given(st.lists(text_st, min_size=2, max_size=40), st.integers(1, 7))
def test_pool_equals_the_oracle(texts: list[str], chunk: int) -> None:
    texts = [*texts, "", "the and of", "東京タワーに行く"]
    assert_oracle(Postings.from_texts(texts, ENGLISH, n_jobs=2, chunk=chunk), [ENGLISH(t) for t in texts])


def test_empty_corpus_and_documents() -> None:
    for texts in ([], [""], ["", "the of", ""]):
        for n_jobs in (1, 2):
            p = Postings.from_texts(texts, ENGLISH, n_jobs=n_jobs, chunk=1)
            assert_oracle(p, [ENGLISH(t) for t in texts])


@pytest.fixture(scope="module")
def cranfield_texts(cranfield: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, list[str]]:
    frame = cranfield["corpus"]
    return frame, DocumentTable.from_frame(frame).texts(("title", "content"))


def test_bm25_cranfield_same_index_and_scores(cranfield_texts: tuple[pd.DataFrame, list[str]],
                                              cranfield: dict[str, pd.DataFrame],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    frame, texts = cranfield_texts
    one = BM25Retriever(frame, n_jobs=1)
    pools: list[Any] = []
    real_pool = _parallel.ProcessPoolExecutor

    def spy(*args: Any, **kwargs: Any) -> Any:
        pools.append(kwargs)
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(_parallel, "ProcessPoolExecutor", spy)
    monkeypatch.setattr("kolm_search.retrievers.postings._PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr("kolm_search.retrievers.postings._MIN_CHUNK", 100)
    two = BM25Retriever(frame, n_jobs=2)
    assert len(pools) == 1 and pools[0]["max_workers"] == 2  # the pool did the work
    assert one.vocab == two.vocab
    for name in ("t_ptr", "t_docs", "t_w", "nonocc", "doc_len"):
        a, b = getattr(one, name), getattr(two, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    queries = cranfield["queries"]["query"].tolist()[:50]
    for x, y in zip(one.score_texts(queries, 20), two.score_texts(queries, 20), strict=True):
        assert np.array_equal(x, y)
    assert_oracle(Postings.from_texts(texts, ENGLISH, n_jobs=2, chunk=333), [ENGLISH(t) for t in texts])


def test_language_tokenizers_in_workers() -> None:
    rng = np.random.default_rng(7)
    german = ["Die", "schönen", "Häuser", "der", "Straße", "sind", "größer", "als", "die", "Gärten", "und",
              "Bäume", "laufen", "läuft", "gelaufen", "Fußball", "ÜBER", "über"]
    cjk = ["東京タワーに行く", "中文信息检索", "한국어 검색", "ｶﾀｶﾅ", "日本語の文章です"]
    texts = [" ".join(rng.choice(german, int(rng.integers(0, 12)))) + " " + str(rng.choice(cjk))
             for _ in range(60)]
    for tok in (GERMAN, Tokenizer(language="ja")):
        assert_oracle(Postings.from_texts(texts, tok, n_jobs=2, chunk=9), [tok(t) for t in texts])
    frame = pd.DataFrame({"id": [str(i) for i in range(len(texts))], "content": texts})
    a = BM25Retriever(frame, tokenizer=GERMAN, fields=("content",), n_jobs=1)
    b = BM25Retriever(frame, tokenizer=GERMAN, fields=("content",),
                      postings=Postings.from_texts(texts, GERMAN, n_jobs=2, chunk=7))
    assert a.vocab == b.vocab and np.array_equal(a.t_w, b.t_w)
    for x, y in zip(a.score_texts(["Häuser Straße", "東京"], 10), b.score_texts(["Häuser Straße", "東京"], 10),
                    strict=True):
        assert np.array_equal(x, y)


# -- failures ------------------------------------------------------------------------------
class Crashing:
    """A tokenizer whose worker process dies on the text "CRASH"."""

    def __call__(self, text: str) -> list[str]:
        if text == "CRASH" and multiprocessing.parent_process() is not None:
            os._exit(3)
        return text.split()


class Hanging:
    def __call__(self, text: str) -> list[str]:
        if text == "HANG" and multiprocessing.parent_process() is not None:
            time.sleep(120)
        return text.split()


class Unsendable(str):
    def __reduce__(self) -> Any:
        raise TypeError("this token cannot travel")


class UnsendableTokens:
    """Tokens that cannot be pickled back from a worker process."""

    def __call__(self, text: str) -> list[str]:
        return [Unsendable(w) for w in text.split()]


class NotInWorkers(Tokenizer):
    """Rebuilds here, but not in a worker process."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        if multiprocessing.parent_process() is not None:
            raise RuntimeError("no stemmer here")
        super().__setstate__(state)


class NoConfig(Tokenizer):
    def __setstate__(self, state: dict[str, Any]) -> None:
        raise RuntimeError("config cannot be rebuilt")


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_bad_document_names_its_row(n_jobs: int) -> None:
    texts: list[Any] = ["flow wing"] * 10
    texts[7] = 3.5
    with pytest.raises(KolmValueError, match="document row 7: .*expects str, got float"):
        Postings.from_texts(texts, ENGLISH, n_jobs=n_jobs, chunk=3)
    texts[7] = None
    with pytest.raises(KolmValueError, match="document row 7: .*AttributeError"):
        Postings.from_texts(texts, lambda t: t.split(), n_jobs=1, chunk=3)


def test_tokenizer_that_cannot_travel() -> None:
    texts = ["flow wing"] * 6
    with pytest.raises(KolmTypeError, match="cannot be sent to worker processes.*config cannot be rebuilt"):
        Postings.from_texts(texts, NoConfig(), n_jobs=2, chunk=2)
    with pytest.raises(KolmTypeError, match="cannot be sent"):
        Postings.from_texts(texts, lambda t: t.split(), n_jobs=2, chunk=2)  # a lambda does not pickle
    with pytest.raises(KolmError, match="could not rebuild the tokenizer.*no stemmer here"):
        Postings.from_texts(texts, NotInWorkers(), n_jobs=2, chunk=2)
    assert Postings.from_texts(texts, NoConfig(), n_jobs=1).vocab == ["flow", "wing"]  # no pool: no pickle
    with pytest.raises(KolmError, match="rows 0-1 in a worker process failed .*this token cannot travel.*n_jobs=1"):
        Postings.from_texts(texts, UnsendableTokens(), n_jobs=2, chunk=2)
    assert Postings.from_texts(texts, UnsendableTokens(), n_jobs=1).vocab == ["flow", "wing"]


def test_dead_or_hung_worker_raises_and_is_stopped() -> None:
    texts = ["a b"] * 8 + ["CRASH"] + ["c"] * 3
    with pytest.raises(KolmError, match=r"worker process died before document rows \d+-11 were all counted .*n_jobs=1"):
        Postings.from_texts(texts, Crashing(), n_jobs=2, chunk=2)
    texts[8] = "HANG"
    t0 = time.monotonic()
    with pytest.raises(KolmError, match="rows 8-9 in a worker process took more than 3 s"):
        Postings.from_texts(texts, Hanging(), n_jobs=2, chunk=2, chunk_timeout=3)
    assert time.monotonic() - t0 < 60
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not multiprocessing.active_children()  # the hung worker was ended


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_arguments(bad: Any) -> None:
    with pytest.raises(KolmValueError, match="n_jobs must be a positive integer"):
        Postings.from_texts(["a b"], ENGLISH, n_jobs=bad)
    with pytest.raises(KolmValueError, match="n_jobs must be a positive integer"):
        BM25Retriever(pd.DataFrame({"id": ["1"], "content": ["flow"]}), n_jobs=bad)
    with pytest.raises(KolmValueError, match="chunk must be a positive integer"):
        Postings.from_texts(["a b"], ENGLISH, chunk=bad)
    with pytest.raises(KolmValueError, match="chunk_timeout"):
        Postings.from_texts(["a b"], ENGLISH, chunk_timeout=-abs(bad) if isinstance(bad, float) else bad)


def test_default_n_jobs_uses_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _parallel.resolve_n_jobs(None) == len(os.sched_getaffinity(0))
    assert _parallel.resolve_n_jobs(np.int64(3)) == 3
    monkeypatch.setattr(multiprocessing.current_process(), "daemon", True)
    assert _parallel.resolve_n_jobs(4) == 1  # a daemonic process cannot start workers
