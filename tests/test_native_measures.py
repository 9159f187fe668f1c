"""Measures computed natively (no ir_measures call) and equal to their oracles per query (1e-9):
IPrec, SetP/SetR/SetF, NumQ against ir_measures (pytrec_eval behind it); DCG@k and nDCG with
dcg='exp-log2' against ranx (and ir_measures' gdeval to its five printed decimals); BEIR's R_cap@k
against trec_eval's relative_P and BEIR's own definition; alpha_nDCG@k, alpha_DCG@k, ERR_IA@k and
nERR_IA@k over subtopic qrels against ir_measures (pyndeval, ndeval's code); on Cranfield and on
random graded tie-free runs (ir_measures' tools break score ties another way). Also compare_runs
(RBO from its definition, Kendall's tau from scipy) and the 11-point precision-recall curve."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import pytrec_eval
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import KolmValueError, compare_runs, evaluate, precision_recall_curve, presets
from kolm_search.evaluation.agreement import rbo
from kolm_search.evaluation.measures import parse_measure
from kolm_search.io import read_qrels

ir_measures = pytest.importorskip("ir_measures", reason="ir_measures (test extra) not installed")

TREC_BACKED = ["IPrec@0.0", "IPrec@0.1", "IPrec@0.5", "IPrec@1.0", "SetP", "SetP(relative=True)", "SetR", "SetF",
               "SetF(beta=2.0)", "SetF(beta=0.5)", "SetP(rel=2)", "IPrec(rel=2)@0.3", "NumQ"]
RANX = {"DCG@10": "dcg@10", "DCG": "dcg", "DCG(dcg='exp-log2')@10": "dcg_burges@10",
        "nDCG(dcg='exp-log2')@10": "ndcg_burges@10", "nDCG(dcg='exp-log2')@3": "ndcg_burges@3",
        "nDCG(dcg='exp-log2')": "ndcg_burges"}
DIVERSITY = ["alpha_nDCG@1", "alpha_nDCG@5", "alpha_nDCG@10", "alpha_nDCG@20", "alpha_nDCG(alpha=0.3)@10",
             "alpha_nDCG(rel=2)@10", "alpha_DCG@1", "alpha_DCG@10", "ERR_IA@1", "ERR_IA@10", "ERR_IA(rel=2)@20",
             "nERR_IA@5", "nERR_IA@20"]


def random_graded(seed: int, n_q: int = 30, numeric: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tie-free runs (each query's scores a permutation) and grades 0..4."""
    rng = np.random.default_rng(seed)
    rows, qrows = [], []
    for q in range(n_q):
        qid = str(q + 1) if numeric else f"q{q}"
        docs = rng.choice(80, rng.integers(1, 60), replace=False)
        rows += [(qid, f"d{d}", float(s)) for d, s in zip(docs, rng.permutation(len(docs)), strict=True)]
        qrows += [(qid, f"d{d}", int(rng.integers(0, 5))) for d in rng.choice(80, rng.integers(1, 30), replace=False)]
    return (pd.DataFrame(rows, columns=["qid", "doc_id", "score"]),
            pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]))


def _ir(measure: str, qrels: pd.DataFrame, run: pd.DataFrame) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {m.query_id: m.value for m in ir_measures.iter_calc(
            [ir_measures.parse_measure(measure)], qrels.rename(columns={"qid": "query_id", "subtopic": "iteration"}),
            run.rename(columns={"qid": "query_id"}))}


@pytest.fixture(scope="module")
def cran_run(cranfield: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=100).run


@pytest.mark.parametrize("source", ["cranfield", "random0", "random1"])
def test_trec_backed_measures_equal_ir_measures(source: str, request: pytest.FixtureRequest) -> None:
    if source == "cranfield":
        run, qrels = request.getfixturevalue("cran_run"), request.getfixturevalue("cranfield")["qrels"]
    else:
        run, qrels = random_graded(int(source[-1]))
    ours = evaluate(run, qrels, TREC_BACKED, per_query=True).set_index("qid")
    for name in TREC_BACKED:
        assert parse_measure(name).external is None, name  # computed here, not by ir_measures
        want = _ir(name, qrels, run)
        assert set(want) == set(ours.index), name
        for q, value in want.items():
            assert abs(ours.loc[q, name] - value) <= 1e-9, (name, q, ours.loc[q, name], value)


