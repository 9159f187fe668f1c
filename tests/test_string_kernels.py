"""String kernels (run starts, parallel gather, word-at-a-time bytes) and the block grouping
against their numpy twins and plain-Python oracles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels.fusion import output_rows
from kolm_search._kernels.grouping import block_segments, block_segments_numpy
from kolm_search._kernels.strings import (
    gather_strings,
    gather_strings_numpy,
    repeat_strings,
    repeat_strings_numpy,
    string_run_starts,
    string_run_starts_numpy,
)
from kolm_search.interning import string_buffers

# short, long (> 8 and > 16 bytes), empty and non-ASCII ids: every word/tail path
ids = st.sampled_from(["", "a", "q1", "q10", "doc1234", "doc12345", "doc123456", "é", "ünïcödé-id-0001",
                       "x" * 17, "x" * 16, "y" * 9])


def _buffers(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    b = string_buffers(pd.Series(values, dtype="str"))
    assert b is not None
    return b[1], b[2]


@settings(max_examples=150, deadline=None)
@given(st.lists(ids, max_size=60), st.integers(1, 7))
def test_run_starts_match_twin(values: list[str], chunks: int) -> None:
    offsets, data = _buffers(values)
    got = string_run_starts(offsets, data, chunks)
    np.testing.assert_array_equal(got, string_run_starts_numpy(offsets, data))
    want = [i for i in range(len(values)) if i == 0 or values[i] != values[i - 1]]
    assert got.tolist() == want


@settings(max_examples=150, deadline=None)
@given(st.lists(ids, min_size=1, max_size=60), st.data(), st.integers(1, 7))
def test_gather_matches_twin_and_python(values: list[str], data_: st.DataObject, chunks: int) -> None:
    offsets, data = _buffers(values)
    rows = np.array(data_.draw(st.lists(st.integers(0, len(values) - 1), max_size=80)), dtype=np.int64)
    got_off, got_data = gather_strings(offsets, data, rows, chunks)
    want_off, want_data = gather_strings_numpy(offsets, data, rows)
    np.testing.assert_array_equal(got_off, want_off)
    np.testing.assert_array_equal(got_data, want_data)
    decoded = [bytes(got_data[got_off[i]:got_off[i + 1]]).decode() for i in range(len(rows))]
    assert decoded == [values[r] for r in rows]


@pytest.mark.parametrize("bad", [-1, 3, 2**40])
@pytest.mark.parametrize("chunks", [1, 4])
def test_gather_rejects_rows_out_of_range(bad: int, chunks: int) -> None:
    """A row outside [0, n), negative ones included, is named; never read out of bounds."""
    from kolm_search.errors import KolmValueError

    offsets, data = _buffers(["a", "bb", "ccc"])
    rows = np.array([0, 1, 2, bad, 1, 0, 2, 1], dtype=np.int64)
    with pytest.raises(KolmValueError, match=rf"got {bad} at position 3"):
        gather_strings(offsets, data, rows, chunks)


def test_gather_spill_never_crosses_chunks() -> None:
    """Many short strings per chunk: a word written past one string must not clobber the next
    chunk's bytes (written by another thread)."""
    rng = np.random.default_rng(3)
    values = [f"{'ab' * int(n)}" for n in rng.integers(0, 6, 5000)]
    offsets, data = _buffers(values)
    rows = rng.integers(0, len(values), 20_000).astype(np.int64)
    for chunks in (1, 2, 13, 64):
        got = gather_strings(offsets, data, rows, chunks)
        want = gather_strings_numpy(offsets, data, rows)
        np.testing.assert_array_equal(got[1], want[1])


@settings(max_examples=150, deadline=None)
@given(st.lists(ids, max_size=40), st.data(), st.integers(1, 9))
def test_repeat_matches_twin_and_python(values: list[str], data_: st.DataObject, chunks: int) -> None:
    offsets, data = _buffers(values)
    counts = np.array(data_.draw(st.lists(st.integers(0, 5), min_size=len(values), max_size=len(values))),
                      dtype=np.int64)
    got_off, got_data = repeat_strings(offsets, data, counts, chunks)
    want_off, want_data = repeat_strings_numpy(offsets, data, counts)
    np.testing.assert_array_equal(got_off, want_off)
    np.testing.assert_array_equal(got_data, want_data)
    decoded = [bytes(got_data[got_off[i]:got_off[i + 1]]).decode() for i in range(int(counts.sum()))]
    assert decoded == [v for v, c in zip(values, counts, strict=True) for _ in range(c)]


