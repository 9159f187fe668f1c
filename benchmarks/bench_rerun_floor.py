"""What the pieces of a cached ``Experiment`` rerun cost right after ``gc.collect()`` (issue 27 (c)).

``bench_compose.py`` collects garbage before each timed call, as every bench here does, so a
rerun over the table cache starts with cold CPU caches. This times, the same way, the pandas
frames such a rerun must build and the two digests of its key, over a heap of ``--objects``
small live objects (a notebook's; the collection walks them all):

    cd benchmarks && python bench_rerun_floor.py --corpus ../../shared/data/med --rounds 30

Rows: a DataFrame of a float block (queries x 5 runs, the per-query values), a DataFrame of a
dict of 16 mixed columns (the measure table), ``pyarrow.Table.to_pandas`` of the same, and the
dataset's ``queries_digest`` and ``qrels_digest``; medians in ms.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from kolm_search.compose.queries import queries_digest
from kolm_search.evaluation.table_cache import qrels_digest
from kolm_search.io import load_dataset


def cold_ms(fn: Callable[[], Any], rounds: int) -> float:
    """Median wall time (ms) of ``fn()``, each call right after ``gc.collect()``."""
    times = []
    for _ in range(rounds):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default="cranfield")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--objects", type=int, default=200_000)
    args = ap.parse_args()
    ds = load_dataset(args.corpus)
    heap = [{"i": i} for i in range(args.objects)]
    names = [f"bm25 % 100 >> prior0.{i}" for i in range(5, 10)]
    mixed: dict[str, Any] = {f"c{i}": np.random.default_rng(i).random(5) for i in range(12)}
    mixed.update(run=pd.array(names, dtype="str"), baseline=pd.array(names, dtype="str"), n=np.arange(5),
                 significant=np.ones(5, bool))
    arrow = pa.table({k: pa.array(list(v), pa.large_string()) if k in ("run", "baseline") else pa.array(v)
                      for k, v in mixed.items()})
    n_q = len(ds.judged_queries())
    block = np.random.default_rng(0).random((n_q, 5))
    index = pd.Index(pd.array([str(i) for i in range(n_q)], dtype="str"), name="qid")
    rows = {"DataFrame of a float block": lambda: pd.DataFrame(block, index=index, columns=names),
            "DataFrame of 16 mixed columns": lambda: pd.DataFrame(mixed),
            "pyarrow Table.to_pandas of the same": arrow.to_pandas,
            "queries_digest": lambda: queries_digest(ds.queries, limit=100),
            "qrels_digest": lambda: qrels_digest(ds.qrels),
            "nothing": lambda: None}
    print(f"# {args.corpus}: {n_q} judged queries, {len(heap)} objects alive, {args.rounds} rounds; ms after gc.collect()")
    for what, fn in rows.items():
        print(f"{what:40s} {cold_ms(fn, args.rounds):7.3f}")


if __name__ == "__main__":
    main()
