"""``grid_search``: score every point of a parameter grid of a stage, sharing the prefixes the
points have in common, and choose one (on all queries, or by cross-validation over them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search._params import positive_int
from kolm_search.compose.cache import StageCache, cache_root
from kolm_search.compose.runner import RunState, sharing
from kolm_search.compose.stage import Stage
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.evaluation.compare import per_query_table
from kolm_search.evaluation.crossval import CrossValidation, check_folds, cross_validate, grid_points
from kolm_search.evaluation.measure_pass import settings
from kolm_search.evaluation.measures import metric_key, metric_list

__all__ = ["GridSearch", "grid_search"]


@dataclass
class GridSearch:
    """What :func:`grid_search` found.

    Attributes
    ----------
    table : DataFrame
        One row per point, in grid order: ``point`` (its name, ``p0``, ``p1``, ...), one column
        per parameter, and the metric's mean over the queries (as in
        :func:`~kolm_search.compare` and :func:`~kolm_search.evaluation.cross_validate`: the
        judged queries any point answers, a point missing one scored 0 there).
    best_params : dict
        The point with the best mean (ties: the first), the choice to use.
    best_score : float
        Its mean over every query (an optimistic estimate: chosen on the same queries).
    held_out_score : float
        With ``folds``: the mean held-out score of the choice made on the other folds
        (:func:`~kolm_search.evaluation.cross_validate`), the honest estimate; else NaN.
    cross_validation : CrossValidation or None
    runs : dict point name -> run DataFrame
    shared : RunState
        What was computed and reused (``computed``, ``reused`` by stage fingerprint).
    """

    table: pd.DataFrame
    best_params: dict[str, Any]
    best_score: float
    held_out_score: float
    cross_validation: CrossValidation | None
    runs: dict[str, pd.DataFrame]
    shared: RunState


def grid_search(stage: Stage, grid: Mapping[str, Sequence[Any]], queries: Any, qrels: Any, metric: str = "ndcg@10",
                folds: int | None = None, *, limit: int = 100, seed: int = 0, cache_dir: str | Path | None = None,
                relevance_level: int = 1) -> GridSearch:
    """Score ``stage`` at every point of ``grid`` and choose the best.

    Parameters
    ----------
    stage : Stage
        A retrieving stage; ``grid`` names its parameters as :meth:`Stage.get_params` does
        (nested ``left__stage__k1``). Each point is set with ``set_params``, and the stage's
        parameters are restored afterwards (also on error).
    grid : dict name -> list of values
        Every combination is a point (:func:`~kolm_search.evaluation.grid_points`).
    queries, qrels
        Queries in any form the stage takes (a DataFrame ``qid, query``), and their judgements.
    metric : str, default "ndcg@10"
        One metric of :func:`~kolm_search.evaluate`.
    folds : int, optional
        Choose by ``folds``-fold cross-validation over queries as well, reporting the choice's
        held-out score.
    limit : int, default 100
        Documents retrieved per query.
    cache_dir : path, optional
        Stage outputs on disk (:class:`~kolm_search.compose.StageCache`): a later search over
        the same folder runs only what it has not run. Within one call, points that share a
        prefix (the first stage, when only a reranker's parameter varies) run it once anyway.
        An empty string is refused (``"."`` is the current folder).

    Returns
    -------
    GridSearch
    """
    if not isinstance(stage, Stage) or not stage.is_source:
        raise KolmTypeError(f"grid_search takes a retrieving Stage, got {type(stage).__name__}")
    if len(metric_list(metric)) != 1:
        raise KolmValueError(f"grid_search scores one metric, got {metric!r}")
    settings(metric, relevance_level, "ignore")  # the metric parsed before any point runs
    limit = positive_int("limit", limit)
    points = grid_points(grid)
    if not grid:
        raise KolmValueError("grid_search: the grid is empty; name at least one parameter and its values")
    current = stage.get_params(deep=True)
    unknown = [name for name in grid if name not in current]
    if unknown:
        raise KolmValueError(f"grid names {unknown}, which {stage!r} does not have; it has {sorted(current)}")
    if folds is not None:  # before any point runs (the queries scored are checked again at the end)
        check_folds(folds, queries["qid"].nunique() if isinstance(queries, pd.DataFrame) and "qid" in queries else None)
    original = {name: current[name] for name in grid}
    root = cache_root(cache_dir)
    state = RunState(cache=None if root is None else StageCache(root), depth=limit)  # (bm25 % k over k: one BM25)
    runs: dict[str, pd.DataFrame] = {}
    try:
        for i, point in enumerate(points):
            stage.set_params(**point)
            state.forget_unnamed()  # (a stage without a fingerprint is keyed by identity, which set_params keeps)
            with sharing(state):
                runs[f"p{i}"] = stage(queries, limit=limit)
    finally:
        stage.set_params(**original)
    key = str(metric)
    scores = per_query_table(runs, qrels, [metric], relevance_level=relevance_level)[metric_key(metric)]
    if not len(scores):
        raise KolmValueError("grid_search: no query is both judged and answered by a point: nothing to score")
    means = [float(scores[name].mean()) for name in runs]
    table = pd.DataFrame([{"point": name, **point, key: m} for (name, point, m) in zip(runs, points, means,
                                                                                     strict=True)])
    best = int(np.argmax(means))
    cv = None
    held_out = float("nan")
    if folds is not None:
        cv = cross_validate(runs, qrels, metric=key, folds=folds, seed=seed, relevance_level=relevance_level)
        held_out = float(cv.mean)
    return GridSearch(table=table, best_params=dict(points[best]), best_score=means[best], held_out_score=held_out,
                      cross_validation=cv, runs=runs, shared=state)
