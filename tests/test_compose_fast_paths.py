"""The shortcuts of the stage runner (issue 27, the experiment's speed): a cutoff of a frame
already in rank order keeps a prefix without sorting, ``rescored`` sorts each query's row,
a node's output is keyed by the node that made it, and a dataset's judged queries are found
by a set lookup. Oracles: the sorting paths (``lexsort``), ``frame_digest`` and pandas'
``isin``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, CandidateFrame
from kolm_search.compose import sharing
from kolm_search.compose.fingerprints import frame_digest
from kolm_search.compose.frame_ops import _ranked, _stable_rows, cutoff, rescored, scale
from kolm_search.compose.queries import prepare_queries, run_prepared
from kolm_search.compose.runner import RunState, frame_key
from kolm_search.io import Dataset


def _frames(seed: int) -> list[CandidateFrame]:
    rng = np.random.default_rng(seed)
    out = []
    for trial in range(60):
        n_q = int(rng.integers(1, 7))
        counts = rng.integers(0, 6, n_q) if trial % 2 else np.full(n_q, int(rng.integers(0, 5)))
        if trial % 5 == 0:
            counts[0] = 30  # one long list: the row matrix would be mostly padding
        ptr = np.concatenate([[0], np.cumsum(counts)])
        n = int(ptr[-1])
        out.append(CandidateFrame.from_ptr(ptr, rng.integers(0, 40, n), rng.integers(0, 4, n).astype(np.float64)))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_rescored_and_scale_match_lexsort(seed: int) -> None:
    rng = np.random.default_rng(seed + 10)
    for frame in _frames(seed):
        new = rng.integers(0, 3, len(frame)).astype(np.float64)  # many ties: broken by the old rank
        out = rescored(frame, new)
        order = np.lexsort((frame.rank, -new, frame.query))
        for got, want in ((out.query, frame.query[order]), (out.doc, frame.doc[order]), (out.score, new[order]),
                          (out.rank, _ranked(out).rank)):
            np.testing.assert_array_equal(got, want)
        neg = scale(frame, -2.0)
        order = np.lexsort((frame.rank, -(frame.score * -2.0), frame.query))
        np.testing.assert_array_equal(neg.doc, frame.doc[order])


@pytest.mark.parametrize("k", [1, 2, 3, 100])
def test_cutoff_of_a_ranked_frame_equals_the_sorting_path(k: int) -> None:
    for frame in _frames(3):
        fast = cutoff(frame, k)
        shuffled = CandidateFrame(query=frame.query, doc=frame.doc, score=frame.score, rank=frame.rank,
                                  n_queries=frame.n_queries, list_id=np.zeros(len(frame), np.int32))  # slow path
        slow = cutoff(shuffled, k)
        for name in ("query", "doc", "score", "rank"):
            np.testing.assert_array_equal(getattr(fast, name), getattr(slow, name))
            assert getattr(fast, name).dtype == getattr(slow, name).dtype


def test_a_node_output_is_keyed_by_its_node() -> None:
    corpus = pd.DataFrame({"id": ["a", "b", "c"], "title": "", "content": ["x y", "y z", "z z x"]})
    first = BM25Retriever(corpus) % 2
    loose = CandidateFrame.from_ptr([0, 1], [0], [1.0])
    assert frame_key(loose) == frame_digest(loose)  # outside a block: the entries' digest
    state = RunState()
    prepared = prepare_queries(["x", "z"], limit=2)
    with sharing(state):
        run_prepared(first, prepared)
        outputs = list(state.memo.values())
        assert all(frame_key(f).startswith("node:") for f in outputs)
        assert frame_key(loose) == frame_digest(loose)
    assert frame_key(outputs[0]) == frame_digest(outputs[0])  # the block is over


def test_judged_queries_equal_isin() -> None:
    queries = pd.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "query": ["a", "b", "c", "d"]})
    qrels = pd.DataFrame({"qid": ["q3", "q1", "q1", "zz"], "doc_id": ["d", "d", "e", "f"], "relevance": 1})
    ds = Dataset(name="t", corpus=pd.DataFrame({"id": ["d"], "title": "", "content": ["x"]}), queries=queries,
                 qrels=qrels)
    want = queries[queries["qid"].isin(set(qrels["qid"]))].reset_index(drop=True)
    pd.testing.assert_frame_equal(ds.judged_queries(), want)
    # categorical qids (as load_dataset gives), with a category no judgement uses any more
    ds.qrels = qrels.assign(qid=pd.Categorical(qrels["qid"], categories=["q1", "q2", "q3", "zz"]))
    pd.testing.assert_frame_equal(ds.judged_queries(), want)
    ds.queries = queries.assign(qid=pd.Categorical(queries["qid"]))
    pd.testing.assert_frame_equal(ds.judged_queries(), ds.queries[ds.queries["qid"].isin(set(qrels["qid"]))]
                                  .reset_index(drop=True))


def test_an_alias_entry_reads_through_its_target(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kolm_search.compose import StageCache

    cache = StageCache(tmp_path)
    frame = CandidateFrame.from_ptr([0, 2, 3], [4, 1, 7], [2.5, 1.0, 0.5])
    cache.put("stage-a", "input-1", frame)
    cache.put("then", "input-0", frame, same_as=("stage-a", "input-1"))
    back = cache.get("then", "input-0", 2)
    assert back is not None
    for name in ("query", "doc", "score", "rank"):
        np.testing.assert_array_equal(getattr(back, name), getattr(frame, name))
    assert cache.file_for("then", "input-0").stat().st_size < cache.file_for("stage-a", "input-1").stat().st_size
    other = CandidateFrame.from_ptr([0, 1, 3], [4, 1, 7], [2.5, 1.0, 0.5])
    cache.put("stage-a", "input-1", other)  # the target now holds other entries: the alias no longer holds
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert cache.get("then", "input-0", 2) is None
    cache.file_for("stage-a", "input-1").write_bytes(b"")
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert cache.get("then", "input-0", 2) is None


@pytest.mark.parametrize("ties", [False, True])
def test_rescored_of_full_and_ragged_frames_matches_lexsort(ties: bool) -> None:
    rng = np.random.default_rng(7)
    for trial in range(40):
        n_q, width = int(rng.integers(1, 9)), int(rng.integers(1, 12))
        counts = np.full(n_q, width) if trial % 2 else rng.integers(max(1, width // 2), width + 1, n_q)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        n = int(ptr[-1])
        frame = CandidateFrame.from_ptr(ptr, rng.integers(0, 99, n), rng.standard_normal(n))
        new = rng.integers(0, 2, n).astype(np.float64) if ties else rng.standard_normal(n)
        if trial % 3 == 0:
            new[: n // 2] = -0.0 if trial % 2 else 0.0  # signed zeros compare equal: a tie
        out = rescored(frame, new)
        order = np.lexsort((frame.rank, -new, frame.query))
        for got, want in ((out.query, frame.query[order]), (out.doc, frame.doc[order]), (out.score, new[order]),
                          (out.rank, _ranked(out).rank)):
            np.testing.assert_array_equal(got, want)
        assert (out.query.dtype, out.doc.dtype, out.score.dtype, out.rank.dtype) == \
            (np.int32, np.int64, np.float64, np.int32)


def test_rescored_sorts_again_the_rows_that_tie_past_the_first_ones() -> None:
    rng = np.random.default_rng(3)
    for dense in (True, False):
        counts = np.full(40, 9) if dense else rng.integers(5, 10, 40)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        n = int(ptr[-1])
        frame = CandidateFrame.from_ptr(ptr, rng.integers(0, 99, n), rng.standard_normal(n))
        new = rng.standard_normal(n)
        for q in (20, 33):  # ties in rows the first 16 do not show
            new[ptr[q]:ptr[q + 1]] = np.round(new[ptr[q]:ptr[q + 1]])
        out = rescored(frame, new)
        order = np.lexsort((frame.rank, -new, frame.query))
        np.testing.assert_array_equal(out.doc, frame.doc[order])
        np.testing.assert_array_equal(out.score, new[order])


_POOL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 5e-324, -5e-324, 1.5, np.nextafter(1.5, 2.0),
                  np.nextafter(1.5, 1.0), 1.5 + 2**-40, -2.0, np.nextafter(-2.0, 0.0), 3e300, -3e300])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), st.integers(1, 300), st.integers(0, 2**32 - 1), st.sampled_from(["pool", "normal", "round"]))
def test_stable_rows_equal_numpys_stable_argsort(rows: int, width: int, seed: int, kind: str) -> None:
    """The packed-key row sort against ``np.argsort(kind="stable")``: ties (signed zeros too),
    infinities, denormals and values one ulp apart (whose packed keys collide: sorted again)."""
    rng = np.random.default_rng(seed)
    if kind == "pool":
        neg = rng.choice(_POOL, (rows, width))
    elif kind == "normal":
        neg = rng.standard_normal((rows, width))
    else:
        neg = np.round(rng.standard_normal((rows, width)), 1)
    got = _stable_rows(neg)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.argsort(neg, axis=1, kind="stable"))


def test_stable_rows_with_nan_or_long_rows_equal_numpys() -> None:
    """NaN: numpy's sort (NaN last); rows of 2**21 + 1 entries: 22 bits of column, most keys collide."""
    neg = np.array([[1.0, np.nan, -1.0, np.nan, 0.0]])
    np.testing.assert_array_equal(_stable_rows(neg), np.argsort(neg, axis=1, kind="stable"))
    wide = np.round(np.random.default_rng(0).standard_normal((2, (1 << 24) // 8 + 1)), 2)
    np.testing.assert_array_equal(_stable_rows(wide), np.argsort(wide, axis=1, kind="stable"))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 200), st.integers(0, 2**32 - 1),
       st.sampled_from(["pool", "ulps", "ties", "nan"]))
def test_row_sort_kernel_is_its_numpy_twin(rows: int, width: int, seed: int, kind: str) -> None:
    """``_kernels/row_sort.stable_rows`` against ``stable_rows_numpy``: values alike in all but
    their last bits (many insertion moves: some rows handed to numpy), ties, signed zeros; NaN
    refused (None)."""
    from kolm_search._kernels import load
    from kolm_search._kernels.row_sort import stable_rows_numpy

    rng = np.random.default_rng(seed)
    if kind == "ulps":  # one ulp apart, in descending order: every entry moves
        neg = 1.0 + np.arange(width)[::-1] * 2.0**-52 * rng.integers(1, 3, (rows, 1))
    elif kind == "ties":
        neg = rng.integers(-2, 3, (rows, width)).astype(np.float64) * rng.choice([1.0, -0.0], (rows, width))
    else:
        neg = rng.choice(_POOL, (rows, width))
    if kind == "nan":
        neg[rng.integers(0, rows), rng.integers(0, width)] = np.nan
        assert load("row_sort").stable_rows(neg) is None
        return
    got = load("row_sort").stable_rows(neg)
    assert got is not None and got.dtype == np.int64
    np.testing.assert_array_equal(got, stable_rows_numpy(neg))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=12), st.integers(0, 2**32 - 1),
       st.sampled_from(["pool", "ulps", "ties", "nan", "unranked"]))
