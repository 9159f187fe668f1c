"""Measure names and objects: evaluate() against ir_measures (and pytrec_eval behind it), per query.

ir_measures hands each measure to a tool: pytrec_eval (trec_eval's ranking: float32 scores,
ties by document id descending) for most, MS MARCO's script for RR@k, its own code for
Judged, gdeval for ERR@k (printed to 5 decimals), cwl_eval for RBP. Those others break score
ties by document id ascending and compare float64 scores, so they are given the run already
in trec_eval's order (scores replaced by descending ranks, computed here in plain Python);
pytrec_eval's measures get the raw run, ties and all.
"""

from __future__ import annotations

import ir_measures as irm
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import KolmTypeError, KolmValueError, compare, evaluate
from kolm_search.evaluation.measures import parse_measure

TREC_EVAL = ["nDCG@10", "nDCG@3", "nDCG@50", "nDCG", "AP", "AP@5", "AP(rel=2)@10", "RR", "RR(rel=2)", "P@5", "P@50",
             "P(rel=2)@5", "R@10", "R(rel=2)@3", "R@50", "Rprec", "Rprec(rel=2)", "Bpref", "Bpref(rel=3)", "Success@3",
             "Success(rel=3)@5", "NumRet", "NumRel", "NumRelRet", "NumRet(rel=2)", "nDCG(judged_only=True)@5",
             "nDCG(judged_only=True)", "AP(judged_only=True)", "P(judged_only=True,rel=2)@3", "Rprec(judged_only=True)",
             "Success(judged_only=True)@2", "RR(judged_only=True)", "R(judged_only=True)@5",
             "nDCG(gains={0:1,1:3,2:7})@5", "infAP", "infAP(rel=2)", "SetAP", "SetAP(rel=2)"]  # the last two: ir_measures
OTHER_TOOLS = ["RR@5", "RR(rel=2)@3", "RR@50", "Judged@5", "Judged@50", "Judged", "RBP(p=0.5,rel=1)", "RBP(rel=2)"]
ROUNDED = ["ERR@5", "ERR@50"]  # gdeval prints 5 decimals
LEGACY = {"ndcg@10": "nDCG@10", "ndcg_cut_10": "nDCG@10", "NDCG@10": "nDCG@10", "ndcg": "nDCG", "map": "AP",
          "MAP": "AP", "map@5": "AP@5", "map_cut.5": "AP@5", "mrr": "RR", "recip_rank": "RR", "mrr@5": "RR@5",
          "MRR@5": "RR@5", "P_5": "P@5", "precision@5": "P@5", "Precision@5": "P@5", "recall@10": "R@10",
          "recall_10": "R@10", "Recall@10": "R@10", "r-precision": "Rprec", "RPrec": "Rprec", "hit_rate@3": "Success@3",
          "success_3": "Success@3", "success@3": "Success@3", "bpref": "Bpref", "BPref": "Bpref",
          "num_ret": "NumRet", "num_rel": "NumRel", "num_rel_ret": "NumRelRet", "precision@5-l2": "P(rel=2)@5",
          "ndcg@10-l3": "nDCG@10", "judged@5": "Judged@5", "err@5": "ERR@5"}


def trec_order(run: pd.DataFrame) -> pd.DataFrame:
    """The run with scores replaced by descending ranks in trec_eval's order (plain Python)."""
    rows = sorted(run[["qid", "doc_id", "score"]].itertuples(index=False, name=None),
                  key=lambda r: (np.float32(r[2]), str(r[1]).encode()), reverse=True)
    rows.sort(key=lambda r: str(r[0]))  # stable: keeps each query's order
    out = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    out["score"] = -out.groupby("qid").cumcount().astype(float)
    return out


def oracle(measures: list[str], run: pd.DataFrame, qrels: pd.DataFrame) -> dict[tuple[str, str], float]:
    """ir_measures' value of every (query of the qrels, measure). Measures with judged_only or
    gains go in calls of their own: ir_measures 0.4.3 puts NumRet and nDCG in whichever
    pytrec_eval call comes first (in set order), which may rank judged documents only or remap gains."""
    r = pd.DataFrame({"query_id": run["qid"].astype(str), "doc_id": run["doc_id"].astype(str), "score": run["score"]})
    q = pd.DataFrame({"query_id": qrels["qid"].astype(str), "doc_id": qrels["doc_id"].astype(str),
                      "relevance": qrels["relevance"].astype(int)})
    groups: dict[str, list[str]] = {}
    for x in measures:
        groups.setdefault("judged_only" if "judged_only" in x else "gains" if "gains" in x else "", []).append(x)
    return {(m.query_id, str(m.measure)): float(m.value) for group in groups.values()
            for m in irm.iter_calc([irm.parse_measure(x) for x in group], q, r)}


