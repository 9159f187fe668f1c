"""Metrics: kolm_search.evaluate vs ranx (build + evaluate, and prebuilt) and pytrec_eval.

Rerun: ``python benchmarks/bench_evaluate.py --queries 5000 --depth 1000``. All three are
checked to agree (mean nDCG@10) before timing is reported. A row times the same run with its
scores rounded to 0.1 (most documents of a query tie with others: trec_eval's order breaks the
ties by document id).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import header, median_time, report

METRICS = ["ndcg@10", "map", "recall@100", "mrr"]
RANX = ["ndcg@10", "map", "recall@100", "mrr"]
TREC = {"ndcg_cut.10", "map", "recall.100", "recip_rank"}


def make(n_queries: int, depth: int, n_rel: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    qids = pd.array([f"q{i}" for i in range(n_queries)], dtype="str")
    docs = rng.integers(0, 1_000_000, size=(n_queries, depth))
    docs = np.sort(docs, axis=1)  # unique per query after the fix below
    docs += np.arange(depth)[None, :]
    run = pd.DataFrame({"qid": qids.take(np.repeat(np.arange(n_queries), depth)),
                        "doc_id": pd.array([f"d{d}" for d in docs.ravel()], dtype="str"),
                        "score": rng.random(n_queries * depth)})
    rel_docs = np.where(rng.random((n_queries, n_rel)) < 0.6, docs[:, rng.integers(0, depth, n_rel)],
                        rng.integers(2_000_000, 3_000_000, (n_queries, n_rel)))
    qrels = pd.DataFrame({"qid": qids.take(np.repeat(np.arange(n_queries), n_rel)),
                          "doc_id": pd.array([f"d{d}" for d in rel_docs.ravel()], dtype="str"),
                          "relevance": rng.integers(1, 4, n_queries * n_rel)})
    return run, qrels.drop_duplicates(["qid", "doc_id"]).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=5_000)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--rel", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-ranx", action="store_true")
    ap.add_argument("--no-pytrec", action="store_true")
    args = ap.parse_args()
    header(f"evaluation of {args.queries} queries x {args.depth} docs, ~{args.rel} judged each; metrics {METRICS}")
    run, qrels = make(args.queries, args.depth, args.rel)
    from kolm_search import evaluate

    rows = []
    t0 = time.perf_counter()
    evaluate(run.head(2000), qrels, METRICS)
    rows.append({"what": "kolm first call (Numba compile or cache load)", "seconds": time.perf_counter() - t0})
    t_k, ours = median_time(lambda: evaluate(run, qrels, METRICS), args.repeat)
    rows.append({"what": "kolm evaluate (DataFrames in)", "seconds": t_k, "ndcg@10": f"{ours['ndcg@10']:.6f}"})
    obj_run = run.astype({"qid": object, "doc_id": object})
    obj_qrels = qrels.astype({"qid": object, "doc_id": object})
    t_ko, _ = median_time(lambda: evaluate(obj_run, obj_qrels, METRICS), args.repeat)
    rows.append({"what": "kolm evaluate (object columns, as ranx gets)", "seconds": t_ko})
    cat_run = run.astype({"qid": "category", "doc_id": "category"})  # as read_run / read_qrels give them
    cat_qrels = qrels.astype({"qid": "category", "doc_id": "category"})
    t_kc, _ = median_time(lambda: evaluate(cat_run, cat_qrels, METRICS), args.repeat)
    rows.append({"what": "kolm evaluate (categorical ids, as read_run gives)", "seconds": t_kc})
    tied = run.assign(score=np.round(run["score"].to_numpy() * 10) / 10)  # 11 distinct scores: ties break by doc id
    t_kt, _ = median_time(lambda: evaluate(tied, qrels, METRICS), args.repeat)
    rows.append({"what": "kolm evaluate (str ids, tie-heavy: scores rounded to 0.1)", "seconds": t_kt})
    if not args.no_ranx:
        from ranx import Qrels, Run
        from ranx import evaluate as ranx_evaluate

        small = obj_run.head(2000)
        ranx_evaluate(Qrels.from_df(obj_qrels.head(100), q_id_col="qid", doc_id_col="doc_id", score_col="relevance"),
                      Run.from_df(small, q_id_col="qid", doc_id_col="doc_id", score_col="score"), RANX, make_comparable=True)
        t0 = time.perf_counter()
        rq = Qrels.from_df(obj_qrels, q_id_col="qid", doc_id_col="doc_id", score_col="relevance")
        rr = Run.from_df(obj_run, q_id_col="qid", doc_id_col="doc_id", score_col="score")
        t_build = time.perf_counter() - t0
        t_eval, theirs = median_time(lambda: ranx_evaluate(rq, rr, RANX), 1, 0)
        rows.append({"what": "ranx Qrels/Run.from_df", "seconds": t_build})
        rows.append({"what": "ranx evaluate (prebuilt)", "seconds": t_eval, "ndcg@10": f"{theirs['ndcg@10']:.6f}",
                     "kolm_speedup": f"{t_eval / t_k:.1f}x"})
        rows.append({"what": "ranx build + evaluate", "seconds": t_build + t_eval,
                     "kolm_speedup": f"{(t_build + t_eval) / t_k:.1f}x (object: {(t_build + t_eval) / t_ko:.1f}x, "
                                     f"categorical: {(t_build + t_eval) / t_kc:.1f}x)"})
    if not args.no_pytrec:
        import pytrec_eval

        def pytrec() -> dict[str, float]:
            r: dict[str, dict[str, float]] = {}
            for q, d, s in zip(obj_run.qid, obj_run.doc_id, obj_run.score, strict=True):
                r.setdefault(q, {})[d] = s
            j: dict[str, dict[str, int]] = {}
            for q, d, v in zip(obj_qrels.qid, obj_qrels.doc_id, obj_qrels.relevance, strict=True):
                j.setdefault(q, {})[d] = int(v)
            res = pytrec_eval.RelevanceEvaluator(j, TREC).evaluate(r)
            return {"ndcg@10": float(np.mean([v["ndcg_cut_10"] for v in res.values()]))}

        t_p, ref = median_time(pytrec, 1, 0)
        rows.append({"what": "pytrec_eval (dicts built + evaluate)", "seconds": t_p, "ndcg@10": f"{ref['ndcg@10']:.6f}",
                     "kolm_speedup": f"{t_p / t_k:.1f}x", "agrees": abs(ref["ndcg@10"] - ours["ndcg@10"]) < 1e-9})
    report(rows)


if __name__ == "__main__":
    main()