def test_rescore_rows_kernel_is_its_numpy_twin(lengths: list[int], seed: int, kind: str) -> None:
    """``_kernels/row_sort.rescore_rows`` against ``rescore_rows_numpy`` (one lexsort by query,
    descending score, rank) on ranked frames, full and ragged, empty queries among them; None for
    a NaN score, entries not ranked, or a list much longer than the mean."""
    from kolm_search._kernels import load
    from kolm_search._kernels.row_sort import rescore_rows_numpy

    rng = np.random.default_rng(seed)
    counts = np.array(lengths)
    query = np.repeat(np.arange(len(counts)), counts).astype(np.int32)
    rank = np.concatenate([np.arange(c) for c in counts]).astype(np.int32) if counts.sum() else np.zeros(0, np.int32)
    doc = rng.integers(0, 1000, len(query)).astype(np.int64)
    n = len(query)
    if kind == "ulps":
        score = 1.0 + np.arange(n) * 2.0**-52 * rng.integers(1, 3)
    elif kind == "ties":
        score = rng.integers(-2, 3, n).astype(np.float64) * rng.choice([1.0, -0.0], n)
    else:
        score = rng.choice(_POOL[np.isfinite(_POOL)], n)
    if kind == "nan" and n:
        score[rng.integers(0, n)] = np.nan
    if kind == "unranked" and n > 1:
        rank = rank[::-1].copy()
    got = load("row_sort").rescore_rows(query, rank, doc, score, len(counts))
    width = int(counts.max())
    sparse = n == 0 or len(counts) * width > 2 * n
    ranked = kind != "unranked" or n < 2 or bool(np.array_equal(rank, rank[::-1]))
    if (kind == "nan" and n) or sparse or not ranked:
        assert got is None
        return
    if got is None:  # many moves (values one ulp apart): left to the caller
        assert kind == "ulps"
        return
    want = rescore_rows_numpy(query, rank, doc, score)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=8), st.integers(0, 2**32 - 1),
       st.sampled_from(["ranked", "swap", "shift", "descending", "outside", "negative", "int64"]))
