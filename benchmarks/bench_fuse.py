"""RRF fusion: kolm_search.fuse vs ranx, a plain-Python dict and a bare Numba scatter-add.

Rerun: ``python benchmarks/bench_fuse.py --queries 10000`` (the issue's scale; ranx then needs
more than 20 GB: pass ``--no-ranx`` on a small machine). Every figure is the median of ``--repeat`` runs
in this one process; Numba compile time is measured separately and kept out.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import header, median_time, median_times, report
from numba import njit, prange


def make_runs(n_queries: int, n_runs: int, depth: int, n_docs: int, seed: int = 0) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    runs = []
    qids = pd.array([f"q{i}" for i in range(n_queries)], dtype="str")
    for _ in range(n_runs):
        docs = np.argsort(rng.random((n_queries, n_docs)), axis=1)[:, :depth] if n_docs <= 5000 else \
            np.stack([rng.choice(n_docs, depth, replace=False) for _ in range(n_queries)])
        runs.append(pd.DataFrame({
            "qid": qids.take(np.repeat(np.arange(n_queries), depth)),
            "doc_id": pd.array([f"doc{d}" for d in docs.ravel()], dtype="str"),
            "score": np.tile(np.linspace(depth, 1, depth), n_queries),
        }))
    return runs


def _made_in_random_order(col: pd.Series, seed: int = 1) -> pd.Series:
    """An object column equal to ``col`` whose strings were created in a random row order."""
    values = col.to_numpy(dtype=object)
    perm = np.random.default_rng(seed).permutation(len(values))
    out = np.empty(len(values), dtype=object)
    out[perm] = [(v + "!")[:-1] for v in values[perm]]  # a new object per row, made in perm order
    return pd.Series(out, index=col.index, dtype=object)  # (pandas 3 would infer its str dtype)


def python_rrf(runs: list[pd.DataFrame], k: int = 60) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        last = None
        rank = 0
        for qid, doc in zip(run["qid"].tolist(), run["doc_id"].tolist(), strict=True):
            rank = rank + 1 if qid == last else 0
            last = qid
            acc = out.setdefault(qid, {})
            acc[doc] = acc.get(doc, 0.0) + 1.0 / (k + rank + 1)
    return out


@njit(parallel=True, cache=True)
def bare_scatter(q_ptr, docs, contrib, n_docs, n_chunks):  # the floor: no dedup, no sort
    n_q = q_ptr.shape[0] - 1
    total = 0.0
    for c in prange(n_chunks):
        acc = np.zeros(n_docs)
        for q in range((n_q * c) // n_chunks, (n_q * (c + 1)) // n_chunks):
            for i in range(q_ptr[q], q_ptr[q + 1]):
                acc[docs[i]] += contrib[i]
            for i in range(q_ptr[q], q_ptr[q + 1]):
                acc[docs[i]] = 0.0
        total += acc.sum()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-ranx", action="store_true")
    ap.add_argument("--no-python", action="store_true")
    ap.add_argument("--object-order", choices=["column", "random"], default="column",
                    help="make the Python strings of the object columns in row order (astype) or in a "
                         "random order (as after shuffling or sorting a frame: objects at random addresses)")
    args = ap.parse_args()
    header(f"RRF fusion, {args.queries} queries x {args.runs} runs x {args.depth} docs")
    runs = make_runs(args.queries, args.runs, args.depth, args.docs)
    from kolm_search import fuse
    from kolm_search.fusion import fuse_arrays

    t0 = time.perf_counter()
    fuse([r.head(2000) for r in runs])
    compile_s = time.perf_counter() - t0
    rows = [{"what": "kolm fuse: first call on 2k rows (compile or cache load)", "seconds": compile_s}]
    t_kolm, fused = median_time(lambda: fuse(runs), args.repeat)
    rows.append({"what": "kolm_search.fuse (str columns in, DataFrame out)", "seconds": t_kolm, "rows_out": len(fused)})
    obj_runs = [r.astype({"qid": object, "doc_id": object}) for r in runs]  # ranx needs object columns
    if args.object_order == "random":  # the strings made in another order than the rows
        obj_runs = [r.assign(qid=_made_in_random_order(r["qid"]), doc_id=_made_in_random_order(r["doc_id"]))
                    for r in obj_runs]
        assert all(r[c].dtype == object for r in obj_runs for c in ("qid", "doc_id"))
    t_obj, _ = median_time(lambda: fuse(obj_runs), args.repeat)
    rows.append({"what": f"kolm_search.fuse (object columns, as ranx gets; objects in {args.object_order} order)",
                 "seconds": t_obj})

    # the kernel on already-coded frames vs the bare scatter-add floor
    q = np.repeat(np.arange(args.queries), args.depth)
    codes = [pd.factorize(r["doc_id"])[0] for r in runs]
    order = np.lexsort((np.concatenate([np.full(len(r), i) for i, r in enumerate(runs)]), np.concatenate([q] * len(runs))))
    docs = np.concatenate(codes)[order]
    lids = np.concatenate([np.full(len(r), i) for i, r in enumerate(runs)])[order]
    rank = np.tile(np.arange(args.depth), args.queries * len(runs))[np.argsort(np.concatenate([q] * len(runs)), kind="stable")]
    contrib = 1.0 / (61.0 + rank)
    ptr = np.arange(0, len(docs) + 1, args.depth * len(runs))
    n_docs = int(docs.max()) + 1
    from kolm_search.fusion import fuse_rrf_arrays

    fuse_arrays(ptr[:3], lids[: ptr[2]], docs[: ptr[2]], contrib[: ptr[2]], n_docs)  # compile or cache load
    fuse_rrf_arrays(ptr[:3], lids[: ptr[2]], docs[: ptr[2]], rank[: ptr[2]], n_docs)
    bare_scatter(ptr[:3], docs, contrib, n_docs, 2)
    out = (np.empty(len(docs), np.int64), np.empty(len(docs), np.float64))  # buffers reused through out=
    out[0].fill(0)  # faulted in once, here (np.zeros would leave the pages to the first timed call)
    out[1].fill(0.0)
    # the kernel figures are taken in rounds (each call once a round) so that background
    # work after the large runs above slows one call of each, not every call of one
    t = median_times({
        "full": lambda: fuse_arrays(ptr, lids, docs, contrib, n_docs),
        "full_out": lambda: fuse_arrays(ptr, lids, docs, contrib, n_docs, out=out),
        "rrf": lambda: fuse_rrf_arrays(ptr, lids, docs, rank, n_docs),
        "rrf_out": lambda: fuse_rrf_arrays(ptr, lids, docs, rank, n_docs, out=out),
        "limit100": lambda: fuse_arrays(ptr, lids, docs, contrib, n_docs, limit=100),
        "limit10": lambda: fuse_arrays(ptr, lids, docs, contrib, n_docs, limit=10),
        "bare": lambda: bare_scatter(ptr, docs, contrib, n_docs, 2),
    }, args.repeat, warmup=2)
    t_kernel, t_rrf, t_bare = t["full"], t["rrf"], t["bare"]
    # back to back (a loop over batches): each call's fresh output gets the memory the last one
    # freed; in the rounds above it gets memory freed a second earlier, which this VM has by
    # then handed back to its host and faults in again at ~1 s a GB
    t_b2b = median_time(lambda: fuse_arrays(ptr, lids, docs, contrib, n_docs), args.repeat, warmup=1)[0]
    rows.append({"what": "kolm fuse_arrays on coded arrays (dedup + sort)", "seconds": t_kernel})
    rows.append({"what": "kolm fuse_arrays, back-to-back calls (a loop over batches)", "seconds": t_b2b})
    rows.append({"what": "kolm fuse_rrf_arrays (RRF from ranks, what fuse runs)", "seconds": t_rrf})
    rows.append({"what": "kolm fuse_arrays into reused out= buffers", "seconds": t["full_out"]})
    rows.append({"what": "kolm fuse_rrf_arrays into reused out= buffers", "seconds": t["rrf_out"]})
    rows.append({"what": "bare Numba scatter-add (floor, 2 threads)", "seconds": t_bare,
                 "kernel_vs_bare": f"{t_kernel / t_bare:.2f}x", "rrf_vs_bare": f"{t_rrf / t_bare:.2f}x",
                 "b2b_vs_bare": f"{t_b2b / t_bare:.2f}x", "out_vs_bare": f"{t['full_out'] / t_bare:.2f}x",
                 "rrf_out_vs_bare": f"{t['rrf_out'] / t_bare:.2f}x"})
    rows.append({"what": "kolm fuse_arrays, limit=100 (top-k selection)", "seconds": t["limit100"],
                 "vs_bare": f"{t['limit100'] / t_bare:.2f}x"})
    rows.append({"what": "kolm fuse_arrays, limit=10 (top-k selection)", "seconds": t["limit10"],
                 "vs_bare": f"{t['limit10'] / t_bare:.2f}x"})
    if not args.no_python:
        t_py, _ = median_time(lambda: python_rrf(runs), 1, warmup=0)
        rows.append({"what": "plain-Python dict RRF", "seconds": t_py, "kolm_speedup": f"{t_py / t_kolm:.1f}x"})
    if not args.no_ranx:
        from ranx import Run
        from ranx import fuse as ranx_fuse

        small = [r.head(2000).astype({"qid": object, "doc_id": object}) for r in runs]
        ranx_fuse(runs=[Run.from_df(r, q_id_col="qid", doc_id_col="doc_id", score_col="score") for r in small],
                  method="rrf", params={"k": 60})  # compile
        t_build, built = median_time(lambda: [Run.from_df(r, q_id_col="qid", doc_id_col="doc_id", score_col="score") for r in obj_runs], 1, 0)
        t_fuse, _ = median_time(lambda: ranx_fuse(runs=built, method="rrf", params={"k": 60}), 1, 0)
        rows.append({"what": "ranx Run.from_df (3 runs)", "seconds": t_build})
        rows.append({"what": "ranx fuse rrf (prebuilt Runs)", "seconds": t_fuse})
        rows.append({"what": "ranx build + fuse", "seconds": t_build + t_fuse,
                     "kolm_speedup": f"{(t_build + t_fuse) / t_kolm:.1f}x (object: {(t_build + t_fuse) / t_obj:.1f}x)"})
    report(rows)


if __name__ == "__main__":
    main()
