"""``leave_one_collection_out``: choose a configuration on all collections but one, score the
choice on the one left out.

Cross-validation over the queries of one collection (:func:`~kolm_search.cross_validate`)
guards against tuning to its queries, not to the collection: a default chosen that way on
Cranfield lost on average on eight other collections. Here every fold holds out a whole
collection. For each collection ``c``:

1. every candidate's per-query ``metric`` is computed on each collection with that
   collection's judgements alone (:func:`~kolm_search.evaluation.per_query_table`);
2. the candidate with the best ``criterion`` over the *other* collections is chosen (ties:
   the first candidate in order); ``c``'s judgements take no part in it;
3. the chosen candidate's per-query scores on ``c`` are compared with the baseline's by paired
   tests (:func:`~kolm_search.evaluation.paired_test`).

Criteria (both give every training collection the same weight, whatever its number of
queries, so a 225-query collection does not outvote a 30-query one):

- ``"mean"``: the mean over the training collections of the candidate's mean ``metric``. With
  a fixed baseline this is the same choice as the mean of per-collection deltas against it
  (the baseline's mean is the same constant for every candidate).
- ``"worst-delta"``: the smallest per-collection delta against the baseline (maximin): prefers
  a candidate that wins everywhere by a little to one that wins somewhere by a lot. Needs a
  baseline.

Candidates are runs, or are made from a collection's documents and queries only (see
:func:`collection_runs`): an unsupervised pipeline never sees judgements. A supervised one
(learning to rank, trained by K-fold cross-validation over a collection's queries) plugs in
as the run it produces: each query's ranking made by a model that did not train on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.evaluation.compare import TESTS, Test, paired_test, per_query_table
from kolm_search.evaluation.measures import metric_key, metric_list

__all__ = ["CRITERIA", "LeaveOneCollectionOut", "collection_runs", "leave_one_collection_out"]

CRITERIA = ("mean", "worst-delta")
Criterion = Literal["mean", "worst-delta"]
Candidate = Callable[[Any, Any], Any]  # (documents, queries) -> run
_BASELINE = "\x00baseline"


@dataclass(frozen=True)
class LeaveOneCollectionOut:
    """What :func:`leave_one_collection_out` found.

    Attributes
    ----------
    metric, criterion : str
    tests : tuple of str
        The paired tests run, one ``p_<test>`` column each.
    folds : DataFrame
        One row per held-out collection: ``collection, n_queries, chosen, train_score`` (the
        criterion's value over the other collections), ``score`` (the chosen candidate's mean
        on the held-out collection), ``baseline``, ``delta``, ``wins, ties, losses`` (queries)
        and ``p_<test>`` for each test.
    per_query : DataFrame
        ``collection, qid, chosen, score, baseline``: every held-out query once.
    scores : DataFrame
        Mean ``metric`` of every candidate on every collection (collection x candidate), each
        computed with that collection's judgements; the folds choose from the other rows.
    baseline_scores : Series
        The baseline's mean per collection (NaN without a baseline).
    mean, baseline_mean, delta : float
        Means over the collections (each weighs the same) of the held-out scores, of the
        baseline's, and their difference.
    pooled_p : dict
        Each test over every held-out query of every collection together.
    """

    metric: str
    criterion: str
    tests: tuple[str, ...]
    folds: pd.DataFrame
    per_query: pd.DataFrame
    scores: pd.DataFrame
    baseline_scores: pd.Series
    mean: float
    baseline_mean: float
    delta: float
    pooled_p: dict[str, float]

    def to_markdown(self) -> str:
        """One row per held-out collection and a row of means, as Markdown."""
        has_base = not np.isnan(self.baseline_mean)
        pcols = [f"p_{t}" for t in self.tests]
        head = ["held out", "queries", f"chosen on the others ({self.criterion})", self.metric]
        if has_base:
            head += ["baseline", "delta", "wins/ties/losses", *[f"p ({t})" for t in self.tests]]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in self.folds.to_dict("records"):
            cells = [str(r["collection"]), str(r["n_queries"]), str(r["chosen"]), f"{r['score']:.4f}"]
            if has_base:
                cells += [f"{r['baseline']:.4f}", f"{r['delta']:+.4f}", f"{r['wins']}/{r['ties']}/{r['losses']}",
                          *[f"{r[c]:.3g}" for c in pcols]]
            lines.append("| " + " | ".join(cells) + " |")
        cells = [f"mean of {len(self.folds)}", str(int(self.folds["n_queries"].sum())), "", f"{self.mean:.4f}"]
        if has_base:
            cells += [f"{self.baseline_mean:.4f}", f"{self.delta:+.4f}", "",
                      *[f"{self.pooled_p[t]:.3g}" for t in self.tests]]
        lines.append("| " + " | ".join(cells) + " |")
        note = "\n\np on the mean row: each test over all held-out queries pooled.\n" if has_base and self.tests else "\n"
        return "\n".join(lines) + note


def collection_runs(candidates: Mapping[Any, Candidate], collections: Mapping[Any, tuple[Any, Any]]
                    ) -> dict[str, dict[str, Any]]:
    """Every candidate's run on every collection: ``{collection: {candidate: run}}``.

    Parameters
    ----------
    candidates : dict name -> function ``(documents, queries) -> run``
        A pipeline factory: it builds its pipeline over the documents and answers the queries
        (e.g. ``lambda docs, q: presets.hybrid(docs, embedder).search_batch(q, limit=100).run``).
        It gets no judgements, so nothing it does can be tuned to them.
    collections : dict name -> (documents, queries)
        E.g. ``{name: (ds.corpus, ds.judged_queries())}`` of :func:`~kolm_search.io.load_dataset`.
    """
    cands = _names(candidates, "candidates")
    colls = _names(collections, "collections")
    for name, fn in cands.items():
        if not callable(fn):
            raise KolmTypeError(f"candidate {name!r} must be a function (documents, queries) -> run, "
                                f"got {type(fn).__name__}")
    out: dict[str, dict[str, Any]] = {}
    for cname, pair in colls.items():
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise KolmTypeError(f"collection {cname!r} must be a (documents, queries) pair, got {type(pair).__name__}")
        documents, queries = pair
        out[cname] = {name: fn(documents, queries) for name, fn in cands.items()}
    return out


def _names(mapping: Any, what: str) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        raise KolmTypeError(f"{what} must be a dict name -> value, got {type(mapping).__name__}")
    if not mapping:
        raise KolmValueError(f"{what} is empty")
    names = [str(k) for k in mapping]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise KolmValueError(f"{what}: two entries are named {dup!r} (names are compared as str)")
    return {str(k): v for k, v in mapping.items()}


def _choose(means: pd.DataFrame, base: pd.Series, criterion: str) -> tuple[str, float]:
    """The candidate (column) with the best criterion over ``means``'s rows (collections);
    ties: the first column."""
    values = means.to_numpy(np.float64)
    if criterion == "mean":
        value = values.mean(axis=0)
    else:
        value = (values - base.to_numpy(np.float64)[:, None]).min(axis=0)
    best = int(np.argmax(value))
    return str(means.columns[best]), float(value[best])


def leave_one_collection_out(runs: Mapping[Any, Mapping[Any, Any]], qrels: Mapping[Any, Any],
                             baseline: Mapping[Any, Any] | None = None, *, metric: Any = "ndcg@10",
                             criterion: Criterion = "mean", tests: Sequence[Test] | None = None,
                             relevance_level: int = 1, n_resamples: int = 10_000,
                             seed: int = 0) -> LeaveOneCollectionOut:
    """Leave-one-collection-out choice among candidate configurations.

    Parameters
    ----------
    runs : dict collection -> (dict candidate -> run)
        Every candidate's run on every collection (the same candidate names on each, in the
        same order: it breaks ties); runs are DataFrames ``qid, doc_id, score[, rank]``,
        ``BatchResult``s or nested dicts. :func:`collection_runs` makes them from pipeline
        factories.
    qrels : dict collection -> qrels
        Each collection's judgements (DataFrame ``qid, doc_id, relevance``, a Dataset, ...).
    baseline : dict collection -> run, optional
        A fixed system (e.g. ``presets.hybrid``) scored on the same queries. Required by
        ``criterion="worst-delta"`` and for the tests.
    metric : str or ir_measures measure, default "ndcg@10"
        One metric of :func:`~kolm_search.evaluate`: it chooses and it scores.
    criterion : {"mean", "worst-delta"}, default "mean"
        How the training collections choose (see the module docstring).
    tests : sequence of {"t", "wilcoxon", "fisher", "bootstrap"}, optional
        Paired two-sided tests of the held-out per-query scores against the baseline's.
        Default: ``("t", "fisher")`` with a baseline, none without.
    relevance_level : int
        As in :func:`~kolm_search.evaluate`.
    n_resamples, seed : int
        Resamples of the randomised tests and their seed.

    Returns
    -------
    LeaveOneCollectionOut

    Notes
    -----
    A collection's evaluated queries are its judged queries that some run answers; a run
    missing one scores 0 there. Every collection needs at least two (and there must be at
    least two collections), so each fold chooses on something.
    """
    measures = metric_list(metric)
    if len(measures) != 1:
        raise KolmValueError(f"leave_one_collection_out takes one metric, got {len(measures)}")
    if criterion not in CRITERIA:
        raise KolmValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    tests = (("t", "fisher") if baseline is not None else ()) if tests is None else tuple(tests)
    for t in tests:
        if t not in TESTS:
            raise KolmValueError(f"tests must be among {TESTS}, got {t!r}")
    if criterion == "worst-delta" and baseline is None:
        raise KolmValueError("criterion 'worst-delta' compares with the baseline: give baseline=")
    if tests and baseline is None:
        raise KolmValueError("the paired tests compare with the baseline: give baseline= (or tests=())")
    key = metric_key(measures[0])
    by_coll = _names(runs, "runs")
    if len(by_coll) < 2:
        raise KolmValueError(f"leave-one-collection-out needs at least two collections, got {list(by_coll)}")
    judgements = _names(qrels, "qrels")
    bases = {} if baseline is None else _names(baseline, "baseline")
    names: list[str] | None = None
    tables: dict[str, pd.DataFrame] = {}
    for coll, cands in by_coll.items():
        cands = _names(cands, f"runs[{coll!r}]")
        if names is None:
            names = list(cands)
        elif list(cands) != names:
            raise KolmValueError(f"runs[{coll!r}] has candidates {list(cands)}, the first collection {names}: "
                                 "every collection needs the same candidates in the same order")
        if coll not in judgements:
            raise KolmValueError(f"no qrels for collection {coll!r}")
        if bases and coll not in bases:
            raise KolmValueError(f"no baseline run for collection {coll!r}")
        if _BASELINE in cands:
            raise KolmValueError("a candidate is named like the baseline")
        both = {**cands, **({_BASELINE: bases[coll]} if bases else {})}
        table = per_query_table(both, judgements[coll], [measures[0]], relevance_level=relevance_level)[key]
        if len(table) < 2:
            raise KolmValueError(f"collection {coll!r} has {len(table)} query judged and answered: need at least 2")
        tables[coll] = table
    assert names is not None
    colls = list(tables)
    means = pd.DataFrame([tables[c][names].mean(axis=0) for c in colls], index=pd.Index(colls, name="collection"))
    base_means = pd.Series([tables[c][_BASELINE].mean() if bases else np.nan for c in colls], index=means.index,
                           dtype=np.float64)
    rows, per_query = [], []
    for c in colls:
        train = [o for o in colls if o != c]  # c's judgements take no part in its choice
        chosen, train_score = _choose(means.loc[train], base_means.loc[train], criterion)
        held = tables[c][chosen].to_numpy(np.float64)
        row: dict[str, Any] = {"collection": c, "n_queries": len(held), "chosen": chosen, "train_score": train_score,
                               "score": float(held.mean())}
        frame = pd.DataFrame({"collection": c, "qid": tables[c].index.astype(str), "chosen": chosen, "score": held})
        if bases:
            b = tables[c][_BASELINE].to_numpy(np.float64)
            d = held - b
            row.update(baseline=float(b.mean()), delta=float(d.mean()), wins=int((d > 1e-12).sum()),
                       ties=int((np.abs(d) <= 1e-12).sum()), losses=int((d < -1e-12).sum()))
            row.update({f"p_{t}": paired_test(b, held, t, n_resamples=n_resamples, seed=seed) for t in tests})
            frame["baseline"] = b
        rows.append(row)
        per_query.append(frame)
    folds = pd.DataFrame(rows)
    pq = pd.concat(per_query, ignore_index=True)
    mean = float(folds["score"].mean())
    base_mean = float(folds["baseline"].mean()) if bases else float("nan")
    pooled: dict[str, float] = {t: paired_test(pq["baseline"].to_numpy(), pq["score"].to_numpy(), t, n_resamples=n_resamples,
                             seed=seed) for t in tests} if bases else {}
    return LeaveOneCollectionOut(metric=key, criterion=criterion, tests=tests, folds=folds, per_query=pq,
                                 scores=means, baseline_scores=base_means, mean=mean, baseline_mean=base_mean,
                                 delta=mean - base_mean, pooled_p=pooled)