def test_ranked_width_kernel_is_its_numpy_twin(lengths: list[int], seed: int, kind: str) -> None:
    """``_kernels/row_sort.ranked_width`` (the check ``cutoff`` makes before keeping prefixes)
    against ``ranked_width_numpy`` and against its definition: the longest list when queries
    ascend with ranks ``0..`` each, -1 when two entries swap, a rank is off by one, queries
    descend or a query is outside the batch (past it or negative); int64 columns take the twin.
    The kernel's count per query (what ``rescore_rows`` sorts by) is each query's entries."""
    from kolm_search._kernels import load
    from kolm_search._kernels.row_sort import _ranked_width, ranked_width_numpy

    rng = np.random.default_rng(seed)
    counts = np.array(lengths, np.int64)
    n_q = len(counts)
    query = np.repeat(np.arange(n_q), counts).astype(np.int32)
    rank = np.concatenate([np.arange(c) for c in counts]).astype(np.int32) if counts.sum() else np.zeros(0, np.int32)
    n = len(query)
    broken = False
    if kind == "swap" and n > 1:
        i = int(rng.integers(0, n - 1))
        rank[[i, i + 1]] = rank[[i + 1, i]]
        broken = rank[i] != rank[i + 1]
    elif kind == "shift" and n:
        rank[int(rng.integers(0, n))] += 1
        broken = True
    elif kind == "descending" and n and query[0] != query[-1]:
        query, rank = query[::-1].copy(), rank[::-1].copy()
        broken = True
    elif kind == "outside" and n:
        query = query.copy()
        query[-1] = n_q
        broken = True
    elif kind == "negative" and n:
        query = query.copy()
        query[: int(rng.integers(1, n + 1))] = -1
        broken = True
    elif kind == "int64":
        query, rank = query.astype(np.int64), rank.astype(np.int64)
    got = load("row_sort").ranked_width(query, rank, n_q)
    assert got == ranked_width_numpy(query, rank, n_q)
    assert got == (-1 if broken else int(counts.max(initial=0)))
    if not broken and query.dtype == np.int32:
        count = np.full(n_q, -7, np.int64)
        assert _ranked_width(query, rank, n_q, count) == got
        np.testing.assert_array_equal(count, counts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=6), st.integers(0, 2**32 - 1),
       st.sampled_from([2**31, 2**32, 3 * 2**32, 2**40]))
