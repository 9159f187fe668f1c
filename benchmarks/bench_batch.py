"""search_batch of a hybrid preset vs a loop of single ``search`` calls, on Cranfield.

Rerun: ``python benchmarks/bench_batch.py`` (the packaged Cranfield; ``--dataset`` takes any BEIR
folder or name). The dense side
uses LSA (no model download) so the figure measures the pipeline, not a neural encoder.
"""

from __future__ import annotations

import argparse
import asyncio

from _common import header, median_time, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="cranfield", help="a BEIR folder or dataset name (default: packaged Cranfield)")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from kolm_search import presets
    from kolm_search.adapters import LSAEmbedder
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.io import load_dataset

    ds = load_dataset(args.dataset)
    header(f"hybrid (BM25 + LSA-256, RRF k=60) on {ds}, top-{args.limit}")
    table = DocumentTable.from_frame(ds.corpus)
    client = presets.hybrid(table, LSAEmbedder(table.texts(), n_components=256))
    queries = ds.queries
    client.search_batch(queries.head(3), limit=args.limit)
    t_batch, batch = median_time(lambda: client.search_batch(queries, limit=args.limit), args.repeat)

    def loop() -> list:
        return [client.search_sync({"query": q, "limit": args.limit}) for q in queries["query"]]

    async def gathered() -> list:
        return list(await asyncio.gather(*(client.search({"query": q, "limit": args.limit}) for q in queries["query"])))

    t_loop, singles = median_time(loop, args.repeat)
    t_gather, _ = median_time(lambda: asyncio.run(gathered()), args.repeat)
    same = all(list(batch.run[batch.run.qid == qid].doc_id) == [d.id for d in s.results]
               for qid, s in zip(queries["qid"], singles, strict=True))
    n = len(queries)
    rows = [
        {"what": "search_batch (one call)", "seconds": t_batch, "qps": f"{n / t_batch:,.0f}", "same_results": same},
        {"what": "loop of search_sync", "seconds": t_loop, "qps": f"{n / t_loop:,.0f}", "batch_speedup": f"{t_loop / t_batch:.1f}x"},
        {"what": "asyncio.gather of search", "seconds": t_gather, "qps": f"{n / t_gather:,.0f}", "batch_speedup": f"{t_gather / t_batch:.1f}x"},
    ]
    report(rows)


if __name__ == "__main__":
    main()
