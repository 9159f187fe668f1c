"""Leave-one-collection-out choice of an unsupervised hybrid recipe on the four development
collections (cranfield, med, npl, lisa), against ``presets.hybrid``.

Rerun from ``benchmarks/`` (extra ``embeddings``: the packaged MiniLM on sentence-transformers)::

    python bench_recipe.py --peers --feedback

The collections are read from ``--data`` (default ``../shared/data`` beside the project); the
corpus embeddings from (and written to) the ``CachedEmbedder`` file ``--cache`` (default the
project's ``cache/embeddings.sqlite``):
the first run embeds the 19,861 documents of the four collections once (29 minutes here, on
2 cores shared with other jobs); later runs take 2-3 minutes.
``--embedder minilm-onnx`` uses the int8 ONNX MiniLM instead.

What runs, per collection (nothing below reads a judgement except the scoring):

- the baseline: ``presets.hybrid`` asked for 100 results (RRF ``k=60`` of BM25's top 100 and
  MiniLM's top 100; see ``--peers`` for the check against bm25s, ranx and numpy);
- the children, each once, at depth 1000: BM25 (three parameter settings), Bo1 feedback around
  each BM25, and MiniLM;
- every candidate of :data:`GRID` (:class:`Recipe`): a fusion of the children, made by a
  pipeline factory ``(documents, queries) -> run`` as
  :func:`~kolm_search.evaluation.collection_runs` calls it.

Then :func:`~kolm_search.leave_one_collection_out` chooses a candidate on three collections
and scores it on the fourth (criterion ``mean`` and ``worst-delta``), with paired t and
Fisher randomisation tests against the baseline. ``--feedback`` prints BM25 against RM3, Bo1
and KL on every collection; ``--peers`` the sanity check of ``bm25``/``dense``/``hybrid``.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kolm_search import evaluate, fuse, leave_one_collection_out, presets
from kolm_search.adapters import CachedEmbedder, load_embedder
from kolm_search.engine.doctable import DocumentTable
from kolm_search.evaluation import collection_runs, paired_test, per_query_table
from kolm_search.io import load_beir
from kolm_search.retrievers.dense import DenseRetriever

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ("cranfield", "med", "npl", "lisa")
BM25_PARAMS = {"1.5/0.75": (1.5, 0.75), "1.2/0.75": (1.2, 0.75), "0.9/0.4": (0.9, 0.4)}
"""kolm's and bm25s' default; Robertson's and Terrier's k1 with b 0.75; Anserini's default."""
GRID: dict[str, list[Any]] = {
    "bm25": list(BM25_PARAMS),
    "sparse": ["bm25", "bm25+bo1/2"],  # BM25 alone, or BM25 and Bo1 feedback at half weight (guarded)
    "fusion": ["rrf60", "rrf20", "min-max", "zmuv", "zmuv-adaptive"],
    "depth": [100, 1000],
}
LIMIT = 100  # every candidate and the baseline return 100 documents per query


@dataclass(frozen=True)
class Recipe:
    """One candidate: the BM25 parameters, the sparse lists, the fusion and the depth fused.

    ``fusion``: ``"rrf60"``/``"rrf20"`` weighted RRF (``k``), ``"min-max"``/``"zmuv"`` CombSUM
    (``fuse(..., "wsum", norm=...)``) of the normalised scores, ``"zmuv-adaptive"``: z-scores
    summed with per-query weights from each list's score distribution (:func:`adaptive_fuse`).
    ``sparse="bm25+bo1/2"`` adds the Bo1 list with weight 0.5 (BM25 and MiniLM weigh 1), so
    feedback can re-order but never outvote the unexpanded query.
    """

    bm25: str
    sparse: str
    fusion: str
    depth: int

    @property
    def name(self) -> str:
        return f"bm25 {self.bm25}, {self.sparse}, {self.fusion}, depth {self.depth}"

    def run(self, children: dict[str, pd.DataFrame]) -> pd.DataFrame:
        lists = [children[f"bm25 {self.bm25}"], children["dense"]]
        weights = [1.0, 1.0]
        if self.sparse == "bm25+bo1/2":
            lists.append(children[f"bo1 {self.bm25}"])
            weights.append(0.5)
        lists = [run[run["rank"] < self.depth] for run in lists]
        if self.fusion.startswith("rrf"):
            return fuse(lists, "rrf", k=int(self.fusion[3:]), weights=weights, limit=LIMIT)
        if self.fusion == "zmuv-adaptive":
            return adaptive_fuse(lists, weights, limit=LIMIT)
        return fuse(lists, "wsum", weights=weights, norm=self.fusion, limit=LIMIT)