def assert_matches(run: pd.DataFrame, qrels: pd.DataFrame, names: list[str], given: pd.DataFrame, tol: float) -> None:
    got = evaluate(run, qrels, names, per_query=True, missing="zero")
    assert isinstance(got, pd.DataFrame)
    want = oracle(names, given, qrels)
    assert sorted(got["qid"]) == sorted({q for q, _ in want})
    for row in got.to_dict("records"):
        for name in names:
            assert abs(row[name] - want[row["qid"], str(irm.parse_measure(name))]) <= tol, (row["qid"], name)
    means = evaluate(run, qrels, names, missing="zero")
    assert isinstance(means, dict)
    for name in names:  # aggregated as ir_measures does: the mean, or the sum for the counts
        measure = irm.parse_measure(name)
        agg = measure.aggregator()
        for (_, m), v in want.items():
            if m == str(measure):
                agg.add(v)
        assert abs(means[name] - agg.result()) <= tol * max(1.0, abs(means[name])), name


def assert_all_match(run: pd.DataFrame, qrels: pd.DataFrame) -> None:
    ranked = trec_order(run)
    assert_matches(run, qrels, TREC_EVAL, run, 1e-9)
    assert_matches(run, qrels, OTHER_TOOLS, ranked, 1e-9)
    assert_matches(run, qrels, ROUNDED, ranked, 5.1e-6)


docs = st.sampled_from([f"d{i}" for i in range(12)] + ["D1", "d1x", "10", "9"])
run_rows = st.lists(st.tuples(st.sampled_from(["1", "2", "3"]), docs,
                              st.sampled_from([0.0, -0.0, 1.0, 1.0000001, 2.5, -1.0, 3.0])), min_size=1, max_size=45)
qrel_rows = st.lists(st.tuples(st.sampled_from(["1", "2", "4"]), docs, st.integers(-1, 4)), min_size=1, max_size=35)


@settings(max_examples=60, deadline=None)
@given(run_rows, qrel_rows)
def test_random_runs_match_ir_measures(rrows: list, qrows: list) -> None:
    """Graded judgements, score ties (also float32 ties), unjudged documents, queries without
    a relevant document or missing from the run, cutoffs beyond the run's depth."""
    run = pd.DataFrame(rrows, columns=["qid", "doc_id", "score"]).drop_duplicates(["qid", "doc_id"])
    qrels = pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]).drop_duplicates(["qid", "doc_id"])
    qrels = qrels[qrels.groupby("qid")["relevance"].transform("max") >= 0]  # trec_eval never returns otherwise
    if qrels.empty or not set(run.qid) & set(qrels.qid):
        return
    assert_all_match(run, qrels)


@pytest.mark.parametrize("seed", range(3))
def test_larger_random_runs_match_ir_measures(seed: int) -> None:
    """40 queries of up to 30 documents from 50, grades -1..4 (-1: pooled but unjudged, for
    infAP), half the scores tied, some queries without a relevant document or missing from the run."""
    rng = np.random.default_rng(seed)
    runs, judgements = [], []
    for q in range(40):
        if q % 7 != 3:  # missing from the run
            picked = rng.choice(50, int(rng.integers(1, 31)), replace=False)
            runs += [(str(q), f"d{d}", float(rng.integers(0, 8)) if d % 2 else float(rng.random())) for d in picked]
        grades = rng.integers(-1, 5, 15) if q % 5 else rng.integers(0, 1, 15)  # q % 5 == 0: nothing relevant
        judgements += [(str(q), f"d{d}", int(g)) for d, g in zip(rng.choice(50, 15, replace=False), grades, strict=True)]
    qrels = pd.DataFrame(judgements, columns=["qid", "doc_id", "relevance"])
    assert_all_match(pd.DataFrame(runs, columns=["qid", "doc_id", "score"]),
                     qrels[qrels.groupby("qid")["relevance"].transform("max") >= 0])


