"""fit_fusion, FittedFusion and optimize_fusion over any method: brute-force grid oracles,
train/test splits against ranx, name matching and errors."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest

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
