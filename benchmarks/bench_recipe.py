"""Cross-validated choice of the ``presets.hybrid_plus`` settings on Cranfield, against
``presets.hybrid``.

Rerun: ``python benchmarks/bench_recipe.py`` (extra ``onnx``; embeds Cranfield's 1,400
documents once with the packaged MiniLM, a few minutes on 2 cores; ``--embeddings FILE.npy``
reuses a saved matrix). A setting is a ``hybrid_plus`` configuration at depth 1000: the sparse
child (BM25, or BM25 with Bo1, KL or RM3 feedback: ``FeedbackRetriever`` with its defaults),
text expansion of every child's query (off, or the ``FeedbackTermExpander`` planner with 5 documents x
30 terms), the LSA-128 child (or none) and the RRF ``k`` (20, 60). Each child's run is made
once, and the settings are their RRF fusions (what the composite does: ``tests/test_recipe.py``
checks the preset against this fusion). ``cross_validate`` then picks a setting on 4/5 of the
queries and scores it on the other fifth, five times, for ten seeds of the split; the baseline
is ``presets.hybrid`` asked for 100 results (its children cut at 100).

Printed: one row per family (sparse child x text expansion x LSA, ``k`` chosen by CV), then
the cross-validation of the recipe's own grid (``RECIPE_GRID``: the defaults of
``hybrid_plus`` and their neighbours), fold by fold and seed by seed.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import numpy as np
import pandas as pd

from kolm_search import evaluate, fuse, presets
from kolm_search.adapters import FeedbackTermExpander, LSAEmbedder, OnnxEmbedder, packaged_minilm_onnx
from kolm_search.doctable import DocumentTable
from kolm_search.evaluation.crossval import CrossValidation, cross_validate, grid_points
from kolm_search.io import load_beir, packaged_datasets
from kolm_search.planners import DefaultQueryPlanner, ExpandingQueryPlanner
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever

GRID: dict[str, list[Any]] = {
    "sparse": [None, "bo1", "kl", "rm3"],  # feedback model of the BM25 child (None: plain BM25)
    "text": [None, (5, 30)],  # FeedbackTermExpander planner (fb_docs, fb_terms) on every child's query
    "lsa": [None, 128],
    "k": [20, 60],
}
RECIPE_GRID: dict[str, list[Any]] = {"sparse": [None, "bo1"], "text": [None], "lsa": [128], "k": [20, 60]}


class MemoEmbedder:
    """The packaged MiniLM with a memo of query embeddings (expanded queries recur across settings)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.memo = inner, {}
        self.model_id = getattr(inner, "model_id", repr(inner))

    def embed_many(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if todo:
            self.memo.update(zip(todo, np.asarray(self.inner.embed_many(todo), np.float32), strict=True))
        return np.stack([self.memo[t] for t in texts])

    def embed(self, text: str) -> np.ndarray:
        return self.embed_many([text])[0]


def child_runs(table: DocumentTable, queries: pd.DataFrame, embedder: Any, emb: np.ndarray,
               depth: int = 1000) -> dict[tuple[Any, ...], pd.DataFrame]:
    """The ``depth`` best documents of every child of ``hybrid_plus``, with and without text expansion."""
    bm25 = BM25Retriever(table)
    lsa = LSAEmbedder(table.texts(("title", "content")), n_components=128)
    out: dict[tuple[Any, ...], pd.DataFrame] = {}
    for text in GRID["text"]:
        planner = DefaultQueryPlanner() if text is None else ExpandingQueryPlanner(
            FeedbackTermExpander(bm25, fb_docs=text[0], fb_terms=text[1]), max_queries=2)
        clients = {("sparse", fb): presets.bm25(table, planner=planner, feedback=fb) for fb in GRID["sparse"]}
        clients[("dense", None)] = presets.dense(table, embedder, planner=planner, embeddings=emb)
        clients[("lsa", 128)] = presets.dense(table, lsa, planner=planner)
        for (child, variant), client in clients.items():
            out[(text, child, variant)] = client.search_batch(queries, limit=depth).run
    return out


def recipe_run(children: dict[tuple[Any, ...], pd.DataFrame], point: dict[str, Any], limit: int = 100) -> pd.DataFrame:
    text = point["text"]
    lists = [children[(text, "sparse", point["sparse"])], children[(text, "dense", None)]]
    if point["lsa"] is not None:
        lists.append(children[(text, "lsa", point["lsa"])])
    return fuse(lists, "rrf", k=point["k"], limit=limit)


def name_of(point: dict[str, Any]) -> str:
    text = "off" if point["text"] is None else f"{point['text'][0]}x{point['text'][1]}"
    return f"sparse={point['sparse'] or 'bm25'} text={text} lsa={point['lsa'] or 'none'} k={point['k']}"


def cv_seeds(candidates: dict[str, pd.DataFrame], qrels: pd.DataFrame, baseline: pd.DataFrame,
             folds: int, seeds: list[int]) -> list[CrossValidation]:
    return [cross_validate(candidates, qrels, baseline, folds=folds, seed=s) for s in seeds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embeddings", help="a saved (1400, 384) float32 .npy of Cranfield's MiniLM embeddings")
    parser.add_argument("--save-embeddings", help="write the corpus embeddings there")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    args = parser.parse_args()
    ds = load_beir(packaged_datasets()["cranfield"])
    table = DocumentTable.from_frame(ds.corpus[["id", "title", "content"]])
    queries, qrels = ds.queries, ds.qrels.astype({"qid": str, "doc_id": str})
    embedder = MemoEmbedder(OnnxEmbedder(*packaged_minilm_onnx(), batch_size=16))
    t0 = time.perf_counter()
    emb = np.load(args.embeddings) if args.embeddings else DenseRetriever(table, embedder).embeddings
    if args.save_embeddings:
        np.save(args.save_embeddings, emb)
    print(f"corpus embeddings: {time.perf_counter() - t0:.0f} s")
    baseline = presets.hybrid(table, embedder, embeddings=emb).search_batch(queries, limit=100).run
    base = evaluate(baseline, qrels)["ndcg@10"]
    t0 = time.perf_counter()
    children = child_runs(table, queries, embedder, emb)
    points = grid_points(GRID)
    runs = {name_of(p): recipe_run(children, p) for p in points}
    print(f"{len(runs)} settings from {len(children)} child runs: {time.perf_counter() - t0:.0f} s")
    print(f"\npresets.hybrid (limit 100) nDCG@10 on all 225 queries: {base:.4f}")
    print(f"\n### Families, k chosen by {args.folds}-fold CV (delta and p: seed {args.seeds[0]})\n")
    print("| sparse | text expansion | LSA | CV nDCG@10 | delta | p | mean delta over seeds (min) "
          "| seeds >= +0.02 | in-sample delta k=20 / k=60 |\n|---|---|---|---|---|---|---|---|---|")
    for sparse, text, lsa in itertools.product(GRID["sparse"], GRID["text"], GRID["lsa"]):
        fam = {p["k"]: name_of(p) for p in points if (p["sparse"], p["text"], p["lsa"]) == (sparse, text, lsa)}
        cvs = cv_seeds({n: runs[n] for n in fam.values()}, qrels, baseline, args.folds, args.seeds)
        deltas = np.array([cv.delta for cv in cvs])
        fixed = " / ".join(f"{evaluate(runs[fam[k]], qrels)['ndcg@10'] - base:+.4f}" for k in GRID["k"])
        text_name = "off" if text is None else f"FeedbackTermExpander {text[0]}x{text[1]}"
        print(f"| {sparse or 'BM25'} | {text_name} | {lsa or '-'} | {cvs[0].mean:.4f} | {cvs[0].delta:+.4f} "
              f"| {cvs[0].p_value:.2g} | {deltas.mean():+.4f} ({deltas.min():+.4f}) | "
              f"{(deltas >= 0.02).sum()}/{len(deltas)} | {fixed} |")
    for title, grid in (("the whole grid", GRID), ("the recipe's grid " + str(RECIPE_GRID), RECIPE_GRID)):
        cvs = cv_seeds({name_of(p): runs[name_of(p)] for p in grid_points(grid)}, qrels, baseline,
                       args.folds, args.seeds)
        print(f"\n### {args.folds}-fold CV over {title}, seed {args.seeds[0]}\n")
        print(cvs[0].to_markdown())
        print("| seed | hybrid_plus (CV) | hybrid | delta | p (paired t) | most chosen |\n|---|---|---|---|---|---|")
        for seed, cv in zip(args.seeds, cvs, strict=True):
            chosen = cv.folds["chosen"].value_counts()
            print(f"| {seed} | {cv.mean:.4f} | {cv.baseline_mean:.4f} | {cv.delta:+.4f} | {cv.p_value:.2g} "
                  f"| {chosen.iloc[0]}/{args.folds} {chosen.index[0]} |")
        deltas = np.array([cv.delta for cv in cvs])
        print(f"\nmean delta over {len(deltas)} seeds: {deltas.mean():+.4f} (min {deltas.min():+.4f}, "
              f"max {deltas.max():+.4f}; {(deltas >= 0.02).sum()} reach +0.02)")


if __name__ == "__main__":
    main()
