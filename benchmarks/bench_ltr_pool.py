"""LambdaMART trained on a collection's training folds plus the other collections' judged
queries, settings chosen by leave-one-collection-out, on the four development collections.

Rerun from ``benchmarks/`` (extras ``ltr`` and ``embeddings``)::

    python bench_ltr_pool.py --data ../../shared/data --cache /work/cache/minilm.sqlite

Features as in ``bench_ltr_grid.py`` (``hybrid % 100`` and the union of RRF, BM25, Bo1, MiniLM,
title BM25, lengths), normalised within each query (``query_norm``) so that one collection's
scores say something about another's. Collection ``c`` is ranked under 5-fold
cross-validation over its queries; each fold's model is fitted on ``c``'s other folds **and**
every judged query of the other collections (``cross_validated_run(..., extra=)``): never on
a query of the held-out fold.

Leave-one-collection-out, strictly: the setting for ``c`` is chosen on the other three
collections' cross-validated scores, and the models behind those scores were fitted without
any of ``c``'s queries or judgements (collection ``o``'s folds pooled with the two
collections that are neither ``o`` nor ``c``). So each setting is fitted 16 times per fold
(4 held-out collections x (1 + 3)); :func:`~kolm_search.leave_one_collection_out` is called
once per held-out collection with those runs and its row for ``c`` kept.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_ltr import build, dense_model
from bench_ltr_grid import TREES
from bench_recipe import COLLECTIONS, ROOT, load

from kolm_search import leave_one_collection_out
from kolm_search.evaluation import per_query_table
from kolm_search.retrievers.ltr import LTRReranker, cross_validated_run

#: Chosen before any pooled figure was seen: normalised features only (raw scores do not
#: carry across collections), the two most regularised tree settings, with and without the
#: hybrid as the starting score.
GRID: dict[str, list[Any]] = {
    "norm": ["minmax", "rank", "minmax+rank"],
    "trees": ["t100/l7/m50", "t200/l3/m100/r.02"],
    "start": [0.0, 1.0],
}

Data = dict[str, Any]


def settings() -> dict[str, dict[str, Any]]:
    out = {}
    for norm, trees, start in itertools.product(*GRID.values()):
        out[f"{norm}/{trees}/s{start:g}"] = {"query_norm": norm, **TREES[trees], "valid_fraction": 0.0,
                                             "start_from": 0 if start else None, "start_weight": start or 1.0}
    return out


def collect(name: str, data: Path, embedder: Any) -> Data:
    """One collection's queries, judgements, candidate features and hybrid run (qids prefixed
    with the collection's name, so collections never share a qid)."""
    table, queries, qrels = load(data, name)
    hybrid, stage = build(table, dense_model(table, embedder), "legacy")
    base = hybrid(queries, limit=100)  # presets.hybrid's depth (fusing top-10 lists would be another system)
    base = base[base["rank"] < 10]
    X, keys = stage.candidate_features(queries)
    tag = f"{name}:"
    return {"stage": stage, "queries": queries.assign(qid=tag + queries["qid"].astype(str)),
            "qrels": qrels.assign(qid=tag + qrels["qid"].astype(str)), "X": X,
            "keys": keys.assign(qid=tag + keys["qid"].astype(str)), "base": base.assign(qid=tag + base["qid"].astype(str))}


def pool(colls: dict[str, Data], names: list[str]) -> tuple[np.ndarray, pd.DataFrame, pd.DataFrame] | None:
    """The training rows of collections ``names`` stacked (groups renumbered in order)."""
    if not names:
        return None
    keys, offset = [], 0
    for n in names:
        k = colls[n]["keys"]
        keys.append(k.assign(group=k["group"].to_numpy() + offset))
        offset += int(k["group"].max()) + 1
    return (np.vstack([colls[n]["X"] for n in names]), pd.concat(keys, ignore_index=True),
            pd.concat([colls[n]["qrels"] for n in names], ignore_index=True))


