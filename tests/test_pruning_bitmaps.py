"""Document bitmaps of frequent terms (:mod:`kolm_search._kernels.bitmaps`) and their cache
(:mod:`kolm_search.retrievers.bitmaps`).

Oracles: the kernel's numpy twin (``np.packbits`` and ``np.searchsorted``), a search of the
postings for each document's place, and the exhaustive kernel for a retriever whose bitmaps are
built, kept, started again and rebuilt after a merge. The pruned kernel over bitmaps is checked
against the exhaustive one in ``tests/test_pruning_blocks.py``.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever
from kolm_search._kernels import load
from kolm_search.retrievers import bitmaps
from kolm_search.retrievers.bitmaps import TermBitmaps
from tests.test_pruning_blocks import zipf_index


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 3000), threads=st.sampled_from([1, 2]))
def test_term_bitmaps_equal_their_twin_and_place_every_document(seed: int, n_docs: int, threads: int) -> None:
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(1, 30))
    t_ptr, t_docs, _ = zipf_index(rng, n_docs, vocab, False)
    terms = rng.permutation(vocab)[:int(rng.integers(0, vocab + 1))].astype(np.int64)
    bm = load("bitmaps")
    bits, rank = bm.term_bitmaps(t_ptr, t_docs, terms, n_docs, n_threads=threads)
    want_bits, want_rank = bm.term_bitmaps_numpy(t_ptr, t_docs, terms, n_docs)
    assert bits.dtype == np.uint64 and rank.dtype == np.int32 and bits.shape == (len(terms), (n_docs + 63) // 64)
    assert bits.tobytes() == want_bits.tobytes() and rank.tobytes() == want_rank.tobytes()
    for r, t in enumerate(terms):
        docs = t_docs[t_ptr[t]:t_ptr[t + 1]]
        for d in rng.integers(0, n_docs, 20):
            word = int(bits[r, d >> 6])
            place = int(rank[r, d >> 6]) + bin(word & ((1 << int(d & 63)) - 1)).count("1")
            assert place == np.searchsorted(docs, d)  # the first posting >= d
            assert bool(word >> int(d & 63) & 1) == (place < len(docs) and docs[place] == d)


def test_the_cache_keeps_rows_starts_again_when_full_and_never_moves_a_published_row(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    n_docs = 5000
    t_ptr, t_docs, _ = zipf_index(rng, n_docs, 40, False)
    df = np.diff(t_ptr)
    frequent = np.flatnonzero(df >= n_docs / 64)
    assert len(frequent) >= 6
    words = (n_docs + 63) // 64
    cache = TermBitmaps(t_ptr, t_docs, n_docs, max_bytes=4 * words * 12, min_docs=0)  # 4 rows
    assert TermBitmaps(t_ptr, t_docs, n_docs).for_terms(frequent) is None  # too few documents for the default
    want_bits, want_rank = load("bitmaps").term_bitmaps_numpy(t_ptr, t_docs, np.arange(40), n_docs)
    bm = load("bitmaps")
    build = bm.term_bitmaps
    built: list[int] = []

    def counting(t_ptr: np.ndarray, t_docs: np.ndarray, terms: np.ndarray, *args: object, **kw: object) -> object:
        built.extend(terms.tolist())
        return build(t_ptr, t_docs, terms, *args, **kw)

    monkeypatch.setattr(bm, "term_bitmaps", counting)
    rare = np.flatnonzero((df > 0) & (df < n_docs / 64))
    assert cache.for_terms(rare) is None

    def check(got: tuple[np.ndarray, ...] | None, terms: np.ndarray) -> None:
        assert got is not None
        slot, bits, rank = got
        held = np.flatnonzero(slot >= 0)
        assert set(held) <= set(terms) and len(held) == min(4, len(set(terms) & set(frequent)))
        assert df[held].min() >= df[np.setdiff1d(np.intersect1d(terms, frequent), held)].max(initial=0)  # most frequent
        for t in held:
            assert bits[slot[t]].tobytes() == want_bits[t].tobytes() and rank[slot[t]].tobytes() == want_rank[t].tobytes()

    first = cache.for_terms(frequent[:2])
    check(first, frequent[:2])
    again = cache.for_terms(np.concatenate([frequent[:3], frequent[:1]]))
    check(again, frequent[:3])
    assert sorted(built) == sorted(frequent[:3].tolist()) and cache.nbytes <= 4 * words * 12  # kept, not rebuilt
    later = cache.for_terms(frequent[3:6])  # 3 + 3 > 4 rows: starts again
    check(later, frequent[3:6])
    check(first, frequent[:2])  # the first call's arrays are untouched
    check(cache.for_terms(frequent), frequent)  # more than fit: the 4 most frequent


def test_threads_share_a_cache_and_score_as_the_exhaustive_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bitmaps, "MIN_DOCS", 0)  # bitmaps for a small index too
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(60)]
    p = 1.0 / np.arange(1, 61) ** 0.9
    texts = [" ".join(rng.choice(words, size=int(rng.integers(3, 25)), p=p / p.sum())) for _ in range(3000)]
    r = BM25Retriever(pd.DataFrame({"id": [str(i) for i in range(3000)], "content": texts}), n_threads=1,
                      tokenizer=None)
    queries = [" ".join(rng.choice(words, size=int(rng.integers(2, 7)), p=p / p.sum())) for _ in range(200)]
    want = r.score_texts(queries, 10, pruning="none")
    outs: list[tuple[np.ndarray, ...]] = []

    def run() -> None:
        outs.append(r.score_texts(queries, 10, pruning="auto"))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outs) == 4 and r._bitmaps is not None and r._bitmaps.nbytes > 0
    for got in outs:
        for a, b in zip(got, want, strict=True):
            assert a.tobytes() == b.tobytes()
    r.add(pd.DataFrame({"id": ["new"], "content": [queries[0]]}))
    want = r.score_texts(queries, 10, pruning="none")
    got = r.score_texts(queries, 10, pruning="auto")  # the merged postings get their own bitmaps
    assert r._bitmaps.matches(r.t_ptr, r.t_docs, len(r.table))
    for a, b in zip(got, want, strict=True):
        assert a.tobytes() == b.tobytes()
