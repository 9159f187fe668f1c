"""``cross_validate``: choose a configuration on training folds, score it on held-out queries.

Each candidate configuration is a run (or a function that makes one). Every candidate is
scored per query once; then for each of ``folds`` disjoint query folds the candidate with
the best mean ``metric`` over the *other* folds is chosen, and its per-query scores on the
held-out fold are kept. The held-out scores of all folds together cover every query once:
their mean is the cross-validated estimate of "tune on this collection, then run". A
baseline (one run, or candidates cross-validated the same way on the same folds) is scored
on the same queries and compared with a paired test of
:func:`~kolm_search.evaluation.compare.paired_test`.

Folds come from a seeded ``numpy.random.Generator`` permutation of the sorted query ids cut
into ``folds`` near-equal parts (``numpy.array_split``), or are given (``split``).
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.evaluation.compare import per_query_table
from kolm_search.evaluation.measures import metric_key, metric_list
from kolm_search.evaluation.stats import PAIRED_TESTS as TESTS
from kolm_search.evaluation.stats import PairedTest as Test
from kolm_search.evaluation.stats import paired_test

__all__ = ["CrossValidation", "cross_validate", "grid_points", "make_folds"]

_BASELINE = "\x00baseline"


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of a parameter grid, in order (the last axis varies fastest).

    ``grid_points({"a": [1, 2], "b": ["x"]})`` is ``[{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]``.
    A one-dimensional numpy array of values (``np.linspace(0.5, 1.5, 5)``) is taken as its list
    of Python values (``tolist``).
    """
    if not isinstance(grid, Mapping):
        raise KolmTypeError(f"grid must be a dict of parameter -> values, got {type(grid).__name__}")
    axes: dict[Any, Sequence[Any]] = {}
    for name, values in grid.items():
        if isinstance(values, np.ndarray) and values.ndim == 1:
            values = values.tolist()
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not len(values):
            raise KolmValueError(f"grid[{name!r}] must be a non-empty list of values, got {values!r}")
        axes[name] = values
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


def make_folds(qids: Sequence[Any], folds: int = 5, *, seed: int | np.random.Generator | None = 0) -> list[list[str]]:
    """Split query ids (as str, sorted first) into ``folds`` disjoint near-equal folds at random.

    The permutation comes from ``numpy.random.default_rng(seed)`` (or the Generator given):
    the same seed gives the same folds whatever the order of ``qids``.
    """
    keys = sorted({str(q) for q in qids})
    check_folds(folds, len(keys))
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    return [[keys[i] for i in sorted(part)] for part in np.array_split(order, folds)]


def check_folds(folds: Any, n_queries: int | None = None) -> None:
    """Refuse (``KolmValueError``) a ``folds`` that is not an integer >= 2, or exceeds
    ``n_queries`` (when given)."""
    if isinstance(folds, bool) or not isinstance(folds, numbers.Integral) or int(folds) < 2:
        raise KolmValueError(f"folds must be an integer >= 2, got {folds!r}")
    if n_queries is not None and int(folds) > n_queries:
        raise KolmValueError(f"folds ({folds}) must not exceed the number of queries ({n_queries})")


def _given_split(split: Any, qids: list[str]) -> list[list[str]]:
    """Folds from ``split``: a list of query-id lists, or a mapping qid -> fold label."""
    if isinstance(split, Mapping):
        labels: dict[Any, list[str]] = {}
        for q, label in split.items():
            labels.setdefault(label, []).append(str(q))
        parts = [labels[k] for k in sorted(labels, key=str)]
    elif isinstance(split, Sequence) and not isinstance(split, (str, bytes)):
        parts = [[str(q) for q in part] for part in split]
    else:
        raise KolmTypeError(f"split must be a list of query-id lists or a dict qid -> fold, got {type(split).__name__}")
    check_folds(len(parts), len(qids))
    seen: dict[str, int] = {}
    for i, part in enumerate(parts):
        if not part:
            raise KolmValueError(f"split fold {i} is empty")
        for q in part:
            if q in seen:
                raise KolmValueError(f"split puts query {q!r} in folds {seen[q]} and {i}")
            seen[q] = i
    missing = sorted(set(qids) - set(seen))
    if missing:
        raise KolmValueError(f"split leaves out {len(missing)} evaluated queries, e.g. {missing[:3]}")
    extra = sorted(set(seen) - set(qids))
    if extra:
        raise KolmValueError(f"split names {len(extra)} queries that are not evaluated (no judgements or run), "
                             f"e.g. {extra[:3]}")
    return [sorted(part) for part in parts]


