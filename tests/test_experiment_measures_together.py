"""An experiment's table measured faster (issue 27, speed bound (b)) and still the same table:
the coded runs over one table and queries measured in one kernel pass
(``coded_runs.evaluate_coded_together``), Student's t tests and intervals of every run against a
baseline in one scipy call (``stats.paired_t``), the curves of every run at once
(``curves.mean_curves``). Oracles: each run measured on its own, ``paired_test`` /
``confidence_interval`` / ``mean_curve`` per pair, and the table built pipeline by pipeline from
each pipeline's own run DataFrame with ``evaluate`` and the 1-D statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, Experiment, KolmError, evaluate
from kolm_search.compose.queries import CodedRun
from kolm_search.evaluation import coded_runs, experiment_runs
from kolm_search.evaluation.curves import CURVE_MEASURES, RECALL_LEVELS, mean_curve, mean_curves
from kolm_search.evaluation.experiment_runs import Runs
from kolm_search.evaluation.stats import confidence_interval, correct, effect_size, paired_t, paired_test
from kolm_search.io import load_dataset
from tests.fakes import Prior
from tests.test_coded_evaluation import coded_runs as coded_run_cases

#: measures the kernel computes (the ones a joint pass takes)
KERNEL = ["ndcg@10", "nDCG", "AP", "RR@3", "P@5", "P(rel=2)@5", "R@10", "Rprec", "Success@3", "Bpref", "Judged@5",
          "NumRet", "NumRelRet", "ERR@10", "infAP", "iprec_at_recall_0.10", "set_P", "DCG@5",
          "AP(judged_only=True)", "nDCG(gains={0:0,1:1,2:5,3:10})@5"]


def _variant(run: CodedRun, how: int, rng: np.random.Generator) -> CodedRun:
    """Another run over the same queries and table: scores permuted, negated, rounded, a NaN,
    or a document twice (refused)."""
    parts = []
    for group, q, doc, rank, score in run.parts:
        score = score.copy()
        if how == 0:
            score = rng.permutation(score)
        elif how == 1:
            score = -score
        elif how == 2:
            score = np.round(score)
        elif how == 3 and len(score):
            score[0] = np.nan
        elif how == 4 and len(doc) > 1 and q[0] == q[1]:
            doc = doc.copy()
            doc[1] = doc[0]
        parts.append((group, q, doc, rank, score))
    return CodedRun(run.prepared, run.table, parts)


def _each(run: CodedRun, limit: int | None, qrels: pd.DataFrame, **kw: Any) -> Any:
    runs = Runs()
    runs.set_coded("r", run, limit)
    try:
        return runs.evaluate(qrels, KERNEL, **kw)["r"]
    except KolmError as exc:
        return type(exc), str(exc)


@settings(max_examples=120, deadline=None)
@given(coded_run_cases(), st.lists(st.integers(0, 4), min_size=1, max_size=4), st.sampled_from([None, 1, 3]),
       st.booleans(), st.sampled_from(["ignore", "zero"]), st.integers(0, 10**6))
def test_runs_measured_together_equal_each_run_measured_alone(case: tuple[CodedRun, pd.DataFrame], hows: list[int],
                                                              limit: int | None, drop: bool, missing: str,
                                                              seed: int) -> None:
    run, qrels = case
    rng = np.random.default_rng(seed)
    runs = [run, *(_variant(run, h, rng) for h in hows)]
    together = Runs()
    for i, r in enumerate(runs):
        together.set_coded(f"r{i}", r, limit)
    kw = {"drop_self_hits": drop, "missing": missing}
    try:
        got: Any = together.evaluate(qrels, KERNEL, **kw)
    except KolmError as exc:
        got = (type(exc), str(exc))
    alone = [_each(r, limit, qrels, **kw) for r in runs]
    errors = [a for a in alone if isinstance(a, tuple)]
    if errors:
        assert got == errors[0]  # the first run's error, as one by one
        return
    for i, want in enumerate(alone):
        pd.testing.assert_frame_equal(got[f"r{i}"], want, check_exact=True)


def test_a_joint_pass_is_what_measures_an_experiments_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    ds = load_dataset("cranfield")
    first = BM25Retriever(ds.corpus) % 40
    pipes = {f"p{w}": first >> Prior(w, modulus=5, rounded=True) for w in (0.1, 0.2, 0.3)}
    exp = Experiment(pipes, ds, ["ndcg@10", "P@5"], limit=40, progress=False, drop_self_hits=False)
    exp.run_pipelines()
    calls = []
    real = coded_runs.evaluate_coded_together

    def spy(items: Any, *args: Any, **kw: Any) -> Any:
        out = real(items, *args, **kw)
        calls.append((len(items), out is not None))
        return out

    monkeypatch.setattr(experiment_runs, "evaluate_coded_together", spy)
    exp.run()
    assert calls == [(3, True)]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 5), st.integers(0, 10**6), st.sampled_from(["random", "ties", "const"]))
def test_paired_t_equals_the_tests_and_intervals_pair_by_pair(n: int, k: int, seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    base = rng.random(n) if kind != "ties" else np.round(rng.random(n), 1)
    others = np.stack([rng.random(n) for _ in range(k)]) if kind == "random" else \
        np.stack([np.round(rng.random(n), 1) for _ in range(k)])
    if kind == "const":  # equal runs, and runs a constant away
        others[0] = base
        if k > 1:
            others[1] = base + 0.25
    p, low, high = paired_t(base, others, confidence=0.9)
    for i in range(k):
        assert p[i] == paired_test(base, others[i], "t")
        want = confidence_interval(base, others[i], "t", confidence=0.9)
        np.testing.assert_array_equal([low[i], high[i]], want)  # (NaN equal to NaN)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 400), st.integers(1, 6), st.integers(0, 10**6),
       st.sampled_from(["random", "ties", "alike", "large"]), st.sampled_from([0.9, 0.95, 0.99]))
def test_student_rows_equal_scipys_ttest_rel_float_for_float(n: int, k: int, seed: int, kind: str,
                                                              level: float) -> None:
    """``stats._student_rows`` (paired_t's arithmetic) against ``scipy.stats.ttest_rel`` of the
    same rows: p-values and interval bounds equal float for float (NaN where scipy's are);
    nearly identical differences warn as scipy warns."""
    import warnings

    from scipy import stats

    from kolm_search.evaluation.stats import _student_rows

    rng = np.random.default_rng(seed)
    d = rng.standard_normal((k, n))
    if kind == "ties":
        d = np.round(d, 1)
    elif kind == "alike":  # nearly identical differences: scipy's precision warning
        d = 0.3 + d * 1e-17
    elif kind == "large":
        d = d * 1e6 + 1e7
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        p, low, high = _student_rows(np.ascontiguousarray(d), level)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        result = stats.ttest_rel(d, np.zeros((k, n)), axis=1)
        interval = result.confidence_interval(confidence_level=level)
    np.testing.assert_array_equal(p, result.pvalue)
    np.testing.assert_array_equal(low, interval.low)
    np.testing.assert_array_equal(high, interval.high)
    assert [str(w.message) for w in ours if "Precision loss" in str(w.message)][:1] == \
        [str(w.message) for w in theirs if "Precision loss" in str(w.message)][:1]


def test_mean_curves_equal_mean_curve_table_by_table() -> None:
    rng = np.random.default_rng(3)
    tables = []
    for n in (0, 1, 7, 300):
        values = rng.random((n, len(CURVE_MEASURES)))
        values[rng.random(values.shape) < 0.2] = np.nan
        tables.append(pd.DataFrame(values, columns=list(CURVE_MEASURES)))
    got = mean_curves(tables)
    for i, t in enumerate(tables):
        np.testing.assert_array_equal(got[i], mean_curve(t)["precision"].to_numpy())


@pytest.mark.parametrize("kw", [{}, {"baseline": ["p0.1", "p0.3"]}, {"drop_self_hits": True}])
def test_an_experiments_table_equals_the_table_built_pipeline_by_pipeline(kw: dict[str, Any]) -> None:
    ds = load_dataset("cranfield")
    first = BM25Retriever(ds.corpus) % 50
    pipes = {f"p{w}": first >> Prior(w, modulus=7, rounded=w > 0.2) for w in (0.1, 0.2, 0.3, 0.4, 0.5)}
    pipes["same"] = first >> Prior(0.1, modulus=7, rounded=False)  # equal to p0.1: differences all 0
    metrics = ["ndcg@10", "P@5", "recall@50"]
    kw = {"drop_self_hits": False} | kw
    table = Experiment(pipes, ds, metrics, limit=50, progress=False, **kw).run()
    # the oracle: each pipeline run on its own, measured by evaluate, compared pair by pair
    drop = kw["drop_self_hits"]
    queries = ds.judged_queries()
    per: dict[str, pd.DataFrame] = {}
    for name, pipe in pipes.items():
        run = pipe(queries, limit=51 if drop else 50)
        if drop:
            from kolm_search.evaluation.self_hits import drop_self_hits

            run = drop_self_hits(run, 50)[0]
        per[name] = evaluate(run, ds.qrels, [*metrics, *CURVE_MEASURES], per_query=True, drop_self_hits=drop)
    qids = sorted(set().union(*(set(t["qid"].astype(str)) for t in per.values())))
    bases = kw.get("baseline", ["p0.1"])
    rows = []
    for m in metrics:
        scores = {n: t.set_index(t["qid"].astype(str))[m].reindex(qids).fillna(0.0).to_numpy() for n, t in per.items()}
        pd.testing.assert_frame_equal(table.per_query[m], pd.DataFrame(scores, index=pd.Index(qids, name="qid")),
                                      check_exact=True)
        block = []
        for b in bases:
            block.append({"run": b, "baseline": b, "p_value": np.nan, "ci_low": 0.0, "ci_high": 0.0})
            for n in pipes:
                if n == b:
                    continue
                low, high = confidence_interval(scores[b], scores[n], "t")
                block.append({"run": n, "baseline": b, "mean": scores[n].mean(),
                              "delta": (scores[n] - scores[b]).mean(), "p_value": paired_test(scores[b], scores[n], "t"),
                              "ci_low": low, "ci_high": high, "effect_size": effect_size(scores[b], scores[n])})
        tested = [r for r in block if not np.isnan(r["p_value"])]
        for r, pa in zip(tested, correct(np.array([r["p_value"] for r in tested]), "holm"), strict=True):
            r["p_adjusted"] = pa
        rows += [(m, r) for r in block]
    got = table.set_index(["metric", "baseline", "run"])
    assert len(got) == len(rows)
    for m, r in rows:
        row = got.loc[(m, r["baseline"], r["run"])]
        for col in ("p_value", "ci_low", "ci_high", "mean", "delta", "effect_size", "p_adjusted"):
            if col in r:
                np.testing.assert_array_equal(row[col], r[col], err_msg=f"{m} {r['run']} vs {r['baseline']}: {col}")
    curves = pd.DataFrame({n: mean_curve(t)["precision"].to_numpy() for n, t in per.items()},
                          index=pd.Index(RECALL_LEVELS, name="recall"))
    pd.testing.assert_frame_equal(table.curves, curves, check_exact=True)