def cv_run(stage: LTRReranker, colls: dict[str, Data], c: str, others: list[str], folds: int) -> pd.DataFrame:
    d = colls[c]
    return cross_validated_run(stage, d["queries"], d["qrels"], folds=folds, seed=0, limit=10,
                               features=(d["X"], d["keys"]), extra=pool(colls, others))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--save", type=Path, help="a parquet file for every run (re-report with --load)")
    parser.add_argument("--load", type=Path, help="read the runs --save wrote instead of fitting")
    args = parser.parse_args()
    from kolm_search.adapters import CachedEmbedder, load_embedder

    embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    colls = {n: collect(n, args.data, embedder) for n in COLLECTIONS}
    runs = fit_all(colls, args.folds) if args.load is None else _read(args.load)
    if args.save is not None:
        pd.concat([r.assign(held_out=c, collection=o, setting=s) for c, by in runs.items() for o, ss in by.items()
                   for s, r in ss.items()], ignore_index=True).to_parquet(args.save)
    report(colls, runs)


def _read(path: Path) -> dict[str, dict[str, dict[str, pd.DataFrame]]]:
    frame = pd.read_parquet(path)
    runs: dict[str, dict[str, dict[str, pd.DataFrame]]] = {c: {o: {} for o in COLLECTIONS} for c in COLLECTIONS}
    for (c, o, s), g in frame.groupby(["held_out", "collection", "setting"], sort=False):
        runs[c][o][s] = g.drop(columns=["held_out", "collection", "setting"])
    return runs


def fit_all(colls: dict[str, Data], folds: int) -> dict[str, dict[str, dict[str, pd.DataFrame]]]:
    """``runs[held_out][collection][setting]``: for ``held_out == collection`` pooled with all
    three others; else pooled with the two that are neither."""
    stage = colls[COLLECTIONS[0]]["stage"]
    runs: dict[str, dict[str, dict[str, pd.DataFrame]]] = {c: {o: {} for o in COLLECTIONS} for c in COLLECTIONS}
    t0 = time.perf_counter()
    for sname, params in settings().items():
        stage.set_params(**params)
        for c in COLLECTIONS:
            runs[c][c][sname] = cv_run(stage, colls, c, [o for o in COLLECTIONS if o != c], folds)
            for o in COLLECTIONS:
                if o != c:  # o's scores for c's choice: no model behind them saw c
                    runs[c][o][sname] = cv_run(stage, colls, o, [p for p in COLLECTIONS if p not in (o, c)],
                                               folds)
        print(f"{sname}: {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


def report(colls: dict[str, Data], runs: dict[str, dict[str, dict[str, pd.DataFrame]]]) -> None:
    """The leave-one-collection-out tables and every setting's deltas."""
    qrels = {n: colls[n]["qrels"] for n in COLLECTIONS}
    base = {n: colls[n]["base"] for n in COLLECTIONS}
    for criterion in ("mean", "worst-delta"):
        rows = [leave_one_collection_out(runs[c], qrels, base, criterion=criterion, tests=("t", "fisher"))
                .folds.set_index("collection").loc[[c]] for c in COLLECTIONS]
        table = pd.concat(rows)
        print(f"\n### Pooled training, leave-one-collection-out, criterion {criterion}\n")
        print(table[["n_queries", "chosen", "score", "baseline", "delta", "p_t", "p_fisher"]].to_markdown(
            floatfmt=".4f"))
        print(f"mean delta {table['delta'].mean():+.4f}")
    own = {n: per_query_table(runs[n][n], qrels[n], ["ndcg@10"])["ndcg@10"].mean() for n in COLLECTIONS}
    hyb = {n: per_query_table({"h": base[n]}, qrels[n], ["ndcg@10"])["ndcg@10"]["h"].mean() for n in COLLECTIONS}
    deltas = pd.DataFrame({n: own[n] - hyb[n] for n in COLLECTIONS})
    deltas["mean"] = deltas.mean(axis=1)
    print("\nEvery setting, pooled with all three others (deltas vs hybrid):\n")
    print(deltas.sort_values("mean", ascending=False).to_markdown(floatfmt="+.4f"))


if __name__ == "__main__":
    main()
