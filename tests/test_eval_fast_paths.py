"""The shortcuts ``evaluate`` takes on runs as search engines write them agree with the general
paths: a run already in rank order within contiguous queries is ordered as the stable sort
orders it, and one Arrow string column coded by positions tells ids apart within groups exactly
as ``encode``'s codes do."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from kolm_search.engine import ids
from kolm_search.evaluation.metrics import _descending_key, _presorted_order, ranking_order


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
    key = _descending_key(query, score)
    fast = _presorted_order(query, key)
    stable = np.argsort(key, kind="stable")
    assert (fast is not None) == (seed % 3 == 0 or (seed % 3 == 2 and n_q == 1))
    if fast is not None:
        assert np.array_equal(fast, stable)
    docs = pd.Series([f"d{i % 7}" for i in range(len(query))], dtype="str")
    order = ranking_order(query, score, docs)
    ref = np.lexsort((-pd.factorize(docs, sort=True)[0], -score.astype(np.float64), query))
    assert np.array_equal(order, ref)


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
