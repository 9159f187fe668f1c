"""LambdaMART settings chosen by leave-one-collection-out on the four development collections.

Rerun from ``benchmarks/`` (extras ``ltr`` and ``embeddings``)::

    python bench_ltr_grid.py --data ../../shared/data --cache /work/cache/minilm.sqlite

Per collection, the features of every query's candidates (``hybrid % 100`` with the union of
the hybrid's RRF score, BM25, Bo1 feedback, the MiniLM cosine, BM25 on the title alone and
log1p of document and query length; see :func:`bench_ltr.feature_stage`) are computed once;
each candidate setting of :data:`GRID` is then scored under 5-fold cross-validation over the
collection's queries (``cross_validated_run``: a fold is ranked by a model fitted on the other
folds' queries and judgements only). Depth 30 re-ranks the hybrid's top 30 only (a subset of
the same rows: every feature is a retriever's score at depth 1000, whatever the candidates'
depth); depth 100 re-ranks all 100. Runs are cut to their top 10 (all nDCG@10 reads).

Then :func:`~kolm_search.leave_one_collection_out` chooses a setting on three collections
(their cross-validated nDCG@10; criterion ``mean`` and ``worst-delta``) and scores it on the
fourth, with paired t and Fisher randomisation tests against the hybrid (``Fuse(bm25, dense,
k=60)`` asked for 100, ``presets.hybrid``'s expression): no collection's judgements choose its
own setting. ``--save`` keeps each collection's runs (parquet) to re-choose without refitting
(``--load``).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

import pandas as pd
from bench_ltr import build, dense_model
from bench_recipe import COLLECTIONS, ROOT, load

from kolm_search import leave_one_collection_out
from kolm_search.evaluation import per_query_table
from kolm_search.retrievers.ltr import cross_validated_run

#: Tree settings: LightGBM's rounds, leaves, learning rate and rows per leaf; ``es``: up to 500
#: rounds, stopped early on a fifth of the training folds' queries (never the held-out fold).
TREES: dict[str, dict[str, Any]] = {
    "t200/l15/m20": {"n_estimators": 200, "num_leaves": 15, "learning_rate": 0.05, "min_data_in_leaf": 20},
    "t100/l7/m50": {"n_estimators": 100, "num_leaves": 7, "learning_rate": 0.05, "min_data_in_leaf": 50},
    "t50/l3/m100": {"n_estimators": 50, "num_leaves": 3, "learning_rate": 0.05, "min_data_in_leaf": 100},
    "t200/l3/m100/r.02": {"n_estimators": 200, "num_leaves": 3, "learning_rate": 0.02, "min_data_in_leaf": 100},
    "es500/l7/m50": {"n_estimators": 500, "num_leaves": 7, "learning_rate": 0.03, "min_data_in_leaf": 50,
                     "valid_fraction": 0.2},
}
GRID: dict[str, list[Any]] = {
    "norm": ["none", "minmax", "rank", "minmax+rank"],
    "trees": list(TREES),
    "start": [0.0, 1.0, 3.0],  # 0: no start; else the hybrid's per-query min-max RRF score times this
    "depth": [30, 100],
}


def settings() -> dict[str, dict[str, Any]]:
    """Every candidate: its name and its LTRReranker parameters (with ``depth``)."""
    out = {}
    for norm, trees, start, depth in itertools.product(*GRID.values()):
        name = f"{norm}/{trees}/s{start:g}/d{depth}"
        out[name] = {"query_norm": norm, **TREES[trees], "valid_fraction": TREES[trees].get("valid_fraction", 0.0),
                     "start_from": 0 if start else None, "start_weight": start or 1.0, "depth": depth}
    return out


def collection_runs(name: str, args: argparse.Namespace, embedder: Any) -> dict[str, pd.DataFrame]:
    """The hybrid's run and every setting's cross-validated run on one collection, each cut to
    its top 10 (all nDCG@10 reads)."""
    table, queries, qrels = load(args.data, name)
    hybrid, stage = build(table, dense_model(table, embedder), "legacy")
    base = hybrid(queries, limit=100)
    t0 = time.perf_counter()
    X, keys = stage.candidate_features(queries)
    pos = keys.groupby("group").cumcount().to_numpy()
    print(f"{name}: features {X.shape} in {time.perf_counter() - t0:.0f} s", flush=True)
    runs: dict[str, pd.DataFrame] = {"hybrid": base[base["rank"] < 10]}
    t0 = time.perf_counter()
    for cname, params in settings().items():
        depth = params.pop("depth")
        keep = pos < depth
        stage.set_params(**params)
        run = cross_validated_run(stage, queries, qrels, folds=args.folds, seed=0, limit=10,
                                  features=(X[keep], keys[keep].reset_index(drop=True)))
        runs[cname] = run
    print(f"{name}: {len(runs) - 1} settings in {time.perf_counter() - t0:.0f} s", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--save", type=Path, help="a folder for each collection's runs (parquet)")
    parser.add_argument("--load", type=Path, help="read the runs --save wrote instead of fitting")
    parser.add_argument("--top", type=int, default=8, help="settings to print by mean delta")
    args = parser.parse_args()
    embedder = None
    if args.load is None and args.embedder != "lsa":
        from kolm_search.adapters import CachedEmbedder, load_embedder

        embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    runs, qrels = {}, {}
    for name in args.collections:
        qrels[name] = load(args.data, name)[2]
        if args.load is not None:
            frame = pd.read_parquet(args.load / f"{name}.parquet")
            runs[name] = {s: g.drop(columns="setting") for s, g in frame.groupby("setting", sort=False)}
            continue
        runs[name] = collection_runs(name, args, embedder)
        if args.save is not None:
            args.save.mkdir(parents=True, exist_ok=True)
            pd.concat([r.assign(setting=s) for s, r in runs[name].items()], ignore_index=True).to_parquet(
                args.save / f"{name}.parquet")
    report(runs, qrels, args.top)


def report(runs: dict[str, dict[str, pd.DataFrame]], qrels: dict[str, pd.DataFrame], top: int) -> None:
    """The best settings by mean delta (in sample), and the leave-one-collection-out choice."""
    per = {c: per_query_table(r, qrels[c], ["ndcg@10"])["ndcg@10"] for c, r in runs.items()}
    deltas = pd.DataFrame({c: t.drop(columns="hybrid").mean() - t["hybrid"].mean() for c, t in per.items()})
    deltas["mean"] = deltas.mean(axis=1)
    deltas["worst"] = deltas[list(per)].min(axis=1)
    print(f"\nTop {top} settings by the mean delta over the collections (in-sample choice, for reference):\n")
    print(deltas.sort_values("mean", ascending=False).head(top).to_markdown(floatfmt="+.4f"))
    cands = {c: {s: r for s, r in rs.items() if s != "hybrid"} for c, rs in runs.items()}
    base = {c: rs["hybrid"] for c, rs in runs.items()}
    for criterion in ("mean", "worst-delta"):
        res = leave_one_collection_out(cands, qrels, base, criterion=criterion, tests=("t", "fisher"))
        print(f"\n### Leave-one-collection-out, criterion {criterion}\n")
        print(res.to_markdown())
    print("chosen on all four (mean):", deltas["mean"].idxmax(), f"{deltas['mean'].max():+.4f}")
    print("chosen on all four (worst-delta):", deltas["worst"].idxmax(), f"{deltas['worst'].max():+.4f}")


if __name__ == "__main__":
    main()
