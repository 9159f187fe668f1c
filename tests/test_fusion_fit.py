"""fit_fusion, FittedFusion and optimize_fusion over any method: brute-force grid oracles,
train/test splits against ranx, name matching and errors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import FittedFusion, KolmValueError, evaluate, fit_fusion, fuse, optimize_fusion


def make_runs(seed: int, n_queries: int = 12) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Three runs that see the relevant documents with different skill, and their qrels."""
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(rng.integers(1, 3))) for q in range(n_queries)
                          for d in rng.choice(30, 4, replace=False)], columns=["qid", "doc_id", "relevance"])
    relevant = set(zip(qrels.qid, qrels.doc_id, strict=True))
    runs = {}
    for name, skill in (("a", 1.5), ("b", 0.7), ("c", 0.2)):
        rows = []
        for q in range(n_queries):
            docs = rng.choice(30, int(rng.integers(5, 15)), replace=False)
            scores = rng.random(len(docs)) + skill * np.array([(f"q{q}", f"d{d}") in relevant for d in docs])
            rows += [(f"q{q}", f"d{d}", float(s)) for d, s in zip(docs, scores, strict=True)]
        runs[name] = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    return runs, qrels


CASES: list[tuple[str, str | None, dict[str, list[Any]]]] = [
    ("wsum", "min-max", {"weights": [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5], [0, 0, 1]]}),
    ("gmnz", "zmuv", {"gamma": [0.1, 0.5, 1.0, 2.0]}),
    ("rbc", None, {"phi": [0.5, 0.8, 0.95]}),
    ("w_condorcet", None, {"weights": [[1, 1, 1], [3, 1, 0], [0, 1, 3]]}),
    ("probfuse", "sum", {"n_segments": [1, 2, 4]}),
    ("slidefuse", None, {"w": [0, 2, 5]}),
    ("rrf", None, {"k": [1, 60], "weights": [[1, 1, 1], [2, 1, 0]]}),
]


@pytest.mark.parametrize("method, norm, grid", CASES)
def test_optimize_fusion_picks_the_best_grid_point(method: str, norm: str | None, grid: dict) -> None:
    runs, qrels = make_runs(1)
    result = optimize_fusion(runs, qrels, "ndcg@5", method=method, norm=norm, grid=grid)
    scores = []
    for combo in itertools.product(*grid.values()):  # brute force, each point fitted on its own
        point = dict(zip(grid, combo, strict=True))
        fitted = fit_fusion(runs, qrels, method, norm=norm, **point)
        got = evaluate(fitted.fuse(runs), qrels, ["ndcg@5"])
        assert isinstance(got, dict)
        scores.append((got["ndcg@5"], point))
    best = max(s for s, _ in scores)
    first_best = next(p for s, p in scores if s == best)  # ties: the earlier grid point
    assert result["score"] == pytest.approx(best)
    assert result["params"] == {k: tuple(map(float, v)) if k == "weights" else v for k, v in first_best.items()}
    trials = result["trials"]
    assert len(trials) == len(scores) and trials["ndcg@5"].is_monotonic_decreasing
    fused = result["fusion"].fuse(runs)
    assert evaluate(fused, qrels, ["ndcg@5"])["ndcg@5"] == pytest.approx(best)  # type: ignore[index]
    if "weights" in grid:
        assert list(result["weights"]) == ["a", "b", "c"]


def test_default_grids_search_the_free_parameters() -> None:
    runs, qrels = make_runs(2)
    for method, free in (("gmnz", {"gamma"}), ("logn_isr", {"sigma"}), ("mixed", {"weights"}),
                         ("probfuse", {"n_segments"}), ("slidefuse", {"w"}), ("rrf", {"k", "weights"})):
        pair = {n: runs[n] for n in "ab"}  # two runs: a small default weight grid
        result = optimize_fusion(pair, qrels, "map", method=method)
        assert set(result["params"]) == free
    fitted = fit_fusion(runs, qrels, "bayesfuse")  # nothing to search: tables only, no metric
    assert fitted.score is None and len(fitted.params["log_odds"]) == 3
    fixed = fit_fusion(runs, qrels, "gmnz", gamma=0.3)
    assert fixed.params["gamma"] == 0.3 and fixed.score is None


