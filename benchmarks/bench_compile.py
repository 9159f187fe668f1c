"""Numba compile time of every kernel: cold (empty cache) and warm (cache on disk).

Rerun: ``python benchmarks/bench_compile.py``. Each measurement is a fresh interpreter that
imports kolm_search and calls every kernel once on tiny inputs; the cold run points
``NUMBA_CACHE_DIR`` at an empty folder (it only affects that child process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from _common import header, report

PROBE = r"""
import time, numpy as np, pandas as pd
t0 = time.perf_counter()
import kolm_search as ks
from kolm_search.retrievers.dense import exact_topk
t_import = time.perf_counter() - t0
t0 = time.perf_counter()
ks.fuse([pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]})])
t_fuse = time.perf_counter() - t0
t0 = time.perf_counter()
r = ks.BM25Retriever(pd.DataFrame({"id": ["a", "b"], "content": ["x y", "y z"]}))
r.score_texts(["y"], 1)
t_bm25 = time.perf_counter() - t0
t0 = time.perf_counter()
exact_topk(np.ones((2, 4), np.float32), np.ones((3, 4), np.float32), 2)
t_dense = time.perf_counter() - t0
t0 = time.perf_counter()
ks.evaluate(pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "score": [1.0]}), pd.DataFrame({"qid": ["1"], "doc_id": ["a"], "relevance": [1]}), ["ndcg@10"])
t_eval = time.perf_counter() - t0
t0 = time.perf_counter()
ids = np.array([f"d{i}" for i in range(2048)], dtype=object)  # object columns: the in-place str readers
ks.fuse([pd.DataFrame({"qid": pd.Series(["q"] * 2048, dtype=object), "doc_id": pd.Series(ids, dtype=object),
                       "score": np.ones(2048)})])
t_obj = time.perf_counter() - t0
print(t_import, t_fuse, t_bm25, t_dense, t_eval, t_obj)
"""


def probe(env: dict[str, str]) -> list[float]:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


def main() -> None:
    header("Numba compile time, cold vs warm cache")
    names = ["import kolm_search", "fuse (interning + fusion kernels)", "BM25 (sparse top-k kernel)",
             "dense (fused tile top-k kernel)", "evaluate (grouping + metrics kernels)",
             "fuse on object columns (str readers, after the above)"]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        t0 = time.perf_counter()
        cold = probe(env)
        cold_total = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = probe(env)
        warm_total = time.perf_counter() - t0
    rows = [{"what": f"{n}: cold", "seconds": c, "warm_seconds": f"{w:.3f}"} for n, c, w in zip(names, cold, warm, strict=True)]
    rows.append({"what": "whole child process: cold", "seconds": cold_total, "warm_seconds": f"{warm_total:.3f}"})
    report(rows)


if __name__ == "__main__":
    main()
