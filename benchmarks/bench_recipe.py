"""Cross-validated choice of the ``presets.hybrid_plus`` settings on Cranfield, against
``presets.hybrid``.

Rerun: ``python benchmarks/bench_recipe.py`` (extra ``onnx``; embeds Cranfield's 1,400
documents once with the packaged MiniLM, a few minutes on 2 cores; ``--embeddings FILE.npy``
reuses a saved matrix). Every grid point is a ``hybrid_plus`` configuration: RM3 expansion
(``fb_docs`` x ``fb_terms``, or none), LSA dimensions, RRF ``k`` and candidate depth. Each
child's run (BM25, MiniLM, LSA behind the expanding planner) is made once per expansion
setting and depth, and the configurations are their RRF fusions (what the composite does:
``tests/test_recipe.py`` checks the preset against this fusion). ``cross_validate`` then picks
a configuration on 4/5 of the queries and scores it on the other fifth, five times; the
baseline is ``presets.hybrid`` asked for 100 results (its children cut at 100).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import pandas as pd

from kolm_search import evaluate, fuse, presets
from kolm_search.adapters import LSAEmbedder, OnnxEmbedder, RM3Expander, packaged_minilm_onnx
from kolm_search.doctable import DocumentTable
from kolm_search.evaluation.crossval import cross_validate, grid_points
from kolm_search.io import load_beir, packaged_datasets
from kolm_search.planners import DefaultQueryPlanner, ExpandingQueryPlanner
from kolm_search.retrievers.bm25 import BM25Retriever
from kolm_search.retrievers.dense import DenseRetriever

GRID: dict[str, list[Any]] = {
    "feedback": [None, (5, 10), (5, 30), (10, 10), (10, 30)],  # (fb_docs, fb_terms) of RM3, None: no expansion
    "lsa_components": [128, 256],
    "k": [20, 60],
    "depth": [100, 1000],
}


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
               limit: int = 100) -> dict[tuple[Any, ...], pd.DataFrame]:
    """Runs of each child of ``hybrid_plus`` for every expansion setting, LSA size and depth."""
    bm25 = BM25Retriever(table)
    lsa = {n: LSAEmbedder(table.texts(("title", "content")), n_components=n) for n in GRID["lsa_components"]}
    out: dict[tuple[Any, ...], pd.DataFrame] = {}
    for fb in GRID["feedback"]:
        planner = DefaultQueryPlanner() if fb is None else ExpandingQueryPlanner(
            RM3Expander(bm25, fb_docs=fb[0], fb_terms=fb[1]), max_queries=2)
        clients = {"bm25": presets.bm25(table, planner=planner),
                   "dense": presets.dense(table, embedder, planner=planner, embeddings=emb)}
        for n, model in lsa.items():
            clients[f"lsa{n}"] = presets.dense(table, model, planner=planner)
        for depth in GRID["depth"]:
            for name, client in clients.items():
                out[(fb, name, depth)] = client.search_batch(queries, limit=max(depth, limit)).run
    return out


def recipe_run(children: dict[tuple[Any, ...], pd.DataFrame], point: dict[str, Any], limit: int = 100) -> pd.DataFrame:
    fb, depth = point["feedback"], point["depth"]
    lists = [children[(fb, "bm25", depth)], children[(fb, "dense", depth)],
             children[(fb, f"lsa{point['lsa_components']}", depth)]]
    return fuse(lists, "rrf", k=point["k"], limit=limit)


def name_of(point: dict[str, Any]) -> str:
    fb = "none" if point["feedback"] is None else f"{point['feedback'][0]}x{point['feedback'][1]}"
    return f"rm3={fb} lsa={point['lsa_components']} k={point['k']} depth={point['depth']}"


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
    t0 = time.perf_counter()
    children = child_runs(table, queries, embedder, emb)
    candidates = {name_of(p): recipe_run(children, p) for p in grid_points(GRID)}
    print(f"{len(candidates)} configurations from {len(children)} child runs: {time.perf_counter() - t0:.0f} s")
    full = {n: evaluate(r, qrels, ["ndcg@10"])["ndcg@10"] for n, r in candidates.items()}
    print(f"\npresets.hybrid (limit 100) nDCG@10 on all 225 queries: {evaluate(baseline, qrels)['ndcg@10']:.4f}")
    print("best configurations on all queries (in-sample, for reading only):")
    for n, v in sorted(full.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {v:.4f}  {n}")
    summary = []
    for seed in args.seeds:
        cv = cross_validate(candidates, qrels, baseline, folds=args.folds, seed=seed)
        if seed == args.seeds[0]:
            print(f"\n### {args.folds}-fold CV, seed {seed}\n")
            print(cv.to_markdown())
        chosen = cv.folds["chosen"].value_counts()
        summary.append((seed, cv.mean, cv.baseline_mean, cv.delta, cv.p_value, f"{chosen.iloc[0]}/{args.folds} {chosen.index[0]}"))
    print(f"\n### {args.folds}-fold CV, one row per seed of the split\n")
    print("| seed | hybrid_plus (CV) | hybrid | delta | p (paired t) | most chosen |\n|---|---|---|---|---|---|")
    for seed, mean, base, delta, p, most in summary:
        print(f"| {seed} | {mean:.4f} | {base:.4f} | {delta:+.4f} | {p:.3g} | {most} |")
    deltas = np.array([row[3] for row in summary])
    print(f"\nmean delta over {len(deltas)} seeds: {deltas.mean():+.4f} (min {deltas.min():+.4f}, max {deltas.max():+.4f})")


if __name__ == "__main__":
    main()
