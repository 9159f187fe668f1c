"""Block-max pruning over long postings, and the exhaustive kernel's stamp-free dense path.

The oracle is the exhaustive kernel (:func:`kolm_search._kernels.sparse.sparse_topk` on its
stamped paths) and its numpy twin (a dense score matrix): the pruned kernel (many blocks per
term, candidates looked up block by block or in frequent terms' bitmaps, products kept and
looked up again, queries given back)
and the plain dense path must return the same documents, scores and tie order, bit for bit, on
random corpora with filters, weights, repeated terms, offsets and every k from 1 to past the
document count. The bounds the kernels read equal their numpy twin's.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search._kernels import load
from kolm_search.engine.selection import Selection, Selections

BLOCK = load("blocks").BLOCK


def zipf_index(rng: np.random.Generator, n_docs: int, vocab: int, zero_weights: bool,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Postings of ``vocab`` terms whose document frequencies fall as a Zipf law from ``n_docs``
    (some near multiples of the block size, some empty), weights from few levels (ties) or random."""
    df = np.minimum(n_docs, (n_docs / np.arange(1, vocab + 1) ** rng.uniform(0.6, 1.4)).astype(np.int64))
    df[rng.random(vocab) < 0.1] = 0
    near = rng.random(vocab) < 0.2
    df[near] = np.clip((df[near] // BLOCK) * BLOCK + rng.integers(-1, 2, int(near.sum())), 0, n_docs)
    docs = [np.sort(rng.choice(n_docs, size=int(f), replace=False)) for f in df]
    levels = np.array([0.25, 0.5, 0.75, 1.0, 1.25, 3.0], np.float32)
    if zero_weights:
        levels = np.concatenate([levels, np.zeros(2, np.float32)])
    weights = []
    for f in df:
        idf = np.float32(np.log1p(n_docs / max(int(f), 1)))
        w = levels[rng.integers(0, len(levels), int(f))] if rng.random() < 0.6 else rng.random(int(f)).astype(np.float32)
        weights.append((w * idf).astype(np.float32))
    t_ptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    return t_ptr, np.concatenate(docs).astype(np.int32), np.concatenate(weights).astype(np.float32)


def queries(rng: np.random.Generator, n_q: int, vocab: int, weighted: bool, offsets: bool,
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    lengths = rng.integers(0, 11, n_q)  # up to 10 terms: more phase-2 terms than kept product rows
    q_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    q_terms = rng.choice(vocab, size=int(q_ptr[-1]), p=p / p.sum()).astype(np.int64)  # frequent ones repeat
    w = (rng.choice([0.0, 0.5, 1.0, 2.0, 0.3], q_ptr[-1]) if weighted else np.ones(q_ptr[-1])).astype(np.float32)
    off = (rng.choice([0.0, 0.5, 1.0], n_q) if offsets else np.zeros(n_q)).astype(np.float32)
    return q_ptr, q_terms, w, off


def selections(rng: np.random.Generator, n_q: int, n_docs: int, filtered: bool) -> Selections:
    if not filtered:
        return Selections.none(n_q)
    chosen = [Selection.of_mask(rng.random(n_docs) < rng.uniform(0.2, 0.9)),
              Selection(n_docs, rows=np.sort(rng.choice(n_docs, n_docs // 3, replace=False)))]
    return Selections.build(rng.integers(-1, len(chosen), n_q), chosen)


def assert_same(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (a, b)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 3000), zero_weights=st.booleans())
def test_posting_bounds_equal_their_twin(seed: int, n_docs: int, zero_weights: bool) -> None:
    rng = np.random.default_rng(seed)
    t_ptr, t_docs, t_w = zipf_index(rng, n_docs, int(rng.integers(1, 40)), zero_weights)
    blocks = load("blocks")
    for got, want in zip(blocks.posting_bounds(t_ptr, t_docs, t_w), blocks.posting_bounds_numpy(t_ptr, t_docs, t_w),
                         strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert len(blocks.posting_bounds(t_ptr, t_docs, t_w)[2]) == blocks.block_pointers(t_ptr)[-1]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 4000), k_frac=st.floats(0, 1.05),
       weighted=st.booleans(), offsets=st.booleans(), filtered=st.booleans(), zero_weights=st.booleans(),
       bail=st.sampled_from([np.inf, 0.25, 0.05]), lookup=st.sampled_from([0.0, 8.0, 1e12]),
       threads=st.sampled_from([1, 2]), dense=st.sampled_from([None, 0.0, 0.05, 0.3]),
       lookup_bits=st.sampled_from([0.0, 2.0, 1e12]))
def test_block_max_pruning_equals_the_exhaustive_kernel(seed: int, n_docs: int, k_frac: float, weighted: bool,
                                                        offsets: bool, filtered: bool, zero_weights: bool,
                                                        bail: float, lookup: float, threads: int, dense: float | None,
                                                        lookup_bits: float) -> None:
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(1, 60))
    t_ptr, t_docs, t_w = zipf_index(rng, n_docs, vocab, zero_weights)
    q_ptr, q_terms, w, off = queries(rng, 24, vocab, weighted, offsets)
    sel = selections(rng, 24, n_docs, filtered)
    k = max(1, round(k_frac * n_docs) + int(rng.integers(0, 2)))  # 1 .. past the document count
    t_min, t_max, b_max, b_last = load("blocks").posting_bounds(t_ptr, t_docs, t_w)
    sparse = load("sparse")
    want = sparse.sparse_topk(q_ptr, q_terms, w, t_ptr, t_docs, t_w, off, *sel.arrays(), n_docs, k, n_threads=1)
    bitmaps = None
    if dense is not None:  # the terms held by at least this share of the documents looked up in bitmaps
        terms = np.flatnonzero(np.diff(t_ptr) >= dense * n_docs)
        slot = np.full(vocab, -1, np.int64)
        rows = rng.permutation(len(terms))  # rows in any order
        slot[terms] = rows
        bits, rank = load("bitmaps").term_bitmaps(t_ptr, t_docs, terms[np.argsort(rows)], n_docs)
        bitmaps = (slot, bits, rank)
    got = load("pruned").pruned_topk(q_ptr, q_terms, w, t_ptr, t_docs, t_w, t_max, b_max, b_last, off, *sel.arrays(),
                                     n_docs, k, n_threads=threads, bail=bail, lookup=lookup, t_min=t_min,
                                     bitmaps=bitmaps, lookup_bits=lookup_bits)
    assert_same(got, want)
    twin = sparse.sparse_topk_numpy(q_ptr, q_terms, w, t_ptr, t_docs, t_w, off, *sel.arrays(), n_docs, k)
    assert_same(got, twin)


def given_back(pruned: ModuleType, monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]) -> int:
    """How many queries ``run()`` sends on to the exhaustive kernel (``pruned``'s calls of it counted)."""
    seen = [0]
    exhaustive = pruned.sparse_topk

    def counting(q_ptr: np.ndarray, *args: object, **kwargs: object) -> tuple[np.ndarray, ...]:
        seen[0] += len(q_ptr) - 1
        return exhaustive(q_ptr, *args, **kwargs)

    monkeypatch.setattr(pruned, "sparse_topk", counting)
    run()
    monkeypatch.undo()
    return seen[0]


def test_a_query_whose_lookups_would_cost_more_than_its_postings_is_given_back(monkeypatch: pytest.MonkeyPatch,
                                                                                ) -> None:
    """``lookup``: phase 2 would look up (candidates x remaining terms) times ``lookup`` more than
    the query's postings: the exhaustive kernel scores it. 0 gives none back; a huge factor gives
    back every query left with candidates and terms after phase 1; the results never change."""
    rng = np.random.default_rng(7)
    n_docs = 3000
    t_ptr, t_docs, t_w = zipf_index(rng, n_docs, 40, False)
    q_ptr, q_terms, w, off = queries(rng, 60, 40, False, False)
    t_min, t_max, b_max, b_last = load("blocks").posting_bounds(t_ptr, t_docs, t_w)
    pruned = load("pruned")
    want = load("sparse").sparse_topk_numpy(q_ptr, q_terms, w, t_ptr, t_docs, t_w, off,
                                            *Selections.none(60).arrays(), n_docs, 10)
    back: dict[float, int] = {}
    got: dict[float, tuple[np.ndarray, ...]] = {}
    for lookup in (0.0, pruned.LOOKUP, 1e12):
        def run(lookup: float = lookup) -> None:
            got[lookup] = pruned.pruned_topk(q_ptr, q_terms, w, t_ptr, t_docs, t_w, t_max, b_max, b_last, off,
                                             *Selections.none(60).arrays(), n_docs, 10, bail=np.inf, lookup=lookup,
                                             t_min=t_min, prune=np.diff(q_ptr) > 0)

        back[lookup] = given_back(pruned, monkeypatch, run)
        assert_same(got[lookup], want)
    assert back[0.0] == int((np.diff(q_ptr) == 0).sum())  # only the empty queries, never pruned
    assert back[0.0] <= back[pruned.LOOKUP] <= back[1e12]
    assert back[1e12] > back[0.0] + 10


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 5000), k_frac=st.floats(0, 1.05),
       weighted=st.booleans(), offsets=st.booleans(), filtered=st.booleans(), zero_weights=st.booleans(),
       dense_ratio=st.sampled_from([16, 10**9]))
def test_plain_dense_path_equals_the_stamped_one(seed: int, n_docs: int, k_frac: float, weighted: bool, offsets: bool,
                                                  filtered: bool, zero_weights: bool, dense_ratio: int) -> None:
    """``t_min`` lets queries whose every product is > 0 skip the stamps; queries with a zero
    weight, a term holding a zero weight, or a selection keep them. Same results either way."""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(1, 60))
    t_ptr, t_docs, t_w = zipf_index(rng, n_docs, vocab, zero_weights)
    q_ptr, q_terms, w, off = queries(rng, 24, vocab, weighted, offsets)
    sel = selections(rng, 24, n_docs, filtered)
    k = max(1, round(k_frac * n_docs) + int(rng.integers(0, 2)))
    t_min = load("blocks").posting_bounds(t_ptr, t_docs, t_w)[0]
    sparse = load("sparse")
    args = (q_ptr, q_terms, w, t_ptr, t_docs, t_w, off, *sel.arrays(), n_docs, k)
    got = sparse.sparse_topk(*args, n_threads=2, dense_ratio=dense_ratio, t_min=t_min)
    assert_same(got, sparse.sparse_topk(*args, n_threads=1, dense_ratio=dense_ratio))
    assert_same(got, sparse.sparse_topk_numpy(*args))


