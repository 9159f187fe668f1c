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
