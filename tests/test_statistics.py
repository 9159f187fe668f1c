"""compare()'s statistics against statsmodels and scipy on the same per-query scores: corrections
(Bonferroni, Holm, Benjamini-Hochberg, Benjamini-Yekutieli = statsmodels' multipletests), Tukey's
HSD (= statsmodels' pairwise_tukeyhsd), t intervals (= statsmodels' tconfint_mean), percentile
bootstrap intervals (= scipy.stats.bootstrap), Cohen's d_z (= the paired t statistic over sqrt(n)),
wins/ties/losses, and several baselines in one table (one correction family per metric)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from kolm_search import KolmValueError, compare
from kolm_search.cli import main
from kolm_search.evaluation.compare import per_query_table
from kolm_search.evaluation.stats import confidence_interval, correct, effect_size, paired_test

statsmodels = pytest.importorskip("statsmodels", reason="statsmodels (test extra) not installed")
from statsmodels.stats.multicomp import pairwise_tukeyhsd  # noqa: E402
from statsmodels.stats.multitest import multipletests  # noqa: E402
from statsmodels.stats.weightstats import DescrStatsW  # noqa: E402

SM_METHOD = {"bonferroni": "bonferroni", "holm": "holm", "bh": "fdr_bh", "by": "fdr_by"}


def _runs(seed: int, n_q: int = 40) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Four runs of different quality over graded qrels (ties between runs on many queries)."""
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(rng.integers(0, 3)) * int(d % 3 == 0)) for q in range(n_q)
                          for d in range(15)], columns=["qid", "doc_id", "relevance"])
    rel = qrels["relevance"].to_numpy()
    runs = {name: qrels[["qid", "doc_id"]].assign(score=rng.random(len(qrels)) + signal * rel)
            for name, signal in (("base", 0.3), ("good", 1.5), ("bad", -0.5), ("meh", 0.35))}
    return runs, qrels


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.sampled_from(list(SM_METHOD)))
def test_corrections_equal_statsmodels(p: list[float], method: str) -> None:
    values = np.array(p)
    want = multipletests(values, method=SM_METHOD[method])[1]
    np.testing.assert_allclose(correct(values, method), want, rtol=1e-12, atol=1e-15)  # type: ignore[arg-type]


def test_t_and_bootstrap_intervals_and_effect_size() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random(60), rng.random(60) + 0.05
    d = b - a
    low, high = confidence_interval(a, b, "t", confidence=0.9)
    np.testing.assert_allclose((low, high), DescrStatsW(d).tconfint_mean(alpha=0.1), rtol=1e-12)
    boot = stats.bootstrap((d,), np.mean, confidence_level=0.95, n_resamples=2000, method="percentile",
                           rng=np.random.default_rng(7)).confidence_interval
    assert confidence_interval(a, b, "bootstrap", n_resamples=2000, seed=7) == (boot.low, boot.high)
    t_low, t_high = confidence_interval(a, b, "t")
    b_low, b_high = confidence_interval(a, b, "bootstrap", seed=3)
    assert abs(b_low - t_low) < 0.02 and abs(b_high - t_high) < 0.02  # two estimates of one interval
    assert effect_size(a, b) * np.sqrt(len(d)) == pytest.approx(stats.ttest_rel(b, a).statistic, rel=1e-12)
    zeros, halves = np.zeros(8), np.full(8, 0.5)
    assert effect_size(a, a) == 0.0 and effect_size(zeros, halves) == np.inf and effect_size(halves, zeros) == -np.inf
    assert confidence_interval(zeros, halves) == (0.5, 0.5) and np.isnan(confidence_interval(a[:1], b[:1])[0])
    with pytest.raises(KolmValueError, match="paired test"):
        paired_test(a, b, "tukey")


@pytest.mark.parametrize(("test", "ci"), [("t", "t"), ("wilcoxon", "bootstrap"), ("fisher", "t")])
def test_compare_columns_from_the_per_query_scores(test: Any, ci: Any) -> None:
    runs, qrels = _runs(0)
    table = compare(runs, qrels, ["ndcg@10", "P@5"], test=test, ci=ci, correction="by", n_resamples=2000, seed=5)
    scores = per_query_table(runs, qrels, ["ndcg@10", "P@5"])
    assert table.attrs["compare"]["correction"] == "by" and table.attrs["compare"]["ci"] == ci
    for metric, frame in scores.items():
        rows = table[(table.metric == metric) & (table.run != "base")]
        base = frame["base"].to_numpy()
        for r in rows.itertuples(index=False):
            d = frame[r.run].to_numpy() - base
            assert r.delta == pytest.approx(d.mean()) and r.effect_size == pytest.approx(effect_size(base, base + d))
            assert (r.wins, r.ties, r.losses) == (int((d > 1e-12).sum()), int((np.abs(d) <= 1e-12).sum()),
                                                  int((d < -1e-12).sum()))
            assert r.ci_low <= r.delta <= r.ci_high
            if ci == "t":
                np.testing.assert_allclose((r.ci_low, r.ci_high), DescrStatsW(d).tconfint_mean(alpha=0.05), rtol=1e-12)
            if test == "t":
                assert r.p_value == pytest.approx(stats.ttest_rel(frame[r.run], base).pvalue, rel=1e-12)
        want = multipletests(rows["p_value"].to_numpy(), method="fdr_by")[1]
        np.testing.assert_allclose(rows["p_adjusted"].to_numpy(), want, rtol=1e-12)
        assert (rows["significant"] == (rows["p_adjusted"] < 0.05)).all()


