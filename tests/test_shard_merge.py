"""The exact merge of shards' top-k (no cluster): the top-k of the whole, ties by global code."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.distributed.shard_merge import merge_parts, merge_topk


@given(st.integers(0, 4), st.lists(st.integers(0, 6), min_size=1, max_size=4), st.integers(1, 8), st.integers(0, 2**31))
@settings(max_examples=100, deadline=None)
def test_merged_shard_top_k_is_the_top_k_of_the_whole(m: int, sizes: list[int], k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    scores = rng.integers(0, 4, (m, int(offsets[-1]))).astype(np.float32) / 2  # many ties
    ids = np.array([f"d{i}" for i in range(offsets[-1])], dtype=object)
    parts = []
    for a, b in itertools.pairwise(offsets):
        kk = min(k, max(b - a, 1))
        d = np.full((m, kk), -1, np.int64)
        s = np.zeros((m, kk), np.float32)
        c = np.zeros(m, np.int64)
        p_ids = np.full((m, kk), None, dtype=object)
        for q in range(m):
            order = np.lexsort((np.arange(b - a), -scores[q, a:b].astype(np.float64)))[:kk]
            c[q] = len(order)
            d[q, :len(order)], s[q, :len(order)] = order, scores[q, a + order]
            p_ids[q, :len(order)] = ids[a + order]
        parts.append((d, s, c, p_ids))
    docs, got_s, counts, got_ids = merge_parts(parts, list(offsets[:-1]), k)
    for q in range(m):
        want = np.lexsort((np.arange(offsets[-1]), -scores[q].astype(np.float64)))[:k]
        assert counts[q] == len(want)
        assert docs[q, :counts[q]].tolist() == want.tolist() and (docs[q, counts[q]:] == -1).all()
        assert got_s[q, :counts[q]].tolist() == scores[q, want].tolist()
        assert got_ids[q, :counts[q]].tolist() == ids[want].tolist()
    plain = merge_topk([p[:3] for p in parts], list(offsets[:-1]), k)
    for a, b in zip(plain, (docs, got_s, counts), strict=True):
        np.testing.assert_array_equal(a, b)