def test_plain_path_is_taken_only_when_every_product_is_positive() -> None:
    """A term whose postings hold a weight 0 marks a document it touches with a sum of 0: the
    stamped path must keep it (the document is a result, score = offset); so must the plain one's
    caller, by not taking it."""
    t_ptr = np.array([0, 3, 4], np.int64)
    t_docs = np.array([0, 1, 2, 1], np.int32)
    t_w = np.array([0.0, 0.5, 0.0, 0.25], np.float32)  # term 0 holds zeros
    t_min = load("blocks").posting_bounds(t_ptr, t_docs, t_w)[0]
    assert t_min.tolist() == [0.0, 0.25]
    sparse = load("sparse")
    for terms in ([0], [0, 1], [1]):
        q = (np.array([0, len(terms)], np.int64), np.array(terms, np.int64), np.ones(len(terms), np.float32))
        args = (*q, t_ptr, t_docs, t_w, np.zeros(1, np.float32), *Selections.none(1).arrays(), 3, 3)
        got = sparse.sparse_topk(*args, dense_ratio=10**9, t_min=t_min)
        assert_same(got, sparse.sparse_topk_numpy(*args))
        assert got[2][0] == len(set(t_docs[np.concatenate([np.arange(t_ptr[t], t_ptr[t + 1]) for t in terms])]))
