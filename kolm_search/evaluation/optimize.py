"""Fusion trained on judged queries: ``fit_fusion`` and ``optimize_fusion``.

Both take runs and qrels of a training split. The supervised methods (probfuse, segfuse,
slidefuse, posfuse, bayesfuse, mapfuse) learn their per-run tables from the qrels; every
method's free parameters (RRF's ``k`` and weights, ``gamma``, ``phi``, ``sigma``, run
``weights``, probfuse's ``n_segments``, slidefuse's window ``w``) are searched on a metric,
over the full grid or by coordinate ascent (:mod:`kolm_search.evaluation.param_search`).
Each point fuses the runs (read once) and evaluates the fused run; tables are trained once
per distinct training setting. Qrels are checked by :func:`~kolm_search.evaluate`'s rules
(:func:`~kolm_search.engine.runs.check_qrels`) before anything is trained on them.

Cost is bounded: by default a search over at most three runs is the full grid (728 points
for RRF over three runs), and beyond three runs default weights are searched by coordinate
ascent (a few hundred points at most for eight runs, where the grid would hold 3.1 million);
a grid of more than ``max_points`` points (default :data:`DEFAULT_MAX_POINTS`) is refused
with its size unless ``max_points`` allows it, and a progress bar (tqdm, on stderr) counts the
points unless ``progress=False``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search.engine.runs import as_run, check_qrels
from kolm_search.errors import KolmValueError
from kolm_search.evaluation import param_search
from kolm_search.evaluation.measures import metric_key
from kolm_search.evaluation.metrics import evaluate, parse_metric
from kolm_search.fusion.fitted import FittedFusion, judge, train_tables
from kolm_search.fusion.frames import prepare_runs, resolve
from kolm_search.fusion.methods import METHODS, canonical_method
from kolm_search.fusion.normalize import canonical_norm

__all__ = ["DEFAULT_GRID", "DEFAULT_MAX_POINTS", "SEARCHES", "fit_fusion", "optimize_fusion"]

DEFAULT_K = (1, 5, 10, 20, 40, 60, 80, 100)
DEFAULT_WEIGHT_STEPS = param_search.WEIGHT_STEPS
DEFAULT_GRID: dict[str, tuple[Any, ...]] = {
    "k": DEFAULT_K,
    "gamma": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "phi": (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99),
    "sigma": (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    "n_segments": (2, 5, 10, 20, 25, 50, 100),
    "w": (1, 2, 3, 5, 7, 10, 20),
}
DEFAULT_MAX_POINTS = 5_000  # a full grid above this many points is refused unless max_points= allows it
GRID_RUNS = 3  # search="auto": default weights on the full grid up to this many runs, coordinate ascent beyond
SEARCHES = ("auto", "grid", "coordinate")
Search = Literal["auto", "grid", "coordinate"]
_TRAINING = {"n_segments"}  # grid parameters that change the trained tables (not fuse's params)


def _weight_vector(w: Any, names: Sequence[str]) -> tuple[float, ...]:
    """One point of a weights axis: a vector in run order, or a dict by run name (missing: 1)."""
    if isinstance(w, Mapping):
        unknown = sorted(set(map(str, w)) - set(names))
        if unknown:
            raise KolmValueError(f"grid['weights'] names unknown runs {unknown} (runs: {list(names)})")
        by_name = {str(k): v for k, v in w.items()}
        w = [by_name.get(n, 1.0) for n in names]
    if isinstance(w, (str, bytes)) or not isinstance(w, Iterable):
        raise KolmValueError(f"grid['weights'] holds {w!r:.60}, not a vector of weights")
    try:
        vector = tuple(float(x) for x in w)
    except (TypeError, ValueError) as exc:
        raise KolmValueError(f"grid['weights'] holds {w!r:.60}, not a vector of numbers") from exc
    if len(vector) != len(names):
        raise KolmValueError(f"weight vector {vector} does not have one entry per run ({len(names)})")
    return vector


def _grid(method: str, grid: Mapping[str, Sequence[Any]] | None, fixed: Mapping[str, Any],
          names: Sequence[str]) -> tuple[dict[str, list[Any]], bool]:
    """The axes to search: the given ones, then a default axis for each free parameter not
    fixed; and whether the run weights are free with no axis given (their default space is
    left to the search strategy)."""
    spec = METHODS[method]
    accepted = set(spec.params) | set(spec.tunable) | ({"weights"} if spec.weights else set())
    given = dict(grid or {})
    unknown = sorted(set(given) - accepted)
    if unknown:
        raise KolmValueError(f"grid names {unknown}, which method {method!r} does not take ({sorted(accepted)})")
    both = sorted(set(given) & set(fixed))
    if both:
        raise KolmValueError(f"{both} both fixed and searched: give each in params or in grid")
    axes: dict[str, list[Any]] = {}
    default_weights = False
    for name in spec.tunable:
        if name not in given and name not in fixed:
            if name == "weights":
                default_weights = True
            else:
                axes[name] = list(DEFAULT_GRID[name])
    for name, values in given.items():
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            raise KolmValueError(f"grid[{name!r}] must be a list of values to try, got {values!r:.60}")
        axes[name] = list(values)
    for name, values in axes.items():
        if not values:
            raise KolmValueError(f"grid[{name!r}] is empty")
        if name == "weights":
            axes[name] = [_weight_vector(w, names) for w in values]
    order = [n for n in ("k", *DEFAULT_GRID, "weights") if n in axes]  # k first, weights last: as before
    return {n: axes[n] for n in order + [n for n in axes if n not in order]}, default_weights


def optimize_fusion(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, metric: str = "ndcg@10", method: str = "rrf",
                    grid: Mapping[str, Sequence[Any]] | None = None, *, queries: Sequence[Any] | None = None,
                    norm: str | None = None, params: Mapping[str, Any] | None = None,
                    relevance_level: int = 1, search: Search = "auto", max_points: int | None = DEFAULT_MAX_POINTS,
                    progress: bool = True) -> dict[str, Any]:
    """Choose the fusion parameters that maximise ``metric`` on ``qrels`` (a training split).

    Parameters
    ----------
    runs : dict name -> run, or list of runs
        At least two.
    qrels : DataFrame of the training queries' judgements
        Checked as :func:`~kolm_search.evaluate` checks them (a document judged twice for one
        query, a missing id or a non-integer grade is an error naming it).
    metric : str
    method : str
        Any fusion method (see :func:`kolm_search.fuse`).
    grid : dict, optional
        Values to try per parameter, e.g. ``{"k": [...], "weights": [[w1, w2, ...], ...]}``
        (a weight vector in run order, or a dict by run name whose missing runs weigh 1).
        A free parameter of the method left out of ``grid`` and ``params`` gets a default
        axis (:data:`DEFAULT_GRID`): ``k`` and ``weights`` for rrf, ``weights`` for wsum,
        wmnz, mixed, w_bordafuse and w_condorcet, ``gamma`` (gmnz), ``phi`` (rbc), ``sigma``
        (logn_isr), ``n_segments`` (probfuse), ``w`` (slidefuse). Default weights are
        normalised vectors of per-run steps 0, .25, .5, .75, 1
        (:mod:`~kolm_search.evaluation.param_search`).
    queries : list, optional
        Restrict to these query ids (e.g. a train split); default: all judged queries.
    norm : str, optional
        Normalisation (see :func:`kolm_search.fuse`).
    params : dict, optional
        Parameters held fixed (not searched).
    relevance_level : int, default 1
        Minimum grade counted relevant when training the supervised methods.
    search : {"auto", "grid", "coordinate"}, default "auto"
        ``"grid"``: every point of the axes' product (with default weights, their full grid:
        13, 91, 529, 2,851, 14,833 ... vectors for 2, 3, 4, 5, 6 runs). ``"coordinate"``:
        coordinate ascent from the best of equal weights and each run alone, one parameter
        (or one run's weight) at a time, at most ``(n + 1) + 10 * (axis sizes + 5 n)`` points
        for ``n`` runs. ``"auto"``: the grid, except default weights of more than three runs
        (coordinate ascent), so the default cost grows linearly in the number of runs.
    max_points : int or None, default 5000
        A grid search of more points is refused (``KolmValueError`` naming its size) before
        any is scored; None searches any size.
    progress : bool, default True
        A progress bar of the points scored (tqdm, on stderr).

    Returns
    -------
    dict
        ``"fusion"``: the best :class:`~kolm_search.fusion.FittedFusion` (apply it with
        ``.fuse(runs)``); ``"params"``: the best point; ``"score"``; ``"trials"``: a
        DataFrame of every point scored with its score, best first (ties: the point scored
        first wins); ``"search"``: the strategy run (``"grid"`` or ``"coordinate"``); and each
        searched parameter at the top level (``"k"``, ``"weights"`` as a dict by run name, ...).
    """
    parse_metric(metric)
    fitted, trials, best, strategy = _search(runs, qrels, method, norm, params, grid, metric, queries,
                                             relevance_level, always_score=True, search=search,
                                             max_points=max_points, progress=progress)
    out: dict[str, Any] = {"method": fitted.method, "norm": fitted.norm, "params": best,
                           "score": fitted.score, "trials": trials, "fusion": fitted, "search": strategy}
    for name, value in best.items():
        out[name] = dict(zip(fitted.runs, value, strict=True)) if name == "weights" else value
    return out


def fit_fusion(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, method: str = "rrf", *, norm: str | None = None,
               metric: str = "ndcg@10", grid: Mapping[str, Sequence[Any]] | None = None,
               queries: Sequence[Any] | None = None, relevance_level: int = 1, search: Search = "auto",
               max_points: int | None = DEFAULT_MAX_POINTS, progress: bool = True, **params: Any) -> FittedFusion:
    """Train ``method`` on ``runs`` and ``qrels`` (a training split); apply the result to
    other runs of the same systems with ``.fuse(runs)``.

    Parameters given as keywords are fixed (``fit_fusion(runs, qrels, "probfuse",
    n_segments=10)``, ``fit_fusion(runs, qrels, "wsum", weights=[.7, .3])``); the supervised
    tables are learned from the qrels (checked as :func:`~kolm_search.evaluate` checks them);
    free parameters are searched as :func:`optimize_fusion` does (``search``, ``max_points``,
    ``progress`` as there), on ``metric`` (only then is ``metric`` evaluated).

    Returns
    -------
    FittedFusion
        ``method``, ``norm``, ``params`` (ranx's names, tables included), ``runs`` (names),
        ``score`` (the metric on the training split when a search ran, else None).
    """
    parse_metric(metric)
    return _search(runs, qrels, method, norm, params, grid, metric, queries, relevance_level, always_score=False,
                   search=search, max_points=max_points, progress=progress)[0]


def _strategy(search: Any, n_runs: int, default_weights: bool) -> Literal["grid", "coordinate"]:
    if search not in SEARCHES:
        raise KolmValueError(f"search must be one of {SEARCHES}, got {search!r}")
    if search == "auto":
        return "coordinate" if default_weights and n_runs > GRID_RUNS else "grid"
    return search


def _check_max_points(max_points: Any) -> int | None:
    if max_points is None:
        return None
    if isinstance(max_points, bool) or not isinstance(max_points, (int, np.integer)) or max_points < 1:
        raise KolmValueError(f"max_points must be an integer >= 1 or None, got {max_points!r}")
    return int(max_points)


def _search(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, method: str, norm: str | None,
            params: Mapping[str, Any] | None, grid: Mapping[str, Sequence[Any]] | None, metric: str,
            queries: Sequence[Any] | None, relevance_level: int, always_score: bool, search: Any,
            max_points: Any, progress: bool) -> tuple[FittedFusion, pd.DataFrame, dict[str, Any], str]:
    from tqdm.auto import tqdm

    column = metric_key(metric)  # an ir_measures object is keyed by its str()
    name, norm_name = canonical_method(method), canonical_norm(norm)
    limit = _check_max_points(max_points)
    if isinstance(runs, Mapping):
        frames: Any = {str(n): as_run(r, what=f"run {n!r}") for n, r in runs.items()}
    else:
        frames = [as_run(r, what=f"run {i}") for i, r in enumerate(runs)]
    if len(frames) < 2:
        raise KolmValueError("fusion training needs at least two runs")
    qrels_df, _ = check_qrels(qrels)  # evaluate's rules, before anything is trained on them
    if queries is not None:
        keep = {str(q) for q in queries}

        def pick(f: pd.DataFrame) -> pd.DataFrame:
            return f[f["qid"].astype(str).isin(keep)]

        frames = {n: pick(f) for n, f in frames.items()} if isinstance(frames, Mapping) else [pick(f) for f in frames]
        qrels_df = pick(qrels_df)
    prepared, _ = prepare_runs(frames)
    fixed = dict(params or {})
    n_runs = len(prepared.names)
    axes, default_weights = _grid(name, grid, fixed, prepared.names)
    strategy = _strategy(search, n_runs, default_weights)
    searched = bool(axes) or default_weights
    if strategy == "grid":
        size = param_search.grid_size(axes, n_runs if default_weights else None)
        if limit is not None and size > limit:
            shape = " x ".join([*(f"{len(v)} {n}" for n, v in axes.items()),
                                *([f"{param_search.weight_grid_size(n_runs)} weight vectors"] if default_weights else [])])
            raise KolmValueError(f"the {name} search grid has {size:,} points ({shape}), above max_points={limit:,}: "
                                 "pass max_points=None (or a larger number) to score them all, or search='coordinate'")
        if default_weights:
            axes["weights"] = param_search.weight_grid(n_runs)
        total: int | None = size
    else:
        total = param_search.coordinate_budget(axes, n_runs if default_weights else 0)
    spec = METHODS[name]
    if (spec.supervised or always_score or searched) and not (
            set(map(str, prepared.q_uniques)) & set(qrels_df["qid"].astype(str))):
        raise KolmValueError("qrels judge no query of the runs: nothing to train or score on")
    judged = judge(prepared, qrels_df, relevance_level=relevance_level) if spec.supervised else None
    tables: dict[tuple[Any, ...], dict[str, Any]] = {}
    names = [*axes, *(["weights"] if default_weights and "weights" not in axes else [])]
    rows: list[dict[str, Any]] = []
    fitted: list[FittedFusion] = []
    seen: dict[tuple[Any, ...], float] = {}

    def score(point: dict[str, Any]) -> float:
        key = tuple(point[n] for n in names)
        if key in seen:
            return seen[key]
        every = {**fixed, **point}
        fuse_params = {k: v for k, v in every.items() if k not in _TRAINING}
        if judged is not None:
            tkey = tuple(sorted((k, v) for k, v in every.items() if k in _TRAINING))
            if tkey not in tables:
                tables[tkey] = train_tables(name, norm_name, judged, every)
            fuse_params.update(tables[tkey])
        _, _, checked = resolve(name, norm_name, fuse_params, n_runs, names=prepared.names)
        value = None
        if always_score or searched:
            result = evaluate(prepared.fuse(name, norm_name, checked), qrels_df, [metric])
            assert isinstance(result, dict)
            value = float(result[column])
        rows.append({**point, column: value})
        fitted.append(FittedFusion(name, norm_name, _plain(checked), tuple(prepared.names), value))
        seen[key] = -np.inf if value is None or np.isnan(value) else value
        bar.update(1)
        return seen[key]

    with tqdm(total=total, desc=f"{name} fusion search ({strategy})", unit="point", disable=not progress,
              leave=False) as bar:
        if strategy == "grid":
            for point in param_search.grid_points(axes):
                score(point)
        else:
            start = {n: spec.defaults[n] for n in axes if n in spec.defaults and spec.defaults[n] in axes[n]}
            param_search.coordinate_ascent(axes, score, start=start, n_weights=n_runs if default_weights else 0)
    trials = pd.DataFrame(rows, columns=[*names, column])
    scores = trials[column].to_numpy(float)
    best = int(np.argmax(np.where(np.isnan(scores), -np.inf, scores))) if searched else 0
    if searched:
        trials = trials.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)
    return fitted[best], trials, {k: rows[best][k] for k in names}, strategy


def _plain(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as plain Python values and arrays (weights a list)."""
    return {k: (v.tolist() if k == "weights" and isinstance(v, np.ndarray) else v) for k, v in params.items()}
