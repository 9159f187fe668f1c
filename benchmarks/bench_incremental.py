"""Incremental indexes: adding or deleting 1,000 documents (then merging) vs a full rebuild.

Rerun: ``python benchmarks/bench_incremental.py --docs 200000 --change 1000 --repeat 3``.
Synthetic Zipf corpus (as bench_bm25). Each timed update starts from the same base index
(a shallow copy: a merge never writes the base's arrays) and ends merged, so the next search
pays nothing more; the rebuild is a new retriever over the same documents in the same order.
Scores after each update are checked bit-equal to the rebuild's.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import pandas as pd
from _common import header, median_time, report
from bench_bm25 import synthetic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--change", type=int, default=1000, help="documents added, then deleted")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--dim", type=int, default=128, help="dense embedding dimension")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from kolm_search import BM25Retriever, Tokenizer
    from kolm_search.retrievers.dense import DenseRetriever

    header(f"incremental: {args.docs} docs, +{args.change} / -{args.change}")
    docs, queries = synthetic(args.docs + args.change, args.queries)
    frame = pd.DataFrame({"id": [str(i) for i in range(len(docs))], "content": docs})
    base_frame, new_frame = frame.iloc[:args.docs], frame.iloc[args.docs:]
    tok = Tokenizer(stopwords=None, stemmer=None)
    base = BM25Retriever(base_frame, tokenizer=tok)
    rng = np.random.default_rng(0)
    gone = [str(i) for i in rng.choice(args.docs, args.change, replace=False)]
    k = 100

    def added() -> BM25Retriever:
        r = copy.copy(base)
        r.add(new_frame)
        r.merge()
        return r

    def deleted() -> BM25Retriever:
        r = copy.copy(base)
        r.delete(gone)
        r.merge()
        return r

    rows = []
    t_add, r_add = median_time(added, args.repeat)
    t_del, r_del = median_time(deleted, args.repeat)
    t_full, r_full = median_time(lambda: BM25Retriever(frame, tokenizer=tok), args.repeat, warmup=0)
    for got, want in zip(r_add.score_texts(queries, k), r_full.score_texts(queries, k), strict=True):
        assert np.array_equal(got, want), "add + merge differs from the rebuild"
    kept = frame[~frame["id"].isin(gone)].iloc[:args.docs - args.change]
    ref_del = BM25Retriever(kept, tokenizer=tok)
    for got, want in zip(r_del.score_texts(queries, k), ref_del.score_texts(queries, k), strict=True):
        assert np.array_equal(got, want), "delete + merge differs from the rebuild"
    del r_add, r_del, r_full, ref_del
    rows += [{"what": f"bm25 add {args.change} + merge", "seconds": t_add, "vs_rebuild": f"{t_full / t_add:.1f}x"},
             {"what": f"bm25 delete {args.change} + merge", "seconds": t_del, "vs_rebuild": f"{t_full / t_del:.1f}x"},
             {"what": f"bm25 rebuild of {len(frame)} (tokenise + index)", "seconds": t_full}]

    emb = rng.standard_normal((len(frame), args.dim)).astype(np.float32)
    dbase = DenseRetriever(base_frame, embeddings=emb[:args.docs])

    def dense_added() -> DenseRetriever:
        r = copy.copy(dbase)
        r.add(new_frame, embeddings=emb[args.docs:])
        r.merge()
        return r

    t_dadd, r_dadd = median_time(dense_added, args.repeat)
    t_dfull, r_dfull = median_time(lambda: DenseRetriever(frame, embeddings=emb), args.repeat)
    assert np.array_equal(r_dadd.embeddings, r_dfull.embeddings)
    rows += [{"what": f"dense add {args.change} + merge (d={args.dim})", "seconds": t_dadd,
              "vs_rebuild": f"{t_dfull / t_dadd:.1f}x"},
             {"what": f"dense rebuild of {len(frame)} (given embeddings)", "seconds": t_dfull}]
    report(rows)


if __name__ == "__main__":
    main()
