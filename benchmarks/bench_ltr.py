"""LambdaMART (``LTRReranker``, extra ``ltr``) against the hybrid baseline on the four development
collections, each under 5-fold cross-validation over its own queries (the folds never share a
query; a fold is ranked by a model fitted on the other folds' queries and judgements only).

Rerun from ``benchmarks/``::

    python bench_ltr.py                  # dense side: LSA (128 dimensions, seed 0) fitted on each corpus
    python bench_ltr.py --embedder minilm --cache ../cache/embeddings.sqlite

The baseline is ``Fuse(bm25, dense, k=60)`` (``presets.hybrid``'s expression) asked for 100
results, over the same dense model as the LTR features. The LTR pipeline (:func:`build`)::

    LTRReranker((hybrid % 100) ** bm25 ** bo1 ** dense ** title_bm25 ** (DocumentLength() ** QueryLength()))

(the hybrid's RRF score, BM25's, Bo1 feedback's, the dense cosine and BM25 on the title alone,
each 0 for a document outside that retriever's top 1000, and log1p of the document's and the
query's length), with the library defaults: features min-max normalised within each query, the
model started from the hybrid's (normalised) score, 200 rounds of 3 leaves at learning rate
0.02, 100 rows per leaf, seed 0, one thread. Those defaults were chosen among the settings of
``bench_ltr_grid.py`` on these four collections (see benchmarks/README.md for the
leave-one-collection-out figures, which are the honest estimate). Per collection: nDCG@10 of
both, the delta, a paired t-test (``scipy.stats.ttest_rel``) and a Fisher randomisation test
over its queries; then the mean over collections.
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
from kolm_search.evaluation import paired_test, per_query_table
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


def build(table: Any, dense: DenseRetriever, **params: Any) -> tuple[Fuse, LTRReranker]:
    """The baseline ``Fuse(bm25, dense, k=60)`` and the LTR stage over the feature union."""
    bm = BM25Retriever(table)
    hybrid = Fuse(bm, dense, k=60)
    features = ((hybrid % 100) ** bm ** FeedbackRetriever(bm, "bo1") ** dense ** BM25Retriever(table, fields=("title",))
                ** (DocumentLength() ** QueryLength()))
    return hybrid, LTRReranker(features, **params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--embedder", default="lsa", help="lsa, or a load_embedder name (minilm) with --cache")
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"))
    parser.add_argument("--folds", type=int, default=5)
    args = parser.parse_args()
    embedder = None
    if args.embedder != "lsa":
        from kolm_search.adapters import CachedEmbedder, load_embedder

        embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    print("| collection | queries | hybrid | LTR | delta | p (paired t) | p (Fisher) | CV s per fold |\n"
          "|---|---|---|---|---|---|---|---|")
    deltas, bases, ltrs = [], [], []
    for name in args.collections:
        table, queries, qrels = load(args.data, name)
        hybrid, stage = build(table, dense_model(table, embedder))
        base = hybrid(queries, limit=100)
        t0 = time.perf_counter()
        run = cross_validated_run(stage, queries, qrels, folds=args.folds, seed=0, limit=100)
        took = (time.perf_counter() - t0) / args.folds
        per = per_query_table({"hybrid": base, "ltr": run}, qrels, ["ndcg@10"])["ndcg@10"]
        d = float((per["ltr"] - per["hybrid"]).mean())
        p = float(ttest_rel(per["ltr"], per["hybrid"]).pvalue)
        pf = paired_test(per["hybrid"].to_numpy(), per["ltr"].to_numpy(), "fisher", n_resamples=10_000, seed=0)
        deltas.append(d)
        bases.append(per["hybrid"].mean())
        ltrs.append(per["ltr"].mean())
        print(f"| {name} | {len(per)} | {per['hybrid'].mean():.4f} | {per['ltr'].mean():.4f} | {d:+.4f} | {p:.2g} "
              f"| {pf:.2g} | {took:.1f} |", flush=True)
    print(f"| mean | | {np.mean(bases):.4f} | {np.mean(ltrs):.4f} | {np.mean(deltas):+.4f} | | | |")
    print(f"target (mean delta >= +0.02): {'met' if np.mean(deltas) >= 0.02 else 'not met'}")


if __name__ == "__main__":
    main()