def adaptive_fuse(lists: list[pd.DataFrame], weights: list[float], limit: int) -> pd.DataFrame:
    """z-score CombSUM with query-adaptive weights: list ``i``'s weight for query ``q`` is
    ``weights[i]`` times the z-score of its top document within its own list (how far the best
    document stands out of the list: a confident list leads), the weights of a query summing to 1.
    A candidate of this benchmark only (not a library piece: it did not win)."""
    parts = []
    for i, (run, w) in enumerate(zip(lists, weights, strict=True)):
        g = run.groupby("qid", observed=True)["score"]
        z = (run["score"] - g.transform("mean")) / g.transform("std", ddof=0).clip(lower=1e-9)
        conf = z.groupby(run["qid"], observed=True).transform("max").clip(lower=1e-9) * w
        parts.append(pd.DataFrame({"qid": run["qid"].astype(str), "doc_id": run["doc_id"].astype(str),
                                   "z": z.to_numpy(), "conf": conf.to_numpy(), "list": i}))
    df = pd.concat(parts, ignore_index=True)
    total = df.groupby(["qid", "list"])["conf"].first().groupby("qid").sum()
    df["score"] = df["conf"] / df["qid"].map(total) * df["z"]
    out = df.groupby(["qid", "doc_id"], as_index=False)["score"].sum()
    out = out.sort_values(["qid", "score", "doc_id"], ascending=[True, False, True], kind="stable")
    out = out.groupby("qid").head(limit).reset_index(drop=True)
    out["rank"] = out.groupby("qid").cumcount()
    return out[["qid", "doc_id", "rank", "score"]]


class Children:
    """Every collection's child runs (depth 1000), made once and shared by the candidates
    (keyed by the table object, which the benchmark keeps alive for the whole run)."""

    def __init__(self, embedder: Any, depth: int = 1000) -> None:
        self.embedder, self.depth = embedder, depth
        self.memo: dict[int, dict[str, pd.DataFrame]] = {}
        self.vectors: dict[int, np.ndarray] = {}

    def embeddings(self, table: DocumentTable) -> np.ndarray:
        if id(table) not in self.vectors:
            self.vectors[id(table)] = DenseRetriever(table, self.embedder).embeddings
        return self.vectors[id(table)]

    def __call__(self, table: DocumentTable, queries: pd.DataFrame) -> dict[str, pd.DataFrame]:
        if id(table) not in self.memo:
            out = {"dense": presets.dense(table, self.embedder, embeddings=self.embeddings(table))
                   .search_batch(queries, limit=self.depth).run}
            for name, (k1, b) in BM25_PARAMS.items():
                out[f"bm25 {name}"] = presets.bm25(table, k1=k1, b=b).search_batch(queries, limit=self.depth).run
                out[f"bo1 {name}"] = presets.bm25(table, k1=k1, b=b, feedback="bo1").search_batch(
                    queries, limit=self.depth).run
            self.memo[id(table)] = out
        return self.memo[id(table)]


def candidates(children: Children) -> dict[str, Callable[[Any, Any], pd.DataFrame]]:
    """The grid's candidates as pipeline factories ``(documents, queries) -> run``."""
    out: dict[str, Callable[[Any, Any], pd.DataFrame]] = {}
    for values in itertools.product(*GRID.values()):
        recipe = Recipe(**dict(zip(GRID, values, strict=True)))
        out[recipe.name] = lambda table, queries, r=recipe: r.run(children(table, queries))
    return out


def load(data: Path, name: str) -> tuple[DocumentTable, pd.DataFrame, pd.DataFrame]:
    ds = load_beir(data / name)
    table = DocumentTable.from_frame(ds.corpus[["id", "title", "content"]])
    return table, ds.judged_queries(), ds.qrels.astype({"qid": str, "doc_id": str})


