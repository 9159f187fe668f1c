"""Exact dense top-k: kolm_search (blocked GEMM + Numba heaps) vs faiss IndexFlatIP and numpy.

Rerun: ``python benchmarks/bench_dense.py --docs 100000 --queries 1000 --dim 384``.
faiss is measured with its defaults and with ``distance_compute_blas_threshold=20`` (its BLAS
path); the peers' top-k ids are checked against kolm's.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _common import header, median_time, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    header(f"exact dense top-{args.k}: {args.queries} queries x {args.docs} docs x {args.dim} float32")
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((args.docs, args.dim), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    from kolm_search.retrievers.dense import exact_topk

    rows = []
    t0 = time.perf_counter()
    exact_topk(queries[:2], docs[:1000], args.k)
    rows.append({"what": "kolm first call (Numba compile or cache load)", "seconds": time.perf_counter() - t0})
    t_k, (kd, ks, kc) = median_time(lambda: exact_topk(queries, docs, args.k, n_threads=args.threads), args.repeat)
    rows.append({"what": "kolm exact_topk", "seconds": t_k})
    t_gemm, _ = median_time(lambda: queries @ docs.T, args.repeat)
    rows.append({"what": "numpy GEMM alone (the floor)", "seconds": t_gemm, "kolm_vs_gemm": f"{t_k / t_gemm:.2f}x"})

    def numpy_topk() -> np.ndarray:
        s = queries @ docs.T
        part = np.argpartition(-s, args.k, axis=1)[:, : args.k]
        top = np.take_along_axis(s, part, axis=1)
        return np.take_along_axis(part, np.argsort(-top, axis=1), axis=1)

    t_np, np_ids = median_time(numpy_topk, args.repeat)
    rows.append({"what": "numpy GEMM + argpartition + sort", "seconds": t_np, "kolm_speedup": f"{t_np / t_k:.2f}x",
                 "same_ids_as_kolm": f"{np.mean(np_ids == kd):.4f}"})
    try:
        import faiss

        index = faiss.IndexFlatIP(args.dim)
        index.add(docs)
        t_f, (_, f_ids) = median_time(lambda: index.search(queries, args.k), args.repeat)
        rows.append({"what": "faiss IndexFlatIP (defaults)", "seconds": t_f, "kolm_speedup": f"{t_f / t_k:.2f}x",
                     "same_ids_as_kolm": f"{np.mean(f_ids == kd):.4f}"})
        old = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = 20
        t_fb, _ = median_time(lambda: index.search(queries, args.k), args.repeat)
        faiss.cvar.distance_compute_blas_threshold = old
        rows.append({"what": "faiss IndexFlatIP (blas_threshold=20)", "seconds": t_fb, "kolm_speedup": f"{t_fb / t_k:.2f}x"})
    except ImportError:
        rows.append({"what": "faiss not installed (pip install faiss-cpu)", "seconds": 0.0})
    report(rows)


if __name__ == "__main__":
    main()
