"""The non-sum fusion pieces against plain-Python oracles: the Condorcet kernel and its twin,
CombMIN/MAX/MED, the normalisations, the Borda completion, and fuse_frame == fuse."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import CandidateFrame, KolmValueError, fuse
from kolm_search._kernels import load
from kolm_search.fusion import fuse_frame
from kolm_search.fusion.entries import Entries
from kolm_search.fusion.methods import METHODS
from kolm_search.fusion.normalize import NORMALIZATIONS, apply_norm
from kolm_search.fusion.voting import complete_lists


def random_lists(rng: np.random.Generator, n_groups: int, n_lists: int, depth: int, n_docs: int):
    ptr, lists, docs = [0], [], []
    for _ in range(n_groups):
        for li in range(n_lists):
            size = int(rng.integers(0, depth + 1))
            lists += [li] * size
            docs += list(rng.integers(0, n_docs, size))  # repeats on purpose
        ptr.append(len(docs))
    return np.array(ptr, np.int64), np.array(lists, np.int64), np.array(docs, np.int64)


@pytest.fixture
def condorcet(monkeypatch):
    kernel = load("condorcet")
    monkeypatch.setattr(kernel, "_PARALLEL_ENTRIES", 0)  # small inputs split over threads too
    return kernel


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("weights", [[1.0, 1.0, 1.0], [1.0, 1.0], [0.2, 0.5, 0.3], [1.0, 0.0, 2.0, 1.0]])
def test_condorcet_kernel_matches_twin(condorcet, seed: int, weights: list[float]) -> None:
    """Random lists (cycles, ties between absent documents, repeats) on any chunking."""
    rng = np.random.default_rng(seed)
    ptr, li, dc = random_lists(rng, 25, len(weights), 12, 15)
    for threads, limit in ((1, None), (2, 3), (4, 0)):
        got = condorcet.condorcet_groups(ptr, li, dc, weights, 15, limit=limit, n_threads=threads)
        want = condorcet.condorcet_groups_numpy(ptr, li, dc, weights, limit=limit)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_condorcet_kernel_orders_a_total_order_and_wide_codes(condorcet) -> None:
    """Lists that agree up to noise sort into their majority order, whatever the codes."""
    rng = np.random.default_rng(4)
    truth = rng.permutation(8)
    lists = [truth.copy() for _ in range(3)]
    lists[0][[1, 2]] = lists[0][[2, 1]]
    lists[1][[5, 6]] = lists[1][[6, 5]]
    ptr = np.array([0, 24])
    li = np.repeat(np.arange(3), 8)
    for table in (np.arange(8), np.arange(8) * 10**8):
        out_ptr, docs, scores = condorcet.condorcet_groups(ptr, li, table[np.concatenate(lists)], [1, 1, 1], 10**9)
        np.testing.assert_array_equal(docs, table[truth])
        np.testing.assert_array_equal(scores, np.arange(8, 0, -1))


def test_condorcet_kernel_validates(condorcet) -> None:
    with pytest.raises(KolmValueError, match="weights"):
        condorcet.condorcet_groups([0, 1], [0], [0], [-1.0], 3)
    with pytest.raises(KolmValueError, match="list ids"):
        condorcet.condorcet_groups([0, 1], [1], [0], [1.0], 3)
    with pytest.raises(KolmValueError, match="limit"):
        condorcet.condorcet_groups([0, 1], [0], [0], [1.0], 3, limit=-2)


run_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), st.sampled_from([f"d{i}" for i in range(7)]),
                              st.integers(-3, 3)), min_size=1, max_size=18)


def frames_of(rows_per_run: list[list[tuple[str, str, int]]]) -> list[pd.DataFrame]:
    return [pd.DataFrame(rows, columns=["qid", "doc_id", "score"]).astype({"score": float}) for rows in rows_per_run]


def lists_of(runs: list[pd.DataFrame]) -> dict[str, list[list[tuple[str, float]]]]:
    """{qid: per run [(doc, score)] best first, ties in input order, repeats dropped}."""
    out: dict[str, list[list[tuple[str, float]]]] = {}
    for qid in sorted(set().union(*[set(r.qid) for r in runs])):
        per_run = []
        for run in runs:
            sub = run[run.qid == qid]
            sub = sub.iloc[np.argsort(-sub.score.to_numpy(), kind="stable")].drop_duplicates("doc_id")
            per_run.append(list(zip(sub.doc_id, sub.score, strict=True)))
        out[qid] = per_run
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(run_rows, min_size=1, max_size=3), st.sampled_from(["min", "max", "med"]))
def test_comb_statistics_match_python(rows: list, stat: str) -> None:
    runs = frames_of(rows)
    got = fuse(runs, method=stat)
    for qid, per_run in lists_of(runs).items():
        values: dict[str, list[float]] = {}
        for lst in per_run:
            for d, s in lst:
                values.setdefault(d, []).append(s)
        f = {"min": min, "max": max, "med": lambda v: float(np.median(v))}[stat]
        want = sorted(((d, f(v)) for d, v in values.items()), key=lambda kv: -kv[1])  # ties: first appearance
        sub = got[got.qid == qid]
        assert list(sub.doc_id) == [d for d, _ in want]
        np.testing.assert_allclose(sub.score, [s for _, s in want])


def python_norm(scores: list[float], norm: str) -> list[float]:
    s, n = np.array(scores), len(scores)
    if norm == "rank":
        return [1 - i / n for i in range(n)]
    lo, hi = min(scores), max(scores)
    if norm == "min-max":
        return [(x - lo) / max(hi - lo, 1e-9) for x in scores]
    if norm == "min-max-inverted":
        return [(hi - x) / max(hi - lo, 1e-9) for x in scores]
    if norm == "max":
        return [x / max(hi, 1e-9) for x in scores]
    if norm == "sum":
        return [(x - lo) / max(sum(scores) - lo * n, 1e-9) for x in scores]
    return list((s - s.mean()) / max(float(s.std()), 1e-9))


@settings(max_examples=60, deadline=None)
@given(st.lists(run_rows, min_size=1, max_size=3), st.sampled_from(NORMALIZATIONS))
def test_normalisations_match_python(rows: list, norm: str) -> None:
    """Each (query, run) list normalised as ranx's formulas say; borda completes every list
    with the query's candidates it lacks, in first-appearance order."""
    runs = frames_of(rows)
    got = fuse(runs, method="wsum", norm=norm, weights=[10.0**i for i in range(len(runs))])  # one run per digit
    for qid, per_run in lists_of(runs).items():
        cands = list(dict.fromkeys(d for lst in per_run for d, _ in lst))
        want: dict[str, float] = dict.fromkeys(cands, 0.0)
        for i, lst in enumerate(per_run):
            if norm == "borda":
                ranked = [d for d, _ in lst]
                values = {d: 1 - j / len(cands) for j, d in enumerate(ranked)}
                values.update({d: 0.5 - (len(ranked) - 1) / (2 * len(cands)) for d in cands if d not in values})
            else:
                values = dict(zip([d for d, _ in lst], python_norm([s for _, s in lst], norm), strict=True)) if lst else {}
            for d, v in values.items():
                want[d] += 10.0**i * v
        sub = got[got.qid == qid]
        np.testing.assert_allclose(sub.set_index("doc_id").score.loc[list(want)], list(want.values()),
                                   rtol=1e-9, atol=1e-9)


