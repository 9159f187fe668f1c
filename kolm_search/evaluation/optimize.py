"""Fusion trained on judged queries: ``fit_fusion`` and ``optimize_fusion``.

Both take runs and qrels of a training split. The supervised methods (probfuse, segfuse,
slidefuse, posfuse, bayesfuse, mapfuse) learn their per-run tables from the qrels; every
method's free parameters (RRF's ``k`` and weights, ``gamma``, ``phi``, ``sigma``, run
``weights``, probfuse's ``n_segments``, slidefuse's window ``w``) are chosen by grid search
on a metric. Each grid point fuses the runs (read once) and evaluates the fused run; tables
are trained once per distinct training setting.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.errors import KolmValueError
from kolm_search.evaluation.measures import metric_key
from kolm_search.evaluation.metrics import evaluate, parse_metric
from kolm_search.fusion.fitted import FittedFusion, judge, train_tables
from kolm_search.fusion.frames import prepare_runs, resolve
from kolm_search.fusion.methods import METHODS, canonical_method
from kolm_search.fusion.normalize import canonical_norm
from kolm_search.runs import as_qrels, as_run

__all__ = ["DEFAULT_GRID", "fit_fusion", "optimize_fusion"]

DEFAULT_K = (1, 5, 10, 20, 40, 60, 80, 100)
DEFAULT_WEIGHT_STEPS = (0.0, 0.25, 0.5, 0.75, 1.0)
DEFAULT_GRID: dict[str, tuple[Any, ...]] = {
    "k": DEFAULT_K,
    "gamma": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
    "phi": (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99),
    "sigma": (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0),
    "n_segments": (2, 5, 10, 20, 25, 50, 100),
    "w": (1, 2, 3, 5, 7, 10, 20),
}
_TRAINING = {"n_segments"}  # grid parameters that change the trained tables (not fuse's params)


def _weight_grid(n_runs: int) -> list[tuple[float, ...]]:
    seen = set()
    out = []
    for combo in itertools.product(DEFAULT_WEIGHT_STEPS, repeat=n_runs):
        total = sum(combo)
        if total == 0:
            continue
        norm = tuple(round(c / total, 6) for c in combo)
        if norm not in seen:
            seen.add(norm)
            out.append(norm)
    return out


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
          names: Sequence[str]) -> dict[str, list[Any]]:
    """The grid: the given axes, then a default axis for each free parameter not fixed."""
    n_runs = len(names)
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
    for name in spec.tunable:
        if name not in given and name not in fixed:
            axes[name] = _weight_grid(n_runs) if name == "weights" else list(DEFAULT_GRID[name])
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
    return {n: axes[n] for n in order + [n for n in axes if n not in order]}


def optimize_fusion(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, metric: str = "ndcg@10", method: str = "rrf",
                    grid: Mapping[str, Sequence[Any]] | None = None, *, queries: Sequence[Any] | None = None,
                    norm: str | None = None, params: Mapping[str, Any] | None = None,
                    relevance_level: int = 1) -> dict[str, Any]:
    """Choose the fusion parameters that maximise ``metric`` on ``qrels`` (a training split).

    Parameters
    ----------
    runs : dict name -> run, or list of runs
        At least two.
    qrels : DataFrame of the training queries' judgements
    metric : str
    method : str
        Any fusion method (see :func:`kolm_search.fuse`).
    grid : dict, optional
        Values to try per parameter, e.g. ``{"k": [...], "weights": [[w1, w2, ...], ...]}``
        (a weight vector in run order, or a dict by run name whose missing runs weigh 1).
        A free parameter of the method left out of ``grid`` and ``params`` gets a default
        axis (:data:`DEFAULT_GRID`; weights: normalised vectors of steps 0, .25, .5, .75, 1):
        ``k`` and ``weights`` for rrf, ``weights`` for wsum, wmnz, mixed, w_bordafuse and
        w_condorcet, ``gamma`` (gmnz), ``phi`` (rbc), ``sigma`` (logn_isr),
        ``n_segments`` (probfuse), ``w`` (slidefuse).
    queries : list, optional
        Restrict to these query ids (e.g. a train split); default: all judged queries.
    norm : str, optional
        Normalisation (see :func:`kolm_search.fuse`).
    params : dict, optional
        Parameters held fixed (not searched).
    relevance_level : int, default 1
        Minimum grade counted relevant when training the supervised methods.

    Returns
    -------
    dict
        ``"fusion"``: the best :class:`~kolm_search.fusion.FittedFusion` (apply it with
        ``.fuse(runs)``); ``"params"``: the best grid point; ``"score"``; ``"trials"``: a
        DataFrame of every grid point with its score, best first (ties: the earlier point
        wins); and each searched parameter at the top level (``"k"``, ``"weights"`` as a
        dict by run name, ...).
    """
    parse_metric(metric)
    fitted, trials, best = _search(runs, qrels, method, norm, params, grid, metric, queries, relevance_level,
                                   always_score=True)
    out: dict[str, Any] = {"method": fitted.method, "norm": fitted.norm, "params": best,
                           "score": fitted.score, "trials": trials, "fusion": fitted}
    for name, value in best.items():
        out[name] = dict(zip(fitted.runs, value, strict=True)) if name == "weights" else value
    return out


def fit_fusion(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, method: str = "rrf", *, norm: str | None = None,
               metric: str = "ndcg@10", grid: Mapping[str, Sequence[Any]] | None = None,
               queries: Sequence[Any] | None = None, relevance_level: int = 1, **params: Any) -> FittedFusion:
    """Train ``method`` on ``runs`` and ``qrels`` (a training split); apply the result to
    other runs of the same systems with ``.fuse(runs)``.

    Parameters given as keywords are fixed (``fit_fusion(runs, qrels, "probfuse",
    n_segments=10)``, ``fit_fusion(runs, qrels, "wsum", weights=[.7, .3])``); the supervised
    tables are learned from the qrels; free parameters are searched as
    :func:`optimize_fusion` does, on ``metric`` (only then is ``metric`` evaluated).

    Returns
    -------
    FittedFusion
        ``method``, ``norm``, ``params`` (ranx's names, tables included), ``runs`` (names),
        ``score`` (the metric on the training split when a search ran, else None).
    """
    parse_metric(metric)
    return _search(runs, qrels, method, norm, params, grid, metric, queries, relevance_level, always_score=False)[0]


def _search(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, method: str, norm: str | None,
            params: Mapping[str, Any] | None, grid: Mapping[str, Sequence[Any]] | None, metric: str,
            queries: Sequence[Any] | None, relevance_level: int,
            always_score: bool) -> tuple[FittedFusion, pd.DataFrame, dict[str, Any]]:
    column = metric_key(metric)  # an ir_measures object is keyed by its str()
    name, norm_name = canonical_method(method), canonical_norm(norm)
    if isinstance(runs, Mapping):
        frames: Any = {str(n): as_run(r, what=f"run {n!r}") for n, r in runs.items()}
    else:
        frames = [as_run(r, what=f"run {i}") for i, r in enumerate(runs)]
    if len(frames) < 2:
        raise KolmValueError("fusion training needs at least two runs")
    qrels_df = as_qrels(qrels)
    if queries is not None:
        keep = {str(q) for q in queries}

        def pick(f: pd.DataFrame) -> pd.DataFrame:
            return f[f["qid"].astype(str).isin(keep)]

        frames = {n: pick(f) for n, f in frames.items()} if isinstance(frames, Mapping) else [pick(f) for f in frames]
        qrels_df = pick(qrels_df)
    prepared, _ = prepare_runs(frames)
    fixed = dict(params or {})
    axes = _grid(name, grid, fixed, prepared.names)
    spec = METHODS[name]
    if (spec.supervised or always_score or axes) and not (
            set(map(str, prepared.q_uniques)) & set(qrels_df["qid"].astype(str))):
        raise KolmValueError("qrels judge no query of the runs: nothing to train or score on")
    judged = judge(prepared, qrels_df, relevance_level=relevance_level) if spec.supervised else None
    tables: dict[tuple[Any, ...], dict[str, Any]] = {}
    rows, fitted = [], []
    for combo in itertools.product(*axes.values()):
        point = dict(zip(axes, combo, strict=True))
        every = {**fixed, **point}
        fuse_params = {k: v for k, v in every.items() if k not in _TRAINING}
        if judged is not None:
            key = tuple(sorted((k, v) for k, v in every.items() if k in _TRAINING))
            if key not in tables:
                tables[key] = train_tables(name, norm_name, judged, every)
            fuse_params.update(tables[key])
        _, _, checked = resolve(name, norm_name, fuse_params, len(prepared.names), names=prepared.names)
        score = None
        if always_score or len(axes):
            fused = prepared.fuse(name, norm_name, checked)
            result = evaluate(fused, qrels_df, [metric])
            assert isinstance(result, dict)
            score = float(result[column])
        rows.append({**point, column: score})
        fitted.append(FittedFusion(name, norm_name, _plain(checked), tuple(prepared.names), score))
    trials = pd.DataFrame(rows, columns=[*axes, column])
    scores = trials[column].to_numpy(float)
    best = int(np.argmax(np.where(np.isnan(scores), -np.inf, scores))) if len(axes) else 0
    if len(axes):
        trials = trials.sort_values(column, ascending=False, kind="stable").reset_index(drop=True)
    return fitted[best], trials, {k: rows[best][k] for k in axes}


def _plain(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as plain Python values and arrays (weights a list)."""
    return {k: (v.tolist() if k == "weights" and isinstance(v, np.ndarray) else v) for k, v in params.items()}
