"""BM25 vs BM25 + pseudo-relevance feedback (RM3, Bo1, KL) on Cranfield: effectiveness and time.

Rerun: ``python benchmarks/bench_feedback.py`` (the packaged Cranfield; ``--dataset`` takes any
BEIR folder or name). Every run is ``search_batch`` of all queries, top-1000, one BM25 index
(Lucene variant, ``--k1``/``--b``) shared by the four pipelines; the feedback pipelines keep
their defaults (RM3: Anserini's 10 documents, 10 terms, original weight 0.5; Bo1/KL: Terrier's
3 documents, 10 terms). The time column is the median ``search_batch`` time per query, after a
warm-up call; counting the collection's term frequencies (once per index) is timed apart.

``python benchmarks/bench_feedback.py --docs 100000 --queries 2000`` times the retrievers alone
(``retrieve_batch``, top-100) on bench_bm25's synthetic Zipf corpus instead (no judgements), with
the expansion step (first pass + weights) apart from the whole call.
"""

from __future__ import annotations

import argparse
import time

from _common import header, median_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dataset", default="cranfield", help="a BEIR folder or dataset name (default: packaged Cranfield)")
    ap.add_argument("--k1", type=float, default=1.5)
    ap.add_argument("--b", type=float, default=0.75)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--docs", type=int, default=0, help="time on a synthetic corpus of this many documents")
    ap.add_argument("--queries", type=int, default=2000, help="synthetic queries (with --docs)")
    args = ap.parse_args()
    if args.docs:
        synthetic_timing(args)
        return
    from kolm_search import FeedbackRetriever, evaluate
    from kolm_search.contract.client import SearchClient
    from kolm_search.contract.config import SearchPipelineModules
    from kolm_search.contract.planners import DefaultQueryPlanner
    from kolm_search.io import load_dataset
    from kolm_search.retrievers import BM25Retriever

    ds = load_dataset(args.dataset)
    header(f"BM25 (k1={args.k1:g}, b={args.b:g}) and pseudo-relevance feedback on {ds}, top-1000")
    bm25 = BM25Retriever(ds.corpus, k1=args.k1, b=args.b)
    queries, qrels = ds.queries, ds.qrels
    metrics = ["map", "recall@100", "ndcg@10"]
    t0 = time.perf_counter()
    FeedbackRetriever(bm25)._counts()  # once per index, shared by the feedback retrievers
    print(f"term counts of the collection (once per index): {time.perf_counter() - t0:.2f} s")
    print("| pipeline | MAP | Recall@100 | nDCG@10 | ms / query (batch) |")
    print("| --- | --- | --- | --- | --- |")
    base_ms = None
    for name in ("bm25", "rm3", "bo1", "kl"):
        retriever = bm25 if name == "bm25" else FeedbackRetriever(bm25, name)  # type: ignore[arg-type]
        client = SearchClient(SearchPipelineModules(planner=DefaultQueryPlanner(), retriever=retriever),
                              {"default_mode": "fulltext"})
        client.search_batch(queries.head(2), limit=1000)  # warm-up
        seconds, run = median_time(lambda c=client: c.search_batch(queries, limit=1000), args.repeat, warmup=0)
        scores = evaluate(run, qrels, metrics)
        ms = 1000.0 * seconds / len(queries)
        base_ms = base_ms or ms
        label = "BM25" if name == "bm25" else f"+ {name.upper() if name != 'bo1' else 'Bo1'}"
        print(f"| {label} | {scores['map']:.4f} | {scores['recall@100']:.4f} | {scores['ndcg@10']:.4f} | "
              f"{ms:.2f} ({ms / base_ms:.1f}x) |")


def synthetic_timing(args: argparse.Namespace) -> None:
    import numpy as np
    import pandas as pd
    from bench_bm25 import synthetic

    from kolm_search import FeedbackRetriever, QueryBatch, Tokenizer
    from kolm_search.retrievers import BM25Retriever

    docs, queries = synthetic(args.docs, args.queries)
    header(f"retrieve_batch top-100, synthetic ({len(docs)} docs, {len(queries)} queries)")
    t0 = time.perf_counter()
    bm25 = BM25Retriever(pd.DataFrame({"id": [str(i) for i in range(len(docs))], "content": docs}),
                         tokenizer=Tokenizer(stopwords=None, stemmer=None), k1=args.k1, b=args.b)
    print(f"index: {time.perf_counter() - t0:.1f} s")

    def batch() -> QueryBatch:
        n = len(queries)
        return QueryBatch(texts=queries, owner=np.arange(n), n_queries=n, limit=100, filters=[{}] * n,
                          mode="fulltext", metadata=[{} for _ in range(n)])

    t0 = time.perf_counter()
    FeedbackRetriever(bm25)._counts()  # once per index, shared by the feedback retrievers
    print(f"term counts of the collection (once per index): {time.perf_counter() - t0:.1f} s")
    print("| retriever | seconds | ms / query | expansion alone (first pass + weights) |")
    print("| --- | --- | --- | --- |")
    base, _ = median_time(lambda: bm25.retrieve_batch(batch()), args.repeat)
    print(f"| BM25 | {base:.2f} | {1000 * base / len(queries):.2f} | |")
    for name in ("rm3", "bo1", "kl"):
        fr = FeedbackRetriever(bm25, name)  # type: ignore[arg-type]
        seconds, _ = median_time(lambda f=fr: f.retrieve_batch(batch()), args.repeat)
        expand, _ = median_time(lambda f=fr: f._expand(queries), args.repeat, warmup=0)
        print(f"| {name} | {seconds:.2f} ({seconds / base:.1f}x) | {1000 * seconds / len(queries):.2f} | "
              f"{expand:.2f} s |")


if __name__ == "__main__":
    main()