def test_fitted_fusion_applies_to_other_queries_by_run_name() -> None:
    runs, qrels = make_runs(3)
    train = [f"q{i}" for i in range(6)]
    fitted = fit_fusion(runs, qrels, "probfuse", n_segments=3, queries=train)
    assert isinstance(fitted, FittedFusion) and fitted.runs == ("a", "b", "c")
    shuffled = {n: runs[n] for n in ("c", "a", "b")}
    got = fitted.fuse(shuffled)
    want = fuse([runs[n] for n in "abc"], method="probfuse", params=fitted.params)
    pd.testing.assert_frame_equal(got, want)
    # tables learned from the training queries only: the same as fitting on those rows alone
    alone = fit_fusion({n: r[r.qid.isin(train)] for n, r in runs.items()}, qrels[qrels.qid.isin(train)],
                       "probfuse", n_segments=3)
    for mine, theirs in zip(fitted.params["probs"], alone.params["probs"], strict=True):
        np.testing.assert_array_equal(mine, theirs)
    with pytest.raises(KolmValueError, match="not the fitted runs"):
        fitted.fuse({"a": runs["a"], "b": runs["b"], "x": runs["c"]})
    with pytest.raises(KolmValueError, match="fitted on 3 runs"):
        fitted.fuse([runs["a"], runs["b"]])


@pytest.mark.slow  # ranx compiles its fusion: ~18 s
def test_train_split_applied_to_test_split_equals_ranx() -> None:
    ranx = pytest.importorskip("ranx")
    from ranx.fusion import slidefuse_train

    runs, qrels = make_runs(4)
    train, test = [f"q{i}" for i in range(8)], [f"q{i}" for i in range(8, 12)]

    def to_ranx(frame: pd.DataFrame, keep: list[str], value: str = "score") -> dict:
        return {q: dict(zip(g.doc_id, g[value].astype(float), strict=True))
                for q, g in frame[frame.qid.isin(keep)].groupby("qid")}

    fitted = fit_fusion(runs, qrels, "slidefuse", norm="min-max", w=3, queries=train)
    normed = [ranx.normalization.norm_switch("min-max")(ranx.Run.from_dict(to_ranx(r, train))) for r in runs.values()]
    probs = slidefuse_train(ranx.Qrels.from_dict(to_ranx(qrels, train, "relevance")), normed)
    want = ranx.fuse([ranx.Run.from_dict(to_ranx(r, test)) for r in runs.values()], norm="min-max",
                     method="slidefuse", params={"probs": probs, "w": 3}).to_dict()
    got = fitted.fuse({n: r[r.qid.isin(test)] for n, r in runs.items()})
    assert len(got) == sum(len(v) for v in want.values())
    for q, d, s in zip(got.qid, got.doc_id, got.score, strict=True):
        assert s == pytest.approx(want[q][d], rel=1e-9, abs=1e-12)


def test_errors_name_the_problem() -> None:
    runs, qrels = make_runs(5)
    with pytest.raises(KolmValueError, match="two runs"):
        fit_fusion({"a": runs["a"]}, qrels, "wsum")
    with pytest.raises(KolmValueError, match="does not take"):
        optimize_fusion(runs, qrels, method="sum", grid={"gamma": [1.0]})
    with pytest.raises(KolmValueError, match="both fixed and searched"):
        optimize_fusion(runs, qrels, method="gmnz", grid={"gamma": [1.0]}, params={"gamma": 0.5})
    with pytest.raises(KolmValueError, match="n_segments"):
        fit_fusion(runs, qrels, "probfuse", n_segments=0)
    with pytest.raises(KolmValueError, match="judge no query"):
        fit_fusion(runs, qrels.iloc[:0], "posfuse")
    with pytest.raises(KolmValueError, match="one entry per run"):
        optimize_fusion(runs, qrels, method="wsum", grid={"weights": [[1, 2]]})
    with pytest.raises(KolmValueError, match="method must be one of"):
        fit_fusion(runs, qrels, "borda")
    with pytest.raises(KolmValueError, match="train them with fit_fusion"):
        fuse(runs, method="posfuse")