def test_rescored_of_int64_ranks_past_int32_orders_by_the_ranks_themselves(lengths: list[int], seed: int,
                                                                          offset: int) -> None:
    """A frame whose int64 ranks do not fit int32, ranks ``0..`` per query but some moved up by
    ``offset`` (the row sort kernel's cast wrapped ``[2**32, 1]`` to ``[0, 1]``, took the frame
    as ranked, and broke ties by the wrapped ranks): ``rescored`` equals a lexsort by (query,
    descending new score, old rank), with ranks ``0..`` per query."""
    rng = np.random.default_rng(seed)
    counts = np.array(lengths, np.int64)
    n_q = len(counts)
    query = np.repeat(np.arange(n_q), counts).astype(np.int32)
    n = len(query)
    starts = np.cumsum(counts) - counts
    rank = np.arange(n, dtype=np.int64) - np.repeat(starts, counts)
    rank += np.where(rng.random(n) < 0.5, offset, 0)
    doc = rng.permutation(n).astype(np.int64)
    new = rng.integers(0, 2, n).astype(np.float64)  # many ties: broken by the old rank
    frame = CandidateFrame(query=query, doc=doc, score=np.zeros(n), rank=rank, n_queries=n_q)
    got = rescored(frame, new)
    order = np.lexsort((rank, -new, query))
    np.testing.assert_array_equal(got.doc, doc[order])
    np.testing.assert_array_equal(got.score, new[order])
    np.testing.assert_array_equal(got.rank, np.arange(n) - np.repeat(starts, counts))


