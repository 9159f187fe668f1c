"""evaluate() against pytrec_eval (the oracle), on random runs with ties and on Cranfield."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import FrameValidationError, KolmValueError, evaluate
from kolm_search.evaluation import parse_metric

OURS_TO_TREC = {
    "ndcg@10": "ndcg_cut_10", "ndcg@3": "ndcg_cut_3", "ndcg": "ndcg", "map": "map", "map@5": "map_cut_5",
    "mrr": "recip_rank", "precision@5": "P_5", "recall@10": "recall_10", "r-precision": "Rprec",
    "hit_rate@3": "success_3", "bpref": "bpref",
}
TREC_MEASURES = {"ndcg_cut.10,3", "ndcg", "map", "map_cut.5", "recip_rank", "P.5", "recall.10", "Rprec", "success.3", "bpref"}


def oracle(run: pd.DataFrame, qrels: pd.DataFrame, level: int = 1) -> dict[str, dict[str, float]]:
    r: dict[str, dict[str, float]] = {}
    for q, d, s in run[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        r.setdefault(str(q), {})[str(d)] = float(s)
    j: dict[str, dict[str, int]] = {}
    for q, d, v in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        j.setdefault(str(q), {})[str(d)] = int(v)
    return pytrec_eval.RelevanceEvaluator(j, TREC_MEASURES, relevance_level=level).evaluate(r)


def assert_matches(run: pd.DataFrame, qrels: pd.DataFrame, level: int = 1) -> None:
    want = oracle(run, qrels, level)
    got = evaluate(run, qrels, list(OURS_TO_TREC), per_query=True, relevance_level=level)
    assert isinstance(got, pd.DataFrame)
    assert sorted(got["qid"]) == sorted(want)
    for row in got.itertuples(index=False):
        for ours, trec in OURS_TO_TREC.items():
            assert abs(row[list(got.columns).index(ours)] - want[row.qid][trec]) <= 1e-9, (row.qid, ours)
    means = evaluate(run, qrels, list(OURS_TO_TREC), relevance_level=level)
    assert isinstance(means, dict)
    for ours, trec in OURS_TO_TREC.items():
        assert abs(means[ours] - np.mean([v[trec] for v in want.values()])) <= 1e-9


docs = st.sampled_from([f"d{i}" for i in range(15)] + ["D1", "d1x", "é", "10", "9"])
run_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q3"]), docs,
                              st.sampled_from([0.0, 1.0, 1.0000001, 2.5, -1.0, 3.0])), max_size=60)
qrel_rows = st.lists(st.tuples(st.sampled_from(["q1", "q2", "q4"]), docs, st.integers(-1, 4)), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(run_rows, qrel_rows, st.integers(1, 3))
def test_random_runs_with_ties_match_pytrec_eval(rrows: list, qrows: list, level: int) -> None:
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"])
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]).drop_duplicates(["qid", "doc_id"])
    # trec_eval (so pytrec_eval) never returns for a query whose judgements are all negative
    qrels = qrels[qrels.groupby("qid")["relevance"].transform("max") >= 0]
    if run.empty or not set(run.qid) & set(qrels.qid):
        return
    assert_matches(run, qrels, level)


def test_cranfield_bm25_run_matches(cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    run = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=200).run
    assert_matches(run, cranfield["qrels"])
    assert_matches(run, cranfield["qrels"], level=3)


def test_query_with_only_negative_judgements_scores_zero() -> None:
    # the oracle cannot be used here: trec_eval loops forever on such a query
    run = pd.DataFrame({"qid": ["q", "q"], "doc_id": ["a", "b"], "score": [2.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["q"], "doc_id": ["a"], "relevance": [-1]})
    assert evaluate(run, qrels, ["ndcg@10", "map", "bpref", "mrr"]) == {"ndcg@10": 0.0, "map": 0.0, "bpref": 0.0, "mrr": 0.0}


def test_missing_queries_and_zero_option() -> None:
    run = pd.DataFrame({"qid": ["a"], "doc_id": ["x"], "score": [1.0]})
    qrels = pd.DataFrame({"qid": ["a", "b"], "doc_id": ["x", "y"], "relevance": [1, 1]})
    assert evaluate(run, qrels, ["map"]) == {"map": 1.0}
    assert evaluate(run, qrels, ["map"], missing="zero") == {"map": 0.5}


def test_int_ids_compared_as_strings() -> None:
    run = pd.DataFrame({"qid": [1, 1], "doc_id": [10, 9], "score": [1.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["1"], "doc_id": ["9"], "relevance": [1]})
    # tie broken by docno descending as strings: "9" > "10" so 9 ranks first
    assert evaluate(run, qrels, ["mrr"]) == {"mrr": 1.0}


def test_nested_dicts_and_batch_result_accepted() -> None:
    assert evaluate({"q": {"a": 1.0}}, {"q": {"a": 2}}, "ndcg@10") == {"ndcg@10": 1.0}


@pytest.mark.parametrize(
    "run, qrels, match",
    [
        (pd.DataFrame({"qid": ["a", "a"], "doc_id": ["x", "x"], "score": [1, 2]}), None, "duplicate document for query 'a'"),
        (pd.DataFrame({"qid": ["a"], "doc_id": ["x"], "score": ["high"]}), None, "non-numeric"),
        (pd.DataFrame({"qid": ["a"], "doc_id": ["x"]}), None, "lacks column"),
        (pd.DataFrame({"qid": ["a"], "doc_id": ["x"], "score": [1.0]}),
         pd.DataFrame({"qid": ["a"], "doc_id": ["x"], "relevance": [1.5]}), "integers"),
        (pd.DataFrame({"qid": ["a"], "doc_id": [None], "score": [1.0]}), None, "missing value"),
    ],
)
def test_bad_input(run: pd.DataFrame, qrels: pd.DataFrame | None, match: str) -> None:
    qrels = qrels if qrels is not None else pd.DataFrame({"qid": ["a"], "doc_id": ["x"], "relevance": [1]})
    with pytest.raises(FrameValidationError, match=match):
        evaluate(run, qrels, ["map"])


@pytest.mark.parametrize("name, parsed", [("ndcg@10", ("ndcg_cut", 10)), ("NDCG_CUT_5", ("ndcg_cut", 5)), ("P_5", ("P", 5)),
                                          ("precision@3", ("P", 3)), ("mrr", ("recip_rank", 0)), ("hit_rate@1", ("success", 1)),
                                          ("R-Precision", ("Rprec", 0)), ("map@100", ("map_cut", 100))])
def test_parse_metric(name: str, parsed: tuple[str, int]) -> None:
    assert parse_metric(name) == parsed


@pytest.mark.parametrize("name", ["ndcg@0", "f1", "recall", "precision@x"])
def test_unknown_metric(name: str) -> None:
    with pytest.raises(KolmValueError, match=repr(name).replace("@", ".").replace("(", "")[:3]):
        parse_metric(name)


@pytest.mark.parametrize("kind", ["object", "category"])
def test_object_and_categorical_columns_match_pytrec_eval(kind: str) -> None:
    """Object and categorical id columns, with non-ASCII ids and score ties broken by doc id
    bytes: pytrec_eval's figures, and the same as str columns."""
    rng = np.random.default_rng(4)
    pool = [f"d{i}" for i in range(300)] + ["\u00e9t\u00e9", "\u20acuro", "d\u00e91", "Z", "z"]
    q = np.repeat([f"q{i}" for i in range(60)], 40)
    d = [pool[i] for i in rng.integers(0, len(pool), len(q))]
    run = pd.DataFrame({"qid": q.astype(object), "doc_id": np.array(d, dtype=object),
                        "score": np.round(rng.random(len(q)), 1)}).drop_duplicates(["qid", "doc_id"])
    run = run.astype({"qid": object, "doc_id": object}).reset_index(drop=True)
    judged = run.sample(frac=0.3, random_state=1)
    qrels = pd.DataFrame({"qid": judged["qid"].to_numpy(), "doc_id": judged["doc_id"].to_numpy(),
                          "relevance": rng.integers(0, 3, len(judged))}).astype({"qid": object, "doc_id": object})
    assert run["doc_id"].dtype == object and len(run) >= 1024
    if kind == "category":
        run, qrels = run.astype({"qid": "category", "doc_id": "category"}), qrels.astype({"doc_id": "category"})
    assert_matches(run, qrels)
    as_str = {c: "str" for c in ("qid", "doc_id")}
    pd.testing.assert_frame_equal(evaluate(run, qrels, ["ndcg@10", "map"], per_query=True),
                                  evaluate(run.astype(as_str), qrels.astype(as_str), ["ndcg@10", "map"], per_query=True))
    run.iloc[1100, 1] = None  # a missing id still names its row
    with pytest.raises(FrameValidationError, match="missing value at row 1100"):
        evaluate(run, qrels, ["map"])


