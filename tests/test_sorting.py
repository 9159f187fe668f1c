"""The written-out stable argsort shared by the kernels, against numpy's stable argsort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels.sorting import stable_argsort


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 5), max_size=300), st.integers(0, 3))
def test_int_keys_match_numpy(values: list[int], spare: int) -> None:
    keys = np.array(values + [99] * spare, dtype=np.int64)  # sort only the first n
    n = len(values)
    o, tmp = np.full(n + spare, -1, np.int64), np.empty(n + spare, np.int64)
    stable_argsort(keys, n, o, tmp)
    np.testing.assert_array_equal(o[:n], np.argsort(keys[:n], kind="stable"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-1.5, -0.0, 0.0, 0.25, 1e-30, 3.0, -np.inf, np.inf]), max_size=300))
def test_float32_keys_match_numpy(values: list[float]) -> None:
    keys = np.array(values, dtype=np.float32)  # -0.0 and 0.0 are equal keys: input order kept
    o, tmp = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    stable_argsort(keys, len(keys), o, tmp)
    np.testing.assert_array_equal(o, np.argsort(keys, kind="stable"))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from(["d1", "d10", "d2", "é", "", "d1x"])),
                max_size=60))
def test_trec_order_matches_python(entries: list[tuple[float, str]]) -> None:
    """``by_docno``: score descending, equal scores by document id descending (byte order),
    as trec_eval ranks a run."""
    import pandas as pd

    from kolm_search._kernels.sorting import merge_sort
    from kolm_search.interning import string_buffers

    n = len(entries)
    scores = np.array([s for s, _ in entries], dtype=np.float32)
    buffers = string_buffers(pd.Series([d for _, d in entries], dtype="str")) if n else None
    offsets, data = (buffers[1], buffers[2]) if buffers is not None else (np.zeros(1, np.int64), np.zeros(0, np.uint8))
    idx = np.arange(n, dtype=np.int64)
    merge_sort(idx, n, np.empty(n, np.int64), scores, np.arange(n, dtype=np.int64), data, offsets, True)
    want = sorted(range(n), key=lambda i: (-entries[i][0], [-b for b in entries[i][1].encode()] + [1]))
    got = [(entries[i][0], entries[i][1]) for i in idx]
    assert got == [(entries[i][0], entries[i][1]) for i in want]