def test_repeat_spill_never_crosses_chunks_and_checks_counts() -> None:
    rng = np.random.default_rng(5)
    values = [f"{'q' * int(n)}{n}" for n in rng.integers(0, 9, 300)]
    offsets, data = _buffers(values)
    counts = rng.integers(0, 90, len(values)).astype(np.int64)
    want = repeat_strings_numpy(offsets, data, counts)
    for chunks in (1, 2, 7, 64, 10_000):
        got = repeat_strings(offsets, data, counts, chunks)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="one entry per string"):
        repeat_strings(offsets, data, counts[:-1])
    with pytest.raises(ValueError, match="counts must be >= 0"):
        repeat_strings(offsets, data, -counts - 1)


@pytest.mark.parametrize("seed", range(6))
def test_block_segments_match_twin(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_q, n_lists = 9, 3
    blocks = []  # (query, list, row, length) with rows laid out list-major, as runs arrive
    row = 0
    for li in range(n_lists):
        for _ in range(int(rng.integers(0, 8))):
            length = int(rng.integers(0, 6))
            blocks.append((int(rng.integers(0, n_q)), li, row, length))
            row += length
    key = np.round(rng.random(row), 1) if seed % 2 else np.arange(row, dtype=np.float64)
    q = np.array([b[0] for b in blocks], np.int64)
    by_q = np.argsort(q, kind="stable")
    bptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(q, minlength=n_q), out=bptr[1:])
    ptr = np.zeros(n_q + 1, np.int64)
    np.cumsum(np.bincount(q, weights=[b[3] for b in blocks], minlength=n_q).astype(np.int64), out=ptr[1:])
    arrays = [np.array([b[i] for b in blocks], np.int64)[by_q] for i in (2, 3, 1)]
    for descending in (False, True):  # scores best first are checked without a negated copy
        got = block_segments(bptr, *arrays, ptr, key, descending=descending)
        want = block_segments_numpy(bptr, *arrays, ptr, key, descending=descending)
        for a, b in zip(got[:3], want[:3], strict=True):
            np.testing.assert_array_equal(a, b)
        assert got[3] == want[3]
    assert block_segments(bptr, *arrays, ptr, -key, descending=True)[3] == block_segments(bptr, *arrays, ptr, key)[3]


def test_output_rows() -> None:
    ptr = np.array([0, 4, 4, 9], np.int64)
    out_ptr = np.array([0, 2, 2, 5], np.int64)
    out_local = np.array([1, 0, 2, 0, 1], np.int64)
    rep = np.array([10, 11, 12, 13, 20, 21, 22, -1, -1], np.int64)  # group 2 starts at row 4
    rows, rank = output_rows(ptr, out_ptr, out_local, rep, 2)
    assert rows is not None
    assert rows.tolist() == [11, 10, 22, 20, 21]
    assert rank.tolist() == [0, 1, 0, 1, 2]
    assert out_local.tolist() == [1, 0, 2, 0, 1]  # untouched unless asked
    rows2, rank2 = output_rows(ptr, out_ptr, out_local, None, 1)
    assert rows2 is None and rank2.tolist() == rank.tolist()
    rows3, _ = output_rows(ptr, out_ptr, out_local, rep, 3, overwrite=True)
    assert rows3 is out_local and out_local.tolist() == [11, 10, 22, 20, 21]


def test_take_strings_gathers_and_rejects_non_strings() -> None:
    import pyarrow as pa

    from kolm_search.interning import take_strings

    arr = pa.array(["a", "bb", "ccc", "ünï"], type=pa.string())
    got = take_strings(arr, np.array([3, 0, 2, 2], np.int64), 2)
    assert list(got) == ["ünï", "a", "ccc", "ccc"] and str(got.dtype) == "str"
    with pytest.raises(TypeError, match="Arrow string array"):
        take_strings(pa.array([1, 2]), np.array([0], np.int64))


def test_repeat_strings_pandas_level() -> None:
    import pyarrow as pa

    from kolm_search.interning import repeat_strings as repeat_column

    got = repeat_column(pa.array(["q1", "", "ünï"], type=pa.string()), np.array([2, 1, 3], np.int64), 2)
    assert list(got) == ["q1", "q1", "", "ünï", "ünï", "ünï"] and str(got.dtype) == "str"
    with pytest.raises(TypeError, match="repeat_strings needs an Arrow string array"):
        repeat_column(pa.array([1, 2]), np.array([1, 1], np.int64))


def test_intern_groups_rejects_groups_beyond_32_bit_codes() -> None:
    from kolm_search._kernels.grouping import intern_groups
    from kolm_search.errors import KolmValueError

    offsets, data = _buffers(["a"])
    with pytest.raises(KolmValueError, match="at most 2\\*\\*31 - 1"):
        intern_groups(np.zeros(1, np.int64), np.array([0, 2**31], np.int64), offsets, data)
