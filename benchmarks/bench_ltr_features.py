"""Learning-to-rank feature sets chosen by leave-one-collection-out on the four development
collections.

Rerun from ``benchmarks/`` (extras ``ltr`` and ``embeddings``)::

    python bench_ltr_features.py --data ../../shared/data --cache /work/cache/minilm.sqlite

Per collection, every feature of :data:`FEATURES` is computed once for every query's
candidates (the hybrid's top 100, ``Fuse(bm25, dense, k=60) % 100``), as the columns of one
left-grouped union ``(((hybrid % 100) ** f1) ** f2) ...`` (a retrieving feature such as Bo1
is then looked up in its own top 1000, 0 outside, whatever the grouping; every other feature
scores exactly the candidates it is given). :data:`LEGACY` is the union of the earlier
figures, ``(hybrid % 100) ** bm25 ** bo1 ** dense ** title_bm25 ** (...)``: Python groups
``**`` to the right, so there each retriever's score of a candidate counted only where every
retriever to its left had retrieved it too.

Each candidate setting is a feature set of :data:`SETS` (columns of that matrix; the first is
always the hybrid's RRF score, the model's starting score) and a learner setting of
:data:`LEARNERS`; it is scored under 5-fold cross-validation over the collection's queries
(``cross_validated_run``: a fold is ranked by a model fitted on the other folds' queries and
judgements only), runs cut to their top 10 (all nDCG@10 reads). Then
:func:`~kolm_search.leave_one_collection_out` chooses a setting on three collections
(criterion ``mean`` and ``worst-delta``) and scores it on the fourth, with paired t and
Fisher randomisation tests against the hybrid (``Fuse(bm25, dense, k=60)`` asked for 100,
``presets.hybrid``'s expression): no collection's judgements choose its own setting.
``--save``/``--load`` keep the features and runs (parquet) to re-report without refitting.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_ltr import LEGACY, dense_model, legacy_union
from bench_recipe import COLLECTIONS, ROOT, load

from kolm_search import leave_one_collection_out
from kolm_search.adapters import LSAEmbedder
from kolm_search.compose import Stage
from kolm_search.evaluation import per_query_table
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.retrievers.ltr import LTRReranker, cross_validated_run
from kolm_search.retrievers.ltr_features import DocumentLength, QueryLength
from kolm_search.retrievers.ltr_scores import BM25Score, DenseScore
from kolm_search.retrievers.ltr_terms import TermCoverage, TermPairs, TermProximity

Parts = dict[str, Any]

#: Every feature, by name, from the collection's parts (``table``, ``bm25``, ``dense`` MiniLM,
#: ``embedder``); grouped in :data:`GROUPS`.
FEATURES: dict[str, Callable[[Parts], Stage]] = {
    "bm25": lambda p: BM25Score(p["bm25"]),
    "bo1": lambda p: FeedbackRetriever(p["bm25"], "bo1"),
    "dense": lambda p: DenseScore(p["dense"]),
    "title_bm25": lambda p: BM25Score(BM25Retriever(p["table"], fields=("title",))),
    "doc_length": lambda p: DocumentLength(),
    "query_length": lambda p: QueryLength(),
    "lsa": lambda p: DenseScore(DenseRetriever(p["table"], LSAEmbedder(p["table"].texts(("title", "content")),
                                                                         n_components=128, seed=0),
                                               embed_queries=True)),
    "title_dense": lambda p: DenseScore(DenseRetriever(p["table"], p["embedder"], fields=("title",),
                                                       embed_queries=True)),
    "bm25_0.9_0.4": lambda p: BM25Score(BM25Retriever(p["table"], k1=0.9, b=0.4)),
    "bm25_1.2_0.75": lambda p: BM25Score(BM25Retriever(p["table"], k1=1.2, b=0.75)),
    "coverage_idf": lambda p: TermCoverage(p["bm25"]),
    "coverage": lambda p: TermCoverage(p["bm25"], weighted=False),
    "od1": lambda p: TermPairs(p["bm25"]),
    "uw8": lambda p: TermPairs(p["bm25"], window=7, ordered=False),
    "od1_bm25": lambda p: TermPairs(p["bm25"], weighting="bm25"),
    "uw8_bm25": lambda p: TermPairs(p["bm25"], window=7, ordered=False, weighting="bm25"),
    "min_distance": lambda p: TermProximity(p["bm25"], measure="min_distance"),
    "min_window": lambda p: TermProximity(p["bm25"], measure="min_window"),
    "first_match": lambda p: TermProximity(p["bm25"], measure="first_match"),
    "rm3": lambda p: FeedbackRetriever(p["bm25"], "rm3"),
    "kl": lambda p: FeedbackRetriever(p["bm25"], "kl"),
}
GROUPS: dict[str, list[str]] = {
    "core": ["bm25", "bo1", "dense", "title_bm25", "doc_length", "query_length"],  # the legacy union, exact
    "lsa": ["lsa"],
    "title_dense": ["title_dense"],
    "bm25v": ["bm25_0.9_0.4", "bm25_1.2_0.75"],
    "coverage": ["coverage_idf", "coverage"],
    "pairs": ["od1", "uw8"],
    "pairs_bm25": ["od1_bm25", "uw8_bm25"],
    "proximity": ["min_distance", "min_window", "first_match"],
    "feedback": ["rm3", "kl"],
}
#: Feature sets (groups added to the hybrid's RRF score). Written after a prototype of these
#: features had been scored on the same four collections (with the library's learner), so the
#: choice among them is not blind to the collections' judgements; leave-one-collection-out
#: keeps each collection's own judgements out of its own choice among them.
SETS: dict[str, list[str]] = {
    "core": ["core"],
    "core+lsa": ["core", "lsa"],
    "core+lsa+bm25v": ["core", "lsa", "bm25v"],
    "core+lsa+bm25v+cov": ["core", "lsa", "bm25v", "coverage"],
    "core+lsa+bm25v+cov+pairs": ["core", "lsa", "bm25v", "coverage", "pairs"],
    "core+lsa+bm25v+cov+prox": ["core", "lsa", "bm25v", "coverage", "proximity"],
    "core+lsa+bm25v+cov+pairs+prox": ["core", "lsa", "bm25v", "coverage", "pairs", "pairs_bm25", "proximity"],
    "core+cov+pairs+prox": ["core", "coverage", "pairs", "pairs_bm25", "proximity"],
    "core+lsa+title": ["core", "lsa", "title_dense"],
    "all": list(GROUPS),
}
#: LambdaMART settings: the library defaults (``s0``: started from the hybrid's score), a
#: larger tree, and no starting score.
LEARNERS: dict[str, dict[str, Any]] = {
    "t200/l3/m100": {},
    "t100/l7/m50": {"n_estimators": 100, "num_leaves": 7, "learning_rate": 0.05, "min_data_in_leaf": 50},
    "t200/l3/m100/nostart": {"start_from": None},
}


def columns(set_name: str) -> list[str]:
    """The RRF score and the features of one set, in :data:`FEATURES` order."""
    names = {f for g in SETS[set_name] for f in GROUPS[g]}
    return ["rrf"] + [f for f in FEATURES if f in names]


def settings() -> dict[str, tuple[str, dict[str, Any]]]:
    """Every candidate: its name, its feature set and its learner parameters."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for (s, _), (lname, params) in itertools.product(SETS.items(), LEARNERS.items()):
        out[f"{s} @ {lname}"] = (s, params)
    for lname, params in LEARNERS.items():
        out[f"legacy @ {lname}"] = ("legacy", params)
    return out


