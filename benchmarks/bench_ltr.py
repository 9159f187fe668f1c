"""LambdaMART (``LTRReranker``, extra ``ltr``) against the hybrid baseline on the four development
collections, each under 5-fold cross-validation over its own queries (the folds never share a
query; a fold is ranked by a model fitted on the other folds' queries and judgements only).

Rerun from ``benchmarks/``::

    python bench_ltr.py                  # dense side: LSA (128 dimensions, seed 0) fitted on each corpus
    python bench_ltr.py --embedder minilm --cache /work/cache/minilm.sqlite --seeds 0 1 2 3 4

The baseline is ``Fuse(bm25, dense, k=60)`` (``presets.hybrid``'s expression) asked for 100
results, over the same dense model as the LTR features. The LTR pipeline (:func:`build`) is
``LTRReranker(hybrid_features(bm25, dense))``
(:func:`~kolm_search.recipes.ltr_union.hybrid_features`: the hybrid's top 100 with its RRF
score, BM25, Bo1, the dense cosine, title BM25, document and query length, an LSA cosine, BM25
at two other parameter settings and the query-term coverage), with the library defaults:
features min-max normalised within each query, the model started from the hybrid's
(normalised) score, 200 rounds of 3 leaves at learning rate 0.02, 100 rows per leaf, seed 0,
one thread. ``--union legacy`` is the union of the earlier figures' stages (:func:`legacy_union`;
those figures were made while ``**`` grouped to the right, this is its flat union now).
That union and those settings were chosen by leave-one-collection-out on these four
collections (``bench_ltr_features.py``, ``bench_ltr_grid.py``; see benchmarks/README.md):
these per-collection figures are in sample for that choice. Per collection: nDCG@10 of both,
the delta, the queries won/tied/lost, a paired t-test (``scipy.stats.ttest_rel``) and a Fisher
randomisation test over its queries; then the mean over collections. ``--seeds`` repeats the
cross-validation over other partitions of the queries into folds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_recipe import COLLECTIONS, ROOT, load
from scipy.stats import ttest_rel

from kolm_search.adapters import LSAEmbedder
from kolm_search.compose import Stage
from kolm_search.evaluation import paired_test, per_query_table
from kolm_search.recipes.ltr_union import hybrid_features
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever
from kolm_search.retrievers.feedback import FeedbackRetriever
from kolm_search.retrievers.fuse_stage import Fuse
from kolm_search.retrievers.ltr import LTRReranker, cross_validated_run
from kolm_search.retrievers.ltr_features import DocumentLength, QueryLength


def dense_model(table: Any, embedder: Any) -> DenseRetriever:
    """The dense side: ``embedder`` (e.g. the cached MiniLM), or LSA fitted on the corpus when None."""
    if embedder is None:
        embedder = LSAEmbedder(table.texts(("title", "content")), n_components=128, seed=0)
    return DenseRetriever(table, embedder, embed_queries=True)


#: The columns of :func:`legacy_union`.
LEGACY = ("rrf", "bm25", "bo1", "dense", "title_bm25", "doc_length", "query_length")


def legacy_union(table: Any, bm: BM25Retriever, dense: DenseRetriever, hybrid: Fuse) -> Stage:
    """The union of the first figures, as written then. ``**`` grouped to the right when those
    figures were made, so each retriever's score counted only for candidates that every
    retriever to its left returned too, and the lengths only where title BM25 did; it is flat
    now: every stage's score (a retriever's in its own top 1000) of the hybrid's candidates."""
    return ((hybrid % 100) ** bm ** FeedbackRetriever(bm, "bo1") ** dense ** BM25Retriever(table, fields=("title",))
            ** (DocumentLength() ** QueryLength()))


def build(table: Any, dense: DenseRetriever, union: str = "hybrid", **params: Any) -> tuple[Fuse, LTRReranker]:
    """The baseline ``Fuse(bm25, dense, k=60)`` and the LTR stage over the feature union
    (``"hybrid"``: :func:`~kolm_search.recipes.ltr_union.hybrid_features`; ``"legacy"``:
    :func:`legacy_union`, the union of the earlier figures of ``bench_ltr_grid.py`` and
    ``bench_ltr_pool.py``)."""
    bm = BM25Retriever(table)
    hybrid = Fuse(bm, dense, k=60)
    features = hybrid_features(bm, dense) if union == "hybrid" else legacy_union(table, bm, dense, hybrid)
    return hybrid, LTRReranker(features, **params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--embedder", default="lsa", help="lsa, or a load_embedder name (minilm) with --cache")
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"))
    parser.add_argument("--union", choices=["hybrid", "legacy"], default="hybrid")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="seeds of the folds: the table is the first's; more print each one's mean")
    args = parser.parse_args()
    embedder = None
    if args.embedder != "lsa":
        from kolm_search.adapters import CachedEmbedder, load_embedder

        embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    print("| collection | queries | hybrid | LTR | delta | wins/ties/losses | p (paired t) | p (Fisher) "
          "| CV s per fold |\n|---|---|---|---|---|---|---|---|---|")
    deltas: dict[int, list[float]] = {s: [] for s in args.seeds}
    bases, ltrs = [], []
    for name in args.collections:
        table, queries, qrels = load(args.data, name)
        hybrid, stage = build(table, dense_model(table, embedder), args.union)
        base = hybrid(queries, limit=100)
        rows = stage.candidate_features(queries)
        for seed in args.seeds:
            t0 = time.perf_counter()
            run = cross_validated_run(stage, queries, qrels, folds=args.folds, seed=seed, limit=100, features=rows)
            took = (time.perf_counter() - t0) / args.folds
            per = per_query_table({"hybrid": base, "ltr": run}, qrels, ["ndcg@10"])["ndcg@10"]
            diff = per["ltr"] - per["hybrid"]
            deltas[seed].append(float(diff.mean()))
            if seed != args.seeds[0]:
                continue
            p = float(ttest_rel(per["ltr"], per["hybrid"]).pvalue)
            pf = paired_test(per["hybrid"].to_numpy(), per["ltr"].to_numpy(), "fisher", n_resamples=10_000, seed=0)
            bases.append(per["hybrid"].mean())
            ltrs.append(per["ltr"].mean())
            wtl = f"{(diff > 0).sum()}/{(diff == 0).sum()}/{(diff < 0).sum()}"
            print(f"| {name} | {len(per)} | {per['hybrid'].mean():.4f} | {per['ltr'].mean():.4f} | {diff.mean():+.4f} "
                  f"| {wtl} | {p:.2g} | {pf:.2g} | {took:.1f} |", flush=True)
    first = deltas[args.seeds[0]]
    print(f"| mean | | {np.mean(bases):.4f} | {np.mean(ltrs):.4f} | {np.mean(first):+.4f} | | | | |")
    print(f"target (mean delta >= +0.02): {'met' if np.mean(first) >= 0.02 else 'not met'}")
    if len(args.seeds) > 1:
        print("\n| fold seed | " + " | ".join(args.collections) + " | mean |\n|---|" + "---|" * (len(args.collections) + 1))
        for seed, ds in deltas.items():
            print(f"| {seed} | " + " | ".join(f"{d:+.4f}" for d in ds) + f" | {np.mean(ds):+.4f} |")
        per_coll = np.mean([deltas[s] for s in args.seeds], axis=0)
        print("| mean | " + " | ".join(f"{d:+.4f}" for d in per_coll) + f" | {per_coll.mean():+.4f} |")


if __name__ == "__main__":
    main()
