"""``cross_validate``, ``make_folds`` and ``grid_points`` against plain-Python references
(pytrec_eval for the per-query scores), on small random runs."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.evaluation import paired_test
from kolm_search.evaluation.crossval import cross_validate, grid_points, make_folds


def random_case(seed: int, n_q: int, n_runs: int) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """``n_runs`` random runs over ``n_q`` queries (some queries missing from some runs) and qrels."""
    rng = np.random.default_rng(seed)
    qids = [f"q{i}" for i in range(n_q)]
    docs = [f"d{i}" for i in range(15)]
    qrels = pd.DataFrame([(q, d, int(rng.integers(0, 3))) for q in qids for d in rng.choice(docs, 5, replace=False)],
                         columns=["qid", "doc_id", "relevance"])
    runs = {}
    for r in range(n_runs):
        rows = []
        for q in qids:
            if rng.random() < 0.15:
                continue  # this run does not answer q
            for d in rng.choice(docs, int(rng.integers(1, 12)), replace=False):
                rows.append((q, str(d), float(rng.integers(0, 6))))  # ties on purpose
        runs[f"run{r}"] = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    return runs, qrels


def trec_ndcg10(run: pd.DataFrame, qrels: pd.DataFrame) -> dict[str, float]:
    q = {}
    for row in qrels.itertuples(index=False):
        q.setdefault(row.qid, {})[row.doc_id] = int(row.relevance)
    r = {}
    for row in run.itertuples(index=False):
        r.setdefault(row.qid, {})[row.doc_id] = float(row.score)
    res = pytrec_eval.RelevanceEvaluator(q, {"ndcg_cut.10"}).evaluate(r)
    return {qid: v["ndcg_cut_10"] for qid, v in res.items()}


def reference(runs: dict[str, pd.DataFrame], qrels: pd.DataFrame,
              split: list[list[str]]) -> tuple[list[str], dict[str, float]]:
    """Plain Python: per fold, the run with the best training mean (first on ties), held out."""
    per = {name: trec_ndcg10(run, qrels) for name, run in runs.items()}
    qids = sorted(set(qrels["qid"]) & set().union(*(set(r["qid"]) for r in runs.values())))
    chosen, held = [], {}
    for part in split:
        train = [q for q in qids if q not in part]
        means = {name: sum(p.get(q, 0.0) for q in train) / len(train) for name, p in per.items()}
        best = max(means.values())
        name = next(n for n in runs if abs(means[n] - best) <= 1e-12)
        chosen.append(name)
        held.update({q: per[name].get(q, 0.0) for q in part})
    return chosen, held


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_q=st.integers(4, 12), n_runs=st.integers(1, 4), folds=st.integers(2, 4))
def test_matches_plain_python(seed: int, n_q: int, n_runs: int, folds: int) -> None:
    runs, qrels = random_case(seed, n_q, n_runs)
    answered = sorted(set(qrels["qid"]) & set().union(*(set(r["qid"]) for r in runs.values())))
    folds = min(folds, len(answered))
    if folds < 2:
        return
    split = [answered[i::folds] for i in range(folds)]
    baseline = runs[next(iter(runs))]
    cv = cross_validate(runs, qrels, baseline, split=split)
    chosen, held = reference(runs, qrels, split)
    # near-ties in training means may be broken differently by float summation order: the
    # choice must be a best one, and on the same choices the held-out scores must agree
    per = {name: trec_ndcg10(run, qrels) for name, run in runs.items()}
    assert len(cv.folds) == len(split)
    for i, part in enumerate(split):
        train = [q for q in answered if q not in part]
        means = {n: float(np.mean([per[n].get(q, 0.0) for q in train])) for n in runs}
        assert cv.folds.loc[i, "train_score"] == pytest.approx(max(means.values()), abs=1e-9)
        assert means[cv.folds.loc[i, "chosen"]] == pytest.approx(max(means.values()), abs=1e-9)
        assert cv.folds.loc[i, "n_test"] == len(part) and cv.folds.loc[i, "n_train"] == len(train)
    got = dict(zip(cv.per_query["qid"], cv.per_query["score"], strict=True))
    if list(cv.folds["chosen"]) == chosen:
        assert got == pytest.approx(held, abs=1e-9)
        assert cv.mean == pytest.approx(np.mean(list(held.values())), abs=1e-9)
    base = trec_ndcg10(baseline, qrels)
    assert dict(zip(cv.per_query["qid"], cv.per_query["baseline"], strict=True)) == \
        pytest.approx({q: base.get(q, 0.0) for q in answered}, abs=1e-9)
    assert cv.delta == pytest.approx(cv.mean - cv.baseline_mean)
    assert cv.p_value == pytest.approx(paired_test(cv.per_query["baseline"], cv.per_query["score"]))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), folds=st.integers(2, 10), seed=st.integers(0, 2**32 - 1))
def test_make_folds_partition(n: int, folds: int, seed: int) -> None:
    qids = [f"q{i}" for i in range(n)]
    if folds > n:
        with pytest.raises(KolmValueError, match="exceed"):
            make_folds(qids, folds, seed=seed)
        return
    parts = make_folds(qids, folds, seed=seed)
    assert len(parts) == folds
    flat = list(itertools.chain.from_iterable(parts))
    assert sorted(flat) == sorted(qids) and len(set(flat)) == n  # disjoint, covering
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert make_folds(list(reversed(qids)), folds, seed=seed) == parts  # the order given does not matter
    assert make_folds(qids, folds, seed=np.random.default_rng(seed)) == parts


def test_random_split_differs_by_seed_and_cv_covers_each_query_once() -> None:
    runs, qrels = random_case(3, 40, 3)
    a, b = make_folds(list(qrels["qid"]), 5, seed=0), make_folds(list(qrels["qid"]), 5, seed=1)
    assert a != b
    cv = cross_validate(runs, qrels, folds=5, seed=0)
    assert cv.per_query["qid"].is_unique and set(cv.per_query["fold"]) == set(range(5))
    assert cv.folds["n_test"].sum() == len(cv.per_query)
    assert (cv.folds["n_train"] + cv.folds["n_test"] == len(cv.per_query)).all()
    assert np.isnan(cv.baseline_mean) and np.isnan(cv.p_value) and "baseline" not in cv.per_query
    assert "held-out mean" in cv.to_markdown()


def test_better_candidate_is_chosen_and_baseline_candidates_cross_validated() -> None:
    runs, qrels = random_case(5, 30, 2)
    perfect = qrels.assign(score=qrels["relevance"].astype(float))  # ranks the judged documents ideally
    cv = cross_validate({**runs, "oracle": perfect}, qrels, baseline_candidates=runs, folds=3, test="fisher",
                        n_resamples=500)
    assert set(cv.folds["chosen"]) == {"oracle"}
    assert set(cv.folds["baseline_chosen"]) <= set(runs)
    assert cv.delta > 0 and cv.p_value < 0.05
    assert list(cv.scores.columns) == [*runs, "oracle"]


def test_lazy_candidates_are_called_once() -> None:
    runs, qrels = random_case(7, 10, 2)
    calls: list[str] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        def run() -> pd.DataFrame:
            calls.append(name)
            return runs[name]
        return run

    cv = cross_validate({n: make(n) for n in runs}, qrels, folds=2)
    assert sorted(calls) == sorted(runs) and len(cv.per_query) > 0


def test_grid_points() -> None:
    assert grid_points({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    assert grid_points({}) == [{}]
    got = grid_points({"k1": np.linspace(0.5, 1.5, 3), "k": np.array([10, 20])})  # numpy axes, as sklearn takes them
    assert got == [{"k1": a, "k": b} for a in (0.5, 1.0, 1.5) for b in (10, 20)]
    assert all(type(p["k1"]) is float and type(p["k"]) is int for p in got)
    with pytest.raises(KolmValueError, match="non-empty list"):
        grid_points({"k1": np.zeros((2, 2))})
    with pytest.raises(KolmValueError, match="grid\\['a'\\]"):
        grid_points({"a": []})
    with pytest.raises(KolmValueError, match="grid\\['a'\\]"):
        grid_points({"a": "xyz"})
    with pytest.raises(KolmTypeError):
        grid_points([("a", [1])])  # type: ignore[arg-type]


def test_bad_inputs() -> None:
    runs, qrels = random_case(11, 8, 2)
    qids = sorted(set(qrels["qid"]))
    with pytest.raises(KolmValueError, match="folds must be an integer >= 2"):
        cross_validate(runs, qrels, folds=1)
    with pytest.raises(KolmValueError, match="folds must be an integer >= 2"):
        cross_validate(runs, qrels, folds=True)  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="exceed the number of queries"):
        cross_validate(runs, qrels, folds=100)
    with pytest.raises(KolmValueError, match="empty"):
        cross_validate({}, qrels)
    with pytest.raises(KolmTypeError, match="candidates must be a dict"):
        cross_validate([runs["run0"]], qrels)  # type: ignore[arg-type]
    with pytest.raises(KolmValueError):
        cross_validate(runs, qrels, metric="no_such_metric@3")
    with pytest.raises(KolmValueError, match="one metric"):
        cross_validate(runs, qrels, metric=["ndcg@10", "map"])
    with pytest.raises(KolmValueError, match="test must be"):
        cross_validate(runs, qrels, test="z")  # type: ignore[arg-type]
    with pytest.raises(KolmValueError, match="not both"):
        cross_validate(runs, qrels, runs["run0"], baseline_candidates=runs)
    cv_q = sorted(cross_validate(runs, qrels, folds=2).per_query["qid"])
    with pytest.raises(KolmValueError, match="in folds 0 and 1"):
        cross_validate(runs, qrels, split=[cv_q, cv_q[:1]])
    with pytest.raises(KolmValueError, match="leaves out"):
        cross_validate(runs, qrels, split=[cv_q[:1], cv_q[1:2]])
    with pytest.raises(KolmValueError, match="not evaluated"):
        cross_validate(runs, qrels, split=[cv_q[:1], [*cv_q[1:], "nope"]])
    with pytest.raises(KolmValueError, match="fold 1 is empty"):
        cross_validate(runs, qrels, split=[cv_q, []])
    with pytest.raises(KolmValueError, match="folds must be an integer >= 2"):
        cross_validate(runs, qrels, split=[cv_q])
    with pytest.raises(KolmTypeError, match="split must be"):
        cross_validate(runs, qrels, split="abc")
    by_label = {q: i % 2 for i, q in enumerate(cv_q)}  # the dict form of a split
    assert cross_validate(runs, qrels, split=by_label).folds["n_test"].tolist() == [
        sum(1 for v in by_label.values() if v == 0), sum(1 for v in by_label.values() if v == 1)]
    assert qids  # the case has judged queries