def test_optimize_fusion_takes_an_ir_measures_object() -> None:
    ir_measures = pytest.importorskip("ir_measures")

    rng = np.random.default_rng(3)
    runs = [pd.DataFrame({"qid": np.repeat(["q1", "q2", "q3"], 6),
                          "doc_id": [f"d{i}" for _ in range(3) for i in rng.permutation(6)],
                          "score": rng.random(18)}) for _ in range(2)]
    qrels = pd.DataFrame({"qid": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d5"], "relevance": [1, 2, 1]})
    by_object = optimize_fusion(runs, qrels, ir_measures.nDCG @ 5, grid={"k": [1, 10, 60]})
    by_name = optimize_fusion(runs, qrels, "ndcg@5", grid={"k": [1, 10, 60]})
    assert by_object["score"] == by_name["score"] and by_object["params"] == by_name["params"]
    assert "nDCG@5" in by_object["trials"].columns


# -- bounded searches (issue 25, defect 6) --------------------------------------------------
def many_runs(n_runs: int, seed: int = 7, n_queries: int = 10) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """``n_runs`` noisy rankings of the same 20 documents per query (every third run more
    skilled): fusing several beats any one, so a search has somewhere to climb."""
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(rng.integers(1, 3))) for q in range(n_queries)
                          for d in rng.choice(20, 4, replace=False)], columns=["qid", "doc_id", "relevance"])
    relevant = set(zip(qrels.qid, qrels.doc_id, strict=True))
    runs = {}
    for i in range(n_runs):
        rows = []
        for q in range(n_queries):
            docs = rng.permutation(20)
            hit = np.array([(f"q{q}", f"d{d}") in relevant for d in docs])
            scores = rng.random(len(docs)) + (0.6 if i % 3 == 0 else 0.3) * hit
            rows += [(f"q{q}", f"d{d}", float(s)) for d, s in zip(docs, scores, strict=True)]
        runs[f"r{i}"] = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    return runs, qrels


def test_weight_grid_size_counts_the_grid() -> None:
    from kolm_search.evaluation.param_search import weight_grid, weight_grid_size

    assert [weight_grid_size(n) for n in range(2, 7)] == [13, 91, 529, 2851, 14833]  # the issue's counts
    for n in range(1, 7):
        assert weight_grid_size(n) == len(weight_grid(n)) == len(set(weight_grid(n)))


@pytest.mark.parametrize("n_runs", [6, 8])
def test_default_search_of_many_runs_is_bounded_and_beats_its_seeds(n_runs: int) -> None:
    """On main the default grid of 8 k x 14,833 (6 runs) or 3.1 M (8 runs) weight vectors ran
    for hours; the default now scores a number of points linear in the runs."""
    from kolm_search.evaluation.param_search import coordinate_budget

    runs, qrels = many_runs(n_runs)
    result = optimize_fusion(runs, qrels, "ndcg@5", progress=False)
    assert result["search"] == "coordinate" and set(result["params"]) == {"k", "weights"}
    trials = result["trials"]
    assert len(trials) <= coordinate_budget({"k": list(range(8))}, n_runs) == n_runs + 1 + 10 * (8 + 5 * n_runs)
    assert len(trials) == len(trials.drop_duplicates(["k", "weights"]))  # each point scored once
    best = result["score"]
    singles = [evaluate(r, qrels, ["ndcg@5"])["ndcg@5"] for r in runs.values()]  # type: ignore[index]
    equal = evaluate(fuse(runs, method="rrf", k=60), qrels, ["ndcg@5"])["ndcg@5"]  # type: ignore[index]
    assert best >= max(singles) - 1e-12 and best >= equal - 1e-12
    assert best > equal > max(singles)  # here fusing helps, and the search climbed past equal weights
    assert evaluate(result["fusion"].fuse(runs), qrels, ["ndcg@5"])["ndcg@5"] == pytest.approx(best)  # type: ignore[index]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3), st.lists(st.integers(1, 4), max_size=2), st.integers(0, 2**32 - 1))
def test_coordinate_ascent_stops_where_no_single_change_improves(n_weights: int, sizes: list[int], seed: int) -> None:
    """Over random score tables: the result is the best point scored (the first of equals);
    every point one coordinate away from it (an axis value, or one run's raw weight step) was
    scored and is no better; the count stays within the budget."""
    from kolm_search.evaluation.param_search import (
        WEIGHT_STEPS,
        coordinate_ascent,
        coordinate_budget,
        normalised,
    )

    rng = np.random.default_rng(seed)
    axes = {f"a{i}": list(range(size)) for i, size in enumerate(sizes)}
    if not axes and not n_weights:
        return
    table: dict[tuple[Any, ...], float] = {}
    order: list[tuple[Any, ...]] = []

    def key(p: dict[str, Any]) -> tuple[Any, ...]:
        return (*(p[n] for n in axes), p.get("weights"))

    def score(p: dict[str, Any]) -> float:
        k = key(p)
        if k not in table:
            table[k] = float(rng.integers(0, 6))  # few values: ties are common
        order.append(k)
        return table[k]

    best = coordinate_ascent(axes, score, start={}, n_weights=n_weights)
    assert len(order) <= coordinate_budget(axes, n_weights)
    assert key(best) == next(k for k in order if table[k] == table[key(best)])  # first found of its score
    # some raw representation of the chosen weights has every neighbour scored and no better
    reps = [()] if not n_weights else [raw for raw in itertools.product(WEIGHT_STEPS, repeat=n_weights)
                                        if normalised(raw) == best["weights"]]
    ok = False
    for raw in reps:
        neighbours = []
        for name, values in axes.items():
            neighbours += [{**best, name: v} for v in values]
        for i in range(n_weights):
            for step in WEIGHT_STEPS:
                w = normalised([step if j == i else raw[j] for j in range(n_weights)])
                if w is not None:
                    neighbours.append({**best, "weights": w})
        if all(key(p) in table and table[key(p)] <= table[key(best)] for p in neighbours):
            ok = True
    assert ok, (best, reps)


