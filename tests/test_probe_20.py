"""Probe 20 (parallel index build, threaded weighting, DocumentTable.coerce/texts, top-k ``k``).

Regressions found by probing: a Tokenizer subclass lost its own attributes on the way to the
worker processes (pickled as the base configuration only: silently other tokens), and a
tokenizer returning an iterator (a generator function) lost the tokens read before the first
new one. Plus properties of the claims: pool builds equal a plain-Python oracle for any
n_jobs/chunk and tokenizer, weights do not depend on how postings are split over threads,
``texts`` equals the plain join.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmTypeError, KolmValueError, Tokenizer
from kolm_search._kernels import run_chunks
from kolm_search.engine.doctable import DocumentTable
from kolm_search.retrievers.bm25_weights import idf, weigh_slice
from kolm_search.retrievers.postings import CollectionStats, Postings
from tests.test_parallel_index import assert_oracle, text_st


@dataclass
class SuffixTokenizer(Tokenizer):
    """A dataclass subclass with a field of its own."""

    suffix: str = "_default"

    def __call__(self, text: str) -> list[str]:
        return [t + self.suffix for t in super().__call__(text)]


class TaggedTokenizer(Tokenizer):
    """A subclass whose own __init__ takes other parameters and sets an attribute."""

    def __init__(self, tag: str) -> None:
        super().__init__(language="german")
        self.tag = tag

    def __call__(self, text: str) -> list[str]:
        return [f"{self.tag}:{t}" for t in super().__call__(text)]


def split_lazily(text: str) -> Iterator[str]:
    """A picklable tokenizer returning a generator."""
    yield from text.lower().split()


def lengths_of_words(text: str) -> list[int]:
    """A picklable tokenizer whose tokens are not strings (refused since issue 25: a saved
    vocabulary holds strings)."""
    return [len(w) for w in text.split()]


TOKENIZERS = [Tokenizer(), SuffixTokenizer(suffix="_s", stopwords=None), TaggedTokenizer("t"), split_lazily]


def oracle_tokens(tokenizer: Any, texts: list[str]) -> list[list[Any]]:
    return [list(tokenizer(t)) for t in texts]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(TOKENIZERS[:3]), st.lists(text_st, max_size=6))
def test_tokenizers_pickle_to_what_they_were(tok: Tokenizer, texts: list[str]) -> None:
    """What a worker process rebuilds tokenises like the original (subclass attributes kept)."""
    back = pickle.loads(pickle.dumps(tok))
    assert type(back) is type(tok)
    assert vars(back).keys() == vars(tok).keys()
    assert [back(t) for t in texts] == [tok(t) for t in texts]


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_subclass_and_generator_tokenizers_equal_the_oracle(n_jobs: int) -> None:
    texts = [f"The flows of wing {i} über Straße {i % 3} 東京タワー" for i in range(23)] + ["", "the and"]
    for tok in TOKENIZERS[1:]:
        got = Postings.from_texts(texts, tok, n_jobs=n_jobs, chunk=4)  # type: ignore[arg-type]
        assert_oracle(got, oracle_tokens(tok, texts))
        assert_oracle(Postings.from_tokens(tok(t) for t in texts), oracle_tokens(tok, texts))  # type: ignore[operator]


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_a_tokenizer_of_non_str_tokens_is_refused_naming_the_row(n_jobs: int) -> None:
    texts = ["", "", "wing flow", "heat"]
    with pytest.raises(KolmTypeError, match=r"^document row 2: token 0 is 4 of type int; a tokenizer must return a "
                                            "list of non-empty str"):
        Postings.from_texts(texts, lengths_of_words, n_jobs=n_jobs, chunk=2)


@settings(max_examples=6, deadline=None)
@given(st.lists(text_st, min_size=2, max_size=50), st.integers(1, 5), st.sampled_from([2, 3]),
       st.sampled_from(TOKENIZERS))
def test_pool_equals_the_oracle_for_any_tokenizer(texts: list[str], chunk: int, n_jobs: int, tok: Any) -> None:
    assert_oracle(Postings.from_texts(texts, tok, n_jobs=n_jobs, chunk=chunk), oracle_tokens(tok, texts))


METHODS = ["lucene", "robertson", "atire", "bm25l", "bm25+"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["cat", "dog", "bird", "fish", "東京"]), max_size=9), min_size=1, max_size=12),
       st.sampled_from(METHODS), st.floats(0.1, 3), st.floats(0, 1), st.integers(0, 4),
       st.lists(st.integers(0, 200), max_size=6))
def test_weights_do_not_depend_on_the_slices(token_lists: list[list[str]], method: str, k1: float, b: float,
                                             extra: int, cuts: list[int]) -> None:
    """weigh_slice over any split of the postings (as threads take them) equals one pass, also with
    external (shard) statistics."""
    table = DocumentTable.from_documents([{"id": str(i), "content": "x"} for i in range(len(token_lists))])
    postings = Postings.from_tokens(token_lists)
    s = postings.stats()
    stats = CollectionStats(df={t: c + extra for t, c in s.df.items()}, n_docs=s.n_docs + 2 * extra, avgdl=s.avgdl + extra)
    r = BM25Retriever(table, method=method, k1=k1, b=b)  # type: ignore[arg-type]
    r.index_postings(postings, stats=stats)
    nnz = postings.p_doc.shape[0]
    bounds = np.unique(np.clip([0, *cuts, nnz], 0, nnz))
    out = np.full(nnz, np.nan, np.float32)
    avgdl = float(stats.avgdl) or 1.0
    one = np.full(nnz, np.nan, np.float32)
    idf32 = _idf32(r, stats, postings)
    run_chunks(weigh_slice(r.method, r.k1, r.b, r.delta), np.array([0, nnz]), idf32, r.nonocc, postings.p_term, postings.p_doc, postings.tf,
               postings.lengths, avgdl, one)
    run_chunks(weigh_slice(r.method, r.k1, r.b, r.delta), bounds, idf32, r.nonocc, postings.p_term, postings.p_doc, postings.tf, postings.lengths,
               avgdl, out)
    assert one.tobytes() == r.t_w.tobytes()
    assert out.tobytes() == one.tobytes()


def _idf32(r: BM25Retriever, stats: CollectionStats, postings: Postings) -> np.ndarray:
    df = np.array([stats.df[t] for t in postings.vocab], np.float64)
    return idf(r.method, df, stats.n_docs).astype(np.float32)


def test_threaded_weights_are_bit_identical_on_a_large_index() -> None:
    """More than 2**20 postings: n_threads > 1 really splits them."""
    rng = np.random.default_rng(20)
    n_docs = 9_000
    lens = rng.integers(100, 160, n_docs)
    terms = rng.integers(0, 4_000, int(lens.sum())).astype(np.int32)
    vocab = [f"t{i}" for i in range(4_000)]
    postings = Postings.from_arrays(vocab, terms, lens)
    assert postings.p_doc.shape[0] > 1 << 20
    table = DocumentTable.from_documents([{"id": str(i), "content": "x"} for i in range(n_docs)])
    for method in ("lucene", "bm25+"):
        weights = []
        for n_threads in (1, 3):
            r = BM25Retriever(table, method=method, n_threads=n_threads)  # type: ignore[arg-type]
            r.index_postings(postings)
            weights.append(r.t_w.tobytes())
        assert weights[0] == weights[1]


class Shouting(str):
    def __str__(self) -> str:
        return "!" + str.__str__(self)


cell_st = st.one_of(st.none(), st.just(np.nan), st.text(max_size=4), st.integers(), st.binary(max_size=3),
                    st.text(max_size=4).map(Shouting), st.just(""))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=5), cell_st, cell_st), max_size=6),
       st.lists(st.sampled_from(["title", "content", "source", "tags"]), max_size=3),
       st.sampled_from([object, "string[pyarrow]", "category"]))
def test_texts_equal_the_plain_join(rows: list[tuple[str, Any, Any]], fields: list[str], dtype: Any) -> None:
    frame = pd.DataFrame({"id": [str(i) for i in range(len(rows))], "content": [r[0] for r in rows],
                          "title": [r[1] for r in rows], "source": [r[2] for r in rows]}, dtype=object)
    if dtype is not object:
        for col in ("content", "title"):
            if all(isinstance(v, str) or v is None for v in frame[col]):
                frame[col] = frame[col].astype(dtype)
    table = DocumentTable.from_frame(frame)
    cols = [table.frame[f].tolist() for f in fields]
    want = [" ".join(str(v) for v in vals if isinstance(v, str) and v) for vals in zip(*cols, strict=True)]
    assert table.texts(fields) == (want if fields else [""] * len(rows))


@pytest.mark.parametrize("bad", [None, 3, [["nested"]]])
def test_a_bad_token_list_names_its_document_row(bad: object) -> None:
    """``from_tokens`` (any chunk) and a callable tokenizer: the row of the bad token list, once."""
    lists: list[object] = [["wing"], ["flow", "wing"], ["heat"], bad, ["gas"]]
    message = r"^document row 3: (tokens must be an iterable of str|token 0 is \['nested'\] of type list; .*list of non-empty str)"
    for chunk in (1, 2, 4096):
        with pytest.raises(KolmTypeError, match=message):
            Postings.from_tokens(lists, chunk=chunk)  # type: ignore[arg-type]
    texts = ["wing", "flow wing", "heat", "BAD", "gas"]

    def tok(text: str) -> object:
        return bad if text == "BAD" else text.split()

    with pytest.raises(KolmTypeError, match=message):
        Postings.from_texts(texts, tok, n_jobs=1)  # type: ignore[arg-type]


def test_a_lazy_tokenizer_failing_midway_or_an_unhashable_token_after_a_new_term_names_the_row() -> None:
    def lazy(text: str) -> Iterator[str]:
        for w in text.split():
            if w == "BOOM":
                raise RuntimeError("broke while yielding")
            yield w

    with pytest.raises(KolmValueError, match=r"^document row 2: tokenising failed: RuntimeError: broke while yielding"):
        Postings.from_texts(["a b", "c", "d BOOM"], lazy, n_jobs=1)  # type: ignore[arg-type]
    with pytest.raises(KolmTypeError, match=r"^document row 1: token 1 is \['unhashable'\] of type list"):
        Postings.from_tokens([["a"], ["new", ["unhashable"]]])  # type: ignore[list-item]
