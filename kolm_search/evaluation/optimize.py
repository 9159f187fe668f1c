"""``optimize_fusion``: grid search of RRF's k and per-run weights on a training split."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from kolm_search.errors import KolmValueError
from kolm_search.evaluation.metrics import evaluate, parse_metric
from kolm_search.fusion import FUSION_METHODS, fuse
from kolm_search.runs import as_qrels, as_run

__all__ = ["optimize_fusion"]

DEFAULT_K = (1, 5, 10, 20, 40, 60, 80, 100)
DEFAULT_WEIGHT_STEPS = (0.0, 0.25, 0.5, 0.75, 1.0)


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


def optimize_fusion(runs: Mapping[str, Any] | Sequence[Any], qrels: Any, metric: str = "ndcg@10", method: str = "rrf",
                    grid: Mapping[str, Sequence[Any]] | None = None, *, queries: Sequence[Any] | None = None,
                    norm: str | None = None) -> dict[str, Any]:
    """Choose fusion parameters that maximise ``metric`` on ``qrels`` (a training split).

    Parameters
    ----------
    runs : dict name -> run, or list of runs
    qrels : DataFrame of the training queries' judgements
    metric : str
    method : {"rrf", "combsum", "combmnz"}
    grid : dict, optional
        ``{"k": [...], "weights": [[w1, w2, ...], ...]}``; defaults: k in
        ``(1, 5, 10, 20, 40, 60, 80, 100)`` (rrf only) and normalised weight vectors from steps
        ``0, .25, .5, .75, 1``.
    queries : list, optional
        Restrict to these query ids (e.g. a train split); default: all judged queries.
    norm : str, optional
        Normalisation for score fusion.

    Returns
    -------
    dict
        ``{"k", "weights", "score", "trials"}`` where ``trials`` is a DataFrame of every
        combination tried, best first (ties: the earlier grid entry wins).
    """
    parse_metric(metric)
    if method not in FUSION_METHODS:
        raise KolmValueError(f"method must be one of {FUSION_METHODS}, got {method!r}")
    names = list(runs) if isinstance(runs, Mapping) else [str(i) for i in range(len(runs))]
    frames = [as_run(runs[n], what=f"run {n!r}") for n in names] if isinstance(runs, Mapping) else [as_run(r) for r in runs]
    if len(frames) < 2:
        raise KolmValueError("optimize_fusion needs at least two runs")
    qrels_df = as_qrels(qrels)
    if queries is not None:
        keep = {str(q) for q in queries}
        frames = [f[f["qid"].astype(str).isin(keep)] for f in frames]
        qrels_df = qrels_df[qrels_df["qid"].astype(str).isin(keep)]
    grid = dict(grid or {})
    ks = list(grid.get("k", DEFAULT_K if method == "rrf" else (60,)))
    weights = [tuple(float(x) for x in w) for w in grid.get("weights", _weight_grid(len(frames)))]
    for w in weights:
        if len(w) != len(frames):
            raise KolmValueError(f"weight vector {w} does not have one entry per run ({len(frames)})")
    rows = []
    for k in ks:
        for w in weights:
            fused = fuse(frames, method=method, k=k, weights=list(w), norm=norm)  # type: ignore[arg-type]
            score = evaluate(fused, qrels_df, [metric])
            assert isinstance(score, dict)
            rows.append({"k": k, "weights": w, metric: score[metric]})
    trials = pd.DataFrame(rows).sort_values(metric, ascending=False, kind="stable").reset_index(drop=True)
    best = trials.iloc[0]
    return {"k": best["k"], "weights": dict(zip(names, best["weights"], strict=True)), "score": float(best[metric]),
            "trials": trials}
