"""rrf_score, merge_with_rrf and the fusion kernel, against plain-Python oracles and the kernel's twin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import KolmValueError, SearchDocument, merge_with_rrf, rrf_score
from kolm_search._kernels import load


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


@pytest.fixture
def kernel():
    return load("fusion")


@pytest.fixture
def chunked(kernel, monkeypatch):
    """Small inputs split over threads too (normally only large batches are)."""
    monkeypatch.setattr(kernel, "_PARALLEL_ENTRIES", 0)
    return kernel


def assert_twin(kernel, ptr, li, dc, ct, n_docs, mnz=False, limit=None, n_threads=None) -> None:
    got = kernel.fuse_groups(ptr, li, dc, ct, n_docs, mnz=mnz, limit=limit, n_threads=n_threads)
    want = kernel.fuse_groups_numpy(ptr, li, dc, ct, mnz=mnz, limit=limit)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got[1].shape == got[2].shape == (int(got[0][-1]),)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mnz", [False, True])
@pytest.mark.parametrize("limit", [None, 5])
@pytest.mark.parametrize("signed", [False, True])
def test_kernel_matches_numpy_twin(kernel, seed: int, mnz: bool, limit: int | None, signed: bool) -> None:
    rng = np.random.default_rng(seed)
    ptr, li, dc, ct = random_groups(rng, n_groups=50, n_lists=3, depth=30, n_docs=40)
    if signed:  # negative scores (z-score) and both zeros
        ct = ct * rng.choice([-1.0, 1.0], ct.size)
        ct[rng.random(ct.size) < 0.1] = 0.0
        ct[rng.random(ct.size) < 0.1] = -0.0
    assert_twin(kernel, ptr, li, dc, ct, 40, mnz, limit)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("limit", [None, 0, 2, 12, 10**6])
@pytest.mark.parametrize("layout", ["uneven", "empty-first-half", "duplicates"])
def test_kernel_any_chunking(chunked, threads: int, limit: int | None, layout: str) -> None:
    """Every split over threads gives the twin's arrays, also when a chunk holds no entries and
    when duplicates leave most of each query's range unused."""
    rng = np.random.default_rng(5)
    ptr, li, dc, ct = random_groups(rng, n_groups=23, n_lists=3, depth=40, n_docs=60)
    if layout == "empty-first-half":
        cut = int(ptr[12])
        ptr = np.concatenate([np.zeros(12, np.int64), ptr[12:] - cut])
        li, dc, ct = li[cut:], dc[cut:], ct[cut:]
    elif layout == "duplicates":
        dc = dc % 7
    assert_twin(chunked, ptr, li, dc, ct, 60, limit=limit, n_threads=threads)


@pytest.mark.parametrize("shape", ["spread", "ties", "outlier", "tiny-range", "extremes"])
def test_kernel_sort_of_long_lists(kernel, shape: str) -> None:
    rng = np.random.default_rng(7)
    ptr, li, dc, ct = random_groups(rng, n_groups=12, n_lists=3, depth=600, n_docs=900)
    if shape == "ties":
        ct = np.round(ct * 50) / 50
    elif shape == "outlier":
        ct = ct + rng.random(ct.size) * 1e-3
        ct[::997] = 1e300
    elif shape == "tiny-range":
        ct = 1.0 + rng.integers(0, 1000, ct.size) * 2.0**-52
    elif shape == "extremes":
        ct = rng.choice([np.finfo(float).max / 4, np.finfo(float).min / 4, 0.0, -0.0, 5e-324], ct.size)
    for limit in (None, 2, 50, 10**6):
        assert_twin(kernel, ptr, li, dc, ct, 900, limit=limit)