def test_borda_completion_keeps_relevance_and_orders_missing_last() -> None:
    # query 0: list 0 = [5, 7], list 1 = [7, 9]; query 1: list 1 = [2]
    e = Entries(np.array([0, 4, 5]), np.array([0, 0, 1, 1, 1]), np.array([5, 7, 7, 9, 2]),
                np.array([2.0, 1.0, 3.0, 0.0, 1.0]), 2, 10, rel=np.array([True, False, False, True, False]))
    full, present, n_ranked, n_cand = complete_lists(e)
    got = list(zip(full.query.tolist(), full.lists.tolist(), full.docs.tolist(), full.rel.tolist(), present.tolist(),
                   n_ranked.tolist(), n_cand.tolist(), strict=True))
    assert got == [(0, 0, 5, True, True, 2, 3), (0, 0, 7, False, True, 2, 3), (0, 0, 9, True, False, 2, 3),
                   (0, 1, 7, False, True, 2, 3), (0, 1, 9, True, True, 2, 3), (0, 1, 5, True, False, 2, 3),
                   (1, 0, 2, False, False, 0, 1), (1, 1, 2, False, True, 1, 1)]
    assert full.position.tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    normed = apply_norm(e, "borda")
    assert normed.score.tolist() == pytest.approx([1, 2 / 3, 1 / 3, 1, 2 / 3, 1 / 3, 1.0, 1.0])


PARAMS = {"gmnz": {"gamma": 0.5}, "rbc": {"phi": 0.7}, "probfuse": {"probs": [[0.5, 0.2], [0.3, 0.1], [0.4, 0.0]]},
          "segfuse": {"probs": [[0.5] * 10, [0.2] * 10, [0.1] * 10]},
          "slidefuse": {"probs": [[0.5, 0.3, 0.1], [0.4], [0.2, 0.2]], "w": 1},
          "posfuse": {"probs": [[0.5, 0.3, 0.1], [0.4], [0.2, 0.2]]},
          "bayesfuse": {"log_odds": [np.linspace(1, -3, 1000)] * 3}, "mapfuse": {"map_scores": [0.3, 0.2, 0.1]}}


