"""rrf_score, merge_with_rrf and the fusion kernel, against plain-Python oracles."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import KolmValueError, SearchDocument, merge_with_rrf, rrf_score
from kolm_search._kernels.fusion import fuse_groups, fuse_groups_numpy
from kolm_search.fusion import fuse_arrays


def oracle_rrf(lists: list[list[str]], k: float, weights: list[float] | None = None) -> list[tuple[str, float]]:
    """Plain-Python RRF: once per list at best rank; ties by first appearance."""
    scores: dict[str, float] = {}
    for li, ids in enumerate(lists):
        w = 1.0 if weights is None else weights[li]
        seen: set[str] = set()
        for rank, doc in enumerate(ids):
            if doc in seen:
                continue
            seen.add(doc)
            scores[doc] = scores.get(doc, 0.0) + w / (k + rank + 1)
    # dict order is first appearance; sorted() is stable
    return sorted(scores.items(), key=lambda kv: -kv[1])


def docs(ids: list[str]) -> list[SearchDocument]:
    return [SearchDocument(id=i, content=f"text of {i}") for i in ids]


class TestRrfScore:
    def test_formula_zero_based(self) -> None:
        assert rrf_score(0) == 1 / 61
        assert rrf_score(9, k=10) == 1 / 20
        assert rrf_score(0, k=0) == 1.0

    @pytest.mark.parametrize("rank", [-1, 1.5, "1", True, None])
    def test_bad_rank(self, rank: object) -> None:
        with pytest.raises(ValueError, match="rank"):
            rrf_score(rank)  # type: ignore[arg-type]

    @pytest.mark.parametrize("k", [-1, float("nan"), float("inf")])
    def test_bad_k(self, k: float) -> None:
        with pytest.raises(ValueError, match="k must"):
            rrf_score(0, k)

    def test_numpy_int_rank(self) -> None:
        assert rrf_score(np.int64(3)) == 1 / 64

    @given(st.integers(0, 10_000), st.floats(0, 1000))
    def test_range(self, rank: int, k: float) -> None:
        s = rrf_score(rank, k)
        assert 0 < s <= 1


ids_strategy = st.lists(st.lists(st.sampled_from([f"d{i}" for i in range(12)]), max_size=15), min_size=1, max_size=4)


class TestMergeWithRrf:
    def test_basic_order_and_scores(self) -> None:
        merged = merge_with_rrf([docs(["a", "b", "c"]), docs(["b", "c", "d"])], {}, 10)
        expected = oracle_rrf([["a", "b", "c"], ["b", "c", "d"]], 60)
        assert [d.id for d in merged] == [e[0] for e in expected]
        assert [d.score for d in merged] == pytest.approx([e[1] for e in expected], rel=1e-15)

    @settings(max_examples=200, deadline=None)
    @given(ids_strategy, st.integers(0, 20), st.sampled_from([0, 1, 60, 2.5]))
    def test_matches_plain_python(self, lists: list[list[str]], limit: int, k: float) -> None:
        merged = merge_with_rrf([docs(x) for x in lists], {}, limit, k)
        expected = oracle_rrf(lists, k)[:limit]
        assert [d.id for d in merged] == [e[0] for e in expected]
        np.testing.assert_allclose([d.score for d in merged], [e[1] for e in expected], rtol=1e-12)

    @settings(max_examples=100, deadline=None)
    @given(ids_strategy, st.data())
    def test_weighted(self, lists: list[list[str]], data: st.DataObject) -> None:
        weights = data.draw(st.lists(st.floats(0, 5), min_size=len(lists), max_size=len(lists)))
        merged = merge_with_rrf([docs(x) for x in lists], {}, 100, 60, weights=weights)
        expected = oracle_rrf(lists, 60, weights)
        assert [d.id for d in merged] == [e[0] for e in expected]

    def test_repeat_inside_list_counts_once_at_best_rank(self) -> None:
        merged = merge_with_rrf([docs(["a", "b", "a"])], {}, 10)
        assert [d.id for d in merged] == ["a", "b"]
        assert merged[0].score == pytest.approx(1 / 61)

    def test_ties_keep_first_appearance(self) -> None:
        merged = merge_with_rrf([docs(["x", "y"]), docs(["y", "x"])], {}, 10)
        assert [d.id for d in merged] == ["x", "y"]
        assert merged[0].score == merged[1].score

    def test_doc_map_extended_first_seen_wins_and_copies(self) -> None:
        pre = SearchDocument(id="a", content="from the map")
        doc_map = {"a": pre}
        first_b = SearchDocument(id="b", content="first b")
        merged = merge_with_rrf(
            [[SearchDocument(id="a", content="list a"), first_b], [SearchDocument(id="b", content="second b")]],
            doc_map,
            10,
        )
        assert doc_map["a"] is pre and doc_map["b"] is first_b
        by_id = {d.id: d for d in merged}
        assert by_id["a"].content == "from the map"
        assert by_id["b"].content == "first b"
        assert by_id["a"] is not pre and pre.score is None  # copies carry the score

    def test_limit_and_empty(self) -> None:
        assert merge_with_rrf([], {}, 5) == []
        assert merge_with_rrf([docs(["a"])], {}, 0) == []
        assert len(merge_with_rrf([docs(list("abcdef"))], {}, 3)) == 3

    @pytest.mark.parametrize("limit", [-1, 2.0, True])
    def test_bad_limit(self, limit: object) -> None:
        with pytest.raises(KolmValueError, match="limit"):
            merge_with_rrf([docs(["a"])], {}, limit)  # type: ignore[arg-type]

    def test_bad_weights(self) -> None:
        with pytest.raises(KolmValueError, match="weights"):
            merge_with_rrf([docs(["a"]), docs(["b"])], {}, 5, weights=[1.0])
        with pytest.raises(KolmValueError, match="weights"):
            merge_with_rrf([docs(["a"])], {}, 5, weights=[-1.0])

    def test_non_document_is_type_error(self) -> None:
        with pytest.raises(TypeError, match=r"ranked_lists\[0\]\[0\]"):
            merge_with_rrf([[{"id": "a"}]], {}, 5)  # type: ignore[list-item]


def random_groups(rng: np.random.Generator, n_groups: int, n_lists: int, depth: int, n_docs: int):
    ptr = [0]
    lists, dcs, contrib = [], [], []
    for _ in range(n_groups):
        for li in range(n_lists):
            size = int(rng.integers(0, depth + 1))
            d = rng.integers(0, n_docs, size)  # repeats on purpose
            lists += [li] * size
            dcs += list(d)
            contrib += list(np.round(1.0 / (60 + np.arange(size) + 1), 6))  # rounded: many ties
        ptr.append(len(dcs))
    return (np.array(ptr, np.int64), np.array(lists, np.int64), np.array(dcs, np.int64),
            np.array(contrib, np.float64))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mnz", [False, True])
@pytest.mark.parametrize("limit", [-1, 5])
@pytest.mark.parametrize("signed", [False, True])
def test_kernel_matches_numpy_twin(seed: int, mnz: bool, limit: int, signed: bool) -> None:
    rng = np.random.default_rng(seed)
    ptr, li, dc, ct = random_groups(rng, n_groups=50, n_lists=3, depth=30, n_docs=40)
    if signed:  # negative scores (z-score) and both zeros exercise the integer sort keys
        ct = ct * rng.choice([-1.0, 1.0], ct.size)
        ct[rng.random(ct.size) < 0.1] = 0.0
        ct[rng.random(ct.size) < 0.1] = -0.0
    got = fuse_groups(ptr, li, dc, ct, 40, mnz, limit, n_chunks=3)
    want = fuse_groups_numpy(ptr, li, dc, ct, 40, mnz, limit)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("chunks", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("limit", [-1, 2, 12, 10**6])
@pytest.mark.parametrize("layout", ["uneven", "empty-first-half", "duplicates"])
def test_kernel_output_placement_any_chunking(chunks: int, limit: int, layout: str) -> None:
    """Outputs are written at each chunk's upper bound (one or two chunks meet in the middle
    and return views; more chunks count first or copy together): every chunking gives the
    twin's arrays, contiguous and exactly as long as ``out_ptr`` says, also when a chunk
    writes nothing and when duplicates leave most of the bound unused."""
    rng = np.random.default_rng(5)
    ptr, li, dc, ct = random_groups(rng, n_groups=23, n_lists=3, depth=40, n_docs=60)
    if layout == "empty-first-half":  # the first chunks' groups hold no entries
        cut = int(ptr[12])
        ptr = np.concatenate([np.zeros(12, np.int64), ptr[12:] - cut])
        li, dc, ct = li[cut:], dc[cut:], ct[cut:]
    elif layout == "duplicates":  # three lists of the same few docs: a third of the bound is used
        dc = dc % 7
    got = fuse_groups(ptr, li, dc, ct, 60, False, limit, n_chunks=chunks)
    want = fuse_groups_numpy(ptr, li, dc, ct, 60, False, limit)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[1].flags.c_contiguous and got[2].flags.c_contiguous
    assert got[1].shape == got[2].shape == (int(got[0][-1]),)


@pytest.mark.parametrize("shape", ["spread", "ties", "outlier", "tiny-range"])
def test_kernel_sort_of_long_lists_matches_twin(shape: str) -> None:
    """Groups of hundreds of docs go through the bucketed sort (crowded buckets included)."""
    rng = np.random.default_rng(7)
    ptr, li, dc, ct = random_groups(rng, n_groups=12, n_lists=3, depth=600, n_docs=900)
    if shape == "ties":
        ct = np.round(ct * 50) / 50
    elif shape == "outlier":  # one huge score: every other doc lands in one bucket
        ct = ct + rng.random(ct.size) * 1e-3
        ct[::997] = 1e300
    elif shape == "tiny-range":
        ct = 1.0 + rng.integers(0, 1000, ct.size) * 2.0**-52
    for limit in (-1, 2, 50, 10**6):  # full sort, heap, bucketed top-limit, limit above any list
        got = fuse_groups(ptr, li, dc, ct, 900, False, limit, n_chunks=2)
        want = fuse_groups_numpy(ptr, li, dc, ct, 900, False, limit)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("codes", ["random", "strided", "clustered"])
@pytest.mark.parametrize("limit", [-1, 3, 40])
def test_kernel_hashes_large_code_ranges(codes: str, limit: int) -> None:
    """Codes over a range far wider than any group go through the per-chunk hash table (in the
    counting pass and the fusing pass); strided codes (multiples of 2**20) and runs of
    neighbouring codes probe long chains. Equal to the numpy twin."""
    rng = np.random.default_rng(3)
    ptr, li, dc, ct = random_groups(rng, n_groups=40, n_lists=3, depth=80, n_docs=120)
    n_docs = 10**9
    if codes == "random":
        table = rng.choice(n_docs, 120, replace=False)
    elif codes == "strided":
        table = np.arange(120, dtype=np.int64) << 20
    else:
        table = 500_000_000 + np.arange(120, dtype=np.int64)
    dc = table[dc].astype(np.int64)
    for chunks in (1, 3):
        got = fuse_groups(ptr, li, dc, ct, n_docs, False, limit, n_chunks=chunks)
        want = fuse_groups_numpy(ptr, li, dc, ct, n_docs, False, limit)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
    dc[len(dc) // 2] = n_docs  # validation on the hashed path too
    with pytest.raises(KolmValueError, match=f"got {n_docs}"):
        fuse_groups(ptr, li, dc, ct, n_docs, False, limit, n_chunks=2)


@pytest.mark.parametrize("limit", [-1, 5, 300])
@pytest.mark.parametrize("bad", [None, "low", "high"])
def test_kernel_direct_marks_over_a_wide_range_prefetch(limit: int, bad: str | None) -> None:
    """Groups wide enough that a direct mark array is used over >= 2**15 codes: the passes
    prefetch the mark of the entry 16 ahead (bad codes included: a prefetch never faults and
    the bad entry is still named). Equal to the numpy twin."""
    from kolm_search._kernels import fusion as kf

    rng = np.random.default_rng(11)
    ptr, li, dc, ct = random_groups(rng, n_groups=9, n_lists=3, depth=700, n_docs=1500)
    n_docs = 60_000
    dc = rng.choice(n_docs, 1500, replace=False)[dc].astype(np.int64)
    hb = int(kf._table_bits(int(np.max(np.diff(ptr)))))
    assert n_docs >= kf._FAR and not kf._use_table(n_docs, hb)  # the direct, prefetching path
    if bad is None:
        for chunks in (1, 3):
            got = fuse_groups(ptr, li, dc, ct, n_docs, False, limit, n_chunks=chunks)
            want = fuse_groups_numpy(ptr, li, dc, ct, n_docs, False, limit)
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
        return
    at = int(ptr[4]) + 5  # 16 entries ahead of it, earlier entries prefetch its mark
    dc[at] = -(2**62) if bad == "low" else 2**62
    with pytest.raises(KolmValueError, match=f"got {dc[at]}"):
        fuse_groups(ptr, li, dc, ct, n_docs, False, limit, n_chunks=2)


def test_prefetch_is_a_hint_at_any_index() -> None:
    """prefetch never faults (any index, far outside the array) and changes no value."""
    from numba import njit

    from kolm_search._kernels.words import prefetch

    @njit
    def touch(a, idx):  # pragma: no cover - compiled
        total = 0.0
        for i in idx:
            prefetch(a, i)
            total += a[0]
        return total

    a = np.arange(4, dtype=np.float64) + 1.5
    idx = np.array([0, 3, 10**12, np.iinfo(np.int64).max], dtype=np.int64)
    assert touch(a, idx) == 4 * 1.5
    assert touch(a, idx.view(np.uint64)) == 4 * 1.5


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("limit", [None, 2, 25])
@pytest.mark.parametrize("n_docs", [40, 10**8])  # direct marks and the hash table
def test_fuse_rrf_arrays_equal_contributions_path(seed: int, limit: int | None, n_docs: int) -> None:
    """RRF computed in the kernel from ranks is bit-identical to fuse_arrays on the numpy
    contributions w / (k + rank + 1), with weights, repeats and every output mode."""
    from kolm_search.fusion import fuse_rrf_arrays

    rng = np.random.default_rng(seed)
    ptr, li, dc, _ = random_groups(rng, n_groups=70, n_lists=3, depth=30, n_docs=40)
    if n_docs > 40:
        dc = dc * 2_500_000 + 7
    ranks = np.concatenate([np.arange(n) for n in np.diff(ptr)]).astype(np.int64)
    ranks = ranks % 17  # not positions: the kernel must read the given ranks
    if seed == 3:  # ranks so sparse that the wrapper takes the contribution array instead of a table
        ranks = ranks * 100_003
    w = np.array([1.0, 0.5, 2.25])
    k = 12.5
    contrib = np.divide(w[li], np.add(ranks, k + 1.0, dtype=np.float64))
    want = fuse_arrays(ptr, li, dc, contrib, n_docs, limit=limit, n_threads=2)
    got = fuse_rrf_arrays(ptr, li, dc, ranks, n_docs, k=k, weights=list(w), limit=limit, n_threads=2)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    twin = fuse_groups_numpy(ptr, li, dc, contrib, n_docs, False, -1 if limit is None else limit)
    for a, b in zip(got, twin, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n, chunks", [(0, 3), (1, 4), (7, 3), (1000, 8)])
def test_rank_ranges_match_numpy(n: int, chunks: int) -> None:
    from kolm_search._kernels.fusion import rank_ranges

    rng = np.random.default_rng(n)
    ranks = rng.integers(-5, 50, n).astype(np.int64)
    lids = rng.integers(-2, 9, n).astype(np.int64)
    want = (int(ranks.min()), int(ranks.max()), int(lids.min()), int(lids.max())) if n else (0, -1, 0, -1)
    assert rank_ranges(ranks, lids, chunks) == want


def test_fuse_rrf_arrays_validates() -> None:
    from kolm_search.fusion import fuse_rrf_arrays

    with pytest.raises(KolmValueError, match="ranks must be non-negative, got -1"):
        fuse_rrf_arrays([0, 2], [0, 0], [0, 1], [0, -1], 5)
    with pytest.raises(KolmValueError, match="one entry per list"):
        fuse_rrf_arrays([0, 2], [0, 1], [0, 1], [0, 0], 5, weights=[1.0])
    with pytest.raises(KolmValueError, match="list_ids must be non-negative, got -2"):
        fuse_rrf_arrays([0, 2], [0, -2], [0, 1], [0, 0], 5)
    with pytest.raises(KolmValueError, match="codes"):
        fuse_rrf_arrays([0, 2], [0, 0], [0, 9], [0, 1], 5)
    with pytest.raises(KolmValueError, match="ranks must have one shape|one shape"):
        fuse_rrf_arrays([0, 2], [0, 0], [0, 1], [0], 5)
    with pytest.raises(KolmValueError, match="k must be"):
        fuse_rrf_arrays([0, 2], [0, 0], [0, 1], [0, 1], 5, k=-1)


def test_fuse_arrays_validates() -> None:
    with pytest.raises(KolmValueError, match="group_ptr"):
        fuse_arrays([0, 3], [0], [0], [1.0], 5)
    with pytest.raises(KolmValueError, match="codes"):
        fuse_arrays([0, 1], [0], [7], [1.0], 5)
    with pytest.raises(KolmValueError, match="finite"):
        fuse_arrays([0, 1], [0], [0], [np.nan], 5)
    with pytest.raises(KolmValueError, match=r"\[0, 0\), got 0"):
        fuse_arrays([0, 1], [0], [0], [1.0], 0)


@pytest.mark.parametrize("limit", [None, 1, 40, 99])  # full lists, heap, bucketed top-limit, all
@pytest.mark.parametrize("bad", ["low", "high", "nan", "inf"])
def test_fuse_arrays_validates_in_every_pass(limit: int | None, bad: str) -> None:
    """The kernel passes validate inline: one bad entry deep inside a big batch is found, by
    the fusing pass (one or two chunks) and by the counting pass that more chunks run first."""
    rng = np.random.default_rng(7)
    ptr, li, dc, ct = random_groups(rng, n_groups=200, n_lists=2, depth=50, n_docs=100)
    at = int(rng.integers(len(dc) // 2, len(dc)))
    if bad in ("low", "high"):
        dc[at] = -3 if bad == "low" else 100
        match = f"got {dc[at]}"
    else:
        ct[at] = np.nan if bad == "nan" else -np.inf
        match = "finite"
    with pytest.raises(KolmValueError, match=match):
        fuse_arrays(ptr, li, dc, ct, 100, limit=limit, n_threads=2)
    with pytest.raises(KolmValueError, match=match):
        fuse_groups(ptr, li, dc, ct, 100, False, -1 if limit is None else limit, n_chunks=4)


@pytest.mark.parametrize("chunks", [1, 2, 3, 4])
@pytest.mark.parametrize("limit", [-1, 2, 12])
def test_kernel_writes_into_given_buffers(chunks: int, limit: int) -> None:
    """``out=`` buffers (reused across calls, larger than needed, stale values in them) give
    the same arrays as fresh outputs; the outputs are views of the buffers."""
    rng = np.random.default_rng(9)
    buf = (np.full(5000, -7, np.int64), np.full(5000, np.nan))
    for seed in range(3):  # the same buffers, call after call
        ptr, li, dc, ct = random_groups(np.random.default_rng(seed), n_groups=40, n_lists=3, depth=30,
                                        n_docs=int(rng.integers(20, 80)))
        want = fuse_groups_numpy(ptr, li, dc, ct, 80, False, limit)
        got = fuse_groups(ptr, li, dc, ct, 80, False, limit, n_chunks=chunks, out=buf)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert np.shares_memory(got[1], buf[0]) and np.shares_memory(got[2], buf[1])


def test_fuse_arrays_out_buffers_public_and_validated() -> None:
    """fuse_arrays / fuse_rrf_arrays take ``out``; exactly len(docs) entries suffice; a wrong
    dtype, shape, a short, read-only or strided buffer, or one that overlaps an input is a
    clear error naming ``out``."""
    from kolm_search import KolmTypeError
    from kolm_search.fusion import fuse_rrf_arrays

    rng = np.random.default_rng(2)
    ptr, li, dc, ct = random_groups(rng, n_groups=30, n_lists=3, depth=20, n_docs=50)
    n = len(dc)
    ranks = np.concatenate([np.arange(m) for m in np.diff(ptr)]).astype(np.int64)
    out = (np.empty(n, np.int64), np.empty(n, np.float64))
    calls = [lambda **kw: fuse_arrays(ptr, li, dc, ct, 50, n_threads=2, **kw),
             lambda **kw: fuse_rrf_arrays(ptr, li, dc, ranks, 50, limit=5, **kw)]
    for call in calls:  # one call at a time: the next call into ``out`` overwrites the views
        want = call()
        got = call(out=out)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert np.shares_memory(got[1], out[0]) and np.shares_memory(got[2], out[1])
    with pytest.raises(KolmTypeError, match=r"out\[0\] \(docs\) must be a 1-D int64 array, got 1-D int32"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(np.empty(n, np.int32), out[1]))
    with pytest.raises(KolmTypeError, match=r"out\[1\] \(scores\) must be a 1-D float64 array, got 2-D"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(out[0], np.empty((n, 1))))
    with pytest.raises(KolmValueError, match=f"at least {n} entries .* got {n - 1}"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(out[0][: n - 1], out[1]))
    with pytest.raises(KolmValueError, match="at least 150 entries"):  # 30 groups x limit 5
        fuse_arrays(ptr, li, dc, ct, 50, limit=5, out=(out[0][:149], out[1]))
    with pytest.raises(KolmValueError, match="C-contiguous"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(np.empty(2 * n, np.int64)[::2], out[1]))
    ro = np.empty(n, np.float64)
    ro.flags.writeable = False
    with pytest.raises(KolmValueError, match="writeable"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(out[0], ro))
    with pytest.raises(KolmValueError, match="share memory"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(dc, out[1]))
    with pytest.raises(KolmValueError, match="share memory"):
        fuse_arrays(ptr, li, dc, ct, 50, out=(out[0], out[0].view(np.float64)))
    with pytest.raises(KolmTypeError, match="tuple of two numpy arrays"):
        fuse_arrays(ptr, li, dc, ct, 50, out=[out[0], out[1]])  # type: ignore[arg-type]


def test_fuse_arrays_many_groups_threads() -> None:
    rng = np.random.default_rng(1)
    ptr, li, dc, ct = random_groups(rng, n_groups=300, n_lists=2, depth=20, n_docs=100)
    a = fuse_arrays(ptr, li, dc, ct, 100, n_threads=1)
    b = fuse_arrays(ptr, li, dc, ct, 100, n_threads=2)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("seed", range(5))
def test_grouping_kernels_match_numpy_twins(seed: int) -> None:
    from kolm_search._kernels.grouping import (
        block_segments,
        block_segments_numpy,
        counting_order,
        counting_order_numpy,
        intern_groups,
        intern_groups_numpy,
    )
    from kolm_search.interning import string_buffers

    rng = np.random.default_rng(seed)
    n, n_keys = 400, 17
    keys = rng.integers(0, n_keys, n).astype(np.int64)
    order, ptr = counting_order(keys, np.int64(n_keys))
    o2, p2 = counting_order_numpy(keys, n_keys)
    np.testing.assert_array_equal(order, o2)
    np.testing.assert_array_equal(ptr, p2)
    lid = np.sort(rng.integers(0, 3, n)).astype(np.int64)  # runs concatenated in list order
    key = np.round(rng.random(n), 1) if seed % 2 else np.arange(n, dtype=np.float64)
    ones = np.ones(n, np.int64)  # single-row blocks in any order: the unsorted-run fallback
    a = block_segments(ptr, order, ones, lid[order], ptr, key)
    b = block_segments_numpy(ptr, order, ones, lid[order], ptr, key)
    for x, y in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[3] == b[3]
    strings = [f"id{v}" for v in rng.integers(0, 30, n)]
    _, offsets, data = string_buffers(pd.Series(strings, dtype="str"))
    local, rep, counts = intern_groups(order, ptr, offsets, data, 3)
    local2, rep2, counts2 = intern_groups_numpy(order, ptr, strings)
    np.testing.assert_array_equal(local, local2)  # codes of every row, within its group
    np.testing.assert_array_equal(counts, counts2)
    for g in range(n_keys):  # each group's code -> first row
        np.testing.assert_array_equal(rep[ptr[g]:ptr[g] + counts[g]], rep2[ptr[g]:ptr[g] + counts2[g]])


def test_intern_groups_wide_groups_match_twin() -> None:
    """Groups of thousands of ids (long probe chains in the per-group table), ids of every
    length incl. empty and non-ASCII, many repeats, and one empty group."""
    from kolm_search._kernels.grouping import intern_groups, intern_groups_numpy
    from kolm_search.interning import string_buffers

    rng = np.random.default_rng(11)
    pool = ["", "é", "a", "doc1", "doc12345", "doc123456789"] + [f"d{i}" * (1 + i % 3) for i in range(3000)]
    sizes = [4000, 0, 2500, 1]
    strings = [pool[i] for i in rng.integers(0, len(pool), sum(sizes))]
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    order = rng.permutation(len(strings)).astype(np.int64)  # rows of a group scattered anywhere
    _, offsets, data = string_buffers(pd.Series(strings, dtype="str"))
    local, rep, counts = intern_groups(order, ptr, offsets, data, 2)
    local2, rep2, counts2 = intern_groups_numpy(order, ptr, strings)
    np.testing.assert_array_equal(local, local2)
    np.testing.assert_array_equal(counts, counts2)
    for g in range(len(sizes)):
        np.testing.assert_array_equal(rep[ptr[g]:ptr[g] + counts[g]], rep2[ptr[g]:ptr[g] + counts2[g]])


@pytest.mark.parametrize("scores", [[1e300, -1e300], [-0.0, 0.0, 5e-324], [np.finfo(float).max, np.finfo(float).min, 0.0]])
def test_kernel_sort_extreme_key_spans(scores: list[float]) -> None:
    """Tiny groups whose keys span most of the 64-bit range (the bucket shift saturates)."""
    n = len(scores)
    ptr = np.array([0, n, 2 * n], np.int64)
    ct = np.array(scores + scores[::-1], np.float64)
    li = np.zeros(2 * n, np.int64)
    dc = np.array(list(range(n)) * 2, np.int64)
    for limit in (-1, 1):
        got = fuse_groups(ptr, li, dc, ct, n, False, limit, n_chunks=1)
        want = fuse_groups_numpy(ptr, li, dc, ct, n, False, limit)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1000, 4097])
@pytest.mark.parametrize("shape", ["crowded", "spread"])
def test_sort_slots_against_stable_argsort(n: int, shape: str) -> None:
    """The ordering kernel (counting pass + insertion, merge-sort fallback for crowded
    buckets) against numpy's stable argsort, full and top-``stop``."""
    from kolm_search._kernels.fusion import _sort_slots
    from kolm_search._kernels.sorting import stable_argsort

    rng = np.random.default_rng(n)
    keys = rng.integers(0, 50 if shape == "crowded" else 2**40, n).astype(np.int64)
    if shape == "crowded":
        keys[0] = 2**62  # one outlier puts every other key in the first bucket
    want = np.argsort(keys, kind="stable")
    o, ks = np.empty(n, np.int64), np.empty(n, np.int64)
    for stop in (n, max(1, n // 3)):
        _sort_slots(keys, n, o, ks, np.empty(2 * n + 2, np.int32), np.empty(n, np.int32), stop)
        np.testing.assert_array_equal(o[:stop], want[:stop])
    stable_argsort(keys, n, o, ks)
    np.testing.assert_array_equal(o, want)