@dataclass(frozen=True)
class CrossValidation:
    """What :func:`cross_validate` found.

    Attributes
    ----------
    metric : str
    folds : DataFrame
        One row per fold: ``fold, n_train, n_test, chosen, train_score, test_score`` and, with a
        baseline, ``baseline_chosen, baseline_test_score``.
    per_query : DataFrame
        One row per query: ``qid, fold, chosen, score`` (the held-out score of the fold's
        chosen candidate) and, with a baseline, ``baseline``.
    scores : DataFrame
        Every candidate's per-query scores, qid x candidate name (the baseline's candidates
        are not in it).
    mean, baseline_mean, delta : float
        Mean held-out score of the candidates, of the baseline (NaN without one), and their
        difference.
    p_value : float
        Paired two-sided test of the held-out per-query scores (NaN without a baseline).
    test : str
    """

    metric: str
    folds: pd.DataFrame
    per_query: pd.DataFrame
    scores: pd.DataFrame
    mean: float
    baseline_mean: float
    delta: float
    p_value: float
    test: str

    def to_markdown(self) -> str:
        """The per-fold table and the summary line, as Markdown."""
        cols = [c for c in self.folds.columns if c not in ("n_train",)]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for row in self.folds[cols].itertuples(index=False):
            lines.append("| " + " | ".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + " |")
        summary = f"\nheld-out mean {self.metric}: {self.mean:.4f}"
        if not np.isnan(self.baseline_mean):
            summary += (f"; baseline {self.baseline_mean:.4f}; delta {self.delta:+.4f}; "
                        f"p = {self.p_value:.3g} ({self.test} test, {len(self.per_query)} queries)")
        return "\n".join(lines) + summary + "\n"


def _candidates(candidates: Any, what: str) -> dict[str, Any]:
    if not isinstance(candidates, Mapping):
        raise KolmTypeError(f"{what} must be a dict name -> run (or a function making one), "
                            f"got {type(candidates).__name__}")
    if not candidates:
        raise KolmValueError(f"{what} is empty: give at least one configuration")
    names = [str(name) for name in candidates]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise KolmValueError(f"{what}: two configurations are named {dup!r} (names are compared as str)")
    return {str(name): (run() if callable(run) else run) for name, run in candidates.items()}


def _choose(table: pd.DataFrame, train: npt.NDArray[np.bool_]) -> tuple[str, float]:
    """The column with the best mean over the ``train`` rows (ties: the first column)."""
    means = table.to_numpy(np.float64)[train].mean(axis=0)
    best = int(np.argmax(means))
    return str(table.columns[best]), float(means[best])


