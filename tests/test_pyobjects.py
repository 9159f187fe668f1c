"""Object columns of ``str`` read in place (kolm_search._kernels.pyobjects), against pyarrow
and Python comparisons as oracles."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search._kernels.pyobjects import ascii_lengths, object_run_starts, pack_ascii
from kolm_search.errors import FrameValidationError
from kolm_search.fuse import _change_starts
from kolm_search.interning import (
    _arrow_strings,
    _chunk_of,
    factorize,
    object_pointers,
    object_strings,
    str_layout,
    string_buffers,
)

pytestmark = pytest.mark.skipif(sys.implementation.name != "cpython", reason="reads CPython's str layout")


def fresh(s: str) -> str:
    """An equal string in a new object (slicing a longer one copies)."""
    return (s + "!")[:-1]


def test_layout_found_and_checked() -> None:
    pa.array(["\xe9", "\u20ac", "\U0001f600"])  # caches the UTF-8 form of those singletons (getsizeof counts it)
    str_layout.cache_clear()
    layout = str_layout()
    assert layout is not None
    assert layout[1] == id(str)
    assert layout[4] == sys.getsizeof("") - 1  # ASCII data right after the header


def test_layout_refused_without_the_gil(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    str_layout.cache_clear()
    try:
        assert str_layout() is None
        assert object_strings(np.array([f"d{i}" for i in range(2000)], dtype=object)) is None
    finally:
        monkeypatch.undo()
        str_layout.cache_clear()
    assert str_layout() is not None


ascii_ids = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
any_ids = st.text(max_size=12).filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s))


@settings(max_examples=40, deadline=None)
@given(st.lists(ascii_ids, min_size=1, max_size=60), st.lists(any_ids, max_size=8), st.integers(0, 2**32 - 1))
def testobject_strings_equal_pyarrow(pool: list[str], other: list[str], seed: int) -> None:
    """ASCII ids of every length (words and tails), a few non-ASCII ones (encoded in Python),
    equal strings in shared and distinct objects: the Arrow array pyarrow builds."""
    rng = np.random.default_rng(seed)
    n = 1500
    values = np.empty(n, dtype=object)
    picks = rng.integers(0, len(pool), n)
    for i, p in enumerate(picks):
        values[i] = pool[p] if i % 2 else fresh(pool[p])
    for s, row in zip(other, rng.choice(n, len(other), replace=False), strict=False):
        values[row] = s
    got = object_strings(values)
    assert got is not None
    assert got.equals(pa.array(values, type=pa.large_string()))


@pytest.mark.parametrize("case", ["none", "nan", "int", "subclass", "mostly-non-ascii", "surrogate", "short"])
def testobject_strings_fall_back_like_pyarrow(case: str) -> None:
    values = np.array([f"doc{i}" for i in range(2000)], dtype=object)

    class Sub(str):
        pass

    if case == "none":
        values[1234] = None
    elif case == "nan":
        values[1234] = float("nan")
    elif case == "int":
        values[1234] = 7
    elif case == "subclass":
        values[1234] = Sub("doc-sub")
    elif case == "mostly-non-ascii":
        values[::2] = "d\u00e9j\u00e0"
    elif case == "surrogate":
        values[1234] = "\ud800"
    elif case == "short":
        values = values[:10]
    assert object_strings(values) is None if case != "mostly-non-ascii" else True
    if case == "none":
        with pytest.raises(FrameValidationError, match="missing id at row 1234"):
            string_buffers(values)
    elif case == "nan":  # not a string column for pyarrow; factorize still names the row
        assert string_buffers(values) is None
        with pytest.raises(FrameValidationError, match="missing value at row 1234"):
            factorize(values, name="doc_id")
    elif case == "int":
        assert _arrow_strings(values) is None  # not a string column, as before
    elif case == "surrogate":
        with pytest.raises(UnicodeEncodeError):
            _arrow_strings(values)
    else:
        assert _arrow_strings(values).equals(pa.array(values, type=pa.large_string()))


def test_pack_leaves_room_for_caller_rows() -> None:
    layout = str_layout()
    assert layout is not None
    values = np.array(["ab", "\u00e9t\u00e9", "cdefghijklmnopq", ""] * 300, dtype=object)
    ptrs = object_pointers(values)
    for chunks in (1, 3, 7):
        lengths, chunk_bytes, n_other = ascii_lengths(ptrs, layout, chunks)
        assert n_other == 300 and (lengths[1::4] == -1).all()
        assert chunk_bytes.sum() == 300 * 17
        for row in range(1, len(values), 4):
            lengths[row] = -len(values[row].encode()) - 1
            chunk_bytes[_chunk_of(row, len(values), chunks)] += len(values[row].encode())
        offsets, data = pack_ascii(ptrs, layout, lengths, chunk_bytes)
        for row in range(1, len(values), 4):
            data[offsets[row]:offsets[row + 1]] = np.frombuffer(values[row].encode(), np.uint8)
        got = pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(data))
        assert got.to_pylist() == values.tolist()


@pytest.mark.parametrize("n, n_chunks", [(1, 1), (5, 3), (1000, 4), (1000, 64)])
def test_chunk_of_matches_the_kernel_split(n: int, n_chunks: int) -> None:
    for row in range(n):
        c = _chunk_of(row, n, n_chunks)
        assert (n * c) // n_chunks <= row < (n * (c + 1)) // n_chunks


@settings(max_examples=40, deadline=None)
@given(st.lists(any_ids, min_size=1, max_size=6), st.lists(st.integers(0, 5), min_size=1, max_size=300),
       st.integers(1, 9))
def test_object_run_starts_equal_python(pool: list[str], picks: list[int], chunks: int) -> None:
    """Run heads over shared objects, equal copies in other objects and strings of every
    kind (ASCII, Latin-1, UCS-2, UCS-4): those of comparing every neighbour in Python."""
    layout = str_layout()
    assert layout is not None
    values = np.array([pool[p % len(pool)] if i % 3 else fresh(pool[p % len(pool)]) for i, p in enumerate(picks)],
                      dtype=object)
    starts, ok = object_run_starts(object_pointers(values), layout, chunks)
    assert ok
    assert starts.tolist() == _change_starts(values).tolist()


@pytest.mark.parametrize("chunks", [1, 4])
def test_object_run_starts_compare_every_byte(chunks: int) -> None:
    """Neighbours of one length that differ in one byte only, at every position (inside the
    8-byte words and in the tail), for each character width."""
    layout = str_layout()
    assert layout is not None
    for base in ("abcdefghijklmnopqrs", "\u00e9bcdefghijklmnopq", "\u20acbcdefghijklm", "\U0001f600bcdefghij"):
        values = []
        for pos in range(len(base)):
            other = base[:pos] + ("Z" if base[pos] != "Z" else "Y") + base[pos + 1:]
            values += [fresh(base), fresh(base), other, fresh(other)]
        arr = np.array(values, dtype=object)
        starts, ok = object_run_starts(object_pointers(arr), layout, chunks)
        assert ok
        assert starts.tolist() == _change_starts(arr).tolist() == list(range(0, len(values), 2))


@pytest.mark.parametrize("chunks", [1, 3])
def test_readers_on_objects_out_of_column_order(chunks: int) -> None:
    """Objects made in one order and read in another (a shuffled or sorted frame: addresses
    at random, the case the 16-rows-ahead prefetch is for), runs shorter and longer than the
    prefetch distance, short and long strings: equal to pyarrow and to Python comparisons."""
    layout = str_layout()
    assert layout is not None
    rng = np.random.default_rng(17)
    made = [fresh(f"doc{i}" + "x" * int(i % 40)) for i in range(5000)]
    values = np.array(made, dtype=object)[rng.permutation(5000)]
    got = object_strings(values)
    assert got is not None
    assert got.equals(pa.array(values.tolist(), type=pa.large_string()))
    grouped = np.sort(rng.integers(0, 300, 5000))  # runs of equal ids, of 1 to ~40 rows
    qids = np.empty(5000, dtype=object)
    for i in rng.permutation(5000):  # one object per row, made in random order
        qids[i] = fresh(f"q{int(grouped[i])}")
    starts, ok = object_run_starts(object_pointers(qids), layout, chunks)
    assert ok
    assert starts.tolist() == _change_starts(qids).tolist()


def test_prefetch_at_is_a_hint_at_any_address() -> None:
    """prefetch_at never faults (null, unmapped, the top of the address space) and reads nothing."""
    from numba import njit

    from kolm_search._kernels.pyobjects import peek_i64, prefetch_at

    @njit
    def hint_then_read(addrs, at):  # pragma: no cover - compiled
        for a in addrs:
            prefetch_at(a)
        return peek_i64(at)

    x = np.array([123456789], dtype=np.int64)
    addrs = np.array([0, 8, -1, 2**62, x.ctypes.data], dtype=np.int64)
    assert hint_then_read(addrs, x.ctypes.data) == 123456789


def test_object_run_starts_reports_non_strings() -> None:
    layout = str_layout()
    assert layout is not None
    values = np.array(["q1", "q1", 3, 3, "q2"], dtype=object)
    _, ok = object_run_starts(object_pointers(values), layout, 2)
    assert not ok
    values = np.array(["q1", "q1", None, None], dtype=object)
    values[3] = values[2]  # the same object: equal without reading it
    _, ok = object_run_starts(object_pointers(values), layout, 1)
    assert not ok  # q1 -> None is compared


def test_fuse_object_columns_equal_str_columns() -> None:
    """The whole fuse path on object columns (the in-place readers) equals str columns."""
    from kolm_search import fuse

    rng = np.random.default_rng(5)
    runs = []
    for _ in range(3):
        q = np.repeat([f"q{i}" for i in range(40)], 50)
        d = [f"d\u00e9{x}" if x % 97 == 0 else f"doc{x}" for x in rng.integers(0, 400, len(q))]
        runs.append(pd.DataFrame({"qid": pd.array(q, dtype="str"), "doc_id": pd.array(d, dtype="str"),
                                  "score": rng.random(len(q))}))
    objs = [r.astype({"qid": object, "doc_id": object}) for r in runs]
    for r in objs:  # one object per row: every neighbour compared by value
        r["qid"] = np.array([fresh(v) for v in r["qid"]], dtype=object)
    pd.testing.assert_frame_equal(fuse(objs), fuse(runs))