@pytest.mark.parametrize("method, norm", list(itertools.product(METHODS, [None, "min-max-inverted", "borda"])))
def test_fuse_frame_equals_fuse(method: str, norm: str | None) -> None:
    """Candidate frames (coded ids, a rank column) fuse as run DataFrames do."""
    rng = np.random.default_rng(len(method))
    runs, parts = [], []
    for li in range(3):
        rows = [(q, int(d), float(s)) for q in range(5) for d, s in zip(rng.choice(12, rng.integers(0, 7), replace=False),
                                                                        rng.random(12), strict=False)]
        run = pd.DataFrame(rows, columns=["qid", "doc_id", "score"]).sort_values(["qid", "score"],
                                                                                 ascending=[True, False])
        run["rank"] = run.groupby("qid").cumcount()
        runs.append(run)
        parts.append(run.assign(list_id=li))
    stacked = pd.concat(parts).sort_values(["qid", "list_id", "rank"])
    frame = CandidateFrame(query=stacked.qid.to_numpy(np.int32), doc=stacked.doc_id.to_numpy(np.int64),
                           score=stacked.score.to_numpy(), rank=stacked["rank"].to_numpy(np.int32), n_queries=5,
                           list_id=stacked.list_id.to_numpy(np.int32))
    params = PARAMS.get(method, {})
    got = fuse_frame(frame, method=method, norm=norm, params=params, n_lists=3, limit=4)
    want = fuse(runs, method=method, norm=norm, params=params, limit=4)
    assert got.query.tolist() == want.qid.tolist()
    assert got.doc.tolist() == want.doc_id.tolist()
    np.testing.assert_allclose(got.score, want.score, rtol=1e-12)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_on_empty_and_single_runs(method: str) -> None:
    empty = pd.DataFrame({"qid": pd.Series([], dtype=str), "doc_id": pd.Series([], dtype=str),
                          "score": pd.Series([], dtype=float)})
    one = pd.DataFrame({"qid": ["q"], "doc_id": ["a"], "score": [1.0]})
    params = {**PARAMS.get(method, {})}
    for key in ("probs", "log_odds", "map_scores"):
        if key in params:
            params[key] = params[key][:2]
    for norm in [None, *NORMALIZATIONS]:
        assert fuse([empty, empty], method=method, norm=norm, params=params).empty
        got = fuse([one, empty], method=method, norm=norm, params=params)
        assert got.doc_id.tolist() == ["a"] and np.isfinite(got.score).all()


def test_non_finite_scores_are_refused_where_read() -> None:
    inf = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "score": [np.inf, 1.0]})
    for method, norm in (("sum", None), ("rrf", "min-max"), ("max", None), ("segfuse", None)):
        params = PARAMS.get(method, {})
        if method == "segfuse":
            params = {"probs": params["probs"][:1]}
        with pytest.raises(KolmValueError, match="must be finite"):
            fuse([inf], method=method, norm=norm, params=params)
    assert fuse([inf], method="rrf").doc_id.tolist() == ["a", "b"]  # ranks only


def test_aliases_and_parameter_conflicts() -> None:
    rng = np.random.default_rng(9)
    runs = [pd.DataFrame({"qid": rng.choice(["a", "b"], 20), "doc_id": rng.choice(list("uvwxyz"), 20),
                          "score": rng.random(20)}) for _ in range(3)]
    for alias, name, norm_alias, norm in (("combsum", "sum", "z-score", "zmuv"), ("combmnz", "mnz", "min_max", "min-max"),
                                          ("wsum", "wsum", "min_max_inverted", "min-max-inverted")):
        pd.testing.assert_frame_equal(fuse(runs, method=alias, norm=norm_alias), fuse(runs, method=name, norm=norm))
    pd.testing.assert_frame_equal(fuse(runs, k=7), fuse(runs, params={"k": 7}))
    pd.testing.assert_frame_equal(fuse({"x": runs[0], "y": runs[1]}, method="wsum", weights={"y": 2.0}),
                                  fuse(runs[:2], method="wsum", params={"weights": [1.0, 2.0]}))
    with pytest.raises(KolmValueError, match="k given twice"):
        fuse(runs, k=1, params={"k": 2})
    with pytest.raises(KolmValueError, match="weights given twice"):
        fuse(runs, weights=[1, 1, 1], params={"weights": [1, 1, 1]})
    with pytest.raises(KolmValueError, match="sigma"):
        fuse(runs, method="logn_isr", params={"sigma": 2.0})
    with pytest.raises(KolmValueError, match="one table per run"):
        fuse(runs, method="posfuse", params={"probs": [[0.5]]})
