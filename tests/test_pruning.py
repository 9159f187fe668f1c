"""Exact dynamic pruning (block-max MaxScore): the pruned kernel returns the exhaustive kernel's
top-k bit for bit (scores, order, ties) on random postings with heavy ties, filters, weights,
offsets and every k; the numpy twin (a dense score matrix) is the oracle of both."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kolm_search._kernels import load
from kolm_search.engine.selection import Selection, Selections


def random_index(rng: np.random.Generator, n_docs: int, vocab: int, max_df: int,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    docs, weights, ptr = [], [], [0]
    levels = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 3.0], np.float32)  # few values: heavy ties
    for _ in range(vocab):
        d = np.sort(rng.choice(n_docs, size=int(rng.integers(0, min(max_df, n_docs) + 1)), replace=False))
        docs.append(d)
        w = levels[rng.integers(0, len(levels), d.size)] if rng.random() < 0.7 else rng.random(d.size) * 2
        weights.append(w.astype(np.float32))
        ptr.append(ptr[-1] + d.size)
    return np.array(ptr, np.int64), np.concatenate(docs).astype(np.int32), np.concatenate(weights).astype(np.float32)


def random_queries(rng: np.random.Generator, n_q: int, vocab: int, max_len: int, weighted: bool, offsets: str,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    q_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, max_len + 1, n_q))]).astype(np.int64)
    q_terms = rng.integers(0, vocab, q_ptr[-1]).astype(np.int64)  # repeats happen: they count twice
    if weighted:
        w = rng.choice([0.0, 0.5, 1.0, 2.0, 0.3], q_ptr[-1]).astype(np.float32)
    else:
        w = np.ones(q_ptr[-1], np.float32)
    if offsets == "none":
        off = np.zeros(n_q, np.float32)
    elif offsets == "ties":
        off = rng.choice([0.0, 0.5, 1.0], n_q).astype(np.float32)
    else:
        off = (rng.random(n_q) * 3).astype(np.float32)
    return q_ptr, q_terms, w, off


def random_selections(rng: np.random.Generator, n_q: int, n_docs: int, kind: str) -> Selections:
    if kind == "none":
        return Selections.none(n_q)
    chosen = [Selection.of_mask(rng.random(n_docs) < rng.random()) for _ in range(2)]
    chosen += [Selection(n_docs, rows=np.sort(rng.choice(n_docs, int(rng.integers(0, n_docs // 4 + 1)), replace=False)))
               for _ in range(3)]
    return Selections.build(rng.integers(-1, len(chosen), n_q), chosen)


def run_both(t_ptr: np.ndarray, t_docs: np.ndarray, t_w: np.ndarray, q: tuple[np.ndarray, ...], sel: Selections,
             n_docs: int, k: int, scan: int = 16, threads: int = 1,
             ) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
    q_ptr, q_terms, w, off = q
    t_min, t_max, b_max, b_last = load("blocks").posting_bounds(t_ptr, t_docs, t_w)
    pruned = load("pruned").pruned_topk(q_ptr, q_terms, w, t_ptr, t_docs, t_w, t_max, b_max, b_last, off,
                                        *sel.arrays(), n_docs, k, n_threads=threads, scan=scan, bail=np.inf,
                                        lookup=0.0)
    exhaustive = load("sparse").sparse_topk(q_ptr, q_terms, w, t_ptr, t_docs, t_w, off, *sel.arrays(), n_docs, k,
                                            n_threads=threads)
    return pruned, exhaustive


def assert_same(pruned: tuple[np.ndarray, ...], exhaustive: tuple[np.ndarray, ...]) -> None:
    for a, b in zip(pruned, exhaustive, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n_docs=st.integers(1, 80), vocab=st.integers(1, 12),
       k_frac=st.floats(0, 1), scan=st.sampled_from([0, 4, 10**9]), weighted=st.booleans(),
       offsets=st.sampled_from(["none", "ties", "random"]), filters=st.sampled_from(["none", "some"]))
def test_pruned_equals_exhaustive(seed: int, n_docs: int, vocab: int, k_frac: float, scan: int, weighted: bool,
                                  offsets: str, filters: str) -> None:
    rng = np.random.default_rng(seed)
    t_ptr, t_docs, t_w = random_index(rng, n_docs, vocab, max_df=int(rng.integers(1, n_docs + 1)))
    q = random_queries(rng, 20, vocab, 6, weighted, offsets)
    sel = random_selections(rng, 20, n_docs, filters)
    k = 1 + round(k_frac * n_docs)  # 1 .. n_docs + 1
    pruned, exhaustive = run_both(t_ptr, t_docs, t_w, q, sel, n_docs, k, scan)  # scan always, sometimes, never
    assert_same(pruned, exhaustive)
    want = load("sparse").sparse_topk_numpy(q[0], q[1], q[2], t_ptr, t_docs, t_w, q[3], *sel.arrays(), n_docs, k)
    np.testing.assert_array_equal(pruned[2], want[2])
    np.testing.assert_array_equal(pruned[0], want[0])
    np.testing.assert_allclose(pruned[1], want[1], rtol=1e-6)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_pruned_equals_exhaustive_on_long_postings(k: int) -> None:
    """Zipf postings long enough that phase 2 gallops and scans, two threads."""
    rng = np.random.default_rng(k)
    n_docs, vocab = 5000, 300
    df = np.minimum(n_docs, (n_docs / np.arange(1, vocab + 1) ** 0.9).astype(int))
    docs = [np.sort(rng.choice(n_docs, size=int(f), replace=False)) for f in df]
    t_ptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    t_docs = np.concatenate(docs).astype(np.int32)
    idf = np.repeat(np.log1p(n_docs / df), df)
    t_w = (idf * rng.choice([0.4, 0.6, 0.8], t_docs.size)).astype(np.float32)  # ties within each term
    q = random_queries(rng, 64, vocab, 8, weighted=False, offsets="random")
    sel = random_selections(rng, 64, n_docs, "some")
    for s in (Selections.none(64), sel):
        pruned, exhaustive = run_both(t_ptr, t_docs, t_w, q, s, n_docs, k, threads=2)
        assert_same(pruned, exhaustive)


def test_queries_the_pruned_kernel_leaves_to_the_exhaustive_one() -> None:
    """Negative weights, a non-finite offset and few selected rows go to the exhaustive kernel."""
    rng = np.random.default_rng(3)
    n_docs = 400
    t_ptr, t_docs, t_w = random_index(rng, n_docs, 6, 400)
    assert np.diff(t_ptr)[[4, 5]].sum() > 2 * 2 * 16  # query 2 is scored row by row
    q_ptr = np.array([0, 2, 4, 6, 8], np.int64)
    q_terms = np.array([0, 1, 2, 3, 4, 5, 0, 2], np.int64)
    w = np.array([1, -1, 1, 1, 1, 1, 1, 1], np.float32)
    off = np.array([0, np.inf, 0, 0], np.float32)
    sel = Selections.build([-1, -1, 0, -1], [Selection(n_docs, rows=np.array([3, 9]))])
    ok = load("pruned").prunable(q_ptr, q_terms, w, t_ptr, off, *sel.arrays()[:2], sel.arrays()[3], 5)
    assert ok.tolist() == [False, False, False, True]
    with np.errstate(invalid="ignore"):
        pruned, exhaustive = run_both(t_ptr, t_docs, t_w, (q_ptr, q_terms, w, off), sel, n_docs, 5)
    assert_same(pruned, exhaustive)


def test_float32_rounding_is_inside_the_bounds() -> None:
    """Document 0's float32 sum rounds up to document 1's score (exact sums differ by half an
    ulp): the exhaustive kernel ranks 0 first (equal scores, lower code); so must pruning, whose
    bounds are exact sums and must allow for the rounding."""
    x1, x2 = np.float32(0.5 + 3 * 2.0**-24), np.float32(0.5)
    y = np.float32(1 + 2.0**-22)
    assert x1 + x2 == y and float(x1) + float(x2) < float(y)  # rounds up, to a tie
    t_ptr = np.array([0, 1, 2, 3], np.int64)
    t_docs = np.array([1, 0, 0], np.int32)
    t_w = np.array([y, x1, x2], np.float32)
    for terms in ([0, 1, 2], [1, 2, 0]):
        q = (np.array([0, 3], np.int64), np.array(terms, np.int64), np.ones(3, np.float32), np.zeros(1, np.float32))
        pruned, exhaustive = run_both(t_ptr, t_docs, t_w, q, Selections.none(1), 2, 1)
        assert exhaustive[0][0, 0] == 0
        assert_same(pruned, exhaustive)
