"""Filtered search: ``search_batch`` of a hybrid preset with and without filters, on Cranfield.

Rerun: ``python bench_filters.py`` (the packaged Cranfield; ``--dataset`` takes any BEIR folder
or name). Each document gets synthetic metadata (``year`` 1950-2019, ``lang`` of three, ``tags``);
rows: no filter, one filter shared by every query (compiled once per batch), a different filter
per query (compiled once per distinct filter), and the cost of compiling one filter to a mask.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import header, median_time, median_times, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="cranfield", help="a BEIR folder or dataset name (default: packaged Cranfield)")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from kolm_search import presets
    from kolm_search.adapters import LSAEmbedder
    from kolm_search.doctable import DocumentTable
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