def test_the_kernel_split_over_threads_equals_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call past ``PARALLEL_ROWS`` measures its queries in chunks on threads: lowered to 0 here,
    two and three threads give one thread's values and statuses exactly (queries of every length,
    duplicates included)."""
    from kolm_search._kernels import load
    from kolm_search._kernels import metrics as metrics_module
    from kolm_search._kernels.measure_ids import Measure

    kernels = load("metrics")
    rng = np.random.default_rng(7)
    n_q, n_docs = 300, 500
    ranked = [rng.integers(0, n_docs, rng.integers(0, 120)) for _ in range(n_q)]  # duplicates now and then
    judged = [rng.choice(n_docs, rng.integers(0, 20), replace=False) for _ in range(n_q)]
    grades = [np.sort(rng.integers(-1, 4, len(j)))[::-1] for j in judged]
    ptr = lambda parts: np.concatenate([[0], np.cumsum([len(x) for x in parts])]).astype(np.int64)  # noqa: E731
    flat = lambda parts: np.concatenate(parts).astype(np.int64)  # noqa: E731
    args = (ptr(ranked), flat(ranked), n_docs, flat(ranked), ptr(judged), flat(judged), flat(grades), n_docs)
    mids = list(Measure)
    cuts = [int(c) for c in rng.integers(1, 40, len(mids))]
    one = kernels.evaluate_queries(*args, mids, cuts, 1, n_threads=1)
    monkeypatch.setattr(metrics_module, "PARALLEL_ROWS", 0)
    for threads in (2, 3):
        got = kernels.evaluate_queries(*args, mids, cuts, 1, n_threads=threads)
        np.testing.assert_array_equal(got[0], one[0])
        np.testing.assert_array_equal(got[1], one[1])
    assert (one[1] != 0).any()  # some query holds a duplicate


@pytest.mark.parametrize("seed", range(6))
def test_metrics_kernel_matches_numpy_twin(seed: int) -> None:
    """The evaluation kernel against its twin on random rankings and graded judgements."""
    from kolm_search._kernels import load
    from kolm_search._kernels.measure_ids import Measure
    from kolm_search._kernels.metrics_twin import evaluate_queries_numpy

    kernels = load("metrics")
    rng = np.random.default_rng(seed)
    n_q = 40
    n_docs = 60
    j_count = rng.integers(0, 12, n_q)
    judged_docs = [rng.choice(n_docs, c, replace=False) for c in j_count]
    grades = [np.sort(rng.integers(-2, 5, c))[::-1] for c in j_count]
    ranked = [rng.choice(n_docs, rng.integers(0, 30), replace=False) for _ in range(n_q)]
    ptr = lambda parts: np.concatenate([[0], np.cumsum([len(x) for x in parts])])  # noqa: E731
    flat = lambda parts: np.concatenate(parts).astype(np.int64)  # noqa: E731
    args = (ptr(ranked), flat(ranked), ptr(judged_docs), flat(judged_docs), flat(grades))
    kernel_args = (args[0], args[1], n_docs, args[1], *args[2:], n_docs)  # judged codes share the space
    mids = list(Measure) * 2
    cuts = [int(c) for c in rng.integers(1, 40, len(mids))]
    params = np.column_stack([rng.random(len(mids)) * 2, rng.normal(size=len(mids)), rng.normal(size=len(mids))])
    for level in (1, 2, 4):
        got, status = kernels.evaluate_queries(*kernel_args, mids, cuts, level, None, params, n_threads=3)
        want = evaluate_queries_numpy(*args, mids, cuts, level, None, params)
        assert not status.any()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # per-measure levels, judged-only rankings, parameters and whole-ranking cutoffs (0), in any order
    mids = mids * 2
    need_cut = {Measure.NDCG_CUT, Measure.P, Measure.RECALL, Measure.SUCCESS, Measure.ERR_CUT}  # 0 is no cutoff
    cuts = [int(c) if Measure(m) not in need_cut or c else 1 for m, c in zip(mids, rng.integers(0, 40, len(mids)),
                                                                             strict=True)]
    levels, flags, params = rng.integers(1, 4, len(mids)), rng.integers(0, 2, len(mids)), rng.random((len(mids), 3))
    got, status = kernels.evaluate_queries(*kernel_args, mids, cuts, levels, flags, params, n_threads=2)
    want = evaluate_queries_numpy(*args, mids, cuts, levels, flags, params)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    for position in (1, 3, 5):  # a code outside its range is refused before the kernel reads it
        bad = list(kernel_args)
        bad[position] = bad[position].copy()
        bad[position][0] = n_docs
        with pytest.raises(ValueError, match="codes outside"):
            kernels.evaluate_queries(*bad, mids, cuts, 1)


def _tiny() -> tuple[pd.DataFrame, pd.DataFrame]:
    run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "doc_id": ["a", "b", "a"], "score": [2.0, 1.0, 1.0]})
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "doc_id": ["b", "a"], "relevance": [1, 1]})
    return run, qrels


def test_each_call_form_has_one_return_type() -> None:
    """``evaluate(...)`` is a dict of floats, ``evaluate(..., per_query=True)`` a DataFrame, by
    keyword or by position; ``per_query`` takes only a bool."""
    from kolm_search.errors import ParameterError

    run, qrels = _tiny()
    for means in (evaluate(run, qrels), evaluate(run, qrels, ["ndcg@10", "map"]),
                  evaluate(run, qrels, "map", False), evaluate(run, qrels, "map", per_query=False)):
        assert type(means) is dict and all(type(v) is float for v in means.values())
    for table in (evaluate(run, qrels, ["map"], True), evaluate(run, qrels, per_query=True)):
        assert type(table) is pd.DataFrame and list(table["qid"]) == ["q1", "q2"]
        assert all(table[c].dtype == np.float64 for c in table.columns[1:])
    assert evaluate(run, qrels, ["map"]) == {"map": evaluate(run, qrels, ["map"], per_query=True)["map"].mean()}
    for bad in (1, "yes", None):
        with pytest.raises(ParameterError, match=rf"per_query must be True or False, got {bad!r}"):
            evaluate(run, qrels, ["map"], per_query=bad)  # type: ignore[call-overload]


def test_the_overloads_say_so() -> None:
    import typing

    from kolm_search.evaluation import metrics

    returns = [o.__annotations__["return"] for o in typing.get_overloads(metrics.evaluate)]
    assert returns == ["dict[str, float]", "pd.DataFrame", "pd.DataFrame", "dict[str, float] | pd.DataFrame"]


@pytest.mark.slow
def test_mypy_resolves_each_call_form(tmp_path: object) -> None:
    """mypy (the project's checker) picks the overload of each form (about 10 s: it reads the package)."""
    from pathlib import Path

    api = pytest.importorskip("mypy.api")
    root = Path(tmp_path)  # type: ignore[arg-type]
    (root / "snippet.py").write_text(
        "from typing import assert_type\nimport pandas as pd\nfrom kolm_search import evaluate\n"
        "run = qrels = pd.DataFrame()\nflag: bool = bool(len(run))\n"
        "assert_type(evaluate(run, qrels), dict[str, float])\n"
        "assert_type(evaluate(run, qrels, ['map'], False), dict[str, float])\n"
        "assert_type(evaluate(run, qrels, ['map'], True), pd.DataFrame)\n"
        "assert_type(evaluate(run, qrels, per_query=True), pd.DataFrame)\n"
        "assert_type(evaluate(run, qrels, per_query=flag), dict[str, float] | pd.DataFrame)\n"
        "assert_type(evaluate(run, qrels), pd.DataFrame)  # wrong on purpose: mypy must say so\n")
    out, _, status = api.run([str(root / "snippet.py"), "--cache-dir", str(root / "cache"), "--follow-imports=silent"])
    assert status == 1 and out.count("error:") == 1 and "snippet.py:11:" in out, out


def test_the_kernel_reports_duplicates_by_named_status() -> None:
    """Query 0 retrieves a document twice, query 1 has it judged twice, query 2 is clean."""
    from kolm_search._kernels import load
    from kolm_search._kernels.measure_ids import Measure, QueryStatus

    values, status = load("metrics").evaluate_queries(
        [0, 2, 3, 4], [0, 0, 0, 0], 1, [0, 0, 0, 0], [0, 1, 3, 4], [0, 0, 0, 0], [1, 1, 1, 1], 1,
        [Measure.P], [1], 1)
    assert status.tolist() == [QueryStatus.RUN_DUPLICATE, QueryStatus.QRELS_DUPLICATE, QueryStatus.EVALUATED]
    assert values[:, 0].tolist() == [0.0, 0.0, 1.0]  # nothing measured for the first two