def test_cranfield_bm25_matches_ir_measures(cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    run = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=60).run
    assert_all_match(run, cranfield["qrels"])


def test_every_name_form_gives_the_same_values(cranfield: dict[str, pd.DataFrame]) -> None:
    """Legacy and ranx spellings, ir_measures strings and objects: the same per-query values,
    each keyed by the name as given (an object by its str())."""
    from kolm_search import presets

    run = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"].head(60), limit=30).run
    qrels = cranfield["qrels"]
    objects = [irm.nDCG @ 10, irm.P(rel=2) @ 5, irm.NumRelRet, irm.RBP(p=0.5, rel=1), irm.Judged @ 5, irm.infAP,
               irm.MAP, irm.RR(judged_only=True), irm.SetAP]
    table = evaluate(run, qrels, list(LEGACY) + list(dict.fromkeys(LEGACY.values())), per_query=True)
    assert isinstance(table, pd.DataFrame)
    for legacy, name in LEGACY.items():
        np.testing.assert_array_equal(table[legacy], table[name], err_msg=legacy)
    by_object = evaluate(run, qrels, objects, per_query=True)
    by_name = evaluate(run, qrels, [str(obj) for obj in objects], per_query=True)
    assert isinstance(by_object, pd.DataFrame) and list(by_object.columns[1:]) == [str(o) for o in objects]
    pd.testing.assert_frame_equal(by_object, by_name)
    assert evaluate(run, qrels, irm.AP @ 10) == evaluate(run, qrels, "AP@10")
    # the call's relevance level is the default rel of every measure without its own
    at2 = evaluate(run, qrels, ["P@5", "R@10", "AP", "RR@3", "Bpref", "NumRelRet", "nDCG@5"], relevance_level=2)
    own = evaluate(run, qrels, ["P(rel=2)@5", "R(rel=2)@10", "AP(rel=2)", "RR(rel=2)@3", "Bpref(rel=2)",
                                "NumRet(rel=2)", "nDCG@5"])
    assert list(at2.values()) == list(own.values())
    mixed = evaluate(run, qrels, ["P@5", "P(rel=2)@5", "P(rel=3)@5"], relevance_level=1)
    assert mixed["P@5"] > mixed["P(rel=2)@5"] > mixed["P(rel=3)@5"] > 0
    # counts are summed over queries, as ir_measures aggregates them
    counts = evaluate(run, qrels, ["NumRet", "NumRel"])
    assert counts["NumRet"] == len(run)
    assert counts["NumRel"] == (qrels[qrels.qid.isin(run.qid.astype(str))].relevance >= 1).sum()


def test_compare_accepts_the_same_names(cranfield: dict[str, pd.DataFrame]) -> None:
    from kolm_search import presets

    queries = cranfield["queries"].head(40)
    runs = {"bm25": presets.bm25(cranfield["corpus"]).search_batch(queries, limit=30).run,
            "title": presets.bm25(cranfield["corpus"], fields=("title",)).search_batch(queries, limit=30).run}
    table = compare(runs, cranfield["qrels"], ["ndcg@10", irm.P(rel=2) @ 5, "RR@10"], n_resamples=200)
    assert list(dict.fromkeys(table["metric"])) == ["ndcg@10", "P(rel=2)@5", "RR@10"]
    row = table[(table.run == "title") & (table.metric == "P(rel=2)@5")].iloc[0]
    assert row["mean"] == pytest.approx(evaluate(runs["title"], cranfield["qrels"], "P(rel=2)@5")["P(rel=2)@5"])


@pytest.mark.parametrize("name", ["hits@10", "HITS_5", "hits", "hits@10-l2"])
def test_hits_is_refused_with_both_meanings(name: str) -> None:
    with pytest.raises(KolmValueError, match=r"(?s)ranx.*number of relevant.*success@k"):
        parse_measure(name)


@pytest.mark.parametrize("name", ["rbp.95", "rbp@80"])
def test_ranx_rbp_spelling_is_refused(name: str) -> None:
    with pytest.raises(KolmValueError, match=r"persistence.*cut at rank.*RBP\(p=0.95,rel=1\)"):
        parse_measure(name)


