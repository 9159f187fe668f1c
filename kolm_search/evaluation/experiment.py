"""``Experiment``: run several pipelines over a dataset, cache the runs, compare, plot."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search.errors import KolmValueError
from kolm_search.evaluation.compare import compare, per_query_table
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.evaluation.runner import run_queries
from kolm_search.evaluation.self_hits import drop_self_hits, wants_self_hits_dropped
from kolm_search.runs import as_qrels

__all__ = ["Experiment"]


class Experiment:
    """PyTerrier-style experiment over :class:`~kolm_search.client.SearchClient` pipelines.

    Parameters
    ----------
    pipelines : dict name -> SearchClient
    dataset : Dataset
        From :func:`kolm_search.io.load_beir` / ``load_dataset``; its judged queries are run.
    metrics : list of str
    limit : int, default 100
        Documents retrieved per query.
    baseline, test, correction, seed
        As in :func:`kolm_search.evaluation.compare`.
    cache_dir : path, optional
        Runs are cached there as parquet (``<dataset>__<pipeline>.parquet``) and reused.
    progress : bool
        Progress bars while searching.
    drop_self_hits : bool, optional
        Drop documents whose id is the query's, as BEIR does: each pipeline searches
        ``limit + 1`` and keeps the ``limit`` best others. None follows the dataset's
        ``drop_self_hits`` (on for BEIR datasets; see :mod:`kolm_search.evaluation.self_hits`).
    score_cache : ScoreCache, optional
        Given to every pipeline's ``search_batch``: rerankers' scores already computed (by
        this experiment, another one, a job or a notebook) are read, not computed again.

    Example
    -------
    >>> exp = Experiment({"bm25": presets.bm25(ds.corpus)}, ds, ["ndcg@10"])  # doctest: +SKIP
    >>> exp.run()                                                              # doctest: +SKIP
    """

    def __init__(self, pipelines: Mapping[str, Any], dataset: Any, metrics: Sequence[str] = ("ndcg@10", "recall@100"), *,
                 limit: int = 100, baseline: str | None = None, test: Literal["t", "wilcoxon", "fisher", "bootstrap"] = "t",
                 correction: Literal["none", "bonferroni", "holm"] = "holm", seed: int = 0,
                 cache_dir: str | Path | None = None, progress: bool = True,
                 drop_self_hits: bool | None = None, score_cache: Any = None) -> None:
        if not pipelines:
            raise KolmValueError("Experiment needs at least one pipeline")
        for name, client in pipelines.items():
            if not callable(getattr(client, "search_batch", None)):
                raise KolmValueError(f"pipeline {name!r} has no search_batch (use a SearchClient)")
        self.pipelines = dict(pipelines)
        self.dataset = dataset
        self.metrics = list(metrics)
        self.limit = int(limit)
        self.baseline = baseline
        self.test: Literal["t", "wilcoxon", "fisher", "bootstrap"] = test
        self.correction: Literal["none", "bonferroni", "holm"] = correction
        self.seed = seed
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.progress = progress
        self.drop_self_hits = wants_self_hits_dropped(as_qrels(dataset), drop_self_hits)
        self.runs: dict[str, pd.DataFrame] = {}
        self.score_cache = score_cache

    def _cache_path(self, name: str) -> Path | None:
        if self.cache_dir is None:
            return None
        tail = "__noself" if self.drop_self_hits else ""
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{getattr(self.dataset, 'name', 'dataset')}__{name}__k{self.limit}{tail}")
        return self.cache_dir / f"{safe}.parquet"

    def run_pipelines(self) -> dict[str, pd.DataFrame]:
        """Search every pipeline over the judged queries (cached runs are reused)."""
        queries = self.dataset.judged_queries()
        for name, client in self.pipelines.items():
            if name in self.runs:
                continue
            path = self._cache_path(name)
            if path is not None and path.exists():
                self.runs[name] = pd.read_parquet(path)
                continue
            extra = {} if self.score_cache is None else {"score_cache": self.score_cache}
            if self.drop_self_hits:
                run = run_queries(client, queries, limit=self.limit + 1, progress=self.progress, desc=name, **extra)
                run, _ = drop_self_hits(run, self.limit)
            else:
                run = run_queries(client, queries, limit=self.limit, progress=self.progress, desc=name, **extra)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                run.to_parquet(path, index=False)
            self.runs[name] = run
        return self.runs

    def run(self) -> ComparisonTable:
        """Search (or reuse cached runs) and return the :func:`compare` table (``.to_latex()``,
        ``.to_markdown()`` render it)."""
        self.run_pipelines()
        return compare(self.runs, self.dataset.qrels, self.metrics, baseline=self.baseline, test=self.test,
                       correction=self.correction, seed=self.seed, drop_self_hits=self.drop_self_hits)

    def per_query(self) -> dict[str, pd.DataFrame]:
        """``{metric: DataFrame qid x pipeline}`` of per-query scores."""
        self.run_pipelines()
        return per_query_table(self.runs, self.dataset.qrels, self.metrics, drop_self_hits=self.drop_self_hits)

    def plot(self, metrics: Sequence[str] | None = None, *, n_boot: int = 2000) -> Any:
        """Bars of each metric with 95% bootstrap intervals, and per-query deltas vs the baseline.

        Needs matplotlib (extra ``plot``). Returns the Figure.
        """
        from kolm_search._extras import require

        plt = require("matplotlib.pyplot", "plot")
        metrics = list(metrics or self.metrics)
        tables = self.per_query()
        names = list(self.pipelines)
        base = self.baseline or names[0]
        rng = np.random.default_rng(self.seed)
        fig, axes = plt.subplots(2, len(metrics), figsize=(4.2 * len(metrics), 6.5), squeeze=False)
        for col, metric in enumerate(metrics):
            t = tables[metric]
            means, lows, highs = [], [], []
            for n in names:
                x = t[n].to_numpy()
                boots = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1) if len(x) else np.zeros(1)
                means.append(x.mean() if len(x) else 0.0)
                lows.append(means[-1] - np.percentile(boots, 2.5))
                highs.append(np.percentile(boots, 97.5) - means[-1])
            ax = axes[0, col]
            ax.bar(names, means, yerr=[lows, highs], capsize=4, color="#4C72B0")
            ax.set_title(metric)
            ax.tick_params(axis="x", rotation=30)
            ax = axes[1, col]
            for n in names:
                if n == base:
                    continue
                delta = np.sort(t[n].to_numpy() - t[base].to_numpy())[::-1]
                ax.plot(np.arange(len(delta)), delta, label=n)
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_title(f"per-query {metric} minus {base}")
            ax.set_xlabel("queries (sorted)")
            if len(names) > 1:
                ax.legend(fontsize=8)
        fig.tight_layout()
        return fig
