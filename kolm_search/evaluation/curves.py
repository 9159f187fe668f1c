"""The interpolated precision-recall curve: trec_eval's ``iprec_at_recall`` at 11 recall levels
(0, 0.1, ..., 1), per query or averaged (what papers plot, and what ranx #38 asked for)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["CURVE_MEASURES", "RECALL_LEVELS", "level_means", "mean_curve", "mean_curves", "precision_recall_curve"]

RECALL_LEVELS = tuple(round(i / 10, 1) for i in range(11))
#: the measures whose per-query values make the curve, one per recall level
CURVE_MEASURES = tuple(f"iprec_at_recall_{r:.2f}" for r in RECALL_LEVELS)


def mean_curve(table: pd.DataFrame) -> pd.DataFrame:
    """``recall, precision`` (11 rows) from a per-query table holding the columns
    :data:`CURVE_MEASURES`: each level's mean over its rows (NaN when it has none)."""
    values = table[list(CURVE_MEASURES)].to_numpy(np.float64)
    means = []
    for j in range(len(CURVE_MEASURES)):  # as pandas' mean: NaN skipped (summed as 0, not counted)
        column = np.ascontiguousarray(values[:, j])
        present = ~np.isnan(column)
        count = int(present.sum())
        means.append(float(np.where(present, column, 0.0).sum() / count) if count else float("nan"))
    return pd.DataFrame({"recall": np.array(RECALL_LEVELS), "precision": means})


def mean_curves(tables: list[pd.DataFrame]) -> np.ndarray:
    """:func:`mean_curve`'s precisions of several per-query tables at once: float64
    ``(len(tables), 11)``, row ``i`` equal float for float to ``mean_curve(tables[i])["precision"]``
    (each level's values summed as one contiguous row, as there)."""
    out = np.full((len(tables), len(CURVE_MEASURES)), np.nan)
    for i, table in enumerate(tables):
        out[i] = level_means(np.stack([table[m].to_numpy(np.float64) for m in CURVE_MEASURES]))
    return out


def level_means(values: np.ndarray) -> np.ndarray:
    """Each row's mean, NaN skipped (NaN for a row of none): float64 ``(k,)`` of ``values``
    ``(k, n)`` whose rows are contiguous (each summed as :func:`mean_curve` sums a level)."""
    values = np.ascontiguousarray(values, np.float64)
    present = ~np.isnan(values)
    counts = present.sum(axis=1)
    sums = np.where(present, values, 0.0).sum(axis=1)
    out = np.full(len(values), np.nan)
    has = counts > 0
    out[has] = sums[has] / counts[has]
    return out


def precision_recall_curve(run: Any, qrels: Any, *, per_query: bool = False, **settings: Any) -> pd.DataFrame:
    """Interpolated precision at recall 0, 0.1, ..., 1 (the best precision at or below the rank
    where that share of the relevant documents is retrieved, as trec_eval's ``iprec_at_recall``).

    Parameters
    ----------
    run, qrels
        As :func:`~kolm_search.evaluate` takes them.
    per_query : bool
        One row per query (``qid`` and one column per recall level) instead of the mean curve.
    **settings
        ``relevance_level``, ``judged_only``, ``missing``, ``drop_self_hits``, ... of
        :func:`~kolm_search.evaluate`.

    Returns
    -------
    DataFrame
        ``recall, precision`` (11 rows; the mean over the evaluated queries), or with
        ``per_query`` ``qid`` and the columns ``0.0, 0.1, ..., 1.0``.
    """
    from kolm_search.evaluation.metrics import evaluate

    table = evaluate(run, qrels, list(CURVE_MEASURES), per_query=True, **settings)
    if per_query:
        return table.rename(columns=dict(zip(CURVE_MEASURES, RECALL_LEVELS, strict=True)))
    return mean_curve(table)