def _dcg_by_hand(run: pd.DataFrame, qrels: pd.DataFrame, k: int | None, exp: bool, normalise: bool) -> dict[str, float]:
    """DCG / nDCG of each query from the formula, ranking by score then document id descending."""
    grades = {(q, d): g for q, d, g in qrels[["qid", "doc_id", "relevance"]].astype({"qid": str, "doc_id": str})
              .itertuples(index=False, name=None)}
    gain = (lambda g: 2.0 ** g - 1.0) if exp else (lambda g: float(g))
    out = {}
    for q, group in run.astype({"qid": str, "doc_id": str}).groupby("qid"):
        ranked = sorted(zip(group.score.astype(np.float32), group.doc_id, strict=True), key=lambda t: t[1],
                        reverse=True)
        ranked = sorted(ranked, key=lambda t: -t[0])  # stable: score descending, then id descending
        docs = [d for _, d in ranked][:k]
        dcg = sum(gain(max(grades.get((q, d), 0), 0)) / np.log2(i + 2) for i, d in enumerate(docs))
        ideal = sorted((g for (qq, _), g in grades.items() if qq == q and g > 0), reverse=True)[:k]
        best = sum(gain(g) / np.log2(i + 2) for i, g in enumerate(ideal))
        if any(qq == q for qq, _ in grades):
            out[q] = (dcg / best if best > 0 else 0.0) if normalise else dcg
    return out


@pytest.mark.parametrize("source", ["cranfield", "random2"])
def test_dcg_and_exponential_ndcg_from_their_formulas(source: str, request: pytest.FixtureRequest) -> None:
    if source == "cranfield":
        run, qrels = request.getfixturevalue("cran_run"), request.getfixturevalue("cranfield")["qrels"]
    else:
        run, qrels = random_graded(2)
    ours = evaluate(run, qrels, list(RANX), per_query=True).set_index("qid")
    for name in RANX:
        assert parse_measure(name).external is None, name
        k = int(name.split("@")[1]) if "@" in name else None
        want = _dcg_by_hand(run, qrels, k, "exp" in name, name.startswith("nDCG"))
        assert set(want) == set(ours.index)
        for q, value in want.items():
            assert abs(ours.loc[q, name] - value) <= 1e-9, (name, q)


@pytest.mark.slow  # ranx compiles its measures on every run (~25 s)
def test_dcg_and_exponential_ndcg_equal_ranx() -> None:
    ranx = pytest.importorskip("ranx", reason="ranx (test extra) not installed")
    run, qrels = random_graded(2)
    obj = {"qid": object, "doc_id": object}
    rq = ranx.Qrels.from_df(qrels.astype(obj).astype({"relevance": int}), q_id_col="qid", doc_id_col="doc_id",
                            score_col="relevance")
    rr = ranx.Run.from_df(run[["qid", "doc_id", "score"]].astype(obj), q_id_col="qid", doc_id_col="doc_id",
                          score_col="score")
    ours = evaluate(run, qrels, list(RANX), per_query=True).set_index("qid")
    for name, theirs in RANX.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ranx.evaluate(rq, rr, theirs, return_mean=False)
        for q, value in rr.scores[theirs].items():
            assert abs(ours.loc[q, name] - value) <= 1e-9, (name, q)


@pytest.mark.skipif(shutil.which("perl") is None, reason="gdeval (ir_measures' exp-log2 nDCG) needs perl")
@pytest.mark.parametrize("source", ["cranfield", "random3"])
def test_exponential_ndcg_equals_gdeval_to_its_printed_decimals(source: str, request: pytest.FixtureRequest) -> None:
    if source == "cranfield":  # gdeval breaks score ties its own way: rank order as scores
        run = request.getfixturevalue("cran_run")
        run, qrels = run.assign(score=-run["rank"].astype(float)), request.getfixturevalue("cranfield")["qrels"]
    else:
        run, qrels = random_graded(3, numeric=True)  # gdeval reads numeric query ids
    name = "nDCG(dcg='exp-log2')@10"
    ours = evaluate(run, qrels, [name], per_query=True).set_index("qid")[name]
    want = _ir(name, qrels, run)
    assert len(want) > 20 and all(abs(ours[q] - v) <= 5e-6 for q, v in want.items())


def test_r_cap_is_beirs_capped_recall_and_trec_evals_relative_p(cran_run: pd.DataFrame,
                                                                 cranfield: dict[str, pd.DataFrame]) -> None:
    qrels = cranfield["qrels"]
    ours = evaluate(cran_run, qrels, ["R_cap@10", "R_cap@100"], per_query=True).set_index("qid")
    r = {q: dict(zip(g.doc_id, g.score, strict=True)) for q, g in cran_run.groupby("qid", observed=True)}
    j = {q: dict(zip(g.doc_id, g.relevance.astype(int), strict=True)) for q, g in qrels.groupby("qid", observed=True)}
    want = pytrec_eval.RelevanceEvaluator(j, {"relative_P.10,100"}).evaluate(r)
    for q in want:
        assert abs(ours.loc[q, "R_cap@10"] - want[q]["relative_P_10"]) <= 1e-9
        ranked = cran_run[cran_run.qid == q].sort_values("rank")["doc_id"].tolist()
        relevant = {d for d, g in j[q].items() if g > 0}
        beir = len(set(ranked[:100]) & relevant) / min(100, len(relevant))  # BEIR's recall_cap
        assert abs(ours.loc[q, "R_cap@100"] - beir) <= 1e-9