def feedback_table(children: Children, colls: dict[str, tuple[DocumentTable, pd.DataFrame, pd.DataFrame]]) -> None:
    """BM25 (1.5/0.75) against RM3, Bo1, KL at top 1000: nDCG@10, Recall@100, MAP."""
    print("\n### Feedback: BM25 vs + RM3 / + Bo1 / + KL (top 1000; p: paired t on nDCG@10 vs BM25)\n")
    print("| collection | run | nDCG@10 | p | Recall@100 | MAP |\n|---|---|---|---|---|---|")
    for name, (table, queries, qrels) in colls.items():
        runs = {"BM25": children(table, queries)["bm25 1.5/0.75"]}
        for fb in ("rm3", "bo1", "kl"):
            runs[f"+ {fb.upper() if fb != 'bo1' else 'Bo1'}"] = presets.bm25(table, feedback=fb).search_batch(
                queries, limit=1000).run
        per = per_query_table(runs, qrels, ["ndcg@10"])["ndcg@10"]
        for run_name, run in runs.items():
            m = evaluate(run, qrels, ["ndcg@10", "recall@100", "map"])
            p = "" if run_name == "BM25" else f"{paired_test(per['BM25'], per[run_name]):.2g}"
            print(f"| {name} | {run_name} | {m['ndcg@10']:.4f} | {p} | {m['recall@100']:.4f} | {m['map']:.4f} |")


def peers(children: Children, colls: dict[str, tuple[DocumentTable, pd.DataFrame, pd.DataFrame]]) -> None:
    """``presets.bm25/dense/hybrid`` against bm25s (its own tokenizer: English stopwords,
    PyStemmer), numpy's exact cosine top 100 over the same vectors, and ranx's RRF."""
    import bm25s
    import Stemmer
    from ranx import Run
    from ranx import fuse as ranx_fuse

    print("\n### Peers: nDCG@10 of kolm's presets and the peers (limit 100)\n")
    print("| collection | bm25 | bm25s | dense | numpy | hybrid | ranx RRF(bm25s, numpy) |\n|---|---|---|---|---|---|---|")
    for name, (table, queries, qrels) in colls.items():
        texts = table.texts(("title", "content"))
        ids = np.asarray(table.ids).astype(str)
        stem = Stemmer.Stemmer("english")
        model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False), show_progress=False)
        qtok = bm25s.tokenize(list(queries["query"]), stopwords="en", stemmer=stem, show_progress=False)
        docs, scores = model.retrieve(qtok, k=100, show_progress=False, n_threads=1)
        qids = list(queries["qid"].astype(str))
        peer_bm25 = {q: {ids[d]: float(s) for d, s in zip(docs[i], scores[i], strict=True) if s > 0}
                     for i, q in enumerate(qids)}
        vectors = children.embeddings(table)
        qv = np.asarray(children.embedder.embed_many(list(queries["query"])), np.float32)
        sims = qv @ vectors.T
        top = np.argsort(-sims, axis=1, kind="stable")[:, :100]
        peer_dense = {q: {ids[d]: float(sims[i, d]) for d in top[i]} for i, q in enumerate(qids)}
        fused = ranx_fuse([Run(peer_bm25), Run(peer_dense)], method="rrf", params={"k": 60}).to_dict()

        def as_frame(run: dict[str, dict[str, float]]) -> pd.DataFrame:
            return pd.DataFrame([(q, d, s) for q, ds in run.items() for d, s in ds.items()],
                                columns=["qid", "doc_id", "score"])

        ours = {"bm25": presets.bm25(table).search_batch(queries, limit=100).run,
                "dense": presets.dense(table, children.embedder, embeddings=vectors).search_batch(queries, limit=100).run,
                "hybrid": presets.hybrid(table, children.embedder, embeddings=vectors).search_batch(queries, limit=100).run}
        n = {k: evaluate(v, qrels)["ndcg@10"] for k, v in ours.items()}
        p = {k: evaluate(as_frame(v), qrels)["ndcg@10"] for k, v in (("bm25s", peer_bm25), ("numpy", peer_dense),
                                                                    ("ranx", fused))}
        print(f"| {name} | {n['bm25']:.4f} | {p['bm25s']:.4f} | {n['dense']:.4f} | {p['numpy']:.4f} "
              f"| {n['hybrid']:.4f} | {p['ranx']:.4f} |")


