"""The shortcuts ``evaluate`` takes on runs as search engines write them agree with the general
paths: a run already in rank order within contiguous queries is ordered as the stable sort
orders it, and one Arrow string column coded by positions tells ids apart within groups exactly
as ``encode``'s codes do."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels import load
from kolm_search._kernels.ranking import descending_key_numpy, presorted_order_numpy, tie_runs_numpy
from kolm_search.engine import ids
from kolm_search.errors import KolmValueError
from kolm_search.evaluation.metrics import ranking_order


@pytest.mark.parametrize("seed", range(6))
def test_presorted_order_is_the_stable_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_q = int(rng.integers(1, 40))
    lengths = rng.integers(1, 30, n_q)
    query = np.repeat(rng.permutation(n_q), lengths).astype(np.int64)
    score = rng.integers(0, 5, len(query)).astype(np.float32)  # many ties
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for a, b in itertools.pairwise(starts):
        score[a:b] = np.sort(score[a:b])[::-1]
    if seed % 3 == 1:  # one query out of order: no shortcut
        score[starts[0]:starts[1]] = score[starts[0]:starts[1]][::-1].copy()
    if seed % 3 == 2 and n_q > 1:  # a query in two places: no shortcut
        query[-1] = query[0]
    key = descending_key_numpy(query, score)
    fast = presorted_order_numpy(query, key)
    stable = np.argsort(key, kind="stable")
    assert (fast is not None) == (seed % 3 == 0 or (seed % 3 == 2 and n_q == 1))
    if fast is not None:
        assert np.array_equal(fast, stable)
    kernel_key, kernel_order = load("ranking").presorted_ranking(query, score, n_q)
    assert np.array_equal(kernel_key, key)
    assert (kernel_order is None) == (fast is None)
    if fast is not None:
        assert np.array_equal(kernel_order, fast)
    docs = pd.Series([f"d{i % 7}" for i in range(len(query))], dtype="str")
    order = ranking_order(query, score, docs)
    ref = np.lexsort((-pd.factorize(docs, sort=True)[0], -score.astype(np.float64), query))
    assert np.array_equal(order, ref)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, -0.0, 1.0, 2.5]), st.booleans()), max_size=40))
def test_tie_runs_kernel_is_its_numpy_twin(rows: list[tuple[int, float, bool]]) -> None:
    """The runs of equal keys holding a row that matters: the one-pass kernel finds the same
    positions and run numbers as the binary search of its twin, and each is a run of equal
    keys that holds a marked row (and every such run of two or more is found)."""
    query = np.array([q for q, _, _ in rows], np.int64)
    score = np.array([s for _, s, _ in rows], np.float32)
    matters = np.array([m for _, _, m in rows], bool)
    key = descending_key_numpy(query, score)
    order = np.argsort(key, kind="stable")
    got = load("ranking").tie_runs(key, order, matters)
    want = tie_runs_numpy(key, order, matters)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    ranked, marked = key[order], matters[order]
    brute = [p for p in range(len(order)) if (ranked == ranked[p]).sum() > 1 and marked[ranked == ranked[p]].any()]
    assert got[0].tolist() == brute
    if len(got[1]):
        assert got[1][0] == 0 and set(np.diff(got[1]).tolist()) <= {0, 1}
        assert all(len(set(ranked[got[0][got[1] == r]].tolist())) == 1 for r in range(int(got[1][-1]) + 1))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3e38, 3e38, 1e-45,
                                                              -1e-45, 7.0])), max_size=40),
       st.booleans())
def test_ranking_kernel_is_its_numpy_twin(rows: list[tuple[int, float]], presort: bool) -> None:
    """Keys bit for bit, and the order exactly the stable sort's whenever the kernel takes the
    shortcut (and it takes it exactly when the twin does), on runs sorted or not, with -0.0,
    ties, extremes and queries in two places."""
    if presort:  # in rank order within each query, queries in a random but contiguous order
        rows = sorted(rows, key=lambda r: (hash((r[0], 3)) % 7, r[0], -r[1]))
    query = np.array([q for q, _ in rows], np.int64)
    score = np.array([s for _, s in rows], np.float32)
    key, order = load("ranking").presorted_ranking(query, score, 6)
    assert np.array_equal(key, descending_key_numpy(query, score))
    twin = presorted_order_numpy(query, key)
    assert (order is None) == (twin is None)
    if order is not None:
        assert np.array_equal(order, np.argsort(key, kind="stable"))
        assert np.array_equal(order, twin)


@pytest.mark.parametrize("repeat", [False, True])
def test_positions_tell_ids_apart_as_codes_do(repeat: bool) -> None:
    rng = np.random.default_rng(1)
    n_q, depth = 120, 800  # above the block size: the shortcut applies
    docs = [f"doc{x}" for x in (rng.permutation(10**6)[:depth] for _ in range(n_q)) for x in x]
    if repeat:
        docs[5 * depth + 10] = docs[5 * depth + 3]
    groups = np.repeat(np.arange(n_q), depth).astype(np.int64)
    column = pd.Series(docs, dtype="str")
    (codes,), bound, _ = ids.codes_within_groups([column], [groups])
    assert codes.min() >= 0 and codes.max() < bound
    (ref,), _ = ids.encode([pd.Series(docs, dtype=object)])
    pairs = pd.DataFrame({"g": groups, "c": codes}).duplicated().to_numpy()
    assert np.array_equal(pairs, pd.DataFrame({"g": groups, "c": ref}).duplicated().to_numpy())
    assert pairs.any() == repeat


def test_sparse_query_codes_take_the_numpy_path() -> None:
    """Codes far above the row count (a caller's own) are ranked without a slot per code (the
    kernel's), equal to the stable sort; codes outside the kernel's range are refused by it."""
    score = np.array([1, 2, 3], np.float32)
    docs = pd.Series(list("abc"), dtype="str")
    for query in (np.array([0, 0, 10**8]), np.array([0, 2**31, 2**31]), np.array([2**32 - 1, 3, 3])):
        order = ranking_order(query, score, docs)
        assert np.array_equal(order, np.lexsort((-score.astype(np.float64), query)))
    with pytest.raises(KolmValueError, match="query codes in"):
        ranking_order(np.array([2**32, 3, 3]), score, docs)
    with pytest.raises(ValueError, match=r"query codes must lie in \[0, 1\)"):
        load("ranking").presorted_ranking(np.array([5]), np.array([1.0], np.float32), 1)
    with pytest.raises(ValueError, match="query codes must lie"):
        load("ranking").presorted_ranking(np.array([-1]), np.array([1.0], np.float32), 1)