def test_tukey_hsd_equals_statsmodels() -> None:
    runs, qrels = _runs(2)
    table = compare(runs, qrels, ["ndcg@10"], test="tukey", baseline=["base", "meh"])
    assert table.attrs["compare"]["correction"] == "none" and table.attrs["compare"]["ci"] == "tukey"
    frame = per_query_table(runs, qrels, ["ndcg@10"])["ndcg@10"]
    names = list(frame.columns)
    sm = pairwise_tukeyhsd(np.concatenate([frame[n].to_numpy() for n in names]), np.repeat(names, len(frame)),
                           alpha=0.05)
    groups = list(sm.groupsunique)
    pairs = [(groups[i], groups[j]) for i in range(len(groups)) for j in range(i + 1, len(groups))]
    for (g1, g2), p, diff, (low, high) in zip(pairs, sm.pvalues, sm.meandiffs, sm.confint, strict=True):
        for run, base, sign in ((g2, g1, 1), (g1, g2, -1)):  # statsmodels: mean(g2) - mean(g1)
            row = table[(table.run == run) & (table.baseline == base)]
            if row.empty:
                continue
            r = row.iloc[0]
            assert r.delta == pytest.approx(sign * diff, abs=1e-12) and r.p_value == pytest.approx(p, abs=1e-6)
            lo, hi = sorted((sign * low, sign * high))
            assert (r.ci_low, r.ci_high) == (pytest.approx(lo, abs=1e-6), pytest.approx(hi, abs=1e-6))
            assert r.p_adjusted == r.p_value and r.significant == (p < 0.05)
    with pytest.raises(KolmValueError, match="Tukey's HSD adjusts"):
        compare(runs, qrels, ["ndcg@10"], test="tukey", correction="holm")


def test_several_baselines_in_one_table() -> None:
    runs, qrels = _runs(3)
    table = compare(runs, qrels, ["ndcg@10"], baseline=["base", "good"], correction="bh")
    assert table.attrs["compare"]["baselines"] == ["base", "good"]
    assert len(table) == 2 * len(runs)  # each baseline's own row and one per other run
    raw = []
    for base in ("base", "good"):
        single = compare(runs, qrels, ["ndcg@10"], baseline=base, correction="none")
        mine = table[table.baseline == base].reset_index(drop=True)
        pd.testing.assert_series_equal(mine["p_value"], single["p_value"].reset_index(drop=True), check_names=False)
        raw += mine["p_value"].dropna().tolist()
    tested = table["p_value"].notna()
    np.testing.assert_allclose(table.loc[tested, "p_adjusted"], multipletests(raw, method="fdr_bh")[1], rtol=1e-12)
    md = table.to_markdown()
    assert "base (baseline a)" in md and "good (baseline b)" in md and "the baselines base (a), good (b)" in md
    assert "†a" in md and "‡b" in md  # 'good' beats 'base' (a); 'bad' loses to 'good' (b)
    assert r"$^{\dagger\mathrm{a}}$" in table.to_latex()
    with pytest.raises(KolmValueError, match="not one of the runs"):
        compare(runs, qrels, baseline=["base", "nope"])


def test_cli_compare_tukey_fdr_and_baselines(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from kolm_search import write_qrels, write_run

    runs, qrels = _runs(4)
    paths = []
    for name, run in runs.items():
        write_run(run, tmp_path / f"{name}.trec")
        paths.append(str(tmp_path / f"{name}.trec"))
    write_qrels(qrels, tmp_path / "qrels.txt")
    base = ["compare", *paths, "--qrels", str(tmp_path / "qrels.txt"), "--metrics", "ndcg@10", "--format", "csv"]
    assert main([*base, "--test", "tukey", "--baseline", "base.trec", "--baseline", "good.trec", "-o",
                 str(tmp_path / "c.csv")]) == 0
    frame = pd.read_csv(tmp_path / "c.csv")
    assert set(frame["baseline"]) == {"base.trec", "good.trec"} and frame["ci_low"].notna().all()
    assert main([*base, "--correction", "by", "--ci", "bootstrap"]) == 0
    assert "ci_high" in capsys.readouterr().out