def fixed_pipelines(children: Children, colls: dict[str, tuple[DocumentTable, pd.DataFrame, pd.DataFrame]],
                    baseline: dict[str, pd.DataFrame]) -> None:
    """``presets.hybrid`` asked for 10 (children cut at 10), with ``depth=100``, and the
    deprecated ``presets.hybrid_plus`` (defaults, asked for 100), each against the baseline."""
    import warnings

    print("\n### Fixed pipelines against presets.hybrid asked for 100 (nDCG@10; p: paired t)\n")
    print("| pipeline | " + " | ".join(colls) + " | mean |\n|---|" + "---|" * (len(colls) + 1))
    rows: dict[str, list[str]] = {}
    deltas: dict[str, list[float]] = {}
    for name, (table, queries, qrels) in colls.items():
        vectors = children.embeddings(table)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            plus = presets.hybrid_plus(table, children.embedder, embeddings=vectors)
        runs = {"presets.hybrid, asked for 10": presets.hybrid(table, children.embedder, embeddings=vectors)
                .search_batch(queries, limit=10).run,
                "presets.hybrid(depth=100), asked for 10": presets.hybrid(table, children.embedder,
                                                                          embeddings=vectors, depth=100)
                .search_batch(queries, limit=10).run,
                "presets.hybrid_plus (deprecated), asked for 100": plus.search_batch(queries, limit=LIMIT).run}
        per = per_query_table({"baseline": baseline[name], **runs}, qrels, ["ndcg@10"])["ndcg@10"]
        for run_name in runs:
            d = float((per[run_name] - per["baseline"]).mean())
            p = paired_test(per["baseline"], per[run_name])
            rows.setdefault(run_name, []).append(f"{per[run_name].mean():.4f} ({d:+.4f}, p {p:.2g})")
            deltas.setdefault(run_name, []).append(d)
    for run_name, cells in rows.items():
        print(f"| {run_name} | " + " | ".join(cells) + f" | {np.mean(deltas[run_name]):+.4f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder of the development collections (default: ../shared/data beside the project)")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    parser.add_argument("--cache", default=str(ROOT / "cache" / "embeddings.sqlite"),
                        help="CachedEmbedder file (default: the project's cache/embeddings.sqlite)")
    parser.add_argument("--embedder", default="minilm", help="a load_embedder name (minilm, minilm-onnx)")
    parser.add_argument("--feedback", action="store_true", help="print the feedback table")
    parser.add_argument("--peers", action="store_true", help="print the check against bm25s, numpy and ranx")
    parser.add_argument("--no-loco", action="store_true", help="skip the recipe grid")
    args = parser.parse_args()
    embedder = CachedEmbedder(load_embedder(args.embedder), args.cache, timeout=600)
    children = Children(embedder)
    colls = {name: load(args.data, name) for name in args.collections}
    t0 = time.perf_counter()
    for table, _, _ in colls.values():
        children.embeddings(table)
    print(f"corpus embeddings ({args.embedder}, cache {args.cache}): {time.perf_counter() - t0:.0f} s")
    if args.peers:
        peers(children, colls)
    if args.feedback:
        feedback_table(children, colls)
    if args.no_loco:
        return
    t0 = time.perf_counter()
    cands = candidates(children)
    runs = collection_runs(cands, {n: (table, q) for n, (table, q, _) in colls.items()})
    baseline = {n: presets.hybrid(table, embedder, embeddings=children.embeddings(table)).search_batch(q, limit=LIMIT).run
                for n, (table, q, _) in colls.items()}
    qrels = {n: c[2] for n, c in colls.items()}
    fixed_pipelines(children, colls, baseline)
    print(f"{len(cands)} candidates x {len(colls)} collections: {time.perf_counter() - t0:.0f} s")
    results = {crit: leave_one_collection_out(runs, qrels, baseline, criterion=crit)  # type: ignore[arg-type]
               for crit in ("mean", "worst-delta")}
    scores = results["mean"].scores
    base = results["mean"].baseline_scores
    print("\n### presets.hybrid (limit 100), nDCG@10\n")
    print(" | ".join(f"{c} {v:.4f}" for c, v in base.items()))
    print("\n### Every candidate, in sample: nDCG@10 delta against presets.hybrid per collection\n")
    delta = scores.sub(base, axis=0).T
    delta["mean"] = delta.mean(axis=1)
    delta["worst"] = delta[list(colls)].min(axis=1)
    print("| candidate | " + " | ".join(delta.columns) + " |\n|---|" + "---|" * len(delta.columns))
    for name, row in delta.sort_values("mean", ascending=False).iterrows():
        print(f"| {name} | " + " | ".join(f"{v:+.4f}" for v in row) + " |")
    for crit, res in results.items():
        print(f"\n### Leave one collection out, criterion {crit!r} (baseline presets.hybrid)\n")
        print(res.to_markdown())
        ok = (res.folds["delta"] >= -0.005).all() and res.delta >= 0.01
        print(f"target (each >= -0.005, mean >= +0.01): {'met' if ok else 'not met'}")


if __name__ == "__main__":
    main()