def random_subtopics(seed: int, n_q: int = 25) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    rows, qrows = [], []
    for q in range(n_q):
        docs = rng.choice(60, rng.integers(1, 40), replace=False)
        rows += [(f"q{q}", f"d{d}", float(s)) for d, s in zip(docs, rng.permutation(len(docs)), strict=True)]
        for d in rng.choice(60, rng.integers(1, 25), replace=False):
            for sub in rng.choice(6, rng.integers(1, 4), replace=False):
                qrows.append((f"q{q}", str(sub), f"d{d}", int(rng.integers(0, 3))))
    return (pd.DataFrame(rows, columns=["qid", "doc_id", "score"]),
            pd.DataFrame(qrows, columns=["qid", "subtopic", "doc_id", "relevance"]))


@pytest.mark.parametrize("seed", range(3))
def test_diversity_measures_equal_ndeval(seed: int, tmp_path: Path) -> None:
    pytest.importorskip("pyndeval", reason="pyndeval (test extra) not installed")
    run, qrels = random_subtopics(seed)
    path = tmp_path / "diversity.qrels"  # as a trec_eval / ndeval file: qid subtopic doc rel
    path.write_text("".join(f"{q} {s} {d} {r}\n" for q, s, d, r in qrels.itertuples(index=False, name=None)))
    read = read_qrels(path, subtopics=True)
    assert list(read.columns) == ["qid", "doc_id", "relevance", "subtopic"] and len(read) == len(qrels)
    ours = evaluate(run, read, [*DIVERSITY, "ERR_IA(judged_only=True)@10"], per_query=True).set_index("qid")
    judged = set(zip(qrels.qid, qrels.doc_id, strict=True))
    only_judged = run[[(q, d) in judged for q, d in zip(run.qid, run.doc_id, strict=True)]]
    for name in [*DIVERSITY, "ERR_IA(judged_only=True)@10"]:
        assert parse_measure(name).external is None, name
        want = _ir(name.replace("(judged_only=True)", ""), qrels, only_judged if "judged" in name else run)
        assert want and set(want) <= set(ours.index), name
        for q, value in want.items():
            assert abs(ours.loc[q, name] - value) <= 1e-9, (name, q, ours.loc[q, name], value)


def test_diversity_kernel_matches_its_twin() -> None:
    from kolm_search._kernels import load
    from kolm_search._kernels.diversity import diversity_numpy
    from kolm_search._kernels.measure_ids import Diversity

    kernel = load("diversity")
    rng = np.random.default_rng(0)
    n_q, r_len, p_len, s_ptr, s_sub, n_sub, r_pair = 30, [], [], [0], [], [], []
    pair = 0
    for _ in range(n_q):
        k = int(rng.integers(0, 12))
        subs = int(rng.integers(0, 5))
        n_sub.append(subs)
        p_len.append(k)
        for _ in range(k):
            mine = rng.choice(subs, rng.integers(0, subs + 1), replace=False) if subs else []
            s_sub += sorted(int(x) for x in mine)
            s_ptr.append(len(s_sub))
        ranked = [int(x) for x in rng.permutation(k)[: rng.integers(0, k + 1)] + pair] + [-1] * int(rng.integers(0, 3))
        r_pair += [ranked[i] for i in rng.permutation(len(ranked))]
        r_len.append(len(ranked))
        pair += k
    ptr = lambda lens: np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)  # noqa: E731
    kinds = [int(d) for d in Diversity] * 3
    cutoffs = [int(c) for c in rng.integers(1, 15, len(kinds))]
    args = (ptr(r_len), r_pair, ptr(p_len), s_ptr, s_sub, n_sub, rng.permutation(pair), kinds, cutoffs)
    for alpha in (0.0, 0.5, 0.9):
        np.testing.assert_allclose(kernel.diversity_queries(*args, alpha), diversity_numpy(*args, alpha),
                                   rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="subtopic numbers"):
        kernel.diversity_queries(*args[:4], [9] * len(s_sub), *args[5:], 0.5)


def test_subtopic_qrels_needed_and_other_measures_see_the_best_grade() -> None:
    run, qrels = random_subtopics(7)
    with pytest.raises(KolmValueError, match="need subtopic qrels"):
        evaluate(run, qrels.drop(columns="subtopic").drop_duplicates(["qid", "doc_id"]), ["alpha_nDCG@10"])
    both = evaluate(run, qrels, ["alpha_nDCG@10", "nDCG@10", "P@5"], per_query=True)
    best = qrels.groupby(["qid", "doc_id"], as_index=False)["relevance"].max()
    alone = evaluate(run, best, ["nDCG@10", "P@5"], per_query=True)
    pd.testing.assert_frame_equal(both[["qid", "nDCG@10", "P@5"]], alone)
    twice = pd.concat([qrels, qrels.head(1)])
    with pytest.raises(KolmValueError, match="twice"):
        evaluate(run, twice, ["ERR_IA@10"])