@pytest.mark.parametrize("name, match", [
    ("P", "P needs a cutoff"), ("R(rel=2)", "R needs a cutoff"), ("RBP(p=0.5)", "RBP needs rel="),
    ("ERR", "ERR needs a cutoff"), ("P(foo=1)@5", "no parameter 'foo'"), ("Bpref(judged_only=True)", "judged_only"),
    ("P@0", "cutoff must be an integer >= 1"), ("P(rel=0)@5", "rel must be"), ("P(rel=True)@5", "rel must be"),
    ("RBP(p=1.5,rel=1)", "p must be"), ("P(judged_only=1)@5", "judged_only must be"),
    ("nDCG(gains={1:0.5})@5", "gains must map"), ("P(2)@5", "must be named"), ("P(rel=x)@5", "literals"),
    ("NoSuchMeasure@5", "unknown metric"), ("ndcg@10-l0", "relevance level"),
])
def test_bad_names_are_refused_naming_the_metric(name: str, match: str) -> None:
    with pytest.raises(KolmValueError, match=match) as info:
        parse_measure(name)
    assert repr(name) in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\s?(P\(\d?\)@\d|P_\d|num_ret|map)\s?", fullmatch=True), st.from_regex(r"[A-Za-z_]{1,9}(\((rel|p|judged_only|gains|cutoff)=[-0-9.TrueFals{}:,]{0,9}\))?"
                                                    r"([@_.][-0-9]{0,25})?(-l[0-9]{1,3})?", fullmatch=True)))
def test_any_text_is_a_measure_or_a_named_error(text: str) -> None:
    try:
        spec = parse_measure(text)
    except KolmValueError as exc:
        assert repr(text) in str(exc)
        return
    assert spec.key == text and (spec.kind or spec.external is not None)  # keyed by the name as given
    assert 0 <= spec.cutoff < 2**31 and (spec.rel is None or 1 <= spec.rel < 2**31)


def test_other_inputs() -> None:
    run = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]})
    qrels = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "relevance": [5]})
    with pytest.raises(KolmTypeError, match="names .str. or ir_measures measures"):
        evaluate(run, qrels, [3])
    with pytest.raises(KolmValueError, match="'AP' is given twice"):
        evaluate(run, qrels, ["AP", irm.AP])
    with pytest.raises(KolmValueError, match="ERR@k .*grades up to 4.*grade 5"):
        evaluate(run, qrels, ["ERR@10"])
    assert parse_measure("Compat(p=0.8)").kind == "" and parse_measure("Compat(p=0.8)").external is not None  # ir_measures
    assert parse_measure("NumRet").summed and not parse_measure("P@5").summed
    # a measure only ir_measures has, that no tool behind it can compute, names itself and the cause
    with pytest.raises(KolmValueError, match=r"ir_measures could not compute SDCG@5"):
        evaluate(run, qrels, ["SDCG@5"])


def test_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    spec = parse_measure(irm.Compat(p=0.8))
    monkeypatch.setitem(sys.modules, "ir_measures", None)  # as if not installed
    run = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]})
    qrels = pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "relevance": [1]})
    with pytest.raises(KolmValueError, match=r"unknown metric 'Compat\(p=0.8\)'.*kolm-search\[measures\]"):
        evaluate(run, qrels, [spec.key])
    assert evaluate(run, qrels, ["AP", "nDCG@10"]) == {"AP": 1.0, "nDCG@10": 1.0}  # native names need no extra


def test_a_str_subclass_is_parsed_by_its_value_and_kept_as_its_key() -> None:
    """A metric given as a str subclass (a ``(str, Enum)`` member, whose ``str()`` is
    ``"Metric.NDCG"``, or one with its own ``__str__``) is the measure its value names, keyed by
    the object given, at every call (the first one and the ones after)."""
    import enum

    class Metric(str, enum.Enum):  # noqa: UP042  (the mixin whose str() is "Metric.NDCG", not StrEnum)
        NDCG = "nDCG@10"
        AP = " AP "

    class Shown(str):
        def __str__(self) -> str:
            return "shown"

    for metric in (Metric.NDCG, Metric.AP, Shown("P(rel=2)@5"), Metric.NDCG):
        spec = parse_measure(metric)
        plain = parse_measure(str.__str__(metric))
        assert spec.key is metric
        assert (spec.kind, spec.cutoff, spec.rel, spec.params, spec.aggregate) \
            == (plain.kind, plain.cutoff, plain.rel, plain.params, plain.aggregate)
