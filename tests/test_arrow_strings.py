"""``engine.arrow_strings`` (kernels over Arrow string buffers) against pandas and Python:
the repeat screen never misses a repeat, the per-group lookup equals the global one kept to each group, integers
equal ``int()`` under the ``-?[0-9]+`` rule, and the hash equals its numpy twin."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.engine.arrow_strings import buffers, may_repeat_within_groups, parse_integers

_TEXT = st.text(alphabet=st.sampled_from(["a", "b", "é", "\u4e00", "0", " "]), max_size=3)


def _truth(groups: list[list[str]]) -> bool:
    return any(len(set(g)) < len(g) for g in groups)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_TEXT, max_size=8), max_size=12), st.booleans())
def test_repeat_screen_finds_every_repeat(groups: list[list[str]], large: bool) -> None:
    flat = [v for g in groups for v in g]
    arr = pa.array(["x", *flat], pa.large_string() if large else pa.string()).slice(1)  # an offset into its buffers
    starts = np.concatenate([[0], np.cumsum([len(g) for g in groups])]).astype(np.int64)
    assert may_repeat_within_groups(arr, starts) == _truth(groups)  # 64-bit hashes of a few strings do not collide


def test_repeat_screen_on_many_rows_and_threads() -> None:
    rng = np.random.default_rng(0)
    docs = [f"d{x}" for x in rng.integers(0, 10**9, 200_000)]
    starts = np.arange(0, 200_001, 1000, dtype=np.int64)
    repeated = pd.DataFrame({"q": np.repeat(np.arange(200), 1000), "d": docs}).duplicated().any()
    assert may_repeat_within_groups(pa.array(docs), starts, n_threads=2) == bool(repeated)
    docs[150_999] = docs[150_500]
    assert may_repeat_within_groups(pa.array(docs), starts, n_threads=2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**64, 2**64).map(str), st.text(alphabet="0123456789-+x. ", max_size=21)),
                max_size=6), st.sampled_from([-1, 0, 1]))
def test_integers_as_int_reads_them(texts: list[str], shift: int) -> None:
    got = parse_integers(pa.array(texts, pa.string()), shift)
    ok = all(re.fullmatch(r"-?[0-9]+", t) and abs(int(t)) < 2**63 and -2**63 <= int(t) + shift < 2**63 for t in texts)
    assert (got is not None) == bool(ok)
    if got is not None:
        assert got.tolist() == [int(t) + shift for t in texts]


def test_hash_twin_and_refusals() -> None:
    from kolm_search._kernels.strings import fnv1a_numpy

    assert fnv1a_numpy([b""])[0] == np.uint64(0xCBF29CE484222325)
    assert fnv1a_numpy([b"a"])[0] == np.uint64(0xAF63DC4C8601EC8C)  # FNV-1a 64 of "a", the published value
    from kolm_search._kernels import load

    values = ["", "a", "é\u4e00", "doc123"]
    offsets, data = buffers(pa.array(values))
    kernel = load("strings")._hash
    assert [kernel(offsets, data, i) for i in range(len(values))] == fnv1a_numpy([v.encode() for v in values]).tolist()
    with pytest.raises(TypeError):
        buffers(pa.array(["a", None]))
    with pytest.raises(TypeError):
        buffers(pa.array([1, 2]))
    with pytest.raises(ValueError):
        may_repeat_within_groups(pa.array(["a", "b"]), np.array([0, 1]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "é", "cc", "d\u4e00"])), min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", "é", "cc", "zz"])), max_size=20))
def test_lookup_within_groups_is_the_global_lookup_kept_to_each_group(rows: list[tuple[int, str]],
                                                                      entries: list[tuple[int, str]]) -> None:
    from kolm_search.engine import ids
    from kolm_search.engine.arrow_strings import lookup_within_groups

    rows = sorted(rows, key=lambda r: r[0])  # each group's rows together
    entries = list(dict.fromkeys(entries))
    values = pd.Series([d for _, d in rows], dtype="str")
    groups = np.array([g for g, _ in rows], np.int64)
    table_codes, table = ids.encode([pd.Series([d for _, d in entries], dtype="str")])
    t_groups = np.array([g for g, _ in entries], np.int64)
    got = lookup_within_groups(values, groups, table, t_groups, table_codes[0])
    if got is None:  # an empty table is no Arrow string Index: the global lookup then runs
        assert not entries
        return
    everywhere = ids.lookup(values, table)
    own = {(g, int(c)) for g, c in zip(t_groups.tolist(), table_codes[0].tolist(), strict=True)}
    assert got.tolist() == [c if (g, c) in own else -1 for g, c in zip(groups.tolist(), everywhere.tolist(), strict=True)]
    split = np.array([0, 1, 0], np.int64)  # a group in two places, or too many entries for a scan: not taken
    assert lookup_within_groups(pd.Series(["a", "b", "a"], dtype="str"), split, table, t_groups, table_codes[0]) is None
    if len(entries):
        assert lookup_within_groups(values, groups, table, t_groups, table_codes[0], most=0) is None