def test_coordinate_ascent_finds_the_top_of_a_separable_score() -> None:
    """With no weights and a score that is a sum over axes, one sweep reaches the grid's maximum."""
    from kolm_search.evaluation.param_search import coordinate_ascent, grid_points

    rng = np.random.default_rng(0)
    tables = {f"a{i}": rng.random(n) for i, n in enumerate((5, 3, 7))}
    axes = {name: list(range(len(t))) for name, t in tables.items()}

    def score(p: dict[str, Any]) -> float:
        return float(sum(tables[n][p[n]] for n in axes))

    best = coordinate_ascent(axes, score, start={"a0": 2})
    assert score(best) == max(score(p) for p in grid_points(axes))


def test_a_grid_above_max_points_is_refused_with_its_size() -> None:
    runs, qrels = many_runs(6)
    with pytest.raises(KolmValueError, match=r"118,664 points \(8 k x 14833 weight vectors\), above max_points=5,000"):
        optimize_fusion(runs, qrels, search="grid")
    two = {n: runs[n] for n in ("r0", "r1")}
    with pytest.raises(KolmValueError, match=r"has 78,000 points \(6000 k x 13 weight vectors\)"):
        optimize_fusion(two, qrels, grid={"k": list(range(1, 6001))})  # explicit and huge: refused before scoring
    with pytest.raises(KolmValueError, match="above max_points=38"):
        fit_fusion(two, qrels, "rrf", grid={"k": [1, 2, 3]}, max_points=38)
    assert len(optimize_fusion(two, qrels, grid={"k": [1, 2, 3]}, max_points=39, progress=False)["trials"]) == 39
    for bad in (0, -1, 2.5, True, "10"):
        with pytest.raises(KolmValueError, match="max_points must be"):
            optimize_fusion(two, qrels, max_points=bad)  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="search must be one of"):
        optimize_fusion(two, qrels, search="random")  # type: ignore[arg-type]


def test_progress_is_shown_on_stderr_and_can_be_silenced(capsys: pytest.CaptureFixture[str]) -> None:
    runs, qrels = make_runs(1)
    grid = {"k": [1, 60], "weights": [[1, 1, 1]]}
    optimize_fusion(runs, qrels, grid=grid, method="rrf", progress=False)
    assert capsys.readouterr().err == ""
    optimize_fusion(runs, qrels, grid=grid, method="rrf")
    assert "rrf fusion search (grid)" in capsys.readouterr().err


# -- qrels checked as evaluate checks them (issue 25, defect 13) ------------------------------
@pytest.mark.parametrize("method, fixed", [("probfuse", {"n_segments": 3}), ("bayesfuse", {}), ("mapfuse", {}),
                                           ("rrf", {"k": 60, "weights": [1, 1, 1]}), ("rrf", {})])
def test_fit_fusion_refuses_the_qrels_evaluate_refuses(method: str, fixed: dict[str, Any]) -> None:
    """On main a supervised method with nothing to search trained on qrels judging one
    document twice (evaluate refuses them); the error is now evaluate's, word for word."""
    from kolm_search.errors import FrameValidationError

    runs, qrels = make_runs(1)
    bad = [pd.concat([qrels, qrels.iloc[[3]].assign(relevance=2)], ignore_index=True),  # judged twice
           qrels.assign(qid=qrels.qid.where(qrels.index != 5, None)),  # a missing qid
           qrels.assign(relevance=qrels.relevance.astype(float).where(qrels.index != 2, 1.5))]  # a fractional grade
    for judged in bad:
        with pytest.raises(FrameValidationError) as by_evaluate:
            evaluate(runs["a"], judged, ["ndcg@5"])
        with pytest.raises(FrameValidationError) as by_fit:
            fit_fusion(runs, judged, method, progress=False, **fixed)
        assert str(by_fit.value) == str(by_evaluate.value)
        assert any(w in str(by_fit.value) for w in ("duplicate document for query 'q", "missing value at row 5",
                                                     "row 2 has np.float64(1.5)"))
        with pytest.raises(FrameValidationError) as by_optimize:
            optimize_fusion(runs, judged, "ndcg@5", method=method, params=fixed, progress=False)
        assert str(by_optimize.value) == str(by_evaluate.value)