def test_operators_over_a_batch_of_no_queries_return_an_empty_batch() -> None:
    """Every operator over frames of a batch of no queries (``n_queries == 0``): an empty frame
    of no queries, not numpy's broadcast error from renumbering the ranks."""
    from kolm_search.compose import frame_ops

    empty = CandidateFrame.empty(0)
    listed = CandidateFrame(query=empty.query, doc=empty.doc, score=empty.score, rank=empty.rank, n_queries=0,
                            list_id=np.zeros(0, np.int32))
    outs = [frame_ops.cutoff(empty, 3), frame_ops.cutoff(listed, 3), frame_ops.scale(empty, 2.0),
            frame_ops.scale(empty, -1.0), frame_ops.rescored(listed, np.zeros(0))]
    outs += [getattr(frame_ops, op)(empty, empty) for op in
             ("linear", "union", "intersection", "concatenate", "feature_union")]
    for out in outs:
        assert len(out) == 0 and out.n_queries == 0 and out.rank.dtype == np.int32


def test_rank_checks_of_a_huge_batch_allocate_nothing_of_its_size() -> None:
    """``ranked_width`` (``cutoff``'s check) and ``rescore_rows`` of three entries in a batch
    declared 10**12 queries long answer without an array of that size (before: ``ranked_width``
    allocated a count per query)."""
    from kolm_search._kernels import load

    query, rank = np.array([0, 0, 7], np.int32), np.array([0, 1, 0], np.int32)
    assert load("row_sort").ranked_width(query, rank, 10**12) == 2
    assert load("row_sort").rescore_rows(query, rank, np.arange(3), np.array([1.0, 2.0, 3.0]), 10**12) is None
    frame = CandidateFrame(query=query, doc=np.arange(3, dtype=np.int64), score=np.array([3.0, 2.0, 1.0]), rank=rank,
                           n_queries=10**12)
    assert cutoff(frame, 1).doc.tolist() == [0, 2]


@pytest.mark.parametrize("shape", [(2,), (4,), (3, 1), ()])
def test_rescored_refuses_scores_not_one_per_candidate(shape: tuple[int, ...]) -> None:
    """A columnar reranker's scores of the wrong shape are a ``FrameValidationError`` naming both
    sizes (before: numpy's reshape or index error), a ``SearchError`` naming the stage in a pipeline."""
    from kolm_search.errors import FrameValidationError

    frame = CandidateFrame.from_ptr([0, 3], np.arange(3), np.array([3.0, 2.0, 1.0]))
    with pytest.raises(FrameValidationError, match=r"rescored: .* scores for a frame of 3 candidates"):
        rescored(frame, np.ones(shape))


def test_a_reranker_giving_rescored_too_few_scores_is_a_search_error_naming_it() -> None:
    """Inside a pipeline, ``rescored``'s refusal reaches the caller as a ``SearchError`` naming the reranker."""
    from kolm_search.compose.kinds import RerankerStage
    from kolm_search.errors import SearchError

    class Short(RerankerStage):
        def stage_params(self) -> dict[str, object]:
            return {}

        def transform(self, batch: object, candidates: CandidateFrame | None) -> CandidateFrame:
            assert candidates is not None
            return rescored(candidates, candidates.score[:-1])

    bm25 = BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(["alpha beta", "alpha gamma", "beta gamma", "alpha alpha"])])
    with pytest.raises(SearchError, match=r"Short.*rescored: \(\d+,\) scores for a frame of \d+ candidates"):
        (bm25 % 3 >> Short())(pd.DataFrame({"qid": ["q1", "q2"], "query": ["alpha", "beta"]}))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=0, max_size=8), st.integers(0, 2**32 - 1),
       st.sampled_from(["ranked", "unranked", "int64", "lists", "sparse"]))