@pytest.mark.parametrize("codes", ["random", "strided", "clustered"])
@pytest.mark.parametrize("limit", [None, 3, 40])
def test_kernel_wide_code_range(kernel, codes: str, limit: int | None) -> None:
    """Codes spread over a range far wider than the batch are renumbered first: the same lists."""
    rng = np.random.default_rng(3)
    ptr, li, dc, ct = random_groups(rng, n_groups=30, n_lists=3, depth=25, n_docs=50)
    span = 10**9
    if codes == "random":
        table = rng.choice(span, 50, replace=False)
    elif codes == "strided":
        table = np.arange(50) * (span // 50)
    else:
        table = span - 1 - np.arange(50)
    got = kernel.fuse_groups(ptr, li, table[dc], ct, span, limit=limit)
    want = kernel.fuse_groups_numpy(ptr, li, table[dc], ct, limit=limit)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_kernel_threads_agree(kernel) -> None:
    rng = np.random.default_rng(1)
    ptr, li, dc, ct = random_groups(rng, n_groups=3000, n_lists=2, depth=30, n_docs=500)
    assert len(dc) >= kernel._PARALLEL_ENTRIES  # large enough to be split over threads
    one = kernel.fuse_groups(ptr, li, dc, ct, 500, n_threads=1)
    two = kernel.fuse_groups(ptr, li, dc, ct, 500, n_threads=2)
    for a, b in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad, match", [
    ({"ptr": [0, 3]}, "ptr must"), ({"docs": [7, 0]}, r"\[0, 5\), got \[0, 7\]"),
    ({"docs": [-1, 0]}, "got \\[-1, 0\\]"), ({"contrib": [np.nan, 1.0]}, "finite"),
    ({"contrib": [np.inf, 1.0]}, "finite"), ({"lists": [1, 0]}, "increasing list id"),
    ({"lists": [-1, 0]}, "non-negative"), ({"contrib": [1.0]}, "one length"), ({"limit": -1}, "limit"),
])
def test_kernel_wrapper_validates(kernel, bad: dict, match: str) -> None:
    args = {"ptr": [0, 2], "lists": [0, 0], "docs": [0, 1], "contrib": [1.0, 0.5], "limit": None}
    args.update(bad)
    limit = args.pop("limit")
    with pytest.raises(KolmValueError, match=match):
        kernel.fuse_groups(args["ptr"], args["lists"], args["docs"], args["contrib"], 5, limit=limit)


def test_kernel_lists_may_decrease_across_queries(kernel) -> None:
    """List ids restart in each query: only a decrease inside one query is an error."""
    assert_twin(kernel, [0, 2, 3], [0, 1, 0], [0, 1, 1], [1.0, 1.0, 1.0], 3)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("scale", [{"power": -1.0}, {"power": 0.5}, {"power": 0.7}, {"log_offset": 0.0},
                                   {"log_offset": 0.3}, {"power": 1.0, "presence": [0.2, 0.5, 0.3]},
                                   {"presence": [2.0, 0.0, 1.0], "power": 1.0}])
def test_kernel_scaling_by_presence_matches_twin(chunked, seed: int, scale: dict) -> None:
    """Sums scaled by the (weighted) number of lists holding each document, as the twin does."""
    rng = np.random.default_rng(seed)
    ptr, li, dc, ct = random_groups(rng, n_groups=40, n_lists=3, depth=20, n_docs=30)
    for threads, limit in ((1, None), (3, 4)):
        got = chunked.fuse_groups(ptr, li, dc, ct, 30, limit=limit, n_threads=threads, **scale)
        want = chunked.fuse_groups_numpy(ptr, li, dc, ct, limit=limit, **scale)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_kernel_scaling_is_checked(kernel) -> None:
    args = ([0, 2], [0, 1], [0, 1], [1.0, 0.5], 5)
    for bad, match in (({"mnz": True, "power": 2.0}, "one of"), ({"power": -1.0, "presence": [1.0, 0.0]}, "power"),
                       ({"log_offset": -1.0}, "log_offset"), ({"presence": [1.0]}, "presence"),
                       ({"presence": [1.0, np.nan]}, "presence")):
        with pytest.raises(KolmValueError, match=match):
            kernel.fuse_groups(*args, **bad)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("span", [7, 10**9])
def test_first_in_block_matches_twin(kernel, seed: int, span: int) -> None:
    """Repeats inside a block found as pandas' duplicated finds them, dense or sparse codes."""
    rng = np.random.default_rng(seed)
    block = np.sort(rng.integers(0, 30, 400))
    docs = rng.choice(rng.integers(0, span, 9), 400)
    np.testing.assert_array_equal(kernel.first_in_block(block, docs), kernel.first_in_block_numpy(block, docs))
    with pytest.raises(KolmValueError, match="non-negative"):
        kernel.first_in_block([0, 0], [-1, 2])