def _rbo_from_sets(a: list[str], b: list[str], p: float) -> float:
    """Webber et al.'s eq. 32 written with sets at each depth (the test oracle)."""
    s_list, l_list = (a, b) if len(a) <= len(b) else (b, a)
    s, n = len(s_list), len(l_list)
    x = [len(set(s_list[:d]) & set(l_list[:d])) for d in range(n + 1)]
    total = sum(x[d] / d * p**d for d in range(1, n + 1)) + sum(x[s] * (d - s) / (s * d) * p**d
                                                                 for d in range(s + 1, n + 1))
    return (1 - p) / p * total + ((x[n] - x[s]) / n + x[s] / s) * p**n


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), unique=True, min_size=1, max_size=25),
       st.lists(st.integers(0, 30), unique=True, min_size=1, max_size=25), st.floats(0.05, 0.98))
def test_rbo_equals_its_definition(a: list[int], b: list[int], p: float) -> None:
    sa, sb = [f"d{x}" for x in a], [f"d{x}" for x in b]
    got = rbo(sa, sb, p)
    assert got == pytest.approx(_rbo_from_sets(sa, sb, p), abs=1e-12)
    assert got == pytest.approx(rbo(sb, sa, p), abs=1e-12) and -1e-12 <= got <= 1 + 1e-12


def test_compare_runs(cran_run: pd.DataFrame, cranfield: dict[str, pd.DataFrame]) -> None:
    from scipy import stats

    other = presets.bm25(cranfield["corpus"], fields=("title",)).search_batch(cranfield["queries"], limit=100).run
    table = compare_runs(cran_run, other, p=0.8, depth=50)
    assert list(table.columns) == ["qid", "rbo", "kendall_tau", "kendall_p_value", "common", "n_a", "n_b"]
    assert len(table) == cran_run.qid.nunique() and table.attrs == {"p": 0.8, "depth": 50}
    def trec_order(run: pd.DataFrame, qid: str) -> list[str]:  # score (float32) descending, then id descending
        part = run[run.qid.astype(str) == qid]
        pairs = sorted(zip(part.score.astype(np.float32).tolist(), part.doc_id.astype(str), strict=True),
                       key=lambda t: t[1], reverse=True)
        return [d for _, d in sorted(pairs, key=lambda t: -t[0])][:50]

    for row in table.sample(20, random_state=0).itertuples(index=False):
        a, b = trec_order(cran_run, row.qid), trec_order(other, row.qid)
        assert row.rbo == pytest.approx(_rbo_from_sets(a, b, 0.8), abs=1e-12)
        common = [d for d in a if d in b]
        assert row.common == len(common)
        if len(common) >= 2:
            tau = stats.kendalltau([a.index(d) for d in common], [b.index(d) for d in common])
            assert row.kendall_tau == pytest.approx(tau.statistic) and row.kendall_p_value == pytest.approx(tau.pvalue)
    same = compare_runs(cran_run, cran_run)
    assert np.allclose(same["rbo"], 1.0) and np.allclose(same["kendall_tau"], 1.0)
    with pytest.raises(KolmValueError, match="persistence"):
        compare_runs(cran_run, other, p=1.0)


def test_precision_recall_curve_is_trec_evals(cran_run: pd.DataFrame, cranfield: dict[str, pd.DataFrame]) -> None:
    qrels = cranfield["qrels"]
    curve = precision_recall_curve(cran_run, qrels)
    assert curve["recall"].tolist() == pytest.approx([i / 10 for i in range(11)])
    assert (np.diff(curve["precision"]) <= 1e-12).all()  # interpolated: never rises
    r = {q: dict(zip(g.doc_id, g.score, strict=True)) for q, g in cran_run.groupby("qid", observed=True)}
    j = {q: dict(zip(g.doc_id, g.relevance.astype(int), strict=True)) for q, g in qrels.groupby("qid", observed=True)}
    want = pytrec_eval.RelevanceEvaluator(j, {"iprec_at_recall"}).evaluate(r)
    for level, value in zip(curve["recall"], curve["precision"], strict=True):
        assert value == pytest.approx(np.mean([v[f"iprec_at_recall_{level:.2f}"] for v in want.values()]), abs=1e-12)
    per_query = precision_recall_curve(cran_run, qrels, per_query=True)
    assert len(per_query) == len(want) and per_query.columns[0] == "qid"