def test_a_frames_ranked_counts_are_its_queries_entries_made_once(lengths: list[int], seed: int, kind: str) -> None:
    """``CandidateFrame.ranked_counts``: each query's entries (``bincount``) when the frame is
    one list ranked ``0..`` per query, None when it is not (ranks shuffled, several lists) or
    its batch is mostly empty queries; made once per frame (the same array again), the same
    for ``reordered`` (a reranker's frame: the same query and rank arrays); ``cutoff`` and ``rescored`` of
    it equal the sorting paths (lexsort)."""
    rng = np.random.default_rng(seed)
    counts = np.array(lengths, np.int64)
    n_q = len(counts) + (3 * int(counts.sum()) + 2 if kind == "sparse" else 0)
    ptr = np.concatenate([[0], np.cumsum(counts), np.full(n_q - len(counts), counts.sum())]).astype(np.int64)
    n = int(ptr[-1])
    frame = CandidateFrame.from_ptr(ptr, rng.permutation(max(n, 1))[:n], rng.integers(0, 3, n).astype(np.float64),
                                    list_id=np.zeros(n, np.int32) if kind == "lists" else None)
    broken = False
    if kind == "unranked" and n > 1 and len(np.unique(frame.rank)) > 1:
        rank = frame.rank.copy()
        rank[[0, -1]] = rank[[-1, 0]]
        broken = bool(rank[0] != frame.rank[0])
        frame = CandidateFrame(frame.query, frame.doc, frame.score, rank, n_q)
    elif kind == "int64":
        frame = CandidateFrame(frame.query.astype(np.int64), frame.doc, frame.score, frame.rank.astype(np.int64), n_q)
    got = frame.ranked_counts
    if kind == "lists" or broken or n_q > 2 * n + 1:
        assert got is None
    else:
        assert got is not None and got.dtype == np.int64
        np.testing.assert_array_equal(got, np.bincount(frame.query, minlength=n_q))
        assert frame.ranked_counts is got  # made once
    new_score = rng.integers(0, 3, n).astype(np.float64)
    if kind != "lists":
        out = rescored(frame, new_score)
        order = np.lexsort((frame.rank, -new_score, frame.query))
        np.testing.assert_array_equal(out.doc, frame.doc[order])
        np.testing.assert_array_equal(out.score, new_score[order])
        if got is not None:  # the same counts (kept, not made again, when the row sort kernel re-ranked it)
            np.testing.assert_array_equal(out.ranked_counts, got)
        for k in (1, 2, 10):
            cut = cutoff(out, k)
            keep = out.rank < k
            np.testing.assert_array_equal(cut.doc, out.doc[keep])
            np.testing.assert_array_equal(cut.rank, out.rank[keep])
    reordered = frame.reordered(frame.doc[::-1].copy(), frame.score[::-1].copy())
    assert reordered.list_id is None and reordered.query is frame.query and reordered.rank is frame.rank
    if got is not None:
        np.testing.assert_array_equal(reordered.ranked_counts, got)


def test_rescore_rows_refuses_counts_that_do_not_describe_its_entries() -> None:
    """``rescore_rows(..., counts)`` takes the entries as ranked by the counts a frame made:
    counts of another shape, another sum, a negative one or not integers raise ``ValueError``
    before the kernel reads past the entries."""
    from kolm_search._kernels import load

    query = np.array([0, 0, 1], np.int32)
    rank = np.array([0, 1, 0], np.int32)
    doc, score = np.array([5, 6, 7], np.int64), np.array([0.1, 0.9, 0.5])
    rows = load("row_sort")
    got = rows.rescore_rows(query, rank, doc, score, 2, np.array([2, 1], np.int64))
    assert got is not None
    np.testing.assert_array_equal(got[0], [6, 5, 7])
    for bad in ([2, 1, 0], [2, 2], [4, -1]):
        with pytest.raises(ValueError, match="counts"):
            rows.rescore_rows(query, rank, doc, score, 2, np.array(bad, np.int64))
    # counts of another dtype are read as the int64 the kernel takes: fractions (summing to the
    # entries as floats) and a uint64 past int64 (wrapped to a negative count) are refused too,
    # never left to write fewer entries than it returns (uninitialised documents and scores)
    for bad_counts in (np.array([1.5, 1.5]), np.array([2**64 - 1, 4], np.uint64)):
        with pytest.raises(ValueError, match="counts"):
            rows.rescore_rows(query, rank, doc, score, 2, bad_counts)
