"""``compare``: every run against one or several baselines, with paired tests, corrections for
multiple testing, confidence intervals and effect sizes (:mod:`kolm_search.evaluation.stats`).

Every run is scored on the same queries: the judged queries any run answers; a run missing one
of them scores 0 there. Corrections apply per metric, across every (baseline, run) comparison of
the table; Tukey's HSD compares every run at once and needs none.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.engine.runs import as_qrels, as_run
from kolm_search.errors import KolmValueError
from kolm_search.evaluation.coded_runs import Measured
from kolm_search.evaluation.curves import CURVE_MEASURES, RECALL_LEVELS, level_means, mean_curves
from kolm_search.evaluation.experiment_runs import Runs
from kolm_search.evaluation.measures import metric_key, metric_list, parse_measure
from kolm_search.evaluation.metrics import evaluate
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.evaluation.self_hits import wants_self_hits_dropped
from kolm_search.evaluation.stats import (
    CORRECTIONS,
    INTERVALS,
    TESTS,
    Correction,
    Interval,
    Test,
    confidence_interval,
    correct,
    effect_size,
    paired_t,
    paired_test,
    rng_of,
    tukey_hsd,
)

__all__ = ["TESTS", "compare", "paired_test", "per_query_table"]

COLUMNS = ("run", "metric", "mean", "delta", "p_value", "p_adjusted", "significant", "wins", "ties", "losses",
           "baseline", "ci_low", "ci_high", "effect_size")


def _check_names(names: Sequence[Any]) -> None:
    """Refuse two run names whose text is equal (``1`` and ``"1"``): reports and files show names
    as text, where one run would hide the other; and a name whose text shows nothing (white
    space, zero-width or other format characters: a report would show a row without a name)."""
    seen: dict[str, Any] = {}
    for name in names:
        if not any(ch.isprintable() and not ch.isspace() for ch in str(name)):  # blank, or format characters only
            raise KolmValueError(f"a run is named {name!r}, which shows nothing as text (blank, or only format, "
                                 "surrogate or other unprintable characters): reports show names as text, so give "
                                 "it one with a visible character")
        other = seen.setdefault(str(name), name)
        if other is not name:
            raise KolmValueError(f"two runs have names whose text is equal, {other!r} and {name!r}: reports show "
                                 "names as text, so one would hide the other; rename one")


def run_tables(runs: Mapping[Any, Any], qrels: Any, metrics: Sequence[Any], *, relevance_level: int = 1,
               drop_self_hits: bool | None = None) -> dict[Any, pd.DataFrame]:
    """Each run's per-query table (``evaluate(run, qrels, metrics, per_query=True, ...)``), by
    name; an experiment's :class:`~kolm_search.evaluation.experiment_runs.Runs` measures the runs it
    holds as codes from their codes (:meth:`Runs.evaluate`)."""
    if isinstance(runs, Runs):
        return runs.evaluate(qrels, metrics, relevance_level=relevance_level, drop_self_hits=drop_self_hits)
    return {name: evaluate(as_run(run, what=f"run {name!r}"), qrels, metrics, per_query=True,
                           relevance_level=relevance_level, drop_self_hits=drop_self_hits)
            for name, run in runs.items()}


def common_tables(tables: Mapping[Any, pd.DataFrame], keys: Sequence[str]) -> dict[str, pd.DataFrame]:
    """``{metric: DataFrame qid x run}`` on the queries any run's table holds (the judged queries
    any run answers), a run's missing ones (and NaN values) scored 0, from each run's per-query
    table."""
    found = [t["qid"].astype(str).to_numpy(dtype=object) for t in tables.values()]
    qids = sorted(set(np.concatenate(found).tolist())) if found else []
    index = pd.Index(qids, name="qid")
    ordered = np.array(qids, dtype=object)
    columns: dict[str, dict[Any, np.ndarray]] = {m: {} for m in keys}
    for (name, table), ids_ in zip(tables.items(), found, strict=True):
        whole = len(ids_) == len(ordered) and bool((ids_ == ordered).all())  # every query, in order (the rule)
        at = None if whole else index.get_indexer(ids_)
        for m in keys:
            values = table[m].to_numpy(np.float64)
            if at is None:
                column = values.copy()
            else:
                column = np.zeros(len(index))
                column[at] = values
            column[np.isnan(column)] = 0.0
            columns[m][name] = column
    return {m: pd.DataFrame(columns[m], index=index) if columns[m] else pd.DataFrame(index=index) for m in keys}


def _common_values(measured: Mapping[Any, pd.DataFrame | Measured], keys: Sequence[str], curve_keys: Sequence[str],
                   ) -> tuple[dict[str, pd.DataFrame], np.ndarray] | None:
    """:func:`common_tables` and the runs' mean curves (float64 ``(n_runs, 11)``) straight from
    the runs' :class:`Measured` values, when every run is measured over the same query codes
    (the same labels) and the kept queries' ids are in Python's string order (as
    ``common_tables`` sorts them); None otherwise. The same floats as through the per-query
    DataFrames: each value is the one the DataFrame holds, the missing ones 0, each curve level
    summed as one contiguous row."""
    found = list(measured.values())
    if not found or not all(isinstance(t, Measured) for t in found):
        return None
    first = found[0]
    assert isinstance(first, Measured)
    if any(t.labels is not first.labels or t.keys != first.keys for t in found if isinstance(t, Measured)):
        return None
    keeps = np.stack([t.keep for t in found if isinstance(t, Measured)])
    rows = np.flatnonzero(keeps.any(axis=0))
    qids = first.labels[rows].tolist() if len(rows) else []
    if not all(isinstance(q, str) for q in qids) or any(a >= b for a, b in itertools.pairwise(qids)):
        return None
    index = pd.Index(qids, name="qid")
    column_of = {k: j for j, k in enumerate(first.keys)}
    columns: dict[str, dict[Any, np.ndarray]] = {m: {} for m in keys}
    curves = np.full((len(found), len(curve_keys)), np.nan)
    for i, (name, t) in enumerate(measured.items()):
        assert isinstance(t, Measured)
        kept = t.keep[rows]
        for m in keys:
            column = np.zeros(len(rows))
            column[kept] = t.values[rows[kept], column_of[m]]
            column[np.isnan(column)] = 0.0
            columns[m][name] = column
        own = np.flatnonzero(t.keep)
        curves[i] = level_means(np.stack([t.values[own, column_of[c]] for c in curve_keys]))
    tables = {m: pd.DataFrame(columns[m], index=index) if columns[m] else pd.DataFrame(index=index) for m in keys}
    return tables, curves


def per_query_table(runs: Mapping[str, Any], qrels: Any, metrics: Sequence[Any] | Any, *,
                    relevance_level: int = 1, drop_self_hits: bool | None = None) -> dict[str, pd.DataFrame]:
    """Per-query scores of every run on a common query set: ``{metric: DataFrame qid x run}``
    (metrics as in :func:`~kolm_search.evaluate`, keyed likewise): the judged queries that any
    run answers, a run that misses one scored 0 there."""
    metrics = metric_list(metrics)
    tables = run_tables(runs, as_qrels(qrels), metrics, relevance_level=relevance_level,
                        drop_self_hits=drop_self_hits)
    return common_tables(tables, [metric_key(m) for m in metrics])


def _baselines(baseline: str | Sequence[str] | None, names: list[Any]) -> list[Any]:
    chosen = [names[0]] if baseline is None else [baseline] if isinstance(baseline, str) or not isinstance(
        baseline, Sequence) else list(baseline)
    if not chosen:
        raise KolmValueError("baseline must name at least one run")
    for b in chosen:
        if b not in names:
            raise KolmValueError(f"baseline {b!r} is not one of the runs {names}")
    if len(set(map(str, chosen))) != len(chosen):
        raise KolmValueError(f"a baseline is given twice: {chosen}")
    return chosen


def check_settings(names: list[Any], metrics: Sequence[Any] | Any, baseline: str | Sequence[str] | None, test: Test,
                   correction: Correction | None, *, ci: Interval = "t", alpha: float = 0.05,
                   seed: int | np.random.Generator | None = 0) -> tuple[list[Any], Correction, list[Any]]:
    """:func:`compare`'s settings for runs named ``names`` checked before anything is measured
    (a ``KolmValueError`` naming the bad one; an :class:`~kolm_search.evaluation.Experiment`
    checks them before it searches): the measures (each parsed), the correction (its default
    resolved) and the baselines."""
    measures = metric_list(metrics)
    for measure in measures:
        parse_measure(measure)
    if test not in TESTS:
        raise KolmValueError(f"test must be one of {TESTS}, got {test!r}")
    if ci not in INTERVALS:
        raise KolmValueError(f"ci must be one of {INTERVALS}, got {ci!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 < alpha < 1.0:
        raise KolmValueError(f"alpha must be a number in (0, 1), got {alpha!r}")
    if correction is None:
        correction = "none" if test == "tukey" else "holm"
    if correction not in CORRECTIONS:
        raise KolmValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    if test == "tukey" and correction != "none":
        raise KolmValueError("Tukey's HSD adjusts for every pair of runs itself: give correction='none' (the default "
                             "with it)")
    _check_names(names)
    bases = _baselines(baseline, names)
    if test == "tukey" and len(names) < 2:
        raise KolmValueError("Tukey's HSD needs at least two runs")
    if not (seed is None or isinstance(seed, np.random.Generator)
            or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0)):
        raise KolmValueError(f"seed must be an integer >= 0, a numpy Generator or None, got {seed!r}")
    return measures, correction, bases


def compare(runs: Mapping[Any, Any], qrels: Any, metrics: Sequence[Any] | Any = ("ndcg@10",),
            baseline: str | Sequence[str] | None = None, test: Test = "t", correction: Correction | None = None, *,
            alpha: float = 0.05, ci: Interval = "t", n_resamples: int = 10_000,
            seed: int | np.random.Generator | None = 0, relevance_level: int = 1,
            drop_self_hits: bool | None = None) -> ComparisonTable:
    """Means, deltas with confidence intervals, effect sizes, p-values and wins/ties/losses of
    every run against one or several baselines.

    Parameters
    ----------
    runs : dict name -> run DataFrame (or BatchResult)
        Names whose text is equal (``1`` and ``"1"``) are refused.
    qrels : DataFrame ``qid, doc_id, relevance``
    metrics : list of str or ir_measures measures
        As in :func:`~kolm_search.evaluate`; rows are keyed by the name given (an object by its ``str()``).
    baseline : str or list of str, optional
        The baseline run, or several: every other run is compared with each (default: the first run).
    test : {"t", "wilcoxon", "fisher", "bootstrap", "tukey"}
        Paired two-sided test, or Tukey's HSD over every run (``scipy.stats.tukey_hsd``).
    correction : {"holm", "bonferroni", "bh", "by", "none"}, optional
        Across the comparisons of each metric (``bh``/``by``: Benjamini-Hochberg / -Yekutieli
        false discovery rate). Default ``"holm"``, and ``"none"`` for Tukey's HSD (which adjusts
        for every pair itself; another correction is refused with it).
    alpha : float
        Significance level (on the corrected p-value); the intervals have confidence 1 - alpha.
    ci : {"t", "bootstrap"}
        Interval of the mean difference: Student's t, or the percentile bootstrap (Tukey's HSD
        gives its own simultaneous intervals).
    n_resamples : int
        Resamples of the randomised tests and of the bootstrap interval.
    seed : int or numpy.random.Generator
        Makes the randomised procedures reproducible.
    drop_self_hits : bool, optional
        As in :func:`evaluate` (None: the qrels' flag, on for BEIR datasets).

    Returns
    -------
    ComparisonTable
        A DataFrame, one row per (baseline, run, metric): ``run, metric, mean, delta, p_value,
        p_adjusted, significant, wins, ties, losses, baseline, ci_low, ci_high, effect_size``
        (``delta``, its interval and Cohen's d_z ``effect_size`` are of run minus baseline; each
        baseline's own row has delta 0 and no p-value). ``.to_markdown()``, ``.to_latex()`` and
        ``.to_html()`` render the report (best value in bold, significance marks, a caption
        naming the test and the correction; see :mod:`kolm_search.evaluation.report`).
    """
    if not runs:
        raise KolmValueError("compare needs at least one run")
    names = list(runs)
    measures, correction, bases = check_settings(names, metrics, baseline, test, correction, ci=ci, alpha=alpha,
                                                 seed=seed)
    rng = rng_of(seed)
    keys = [metric_key(m) for m in measures]
    curve = [m for m in CURVE_MEASURES if m not in keys]  # the curves' measures, in the same pass
    curve_keys = [metric_key(m) for m in [*measures, *curve] if metric_key(m) in CURVE_MEASURES]
    if isinstance(runs, Runs):  # an experiment's runs: those measured from codes come as values
        measured = runs.measure(as_qrels(qrels), [*measures, *curve], relevance_level=relevance_level,
                                drop_self_hits=drop_self_hits)
        fast = _common_values(measured, keys, curve_keys)
        raw = {} if fast is not None else {n: t.frame() if isinstance(t, Measured) else t for n, t in measured.items()}
    else:
        fast, raw = None, run_tables(runs, as_qrels(qrels), [*measures, *curve], relevance_level=relevance_level,
                                     drop_self_hits=drop_self_hits)
    tables, curves = fast if fast is not None else (common_tables(raw, keys), mean_curves([raw[n] for n in names]))
    rows = []
    for metric in (metric_key(m) for m in measures):
        t = tables[metric]
        tukey = tukey_hsd(t, confidence=1 - alpha).set_index(["run", "baseline"]) if test == "tukey" else None
        metric_rows = []
        for base in bases:
            b = t[base].to_numpy()
            others = [n for n in names if n != base]
            student = None  # Student's t of every run against this baseline at once (no randomness)
            if tukey is None and (test == "t" or ci == "t") and others:
                student = paired_t(b, np.stack([t[n].to_numpy() for n in others]), confidence=1 - alpha)
            metric_rows.append({"run": base, "metric": metric, "baseline": base,
                                "mean": float(b.mean()) if b.size else float("nan"), "delta": 0.0, "ci_low": 0.0,
                                "ci_high": 0.0, "effect_size": 0.0, "p_value": np.nan, "p_adjusted": np.nan,
                                "significant": False, "wins": 0, "ties": int(b.size), "losses": 0})
            for n in names:
                if n == base:
                    continue
                x = t[n].to_numpy()
                d = x - b
                if tukey is not None:
                    pair = tukey.loc[(n, base)]
                    p, low, high = float(pair["p_value"]), float(pair["ci_low"]), float(pair["ci_high"])
                else:
                    at = others.index(n)
                    p = float(student[0][at]) if student is not None and test == "t" else \
                        paired_test(b, x, test, n_resamples=n_resamples, seed=rng)
                    low, high = (float(student[1][at]), float(student[2][at])) if student is not None and ci == "t" else \
                        confidence_interval(b, x, ci, confidence=1 - alpha, n_resamples=n_resamples, seed=rng)
                metric_rows.append({"run": n, "metric": metric, "baseline": base, "mean": float(x.mean()),
                                    "delta": float(d.mean()), "ci_low": low, "ci_high": high,
                                    "effect_size": effect_size(b, x), "p_value": p, "p_adjusted": np.nan,
                                    "significant": False, "wins": int((d > 1e-12).sum()),
                                    "ties": int((np.abs(d) <= 1e-12).sum()), "losses": int((d < -1e-12).sum())})
        tested = [r for r in metric_rows if not np.isnan(r["p_value"])]
        for r, pa in zip(tested, correct(np.array([r["p_value"] for r in tested]), correction), strict=True):
            r["p_adjusted"], r["significant"] = float(pa), bool(pa < alpha)
        rows += metric_rows
    table = ComparisonTable(rows, columns=list(COLUMNS))
    table.per_query = tables  # the pictures' scores (ComparisonTable.to_html, Experiment.plot)
    table.curves = pd.DataFrame(curves.T.copy(), columns=pd.Index(names), index=pd.Index(RECALL_LEVELS, name="recall"))
    table.attrs["compare"] = {"baseline": bases[0], "baselines": bases, "test": test, "correction": correction,
                              "alpha": alpha, "ci": "tukey" if test == "tukey" else ci, "n_resamples": n_resamples,
                              "n_queries": len(tables[metric_key(measures[0])]),
                              "self_hits_dropped": wants_self_hits_dropped(as_qrels(qrels), drop_self_hits)}
    return table