def cross_validate(candidates: Mapping[Any, Any], qrels: Any, baseline: Any = None, *,
                   baseline_candidates: Mapping[Any, Any] | None = None, metric: Any = "ndcg@10",
                   folds: int = 5, seed: int | np.random.Generator | None = 0, split: Any = None, test: Test = "t",
                   relevance_level: int = 1, drop_self_hits: bool | None = None,
                   n_resamples: int = 10_000) -> CrossValidation:
    """K-fold cross-validation over queries of a choice among candidate configurations.

    Parameters
    ----------
    candidates : dict name -> run, or name -> zero-argument function returning a run
        One run per configuration (DataFrames ``qid, doc_id, score[, rank]``, ``BatchResult``s
        or nested dicts); see :func:`grid_points` to name the points of a parameter grid.
    qrels : DataFrame ``qid, doc_id, relevance`` (or a Dataset, or nested dict)
    baseline : run, optional
        A fixed system scored on the same held-out queries.
    baseline_candidates : dict name -> run, optional
        Instead of ``baseline``: the baseline's own configurations, cross-validated like
        ``candidates`` on the same folds.
    metric : str or ir_measures measure, default "ndcg@10"
        One metric of :func:`~kolm_search.evaluate`; chooses and scores.
    folds : int, default 5
        Number of folds (2 to the number of queries).
    seed : int or numpy.random.Generator, default 0
        Seeds the random split (see :func:`make_folds`).
    split : list of query-id lists, or dict qid -> fold label, optional
        A fixed split instead of the random one; must cover every evaluated query once.
    test : {"t", "wilcoxon", "fisher", "bootstrap"}, default "t"
        Paired test of the held-out scores against the baseline's.
    relevance_level, drop_self_hits
        As in :func:`~kolm_search.evaluate`.
    n_resamples : int
        Resamples of the randomised tests (drawn from ``seed``).

    Returns
    -------
    CrossValidation

    Notes
    -----
    The evaluated queries are the judged queries that some candidate (or the baseline)
    answers; a run missing one of them scores 0 there (as in :func:`~kolm_search.compare`).
    A candidate is chosen on the mean over the training queries of the per-query scores, so
    every metric must be a mean of per-query values (all of ``evaluate``'s are).
    """
    measures = metric_list(metric)
    if len(measures) != 1:
        raise KolmValueError(f"cross_validate takes one metric, got {len(measures)}")
    if test not in TESTS:
        raise KolmValueError(f"test must be one of {TESTS}, got {test!r}")
    key = metric_key(measures[0])
    runs = _candidates(candidates, "candidates")
    base_runs: dict[str, Any] = {}
    if baseline is not None and baseline_candidates is not None:
        raise KolmValueError("give baseline or baseline_candidates, not both")
    if baseline_candidates is not None:
        base_runs = {f"{_BASELINE}{k}": v for k, v in _candidates(baseline_candidates, "baseline_candidates").items()}
    elif baseline is not None:
        base_runs = {_BASELINE: baseline}
    if set(runs) & set(base_runs):
        raise KolmValueError("a candidate is named like the baseline")
    table = per_query_table({**runs, **base_runs}, qrels, [measures[0]], relevance_level=relevance_level,
                            drop_self_hits=drop_self_hits)[key]
    qids = [str(q) for q in table.index]
    if not qids:
        raise KolmValueError("no query is both judged and answered by a run: nothing to cross-validate")
    if split is not None:
        parts = _given_split(split, qids)
    else:
        parts = make_folds(qids, folds, seed=seed)
    cand_table, base_table = table[list(runs)], table[list(base_runs)]
    fold_of = pd.Series(-1, index=table.index, dtype=np.int64)
    chosen_of = pd.Series("", index=table.index, dtype=object)
    held = pd.Series(np.nan, index=table.index)
    held_base = pd.Series(np.nan, index=table.index)
    rows = []
    for i, part in enumerate(parts):
        test_mask = table.index.isin(part)
        train_mask = ~test_mask
        name, train_score = _choose(cand_table, train_mask)
        fold_of[test_mask], chosen_of[test_mask] = i, name
        held[test_mask] = cand_table[name].to_numpy()[test_mask]
        row: dict[str, Any] = {"fold": i, "n_train": int(train_mask.sum()), "n_test": int(test_mask.sum()),
                               "chosen": name, "train_score": train_score,
                               "test_score": float(held[test_mask].mean())}
        if base_runs:
            b_name, _ = _choose(base_table, train_mask)
            held_base[test_mask] = base_table[b_name].to_numpy()[test_mask]
            row["baseline_chosen"] = b_name[len(_BASELINE):] or "baseline"
            row["baseline_test_score"] = float(held_base[test_mask].mean())
        rows.append(row)
    per_query = pd.DataFrame({"qid": qids, "fold": fold_of.to_numpy(), "chosen": chosen_of.to_numpy(),
                              "score": held.to_numpy()})
    mean = float(held.mean())
    base_mean = p_value = float("nan")
    if base_runs:
        per_query["baseline"] = held_base.to_numpy()
        base_mean = float(held_base.mean())
        p_value = paired_test(held_base.to_numpy(), held.to_numpy(), test, n_resamples=n_resamples,
                              seed=seed if isinstance(seed, (int, np.random.Generator)) else 0)
    return CrossValidation(metric=key, folds=pd.DataFrame(rows), per_query=per_query,
                           scores=cand_table.rename_axis(columns=None), mean=mean, baseline_mean=base_mean,
                           delta=mean - base_mean, p_value=p_value, test=test)

