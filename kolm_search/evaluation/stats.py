"""The statistics of :func:`~kolm_search.evaluation.compare`, on per-query scores.

- paired tests (two-sided): Student's t (``scipy.stats.ttest_rel``), Wilcoxon signed-rank
  (``scipy.stats.wilcoxon``, zero differences dropped), Fisher's randomisation (random sign flips;
  Smucker, Allan & Carterette, CIKM 2007), the paired bootstrap shifted to the null (Sakai, SIGIR
  2006); and Tukey's HSD over every run at once (``scipy.stats.tukey_hsd``, as ranx offers; it
  controls the family-wise error itself);
- corrections for multiple testing: Bonferroni, Holm, and the false discovery rate controls of
  Benjamini-Hochberg and Benjamini-Yekutieli (``scipy.stats.false_discovery_control``);
- confidence intervals of the mean difference: Student's t (``ttest_rel(...).confidence_interval``)
  or the percentile bootstrap (``scipy.stats.bootstrap``);
- the paired effect size Cohen's d_z: the mean difference over the differences' standard
  deviation (ddof 1).

Randomised procedures draw from a ``numpy.random.Generator`` (pass ``seed``) in fixed-size blocks,
so results are reproducible bit for bit whatever the thread count.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import KolmValueError

__all__ = ["CORRECTIONS", "INTERVALS", "PAIRED_TESTS", "TESTS", "confidence_interval", "correct", "effect_size",
           "paired_t", "paired_test", "rng_of", "tukey_hsd"]

TESTS = ("t", "wilcoxon", "fisher", "bootstrap", "tukey")
PAIRED_TESTS = ("t", "wilcoxon", "fisher", "bootstrap")
CORRECTIONS = ("none", "bonferroni", "holm", "bh", "by")
INTERVALS = ("t", "bootstrap")
Test = Literal["t", "wilcoxon", "fisher", "bootstrap", "tukey"]
PairedTest = Literal["t", "wilcoxon", "fisher", "bootstrap"]
Correction = Literal["none", "bonferroni", "holm", "bh", "by"]
Interval = Literal["t", "bootstrap"]
_BLOCK = 1000
F64 = npt.NDArray[np.float64]


def rng_of(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _pair(a: npt.ArrayLike, b: npt.ArrayLike) -> tuple[F64, F64]:
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise KolmValueError(f"paired scores must be 1-D and aligned, got {x.shape} and {y.shape}")
    return x, y


def paired_test(a: npt.ArrayLike, b: npt.ArrayLike, test: PairedTest | Test = "t", *, n_resamples: int = 10_000,
                seed: int | np.random.Generator | None = 0) -> float:
    """Two-sided p-value that runs ``a`` and ``b`` (per-query scores, aligned) differ; 1 when
    they never do (or fewer than two queries)."""
    from scipy import stats

    if test not in PAIRED_TESTS:
        raise KolmValueError(f"a paired test is one of {PAIRED_TESTS}, got {test!r} (Tukey's HSD compares every run at "
                             "once: compare(..., test='tukey'))")
    x, y = _pair(a, b)
    diff = y - x
    if diff.size < 2 or np.allclose(diff, 0.0, atol=1e-15):
        return 1.0
    if test == "t":
        return float(stats.ttest_rel(y, x).pvalue)
    if test == "wilcoxon":
        return float(stats.wilcoxon(y, x, zero_method="wilcox").pvalue)
    rng = rng_of(seed)
    observed = abs(diff.mean())
    hits = done = 0
    while done < n_resamples:
        size = min(_BLOCK, n_resamples - done)
        if test == "fisher":
            signs = rng.integers(0, 2, size=(size, diff.size), dtype=np.int8) * 2 - 1
            stat = np.abs((signs * diff).mean(axis=1))
        else:
            idx = rng.integers(0, diff.size, size=(size, diff.size))
            stat = np.abs((diff - diff.mean())[idx].mean(axis=1))
        hits += int(np.count_nonzero(stat >= observed - 1e-15))
        done += size
    return (hits + 1) / (n_resamples + 1)


def correct(p: npt.ArrayLike, correction: Correction) -> F64:
    """p-values adjusted for testing them together (``correction`` one of :data:`CORRECTIONS`)."""
    from scipy import stats

    values = np.asarray(p, np.float64)
    if correction not in CORRECTIONS:
        raise KolmValueError(f"correction must be one of {CORRECTIONS}, got {correction!r}")
    if correction == "none" or values.size == 0:
        return values
    if correction == "bonferroni":
        return np.minimum(values * values.size, 1.0)
    if correction == "holm":
        order = np.argsort(values, kind="stable")
        adjusted = np.empty_like(values)
        running = 0.0
        for i, j in enumerate(order):
            running = max(running, min(1.0, (values.size - i) * values[j]))
            adjusted[j] = running
        return adjusted
    return np.asarray(stats.false_discovery_control(values, method=correction), np.float64)


def confidence_interval(a: npt.ArrayLike, b: npt.ArrayLike, method: Interval = "t", *, confidence: float = 0.95,
                        n_resamples: int = 10_000, seed: int | np.random.Generator | None = 0) -> tuple[float, float]:
    """Interval of the mean of ``b - a`` at ``confidence``: Student's t, or the percentile
    bootstrap over queries; (d, d) when every difference is d; NaN with fewer than two queries."""
    from scipy import stats

    x, y = _pair(a, b)
    diff = y - x
    if method not in INTERVALS:
        raise KolmValueError(f"intervals are one of {INTERVALS}, got {method!r}")
    if diff.size < 2:
        return float("nan"), float("nan")
    if np.ptp(diff) == 0.0:
        return float(diff[0]), float(diff[0])
    if method == "t":
        low, high = stats.ttest_rel(y, x).confidence_interval(confidence_level=confidence)
        return float(low), float(high)
    result = stats.bootstrap((diff,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                             method="percentile", rng=rng_of(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def paired_t(a: npt.ArrayLike, b: npt.ArrayLike, *, confidence: float = 0.95) -> tuple[F64, F64, F64]:
    """Student's paired t of ``a`` (n,) against each row of ``b`` (k, n) at once: the p-values of
    :func:`paired_test` (``test="t"``) and the interval bounds of :func:`confidence_interval`
    (``method="t"``), float for float (``scipy.stats.ttest_rel``'s arithmetic over the rows at
    once, :func:`_student_rows`, each row's reductions over its contiguous values as in the 1-D
    call; the same special cases per row).

    Returns
    -------
    p, low, high : float64 ``(k,)``
    """
    x = np.asarray(a, np.float64)
    y = np.ascontiguousarray(b, np.float64)
    if x.ndim != 1 or y.ndim != 2 or y.shape[1] != x.size:
        raise KolmValueError(f"paired scores must be (n,) and (k, n), got {x.shape} and {y.shape}")
    k = y.shape[0]
    p, low, high = np.ones(k), np.full(k, np.nan), np.full(k, np.nan)
    if x.size < 2 or k == 0:
        return p, low, high
    diff = y - x
    need_p = np.asarray(~np.isclose(diff, 0.0, atol=1e-15).all(axis=1), bool)  # each row's np.allclose(row, 0, atol=1e-15)
    need_ci = (diff.max(axis=1) - diff.min(axis=1)) != 0.0  # each row's np.ptp(row) != 0.0
    rows = np.flatnonzero(need_p | need_ci)  # the rows the 1-D calls give to scipy
    if len(rows):
        pvalue, interval_low, interval_high = _student_rows(np.ascontiguousarray(diff[rows]), confidence)
        at = {int(i): j for j, i in enumerate(rows)}
    for i in range(k):
        if need_p[i]:
            p[i] = float(pvalue[at[i]])
        if need_ci[i]:
            low[i], high[i] = float(interval_low[at[i]]), float(interval_high[at[i]])
        else:
            low[i] = high[i] = float(diff[i, 0])
    return p, low, high


_PRECISION_LOSS = ("Precision loss occurred in moment calculation due to catastrophic cancellation. This occurs when "
                   "the data are nearly identical. Results may be unreliable.")


def _student_rows(d: F64, confidence: float) -> tuple[F64, F64, F64]:
    """``scipy.stats.ttest_rel`` of the rows of differences ``d`` (k, n), n >= 2 (its p-values,
    two-sided, and ``confidence_interval(confidence)``), computed as scipy computes them (mean
    over each contiguous row, the second central moment times n / (n - 1), the standard error,
    Student's t distribution by ``scipy.special.stdtr`` / ``stdtrit``), float for float, without
    the cost of scipy's per-call axis and NaN handling (~0.25 ms a call); scipy's warning on
    nearly identical differences too."""
    import warnings

    from scipy import special

    n = d.shape[1]
    mean = d.mean(axis=1)
    centred = d - mean[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        if bool((np.abs(centred).max(axis=1) / np.abs(mean) < np.finfo(np.float64).eps * 10).any()):
            warnings.warn(_PRECISION_LOSS, RuntimeWarning, stacklevel=4)
        nf = np.asarray(n, dtype=np.float64)
        var = (centred ** 2).mean(axis=1)
        var *= nf / (nf - 1)
        se = np.sqrt(var / n)
        t = (mean - 0.0) / se
    df = np.float64(n - 1)
    pvalue = 2 * special.stdtr(df, -np.abs(t))
    level = np.asarray(confidence, dtype=np.float64)
    tail = (1 - level) / 2
    bounds = special.stdtrit(df, np.stack((tail, 1 - tail)))
    return pvalue, bounds[0] * se + mean, bounds[1] * se + mean


def effect_size(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Cohen's d_z of ``b - a``: mean difference / standard deviation of the differences (ddof 1);
    0 when they never differ, +-inf when they always differ by the same amount, NaN below two queries."""
    x, y = _pair(a, b)
    diff = y - x
    if diff.size < 2:
        return float("nan")
    sd = float(diff.std(ddof=1))
    mean = float(diff.mean())
    if sd == 0.0:
        return 0.0 if mean == 0.0 else float(np.copysign(np.inf, mean))
    return mean / sd


def tukey_hsd(scores: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Tukey's honestly significant difference over every pair of runs (``scores``: one column
    per run, one row per query), by ``scipy.stats.tukey_hsd``.

    Returns
    -------
    DataFrame
        One row per ordered pair ``run`` vs ``baseline`` (run != baseline): ``delta`` (the mean
        of run minus that of baseline), ``p_value``, ``ci_low``, ``ci_high``.
    """
    from scipy import stats

    names = list(scores.columns)
    if len(names) < 2 or len(scores) < 2:
        raise KolmValueError("Tukey's HSD needs at least two runs and two queries")
    result = stats.tukey_hsd(*(scores[n].to_numpy(np.float64) for n in names))
    interval = result.confidence_interval(confidence_level=confidence)
    rows = [{"run": names[i], "baseline": names[j], "delta": float(result.statistic[i, j]),
             "p_value": float(result.pvalue[i, j]), "ci_low": float(interval.low[i, j]),
             "ci_high": float(interval.high[i, j])}
            for i in range(len(names)) for j in range(len(names)) if i != j]
    return pd.DataFrame(rows)
