"""The evaluation kernel on one thread against two, by rows, in one process (``PARALLEL_ROWS``).

Rerun: ``python benchmarks/bench_eval_threads.py --rows 500000 1000000 2000000 4000000``. Each
size is a synthetic layout of queries of 100 retrieved documents (1% judged, grades 0-3) measured
for ``ndcg@10`` and the eleven ``iprec_at_recall`` levels (what ``compare`` measures), by
``_kernels.metrics.evaluate_queries`` with ``n_threads=1`` and ``n_threads=2`` alternating (the
bound lowered to 0 for the timing, so both take the split they are asked for); medians of
``--repeat`` paired rounds. ``PARALLEL_ROWS`` is where two threads start to pay on this machine.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import header

from kolm_search._kernels import load
from kolm_search._kernels import metrics as metrics_module
from kolm_search._kernels.measure_ids import Measure


def layout(rows: int, depth: int = 100, n_docs: int = 100_000, seed: int = 0) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    n_q = rows // depth
    r_doc = np.concatenate([rng.choice(n_docs, depth, replace=False) for _ in range(n_q)]).astype(np.int64)
    r_ptr = np.arange(0, n_q * depth + 1, depth, dtype=np.int64)
    judged = [rng.choice(n_docs, 10, replace=False) for _ in range(n_q)]
    j_doc = np.concatenate(judged).astype(np.int64)
    j_rel = np.sort(rng.integers(0, 4, (n_q, 10)), axis=1)[:, ::-1].ravel().astype(np.int64)
    j_ptr = np.arange(0, n_q * 10 + 1, 10, dtype=np.int64)
    args = (r_ptr, r_doc, n_docs, r_doc, j_ptr, j_doc, j_rel, n_docs)
    mids = [Measure.NDCG_CUT] + [Measure.IPREC] * 11
    cuts = [10] + [0] * 11
    params = np.zeros((12, 3))
    params[1:, 0] = np.linspace(0, 1, 11)
    return args, mids, cuts, [1] * 12, params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, nargs="+", default=[500_000, 1_000_000, 2_000_000, 4_000_000])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    header("evaluation kernel: one thread against two")
    kernels = load("metrics")
    bound = metrics_module.PARALLEL_ROWS
    metrics_module.PARALLEL_ROWS = 0
    try:
        for rows in args.rows:
            kernel_args, mids, cuts, levels, params = layout(rows)
            times: dict[int, list[float]] = {1: [], 2: []}
            for threads in (1, 2):  # warm-up
                kernels.evaluate_queries(*kernel_args, mids, cuts, levels, None, params, n_threads=threads)
            for _ in range(args.repeat):
                for threads in (1, 2):
                    t0 = time.perf_counter()
                    kernels.evaluate_queries(*kernel_args, mids, cuts, levels, None, params, n_threads=threads)
                    times[threads].append(time.perf_counter() - t0)
            one, two = float(np.median(times[1])), float(np.median(times[2]))
            print(f"{rows:>9,} rows  one thread {one * 1e3:7.2f} ms  two {two * 1e3:7.2f} ms  two / one {two / one:.2f}"
                  f"{'   (split from here: PARALLEL_ROWS)' if rows >= bound else ''}")
    finally:
        metrics_module.PARALLEL_ROWS = bound


if __name__ == "__main__":
    main()
