"""Filtered search: ``search_batch`` with and without filters.

Rerun: ``python bench_filters.py`` (the packaged Cranfield; ``--dataset`` takes any BEIR folder
or name): a hybrid preset; each document gets synthetic metadata (``year`` 1950-2019, ``lang``
of three, ``tags``); rows: no filter, one filter shared by every query (compiled once per
batch), a different filter per query (compiled once per distinct filter), and the cost of
compiling one filter.

Rerun: ``python bench_filters.py --scale 200000 1000000 --queries 5000``: BM25 over a synthetic
Zipf corpus (as bench_bm25) of each size, ``search_batch`` of 5,000 queries (top 10) without
filters and with a distinct two-id filter per query (``{"id": {"$in": [a, b]}}``, random ids,
new ones each round so nothing is reused from the last batch). The index is built once and
saved; each case runs in child processes of its own (``--rounds``, cases and checkouts
interleaved) that load it, run one untimed batch, then ``--repeat`` timed ones, each after
resetting the process's peak RSS (``/proc/self/clear_refs``): "extra peak" is the peak RSS
during a batch minus the RSS before it; wall and CPU seconds are medians.
``--compare-to /path/to/other/checkout`` runs the same children on another checkout's code.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import header, median_time, median_times, report


def _status_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def _requests(queries: list[str], n_docs: int, filtered: bool, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, n_docs, (len(queries), 2))
    return [{"query": q, "limit": 10, **({"filters": {"id": {"$in": [str(a), str(b)]}}} if filtered else {})}
            for q, (a, b) in zip(queries, pairs.tolist(), strict=True)]


def child(index: str, case: str, n_queries: int, repeat: int) -> None:
    """One case in this process: prints a JSON line with the batch times and extra peak RSS."""
    import gc

    from bench_bm25 import synthetic

    from kolm_search import BM25Retriever
    from kolm_search.contract.client import SearchClient
    from kolm_search.contract.config import SearchPipelineModules
    from kolm_search.contract.planners import DefaultQueryPlanner

    ret = BM25Retriever.load(index)
    client = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=ret), {"default_mode": "fulltext"})
    _, queries = synthetic(10, n_queries, seed=1)
    n_docs = len(ret.table)
    filtered = case == "distinct"
    t0 = time.perf_counter()
    rows = len(client.search_batch(_requests(queries, n_docs, filtered, seed=100)).run)
    first = time.perf_counter() - t0
    seconds, cpu, extra = [], [], []
    for r in range(repeat):
        reqs = _requests(queries, n_docs, filtered, seed=r)
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
        before = _status_kb("VmRSS")
        t0, c0 = time.perf_counter(), time.process_time()
        out = client.search_batch(reqs)
        seconds.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        extra.append((_status_kb("VmHWM") - before) / 1024)
        del out
    print(json.dumps({"case": case, "first": first, "seconds": statistics.median(seconds),
                      "cpu": statistics.median(cpu), "extra_mb": statistics.median(extra), "rows": rows}))


def scale(sizes: list[int], n_queries: int, repeat: int, compare_to: str | None, rounds: int) -> None:
    from bench_bm25 import synthetic

    from kolm_search import BM25Retriever, Tokenizer

    header(f"{n_queries} queries, top 10, each with a distinct two-id filter, vs unfiltered; BM25 over synthetic docs")
    here = str(Path(__file__).resolve().parent)
    checkouts = {"this": os.environ.get("PYTHONPATH", "")} | ({"compared": compare_to} if compare_to else {})
    rows = []
    for n in sizes:
        docs, _ = synthetic(n, 1)
        with tempfile.TemporaryDirectory() as tmp:
            ret = BM25Retriever([{"id": str(i), "content": d} for i, d in enumerate(docs)],
                                tokenizer=Tokenizer(stopwords=None, stemmer=None))
            ret.save(Path(tmp) / "index")
            del ret, docs
            time.sleep(30)  # let the machine settle after the build freed its memory
            results: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for _ in range(rounds):  # cases and checkouts interleaved, so a slow spell hits each alike
                for case in ("none", "distinct"):
                    for name, path in checkouts.items():
                        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (path, here) if p))
                        out = subprocess.run([sys.executable, __file__, "--child", str(Path(tmp) / "index"), case,
                                              "--queries", str(n_queries), "--repeat", str(repeat)],
                                             env=env, capture_output=True, text=True, check=True)
                        results.setdefault((name, case), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
            for name in checkouts:
                base = statistics.median(r["seconds"] for r in results[(name, "none")])
                for case in ("none", "distinct"):
                    runs = results[(name, case)]
                    sec = statistics.median(r["seconds"] for r in runs)
                    rows.append({"what": f"{n:>9,} docs, {'no filter' if case == 'none' else 'distinct two-id filters'}"
                                         f" ({name})", "seconds": sec,
                                 "cpu_s": f"{statistics.median(r['cpu'] for r in runs):.2f}",
                                 "first_call_s": f"{statistics.median(r['first'] for r in runs):.2f}",
                                 "extra_peak_mb": f"{statistics.median(r['extra_mb'] for r in runs):.0f}",
                                 "vs_none": f"{sec / base:.2f}x", "rows": runs[0]["rows"]})
    report(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="cranfield", help="a BEIR folder or dataset name (default: packaged Cranfield)")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scale", type=int, nargs="*", help="document counts: the distinct-filter batch at scale")
    ap.add_argument("--queries", type=int, default=5000, help="queries of the --scale batches")
    ap.add_argument("--compare-to", default=None, help="another checkout whose code runs the --scale children too")
    ap.add_argument("--rounds", type=int, default=2, help="child processes per case and checkout (--scale)")
    ap.add_argument("--child", nargs=2, metavar=("INDEX", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.queries, args.repeat)
        return
    if args.scale:
        scale(args.scale, args.queries, args.repeat, args.compare_to, args.rounds)
        return
    from kolm_search import presets
    from kolm_search.adapters import LSAEmbedder
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.io import load_dataset

    ds = load_dataset(args.dataset)
    rng = np.random.default_rng(0)
    corpus = ds.corpus.copy()
    n = len(corpus)
    corpus["year"] = rng.integers(1950, 2020, n)
    corpus["lang"] = rng.choice(["en", "fr", "de"], n)
    corpus["tags"] = [list(rng.choice(["a", "b", "c", "d"], int(rng.integers(0, 3)), replace=False)) for _ in range(n)]
    table = DocumentTable.from_frame(corpus)
    header(f"hybrid (BM25 + LSA-256) on {ds} ({n} documents), top-{args.limit}, filters on synthetic metadata")
    client = presets.hybrid(table, LSAEmbedder(table.texts(), n_components=256))
    queries = ds.queries
    shared = {"year": {"$gte": 1980}, "lang": {"$ne": "de"}, "$or": [{"tags": "a"}, {"tags": {"$exists": False}}]}
    per_query = [{"year": {"$gte": int(y)}, "lang": {"$in": np.array(["en", "fr"])}} for y in rng.integers(1950, 2010, len(queries))]
    reqs_shared = [{"query": q, "limit": args.limit, "filters": shared} for q in queries["query"]]
    reqs_each = [{"query": q, "limit": args.limit, "filters": f} for q, f in zip(queries["query"], per_query, strict=True)]
    times = median_times({
        "none": lambda: client.search_batch(queries, limit=args.limit),
        "shared": lambda: client.search_batch(reqs_shared),
        "each": lambda: client.search_batch(reqs_each),
    }, repeat=args.repeat)
    fresh = DocumentTable.from_frame(corpus)
    t_cold, _ = median_time(lambda: DocumentTable.from_frame(corpus).filter_mask(shared), repeat=3, warmup=0)
    t_table, _ = median_time(lambda: DocumentTable.from_frame(corpus), repeat=3, warmup=0)
    fresh.filter_mask(shared)
    t_warm, mask = median_time(lambda: fresh.filter_mask(shared), repeat=args.repeat)
    q = len(queries)
    report([
        {"what": "search_batch, no filter", "seconds": times["none"], "qps": f"{q / times['none']:,.0f}"},
        {"what": "search_batch, one filter for all queries", "seconds": times["shared"], "qps": f"{q / times['shared']:,.0f}",
         "vs_none": f"{times['shared'] / times['none']:.2f}x", "matching_docs": int(mask.sum())},
        {"what": f"search_batch, {q} distinct filters", "seconds": times["each"], "qps": f"{q / times['each']:,.0f}",
         "vs_none": f"{times['each'] / times['none']:.2f}x"},
        {"what": "compile one filter, field columns cached", "seconds": t_warm},
        {"what": "compile one filter, first use (columns built)", "seconds": max(t_cold - t_table, 0.0)},
    ])


if __name__ == "__main__":
    main()
