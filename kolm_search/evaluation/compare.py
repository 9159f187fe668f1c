"""``compare``: paired significance tests between runs, with multiple-testing correction.

Tests (two-sided, paired over queries):

- ``"t"``: Student's paired t-test (scipy);
- ``"wilcoxon"``: Wilcoxon signed-rank (scipy; zero differences dropped);
- ``"fisher"``: Fisher's randomisation test, random sign flips of the per-query differences
  (Smucker, Allan & Carterette, CIKM 2007);
- ``"bootstrap"``: paired bootstrap test on the mean difference, shifted to the null
  (Sakai, SIGIR 2006).

Randomised tests draw from a ``numpy.random.Generator`` (pass ``seed``) in fixed-size
blocks, so results are reproducible bit for bit whatever the thread count. Corrections
(``"none"``, ``"bonferroni"``, ``"holm"``) apply per metric across the runs compared with
the baseline. Every run is scored on the same queries: the judged queries any run answers;
a run missing one of them scores 0 there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import KolmValueError
from kolm_search.evaluation.measures import metric_key, metric_list
from kolm_search.evaluation.metrics import evaluate
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.evaluation.self_hits import wants_self_hits_dropped
from kolm_search.runs import as_qrels, as_run

__all__ = ["TESTS", "compare", "paired_test", "per_query_table"]

TESTS = ("t", "wilcoxon", "fisher", "bootstrap")
Test = Literal["t", "wilcoxon", "fisher", "bootstrap"]
_BLOCK = 1000


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def paired_test(a: npt.ArrayLike, b: npt.ArrayLike, test: Test = "t", *, n_resamples: int = 10_000,
                seed: int | np.random.Generator | None = 0) -> float:
    """Two-sided p-value that runs ``a`` and ``b`` (per-query scores, aligned) differ."""
    from scipy import stats

    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise KolmValueError(f"paired scores must be 1-D and aligned, got {x.shape} and {y.shape}")
    diff = y - x
    if diff.size < 2 or np.allclose(diff, 0.0, atol=1e-15):
        return 1.0
    if test == "t":
        return float(stats.ttest_rel(y, x).pvalue)
    if test == "wilcoxon":
        return float(stats.wilcoxon(y, x, zero_method="wilcox").pvalue)
    rng = _rng(seed)
    observed = abs(diff.mean())
    hits = 0
    done = 0
    while done < n_resamples:
        size = min(_BLOCK, n_resamples - done)
        if test == "fisher":
            signs = rng.integers(0, 2, size=(size, diff.size), dtype=np.int8) * 2 - 1
            stat = np.abs((signs * diff).mean(axis=1))
        elif test == "bootstrap":
            idx = rng.integers(0, diff.size, size=(size, diff.size))
            stat = np.abs((diff - diff.mean())[idx].mean(axis=1))
        else:
            raise KolmValueError(f"test must be one of {TESTS}, got {test!r}")
        hits += int(np.count_nonzero(stat >= observed - 1e-15))
        done += size
    return (hits + 1) / (n_resamples + 1)


def _correct(p: npt.NDArray[np.float64], correction: str) -> npt.NDArray[np.float64]:
    if correction == "none" or p.size == 0:
        return p
    if correction == "bonferroni":
        return np.minimum(p * p.size, 1.0)
    if correction == "holm":
        order = np.argsort(p, kind="stable")
        adjusted = np.empty_like(p)
        running = 0.0
        for i, j in enumerate(order):
            running = max(running, min(1.0, (p.size - i) * p[j]))
            adjusted[j] = running
        return adjusted
    raise KolmValueError(f"correction must be 'none', 'bonferroni' or 'holm', got {correction!r}")


def _check_names(names: Sequence[Any]) -> None:
    """Refuse two run names whose text is equal (``1`` and ``"1"``): reports and files show names
    as text, where one run would hide the other."""
    seen: dict[str, Any] = {}
    for name in names:
        other = seen.setdefault(str(name), name)
        if other is not name:
            raise KolmValueError(f"two runs have names whose text is equal, {other!r} and {name!r}: reports show "
                                 "names as text, so one would hide the other; rename one")


def per_query_table(runs: Mapping[str, Any], qrels: Any, metrics: Sequence[Any] | Any, *,
                    relevance_level: int = 1, drop_self_hits: bool | None = None) -> dict[str, pd.DataFrame]:
    """Per-query scores of every run on a common query set: ``{metric: DataFrame qid x run}``
    (metrics as in :func:`~kolm_search.evaluate`, keyed likewise)."""
    metrics = metric_list(metrics)
    keys = [metric_key(m) for m in metrics]
    qrels_df = as_qrels(qrels)
    frames = {name: as_run(run, what=f"run {name!r}") for name, run in runs.items()}
    judged = set(qrels_df["qid"].astype(str))
    answered = set().union(*(set(f["qid"].astype(str)) for f in frames.values())) & judged
    qids = sorted(answered)
    out = {m: pd.DataFrame(index=pd.Index(qids, name="qid")) for m in keys}
    for name, frame in frames.items():
        table = evaluate(frame, qrels_df, metrics, per_query=True, relevance_level=relevance_level,
                         drop_self_hits=drop_self_hits)
        assert isinstance(table, pd.DataFrame)
        table = table.set_index(table["qid"].astype(str))
        for m in keys:
            out[m][name] = table[m].reindex(qids).fillna(0.0).to_numpy()
    return out


def compare(runs: Mapping[str, Any], qrels: Any, metrics: Sequence[Any] | Any = ("ndcg@10",), baseline: str | None = None,
            test: Test = "t", correction: Literal["none", "bonferroni", "holm"] = "holm", *, alpha: float = 0.05,
            n_resamples: int = 10_000, seed: int | np.random.Generator | None = 0,
            relevance_level: int = 1, drop_self_hits: bool | None = None) -> ComparisonTable:
    """Means, deltas, p-values and wins/ties/losses of every run against a baseline.

    Parameters
    ----------
    runs : dict name -> run DataFrame (or BatchResult)
    qrels : DataFrame ``qid, doc_id, relevance``
    metrics : list of str or ir_measures measures
        As in :func:`~kolm_search.evaluate`; rows are keyed by the name given (an object by its ``str()``).
    baseline : str, optional
        Name of the baseline run (default: the first).
    test : {"t", "wilcoxon", "fisher", "bootstrap"}
    correction : {"none", "bonferroni", "holm"}
    alpha : float
        Significance level for the ``significant`` column (on the corrected p-value).
    n_resamples : int
        Resamples of the randomised tests.
    seed : int or numpy.random.Generator
        Makes the randomised tests reproducible.
    drop_self_hits : bool, optional
        As in :func:`evaluate` (None: the qrels' flag, on for BEIR datasets).

    Returns
    -------
    ComparisonTable
        A DataFrame, one row per (run, metric): ``run, metric, mean, delta, p_value,
        p_adjusted, significant, wins, ties, losses`` (the baseline's row has ``delta`` 0 and
        no p-value); ``.to_markdown()`` and ``.to_latex()`` render the report (best value in
        bold, significance marks, a caption naming the test and the correction; see
        :mod:`kolm_search.evaluation.report`).
    """
    if not runs:
        raise KolmValueError("compare needs at least one run")
    measures = metric_list(metrics)
    if test not in TESTS:
        raise KolmValueError(f"test must be one of {TESTS}, got {test!r}")
    names = list(runs)
    _check_names(names)
    base = names[0] if baseline is None else baseline
    if base not in runs:
        raise KolmValueError(f"baseline {base!r} is not one of the runs {names}")
    rng = _rng(seed)
    tables = per_query_table(runs, qrels, measures, relevance_level=relevance_level, drop_self_hits=drop_self_hits)
    rows = []
    for metric in (metric_key(m) for m in measures):
        t = tables[metric]
        b = t[base].to_numpy()
        others = [n for n in names if n != base]
        pvals = np.array([paired_test(b, t[n].to_numpy(), test, n_resamples=n_resamples, seed=rng) for n in others])
        adjusted = _correct(pvals, correction)
        rows.append({"run": base, "metric": metric, "mean": float(b.mean()) if b.size else float("nan"), "delta": 0.0,
                     "p_value": np.nan, "p_adjusted": np.nan, "significant": False, "wins": 0, "ties": int(b.size), "losses": 0})
        for n, p, pa in zip(others, pvals, adjusted, strict=True):
            x = t[n].to_numpy()
            d = x - b
            rows.append({"run": n, "metric": metric, "mean": float(x.mean()), "delta": float(d.mean()),
                         "p_value": float(p), "p_adjusted": float(pa), "significant": bool(pa < alpha),
                         "wins": int((d > 1e-12).sum()), "ties": int((np.abs(d) <= 1e-12).sum()),
                         "losses": int((d < -1e-12).sum())})
    table = ComparisonTable(rows)
    table.attrs["compare"] = {"baseline": base, "test": test, "correction": correction, "alpha": alpha,
                              "n_resamples": n_resamples, "n_queries": len(tables[metrics[0]]) if metrics else 0,
                              "self_hits_dropped": wants_self_hits_dropped(as_qrels(qrels), drop_self_hits)}
    return table
