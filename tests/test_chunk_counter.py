"""Counting a streamed corpus's chunks on one pool kept for the build (ChunkCounter), with texts as
Arrow arrays: the words Arrow splits equal the tokenizer's, the joined fields equal
``joined_texts``, and the chunks' counts equal the oracle's for any cut, tokenizer and n_jobs."""

from __future__ import annotations

import itertools
import multiprocessing
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search.engine.doc_fields import joined_array, joined_texts
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmError
from kolm_search.retrievers import chunk_counter
from kolm_search.retrievers._encode import encode_array, encode_texts
from kolm_search.retrievers.chunk_counter import ChunkCounter
from kolm_search.retrievers.postings import Postings
from kolm_search.retrievers.spill import SpilledPostings
from tests.test_parallel_index import assert_oracle

ALPHABET = st.sampled_from([*"abcXYZ09_ -.,!'\t\n", "é", "東京", "İ", "\u0301", "ß", "Ａ", "ﬁ", "١", "ऄि"])
TEXT = st.lists(ALPHABET, max_size=30).map("".join)
TOKENIZERS = [Tokenizer(), Tokenizer(lowercase=False), Tokenizer(pattern=r"\w+"), Tokenizer(language="fr"),
              Tokenizer(stopwords=["of the", "a"], stemmer=None), Tokenizer(language="ja")]


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXT, max_size=8), k=st.integers(0, len(TOKENIZERS) - 1), large=st.booleans(), cut=st.integers(0, 3))
def test_words_array_equals_words_text_by_text(texts: list[str], k: int, large: bool, cut: int) -> None:
    tok = TOKENIZERS[k]
    arr = pa.array(["x"] * cut + texts, pa.large_string() if large else pa.string())[cut:]  # a slice, too
    words, counts = tok.words_array(arr)
    want = [tok.drop_phrases(tok.words(t)) for t in texts]
    assert counts.dtype == np.int64 and counts.tolist() == [len(w) for w in want]
    assert words.to_pylist() == [w for ws in want for w in ws]


@settings(max_examples=100, deadline=None)
@given(columns=st.lists(st.lists(st.one_of(st.none(), st.sampled_from(["", "a", "b c", "é"])), min_size=5, max_size=5),
                        max_size=3))
def test_joined_array_equals_joined_texts(columns: list[list[str | None]]) -> None:
    arrays = [pa.array(c, pa.string()) for c in columns]
    assert joined_array(arrays, 5).to_pylist() == joined_texts(columns, 5)


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(st.lists(TEXT, max_size=6), max_size=4), k=st.integers(0, len(TOKENIZERS) - 1))
def test_encode_array_equals_encode_texts(chunks: list[list[str]], k: int) -> None:
    """Chunk after chunk with the same maps: the same ids and the same vocabulary order."""
    tok = TOKENIZERS[k]
    vocab_a: dict[str, int] = {}
    words_a: dict[str, int] = {}
    vocab_b: dict[str, int] = {}
    words_b: dict[str, int] = {}
    start = 0
    for texts in chunks:
        ids, lens = encode_array(tok, pa.array(texts, pa.string()), start, vocab_a, words_a)
        want_ids, want_lens = encode_texts(tok, texts, start, vocab_b, words_b)
        assert ids.dtype == np.int32 and ids.tolist() == want_ids
        assert lens.tolist() == want_lens
        start += len(texts)
    assert list(vocab_a) == list(vocab_b)


def _counted(texts: list[str], cuts: list[int], tok: Any, n_jobs: int, monkeypatch: pytest.MonkeyPatch,
             tmp_path: Any) -> Postings:
    """The texts cut into chunks, counted by a ChunkCounter (two chunks in flight) and spilled."""
    monkeypatch.setattr(chunk_counter, "_PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr(chunk_counter, "_MIN_TASK", 2)
    spill = SpilledPostings(tmp_path)
    bounds = sorted({0, len(texts), *(c % (len(texts) + 1) for c in cuts)})
    with ChunkCounter(tok, n_jobs) as counter:
        pending = None
        for lo, hi in itertools.pairwise(bounds):
            submitted = counter.submit(pa.array(texts[lo:hi], pa.large_string()), lo)
            if pending is not None:
                c = counter.collect(pending)
                spill.add_counted(c.new_terms, Postings([], c.t_ptr, c.p_doc, c.tf, c.lengths))
            pending = submitted
        if pending is not None:
            c = counter.collect(pending)
            spill.add_counted(c.new_terms, Postings([], c.t_ptr, c.p_doc, c.tf, c.lengths))
    blocks = list(spill.blocks(7))
    t_ptr = spill.t_ptr()
    p_doc = np.concatenate([b.p_doc for b in blocks]) if blocks else np.zeros(0, np.int32)
    tf = np.concatenate([b.tf for b in blocks]) if blocks else np.zeros(0, np.int32)
    lengths = np.concatenate(spill.lengths) if spill.lengths else np.zeros(0, np.int64)
    return Postings(list(spill.vocab), t_ptr, p_doc, tf, lengths)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXT, min_size=1, max_size=30), cuts=st.lists(st.integers(0, 30), max_size=4),
       k=st.integers(0, len(TOKENIZERS) - 1))
def test_chunks_counted_in_this_process_equal_the_oracle(texts: list[str], cuts: list[int], k: int,
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path_factory: Any) -> None:
    tok = TOKENIZERS[k]
    got = _counted(texts, cuts, tok, 1, monkeypatch, tmp_path_factory.mktemp("spill"))
    assert_oracle(got, [tok(t) for t in texts])


class Lower:
    """Not a Tokenizer: called text by text, in the workers too."""

    def __call__(self, text: str) -> list[str]:
        return text.lower().split()


@pytest.mark.parametrize("tok", [Tokenizer(), Tokenizer(language="de"), Lower()], ids=["english", "german", "callable"])
def test_chunks_counted_by_a_pool_equal_the_oracle(tok: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    rng = np.random.default_rng(3)
    words = ["Apple", "pears", "the", "Häuser", "Straße", "東京タワー", "of", "running", "ran", "x_1", "A", "ﬁsh"]
    texts = [" ".join(rng.choice(words, int(rng.integers(0, 9)))) for _ in range(120)]
    got = _counted(texts, [7, 8, 50, 90], tok, 2, monkeypatch, tmp_path)
    assert_oracle(got, [tok(t) for t in texts])


def test_a_dead_worker_stops_the_build_and_the_pool(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from tests.test_parallel_index import Crashing

    monkeypatch.setattr(chunk_counter, "_PARALLEL_MIN_CHARS", 0)
    monkeypatch.setattr(chunk_counter, "_MIN_TASK", 2)
    texts = ["a b"] * 8 + ["CRASH"] + ["c"] * 3
    with pytest.raises(KolmError, match=r"worker process died before document rows \d+-11 were all counted"), \
            ChunkCounter(Crashing(), 2) as counter:
        first = counter.submit(pa.array(texts[:6]), 0)
        second = counter.submit(pa.array(texts[6:]), 6)
        counter.collect(first)
        counter.collect(second)
    assert not multiprocessing.active_children()
