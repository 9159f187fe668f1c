"""``Experiment``: run several pipelines over a dataset, cache the runs, compare, plot."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.compose.cache import StageCache, cache_root
from kolm_search.compose.depths import planned_depths
from kolm_search.compose.fingerprints import fingerprints_once
from kolm_search.compose.queries import (
    CodedRun,
    PreparedQueries,
    prepare_queries,
    queries_digest,
    run_coded,
)
from kolm_search.compose.run_cache import RunCache
from kolm_search.compose.runner import RunState, sharing, watching_incomplete
from kolm_search.compose.stage import Stage
from kolm_search.engine.runs import as_qrels
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.evaluation.client_run_cache import read_client_run, write_client_run
from kolm_search.evaluation.compare import check_settings, compare, per_query_table
from kolm_search.evaluation.experiment_runs import Runs
from kolm_search.evaluation.measures import metric_key, metric_list
from kolm_search.evaluation.report import ComparisonTable
from kolm_search.evaluation.runner import run_queries
from kolm_search.evaluation.self_hits import drop_self_hits, wants_self_hits_dropped
from kolm_search.evaluation.stats import Correction, Interval, Test
from kolm_search.evaluation.table_cache import TableCache, qrels_digest, settings_digest
from kolm_search.io._atomic import sweep_leftovers

__all__ = ["Experiment", "Runs"]


class Experiment:
    """PyTerrier-style experiment over stages (:class:`~kolm_search.compose.Stage`) and
    :class:`~kolm_search.contract.client.SearchClient` pipelines.

    Stage pipelines share their work: equal prefixes (equal stage fingerprints, the same
    queries) run once per experiment (``bm25 % 100 >> r1`` and ``bm25 % 100 >> r2`` run BM25
    once; so do ``bm25 % 10``, ``bm25 % 50 >> r`` and ``bm25`` in any order, BM25 at the deepest
    limit asked, read before running: :mod:`~kolm_search.compose.depths`), and with ``cache_dir`` every stage's output is kept on disk
    (:class:`~kolm_search.compose.StageCache`, under ``cache_dir/stages``), so a second
    experiment over the folder runs only the stages whose parameters, index or input changed;
    each pipeline's finished run is kept too (:class:`~kolm_search.compose.run_cache.RunCache`,
    under ``cache_dir/runs``, keyed by the pipeline's fingerprint and a digest of the queries
    and the limit), so a pipeline that did not change is read back whole, without walking its
    stages. ``shared`` (a :class:`~kolm_search.compose.RunState`) counts what was computed and
    reused (a run read whole counts once under the pipeline's fingerprint). ``runs`` (a
    :class:`Runs`) holds each pipeline's run DataFrame; a stage pipeline's is kept as codes
    (and so stored in the run cache) and made when it is first asked for.

    Parameters
    ----------
    pipelines : dict name -> Stage or SearchClient
    dataset : Dataset
        From :func:`kolm_search.io.load_beir` / ``load_dataset``; its judged queries are run.
    metrics : str, ir_measures measure, or a list of them
        As in :func:`~kolm_search.evaluation.compare`.
    limit : int, default 100
        Documents retrieved per query.
    baseline, test, correction, ci, seed
        As in :func:`kolm_search.evaluation.compare` (several baselines, Tukey's HSD, FDR control).
    cache_dir : path, optional
        A client's runs are cached there as parquet (``<dataset>__<pipeline>__k<limit>__q<digest
        of the judged queries>.parquet``, a name with characters a file name cannot hold
        replaced and its digest added, each page checksummed, written all or nothing) and
        reused (a client has no fingerprint: a changed client needs another name); a damaged
        file is searched again with a warning; a stage's outputs go to ``cache_dir/stages`` and
        a stage pipeline's finished runs to ``cache_dir/runs``, keyed by fingerprints
        (``run_cache`` reads them). An empty string is refused (``"."`` is the current folder).
    progress : bool
        Progress bars while searching.
    drop_self_hits : bool, optional
        Drop documents whose id is the query's, as BEIR does: each pipeline searches
        ``limit + 1`` and keeps the ``limit`` best others. None follows the dataset's
        ``drop_self_hits`` (on for BEIR datasets; see :mod:`kolm_search.evaluation.self_hits`).
    score_cache : ScoreCache, optional
        Given to every ``SearchClient`` pipeline's ``search_batch`` (which checks it): rerankers'
        scores already computed (by this experiment, another one, a job or a notebook) are read,
        not computed again. A stage pipeline's built-in rerankers take theirs in their
        constructors (``score_cache=``).

    Example
    -------
    >>> exp = Experiment({"bm25": presets.bm25(ds.corpus)}, ds, ["ndcg@10"])  # doctest: +SKIP
    >>> exp.run()                                                              # doctest: +SKIP
    """

    def __init__(self, pipelines: Mapping[str, Any], dataset: Any, metrics: Sequence[str] = ("ndcg@10", "recall@100"), *,
                 limit: int = 100, baseline: str | Sequence[str] | None = None, test: Test = "t",
                 correction: Correction | None = None, ci: Interval = "t", seed: int = 0,
                 cache_dir: str | Path | None = None, progress: bool = True,
                 drop_self_hits: bool | None = None, score_cache: Any = None) -> None:
        if not isinstance(pipelines, Mapping):
            raise KolmTypeError(f"Experiment takes the pipelines as a dict name -> Stage or SearchClient, got "
                                f"{type(pipelines).__name__}")
        if not pipelines:
            raise KolmValueError("Experiment needs at least one pipeline")
        for name, client in pipelines.items():
            if isinstance(client, Stage):
                if not client.is_source:
                    raise KolmValueError(f"pipeline {name!r} ({client!r}) re-ranks: a pipeline starts with a retrieving "
                                         "stage (e.g. bm25 >> reranker)")
            elif not callable(getattr(client, "search_batch", None)):
                raise KolmValueError(f"pipeline {name!r} is neither a Stage nor a SearchClient")
        self.pipelines = dict(pipelines)
        self.dataset = dataset
        self.metrics = metric_list(metrics)  # one name or measure, or several
        if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1:
            raise KolmValueError(f"limit must be a positive integer, got {limit!r}")
        self.limit = int(limit)
        self.baseline = baseline
        self.test: Test = test
        self.correction: Correction | None = correction
        self.ci: Interval = ci
        self.seed = seed
        check_settings(list(self.pipelines), self.metrics, baseline, test, correction, ci=ci, seed=seed)  # before searching
        self.cache_dir = cache_root(cache_dir)
        self.progress = progress
        self.drop_self_hits = wants_self_hits_dropped(as_qrels(dataset), drop_self_hits)
        self.runs: MutableMapping[str, pd.DataFrame] = Runs()
        self.score_cache = score_cache
        self._prepared: tuple[Any, PreparedQueries] | None = None
        self._qids: tuple[Any, PreparedQueries] | None = None
        self._digest: tuple[Any, str | None] | None = None
        #: the runs part of the table key (:meth:`_runs_key`) the runs held were made under (None:
        #: unknown, or runs made under several): a table measured from them is stored only under it
        self._runs_for: str | None = None
        self.shared = RunState(cache=None if self.cache_dir is None else StageCache(self.cache_dir / "stages"),
                               depth=self.limit + 1 if self.drop_self_hits else self.limit)  # (what _prepare asks)
        self.run_cache = None if self.cache_dir is None else RunCache(self.cache_dir / "runs")
        #: the stage pipelines whose depths :meth:`_run_stage` plans before it computes the first of
        #: them (:func:`~kolm_search.compose.depths.planned_depths`); None once planned
        self._unplanned: list[Any] | None = None
        self.table_cache = None if self.cache_dir is None else TableCache(self.cache_dir / "tables")
        if self.cache_dir is not None:  # the client runs' folder: what writes killed midway left in it
            sweep_leftovers(self.cache_dir)

    def _cache_path(self, name: str, queries: pd.DataFrame) -> Path | None:
        """The file of a client's run over ``queries`` (the judged ones), named by the dataset, the
        pipeline, the limit and a digest of those queries; None without a cache or when the
        queries cannot be digested (then it is not cached)."""
        digest = None if self.cache_dir is None else queries_digest(queries)
        if self.cache_dir is None or digest is None:
            return None
        tail = "__noself" if self.drop_self_hits else ""
        text = f"{getattr(self.dataset, 'name', 'dataset')}__{name}__k{self.limit}{tail}"
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)
        if safe != text:  # names that differ only in what a file name cannot hold get files of their own
            safe += "__" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return self.cache_dir / f"{safe}__q{digest[:16]}.parquet"

    def run_pipelines(self) -> MutableMapping[str, pd.DataFrame]:
        """Search every pipeline over the judged queries (cached runs are reused). Returns
        :attr:`runs` (a :class:`Runs`: a stage pipeline's DataFrame is made when first asked for).
        Runs made here under the table's key are measured into the table cache by :meth:`run`."""
        return self._run_pipelines(self._runs_key() if any(n not in self.runs for n in self.pipelines) else None)

    def _run_pipelines(self, made_for: str | None) -> MutableMapping[str, pd.DataFrame]:
        """:meth:`run_pipelines`, the runs made now being made under the runs key ``made_for``
        (:meth:`_runs_key`, None: not known), which :attr:`_runs_for` records when every run
        held was made under it."""
        queries = self.dataset.judged_queries()
        missing = [name for name in self.pipelines if name not in self.runs]
        if missing:
            self.shared.forget_incomplete()  # a fusion a failed child was missing from is fused again
            held = len(missing) < len(self.pipelines)
            self._runs_for = made_for if not held or self._runs_for == made_for else None
            self._unplanned = [name for name in missing if isinstance(self.pipelines[name], Stage)]
        for name, client in self.pipelines.items():
            if name in self.runs:
                continue
            try:
                self._run_one(name, client, queries)
            except Exception as exc:  # the runs made before it are kept (and cached)
                exc.add_note(f"while running the Experiment's pipeline {name!r}")
                self._unplanned = None  # (a later run plans again, from the pipelines it then has)
                raise
        self._unplanned = None  # (every stage pipeline read whole: nothing computed, nothing to plan)
        return self.runs

    def _run_one(self, name: Any, client: Any, queries: pd.DataFrame) -> None:
        """Pipeline ``name``'s run over ``queries`` into :attr:`runs` (read from a cache, or searched and cached)."""
        if isinstance(client, Stage):
            run = self._run_stage(client, queries)
            if isinstance(self.runs, Runs):
                self.runs.set_coded(name, run, self.limit if self.drop_self_hits else None)
            else:  # a mapping the caller set
                self.runs[name] = drop_self_hits(run.frame(), self.limit)[0] if self.drop_self_hits \
                    else run.frame()
            return
        path = self._cache_path(name, queries)
        found = None if path is None else read_client_run(path)
        if found is not None:
            self.runs[name] = found
            return
        extra: dict[str, Any] = {} if self.score_cache is None else {"score_cache": self.score_cache}
        with watching_incomplete() as incomplete:  # a best-effort fusion whose child failed: not cached
            if self.drop_self_hits:
                run = run_queries(client, queries, limit=self.limit + 1, progress=self.progress, desc=name, **extra)
                run, _ = drop_self_hits(run, self.limit)
            else:
                run = run_queries(client, queries, limit=self.limit, progress=self.progress, desc=name, **extra)
        if incomplete[0]:
            self._runs_for = None  # nor a table measured from it
        elif path is not None:
            write_client_run(path, run)
        self.runs[name] = run

    def _qids_of(self, queries: pd.DataFrame) -> PreparedQueries:
        """What a run read from the run cache needs of the queries to make its DataFrame: their
        qids (the prepared queries when they were made, else the qids alone, unplanned: the run
        cache keys a run by a digest of a queries DataFrame, whose qids ``prepare_queries``
        takes as they are)."""
        if self._prepared is not None and self._prepared[0] is queries:
            return self._prepared[1]
        if self._qids is None or self._qids[0] is not queries:
            self._qids = (queries, PreparedQueries(list(queries["qid"]), []))
        return self._qids[1]

    def _prepare(self, queries: pd.DataFrame) -> PreparedQueries:
        """The judged queries checked and planned once for every stage pipeline."""
        if self._prepared is None or self._prepared[0] is not queries:
            limit = self.limit + 1 if self.drop_self_hits else self.limit
            self._prepared = (queries, prepare_queries(queries, limit=limit))
        return self._prepared[1]

    def _run_stage(self, stage: Stage, queries: pd.DataFrame) -> CodedRun:
        """A stage's run (before self-hits are dropped), its ids not looked up: read whole from
        the run cache, else computed with prefixes shared with the experiment's other stages
        (and cached); the queries are checked and planned once for all of them. The key's
        fingerprint merges the pipeline's deferred changes first
        (:meth:`~kolm_search.compose.kinds.RetrieverStage.stage_identity`): a cached run's codes are
        rows of the merged table read next."""
        key = self._run_key(stage, queries)
        if key is not None and self.run_cache is not None:
            found = self.run_cache.get(*key, lambda: self._qids_of(queries), stage.table,  # type: ignore[attr-defined]
                                       len(queries))
            if found is not None:
                self.shared.reused[key[0]] += 1
                return found
        prepared = self._prepare(queries)
        if self._unplanned is not None:  # the first stage pipeline computed: the depths the rest will ask
            self.shared.planned = planned_depths([self.pipelines[n] for n in self._unplanned if n not in self.runs],
                                                 prepared)
            self._unplanned = None
        with sharing(self.shared), watching_incomplete() as incomplete:
            run = run_coded(stage, prepared)
        if incomplete[0]:  # a best-effort child failed: neither the run nor a table measured from it is kept
            self._runs_for = None
        elif key is not None and self.run_cache is not None:
            self.run_cache.put(*key, run)
        return run

    def _run_key(self, stage: Stage, queries: pd.DataFrame) -> tuple[str, str] | None:
        """(the pipeline's fingerprint, the digest of the queries and of how the run is cut) of
        its run in the run cache, or None (no cache, a stage declaring no fingerprint, queries
        that cannot be digested)."""
        if self.run_cache is None:
            return None
        if self._digest is None or self._digest[0] is not queries:
            self._digest = (queries, queries_digest(queries, limit=self.limit, drop_self_hits=self.drop_self_hits))
        if self._digest[1] is None:
            return None
        try:
            return stage.fingerprint(), self._digest[1]
        except KolmError:
            return None

    def run(self) -> ComparisonTable:
        """Search (or reuse cached runs) and return the :func:`compare` table (``.to_latex()``,
        ``.to_markdown()`` render it).

        With ``cache_dir``, the table is kept in ``cache_dir/tables``
        (:class:`~kolm_search.evaluation.table_cache.TableCache`) when every pipeline is a stage
        whose run the run cache keys: a second run finding it reads neither the runs nor measures
        them (:attr:`runs` then reads a run when it is first asked for)."""
        key = self._table_key()
        if key is not None and self.table_cache is not None:
            found = self.table_cache.get(*key, [str(n) for n in self.pipelines], self._metric_keys())
            if found is not None:
                if not any(name in self.runs for name in self.pipelines):
                    self._runs_for = key[0]
                self._pend_runs()
                return found
        self._run_pipelines(None if key is None else key[0])
        table = compare(self.runs, self.dataset.qrels, self.metrics, baseline=self.baseline, test=self.test,
                        correction=self.correction, ci=self.ci, seed=self.seed, drop_self_hits=self.drop_self_hits)
        if key is not None and self.table_cache is not None and self._runs_for == key[0]:
            self.table_cache.put(*key, table)  # (not a table of runs made before the queries or a pipeline changed)
        return table

    def _metric_keys(self) -> list[str]:
        return [metric_key(m) for m in metric_list(self.metrics)]

    def _table_key(self) -> tuple[str, str] | None:
        """(:meth:`_runs_key`: a digest of every pipeline's name and fingerprint and of the
        dataset's queries and qrels; a digest of every measuring setting) of the measure table in
        the table cache, or None: no cache, a pipeline that is not a stage or has no fingerprint, a run a
        caller set in :attr:`runs`, queries, qrels or settings that cannot be digested. (The
        judged queries, whose digest keys the runs, follow from the queries and the qrels: they
        are not made here.)"""
        runs = self._runs_key()
        if runs is None or not all(isinstance(m, str) for m in self.metrics) or not isinstance(self.seed, int):
            return None
        baseline = self.baseline if self.baseline is None or isinstance(self.baseline, str) else list(self.baseline)
        settings = settings_digest({"metrics": self.metrics, "baseline": baseline, "test": self.test,
                                    "correction": self.correction, "ci": self.ci, "seed": self.seed,
                                    "alpha": 0.05, "n_resamples": 10_000, "relevance_level": 1,
                                    "limit": self.limit, "drop_self_hits": self.drop_self_hits})
        if settings is None:
            return None
        return runs, settings

    def _runs_key(self) -> str | None:
        """The runs part of :meth:`_table_key`: a digest of every pipeline's name and fingerprint,
        of the dataset's queries (with the limit and the dropping of self-hits) and of its qrels
        (which choose the judged queries the runs are made for, and judge them), or None."""
        if self.table_cache is None or not isinstance(self.runs, Runs) \
                or not all(isinstance(n, str) for n in self.pipelines):
            return None
        queries = queries_digest(getattr(self.dataset, "queries", None), limit=self.limit,
                                 drop_self_hits=self.drop_self_hits,
                                 judged="judged_queries")
        if queries is None:
            return None
        parts: list[Any] = [queries]
        with fingerprints_once():  # the pipelines' shared first stages fingerprinted once
            for name, stage in self.pipelines.items():
                if not isinstance(stage, Stage) or (name in self.runs and not self.runs.computed(name)):
                    return None
                try:
                    parts.append([name, stage.fingerprint()])
                except KolmError:
                    return None
        qrels = qrels_digest(self.dataset.qrels)
        if qrels is None:
            return None
        parts.append(qrels)
        return hashlib.sha256(json.dumps(parts).encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def _pend_runs(self) -> None:
        """Every stage pipeline's run, not read yet, made readable on first use."""
        assert isinstance(self.runs, Runs)
        cut = self.limit if self.drop_self_hits else None

        def loader(stage: Stage) -> Callable[[], tuple[CodedRun, int | None]]:
            return lambda: (self._run_stage(stage, self.dataset.judged_queries()), cut)

        for name, stage in self.pipelines.items():
            if name not in self.runs:
                self.runs.set_pending(name, loader(stage))

    def per_query(self) -> dict[str, pd.DataFrame]:
        """``{metric: DataFrame qid x pipeline}`` of per-query scores."""
        self.run_pipelines()
        return per_query_table(self.runs, self.dataset.qrels, self.metrics, drop_self_hits=self.drop_self_hits)

    def plot(self, metrics: Sequence[str] | None = None, *, n_boot: int | None = None) -> Any:
        """The report's pictures in one figure (those of :meth:`ComparisonTable.to_html`,
        :mod:`kolm_search.evaluation.plots`): a row of metric bars with labelled 95 % intervals
        and significance marks, a row of per-query win/loss bars for each run against each
        baseline, and the precision-recall curves.

        Needs matplotlib (extra ``plot``). Returns the Figure. ``n_boot`` is ignored (the
        intervals are Student's t now); it is kept so that older calls still run.
        """
        from kolm_search._extras import require
        from kolm_search.evaluation.plots import draw_bars, draw_deltas, draw_pr

        plt = require("matplotlib.pyplot", "plot")
        table = self.run()
        conf = dict(table.attrs["compare"])
        metrics = [str(m) for m in (metrics or self.metrics)]
        unknown = [m for m in metrics if m not in table.per_query]
        if unknown:
            raise KolmValueError(f"plot: {unknown} are not among the experiment's metrics {self.metrics}")
        pairs = [(b, r) for b in conf["baselines"] for r in self.pipelines if r != b]  # names as compare keeps them
        n_rows = 2 + len(pairs)
        fig, axes = plt.subplots(n_rows, len(metrics), figsize=(4.6 * len(metrics), 3.2 * n_rows), squeeze=False)
        for col, metric in enumerate(metrics):
            draw_bars(axes[0, col], table, metric, table.per_query[metric], conf)
            for row, (base, run) in enumerate(pairs, start=1):
                draw_deltas(axes[row, col], table.per_query[metric], run, base, metric)
        draw_pr(axes[-1, 0], table.curves)
        for ax in axes[-1, 1:]:
            fig.delaxes(ax)
        fig.tight_layout()
        return fig