def collection_features(name: str, data: Path, embedder: Any) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame,
                                                                          pd.DataFrame]:
    """The candidates' keys and features (one column per :data:`FEATURES` name, ``rrf`` first,
    the :data:`LEGACY` columns prefixed ``legacy:``), the queries, the judgements and the hybrid's run."""
    table, queries, qrels = load(data, name)
    bm, dense = BM25Retriever(table), dense_model(table, embedder)
    hybrid = Fuse(bm, dense, k=60)
    parts = {"table": table, "bm25": bm, "dense": dense, "embedder": embedder}
    union: Stage = hybrid % 100
    for make in FEATURES.values():
        union = union ** make(parts)  # one flat union: every feature sees the hybrid's candidates
    t0 = time.perf_counter()
    X, keys = LTRReranker(union).candidate_features(queries)
    old, old_keys = LTRReranker(legacy_union(table, bm, dense, hybrid)).candidate_features(queries)
    if not old_keys[["qid", "doc_id"]].equals(keys[["qid", "doc_id"]]):
        raise RuntimeError("the legacy union's candidates differ")
    print(f"{name}: features {X.shape} in {time.perf_counter() - t0:.0f} s", flush=True)
    frame = keys.assign(**dict(zip(["rrf", *FEATURES], X.T, strict=True)),
                        **{f"legacy:{c}": old[:, i] for i, c in enumerate(LEGACY)})
    return frame, queries, qrels, hybrid(queries, limit=100)


