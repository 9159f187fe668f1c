"""Every measure of trec_eval that pytrec_eval computes (``pytrec_eval.supported_measures``, but
the strings ``runid`` and ``relstring``), by the names pytrec_eval returns (``P_5``,
``iprec_at_recall_0.10``, ``Rprec_mult_0.20``, ``gm_map``, ``G``, ...), equal pytrec_eval's per
query (1e-9) and aggregated as ``pytrec_eval.compute_aggregated_measure`` does: on random tie-heavy
runs with graded and negative judgements, at relevance levels 1-3, with and without ``-J``
(``judged_only``), and on a Cranfield BM25 run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import evaluate
from kolm_search.evaluation.measures import parse_measure

MEASURES = sorted(pytrec_eval.supported_measures - {"runid", "relstring"})


def _dicts(run: pd.DataFrame, qrels: pd.DataFrame) -> tuple[dict[str, Any], dict[str, Any]]:
    r: dict[str, dict[str, float]] = {}
    for q, d, s in run[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        r.setdefault(str(q), {})[str(d)] = float(s)
    j: dict[str, dict[str, int]] = {}
    for q, d, v in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        j.setdefault(str(q), {})[str(d)] = int(v)
    return r, j


def assert_trec_eval(run: pd.DataFrame, qrels: pd.DataFrame, level: int = 1, judged_only: bool = False) -> None:
    r, j = _dicts(run, qrels)
    want = pytrec_eval.RelevanceEvaluator(j, MEASURES, relevance_level=level,
                                          judged_docs_only_flag=judged_only).evaluate(r)
    if not want:
        return
    names = sorted(next(iter(want.values())))
    got = evaluate(run, qrels, names, per_query=True, relevance_level=level, judged_only=judged_only)
    assert isinstance(got, pd.DataFrame)
    got = got.set_index("qid")
    assert sorted(got.index) == sorted(want)
    for name in names:
        ours = got[name].to_dict()
        for q, values in want.items():
            same = abs(ours[q] - values[name]) <= 1e-9 or (np.isnan(ours[q]) and np.isnan(values[name]))
            assert same, (name, q, ours[q], values[name])
    means = evaluate(run, qrels, names, relevance_level=level, judged_only=judged_only)
    assert isinstance(means, dict)
    for name in names:
        summary = pytrec_eval.compute_aggregated_measure(name, [v[name] for v in want.values()])
        assert means[name] == pytest.approx(summary, rel=1e-9, abs=1e-12, nan_ok=True), name


docs = st.sampled_from([f"d{i}" for i in range(12)] + ["D1", "é", "10"])
run_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), docs, st.sampled_from([0.0, 1.0, 2.5, -1.0])),
                    max_size=50)
qrel_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q4"]), docs, st.integers(-1, 3)), min_size=1, max_size=30)


@settings(max_examples=30, deadline=None)
@given(run_rows, qrel_rows, st.integers(1, 3), st.booleans())
def test_random_tie_heavy_runs_match_pytrec_eval(rrows: list, qrows: list, level: int, judged_only: bool) -> None:
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"])
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]).drop_duplicates(["qid", "doc_id"])
    qrels = qrels[qrels.groupby("qid")["relevance"].transform("max") >= 0]  # trec_eval skips such queries
    if run.empty or not set(run.qid) & set(qrels.qid):
        return
    assert_trec_eval(run, qrels, level, judged_only)


@pytest.mark.parametrize("seed", range(3))
def test_larger_random_runs_match_pytrec_eval(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, qrows = [], []
    for q in range(40):
        for d in rng.choice(60, rng.integers(1, 50), replace=False):
            rows.append((f"q{q}", f"d{d}", float(rng.integers(0, 6))))
        for d in rng.choice(60, rng.integers(1, 25), replace=False):
            qrows.append((f"q{q}", f"d{d}", int(rng.integers(-1, 5))))
    run = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"])
    qrels = qrels[qrels.groupby("qid")["relevance"].transform("max") >= 0]
    for level, judged_only in ((1, False), (2, True)):
        assert_trec_eval(run, qrels, level, judged_only)


def test_cranfield_bm25_run_matches_pytrec_eval(cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    queries = cranfield["queries"]
    run = presets.bm25(cranfield["corpus"]).search_batch(queries, limit=100).run
    assert_trec_eval(run, cranfield["qrels"])
    assert_trec_eval(run, cranfield["qrels"], level=2, judged_only=True)


@pytest.mark.parametrize(("name", "kind", "params"), [
    ("iprec_at_recall_0.10", "iprec_at_recall", (0.1,)), ("iprec_at_recall.0.5", "iprec_at_recall", (0.5,)),
    ("Rprec_mult_0.20", "Rprec_mult", (0.2,)), ("set_F", "set_F", (1.0,)), ("utility", "utility", (1.0, -1.0, 0.0)),
    ("11pt_avg", "11pt_avg", ()), ("gm_map", "gm_map", ()), ("relative_P_5", "relative_P", ())])
def test_trec_eval_names(name: str, kind: str, params: tuple[float, ...]) -> None:
    spec = parse_measure(name)
    assert (spec.kind, spec.params) == (kind, params)
    assert spec.aggregate == ("gmean" if kind == "gm_map" else "mean")
