"""RRF fusion: kolm_search.fuse vs ranx (Run building counted), and the fusion kernel vs pandas;
one score method (CombMNZ after min-max) against ranx too.

Rerun: ``python benchmarks/bench_fuse.py`` (3 runs x 1,000 queries x 1,000 documents; ranx
needs object columns and several GB). Rows:

- ``fuse`` from DataFrames with ``str`` ids, with object ids, and with ids as ``read_run``
  returns them (categoricals), against ranx ``Run.from_df`` + ``fuse``, all in this process;
- CombMNZ after min-max (``fuse(method="mnz", norm="min-max")``, categorical ids) against
  ranx's ``fuse`` on the same, Runs already built;
- the kernel on coded arrays (``_kernels.fusion.fuse_groups``) against the same fusion
  written with pandas and numpy only (a groupby sum and a stable sort), the reason the
  kernel exists.

Every figure is the median of ``--repeat`` calls, compile time kept out (one warm-up call).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from _common import header, median_time, report


def make_runs(n_queries: int, n_runs: int, depth: int, n_docs: int, seed: int = 0) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    qids = pd.array([f"q{i}" for i in range(n_queries)], dtype="str")
    runs = []
    for _ in range(n_runs):
        docs = np.argsort(rng.random((n_queries, n_docs)), axis=1)[:, :depth] if n_docs <= 5000 else \
            np.stack([rng.choice(n_docs, depth, replace=False) for _ in range(n_queries)])
        runs.append(pd.DataFrame({
            "qid": qids.take(np.repeat(np.arange(n_queries), depth)),
            "doc_id": pd.array([f"doc{d}" for d in docs.ravel()], dtype="str"),
            "score": np.tile(np.linspace(depth, 1, depth), n_queries),
        }))
    return runs


def pandas_rrf(ptr: np.ndarray, lists: np.ndarray, docs: np.ndarray, contrib: np.ndarray) -> pd.DataFrame:
    """The kernel's job with library calls only: first entry per (query, list, doc), a groupby
    sum per (query, doc), then a stable sort by (query, -score)."""
    query = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    frame = pd.DataFrame({"q": query, "l": lists, "d": docs, "c": contrib})
    frame = frame[~frame.duplicated(["q", "l", "d"])]
    fused = frame.groupby(["q", "d"], sort=False).c.sum().reset_index()
    return fused.sort_values(["q", "c"], ascending=[True, False], kind="stable")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=100_000, help="range of document ids")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-ranx", action="store_true")
    args = ap.parse_args()
    header(f"RRF fusion, {args.runs} runs x {args.queries} queries x {args.depth} docs")
    from kolm_search import fuse
    from kolm_search._kernels import load

    runs = make_runs(args.queries, args.runs, args.depth, args.docs)
    obj_runs = [r.astype({"qid": object, "doc_id": object}) for r in runs]
    cat_runs = [r.astype({"qid": "category", "doc_id": "category"}) for r in runs]  # as read_run returns them
    fuse([r.head(100) for r in runs])  # compile or cache load, untimed
    t_str, fused = median_time(lambda: fuse(runs), args.repeat)
    t_obj, _ = median_time(lambda: fuse(obj_runs), args.repeat)
    t_cat, fused_cat = median_time(lambda: fuse(cat_runs), args.repeat)
    assert fused_cat.astype({"qid": str, "doc_id": str}).equals(fused.astype({"qid": str, "doc_id": str}))
    rows = [{"what": "kolm fuse, str ids", "seconds": t_str, "rows_out": len(fused)},
            {"what": "kolm fuse, object ids", "seconds": t_obj},
            {"what": "kolm fuse, categorical ids (as read_run gives)", "seconds": t_cat}]
    # the kernel on coded arrays, against pandas doing the same
    n = args.queries
    codes = pd.factorize(pd.concat([r["doc_id"] for r in runs], ignore_index=True))[0]
    per_run = [codes[i * n * args.depth:(i + 1) * n * args.depth].reshape(n, args.depth) for i in range(args.runs)]
    docs = np.stack(per_run, axis=1).reshape(-1)  # query-major, then run, then rank
    lists = np.tile(np.repeat(np.arange(args.runs), args.depth), n)
    contrib = 1.0 / (61.0 + np.tile(np.arange(args.depth), n * args.runs))
    ptr = np.arange(0, len(docs) + 1, args.runs * args.depth)
    kernel = load("fusion").fuse_groups
    t_kernel, _ = median_time(lambda: kernel(ptr, lists, docs, contrib, int(codes.max()) + 1), args.repeat)
    t_pandas, _ = median_time(lambda: pandas_rrf(ptr, lists, docs, contrib), args.repeat)
    rows.append({"what": "fusion kernel on coded arrays", "seconds": t_kernel})
    rows.append({"what": "the same with pandas + numpy only", "seconds": t_pandas,
                 "kernel_speedup": f"{t_pandas / t_kernel:.1f}x"})
    if not args.no_ranx:
        from ranx import Run
        from ranx import fuse as ranx_fuse

        small = [r.head(2000) for r in obj_runs]
        ranx_fuse(runs=[Run.from_df(r, q_id_col="qid", doc_id_col="doc_id", score_col="score") for r in small],
                  method="rrf", params={"k": 60})  # compile
        t_build, built = median_time(
            lambda: [Run.from_df(r, q_id_col="qid", doc_id_col="doc_id", score_col="score") for r in obj_runs], 1, 0)
        t_fuse, _ = median_time(lambda: ranx_fuse(runs=built, method="rrf", params={"k": 60}), 1, 0)
        total = t_build + t_fuse
        rows.append({"what": "ranx Run.from_df + fuse (rrf)", "seconds": total, "build": f"{t_build:.2f} s",
                     "kolm_str": f"{total / t_str:.1f}x", "kolm_object": f"{total / t_obj:.1f}x",
                     "kolm_categorical": f"{total / t_cat:.1f}x"})
        t_mnz, _ = median_time(lambda: fuse(cat_runs, method="mnz", norm="min-max"), args.repeat)
        t_ranx_mnz, _ = median_time(lambda: ranx_fuse(runs=built, norm="min-max", method="mnz"), 1, 0)
        rows.append({"what": "kolm fuse mnz + min-max, categorical ids", "seconds": t_mnz})
        rows.append({"what": "ranx fuse mnz + min-max (Runs built)", "seconds": t_ranx_mnz,
                     "kolm_speedup": f"{t_ranx_mnz / t_mnz:.1f}x"})
    report(rows)


if __name__ == "__main__":
    main()