def collection_runs(frame: pd.DataFrame, queries: pd.DataFrame, qrels: pd.DataFrame, folds: int, seed: int = 0,
                    ) -> dict[str, pd.DataFrame]:
    """Every setting's cross-validated run on one collection (top 10)."""
    keys = frame[["qid", "doc_id", "group"]]
    # the features are given: the stage's own features stage is never run (any retrieving stage)
    unused = BM25Retriever(pd.DataFrame({"id": ["-"], "title": [""], "content": ["-"]}))
    runs = {}
    for sname, (fset, params) in settings().items():
        cols = [f"legacy:{c}" for c in LEGACY] if fset == "legacy" else columns(fset)
        runs[sname] = cross_validated_run(LTRReranker(unused, **params), queries, qrels, folds=folds, seed=seed, limit=10,
                                          features=(frame[cols].to_numpy(np.float64), keys))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"))
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="the seed of the folds (make_folds)")
    parser.add_argument("--save", type=Path, help="a folder for each collection's features and runs (parquet)")
    parser.add_argument("--load", type=Path, help="read the features --save wrote instead of computing them")
    parser.add_argument("--top", type=int, default=12, help="settings to print by mean delta")
    args = parser.parse_args()
    embedder = None
    if args.load is None:
        from kolm_search.adapters import CachedEmbedder, load_embedder

        embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    runs, qrels, base = {}, {}, {}
    for name in args.collections:
        if args.load is not None:
            frame = pd.read_parquet(args.load / f"{name}.features.parquet")
            queries = pd.read_parquet(args.load / f"{name}.queries.parquet")
            qrels[name] = pd.read_parquet(args.load / f"{name}.qrels.parquet")
            hyb = pd.read_parquet(args.load / f"{name}.hybrid.parquet")
        else:
            frame, queries, qrels[name], hyb = collection_features(name, args.data, embedder)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                for what, df in (("features", frame), ("queries", queries), ("qrels", qrels[name]), ("hybrid", hyb)):
                    df.to_parquet(args.save / f"{name}.{what}.parquet")
        base[name] = hyb[hyb["rank"] < 10]
        t0 = time.perf_counter()
        runs[name] = collection_runs(frame, queries, qrels[name], args.folds, args.seed)
        print(f"{name}: {len(runs[name])} settings in {time.perf_counter() - t0:.0f} s", flush=True)
    report(runs, qrels, base, args.top)


def report(runs: dict[str, dict[str, pd.DataFrame]], qrels: dict[str, pd.DataFrame], base: dict[str, pd.DataFrame],
           top: int) -> None:
    """The best settings by mean delta (in sample), and the leave-one-collection-out choices."""
    per = {c: per_query_table({"hybrid": base[c], **r}, qrels[c], ["ndcg@10"])["ndcg@10"] for c, r in runs.items()}
    deltas = pd.DataFrame({c: t.drop(columns="hybrid").mean() - t["hybrid"].mean() for c, t in per.items()})
    deltas["mean"] = deltas.mean(axis=1)
    deltas["worst"] = deltas[list(per)].min(axis=1)
    print(f"\nTop {top} settings by the mean delta over the collections (in-sample choice, for reference):\n")
    print(deltas.sort_values("mean", ascending=False).head(top).to_markdown(floatfmt="+.4f"))
    print("\nEvery feature set with the library's learner (t200/l3/m100):\n")
    print(deltas.loc[[s for s in deltas.index if s.endswith("@ t200/l3/m100")]].to_markdown(floatfmt="+.4f"))
    for criterion in ("mean", "worst-delta"):
        res = leave_one_collection_out(runs, qrels, base, criterion=criterion, tests=("t", "fisher"))
        print(f"\n### Leave-one-collection-out, criterion {criterion}\n")
        print(res.to_markdown())
        print(f"pooled p: {res.pooled_p}")
    print("chosen on all four (mean):", deltas["mean"].idxmax(), f"{deltas['mean'].max():+.4f}")
    print("chosen on all four (worst-delta):", deltas["worst"].idxmax(), f"{deltas['worst'].max():+.4f}")


if __name__ == "__main__":
    main()
