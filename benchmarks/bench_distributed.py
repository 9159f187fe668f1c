"""Dask scale-out: overhead of a 1-worker LocalCluster, and a sharded 1M-document BM25 index.

Rerun: ``python benchmarks/bench_distributed.py --docs 1000000 --shards 4``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import header, median_time, report


def synthetic(n_docs: int, vocab: int = 50_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    p /= p.sum()
    lengths = rng.integers(10, 60, n_docs)
    words = np.array([f"t{i}" for i in range(vocab)], dtype=object)
    tokens = words[rng.choice(vocab, size=int(lengths.sum()), p=p)]
    docs = [" ".join(x) for x in np.split(tokens, np.cumsum(lengths)[:-1])]
    return pd.DataFrame({"id": [f"d{i}" for i in range(n_docs)], "content": docs})


def rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import distributed

    from kolm_search import BM25Retriever, presets
    from kolm_search import distributed as kd
    from kolm_search.text import Tokenizer

    header(f"Dask: overhead, and {args.docs} docs in {args.shards} shards")
    plain = Tokenizer(stopwords=None, stemmer=None)
    rng = np.random.default_rng(1)
    rows = []

    # overhead: the same batch in-process vs on a 1-worker cluster (pipeline already shipped)
    small = synthetic(50_000, seed=3)
    client = presets.bm25(small, tokenizer=plain, fields=("content",))
    queries = pd.DataFrame({"qid": range(args.queries),
                            "query": [" ".join(f"t{j}" for j in rng.integers(0, 3000, 4)) for _ in range(args.queries)]})
    t_local, local = median_time(lambda: client.search_batch(queries, limit=100).run, args.repeat)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=50) as cluster, distributed.Client(cluster) as dc:
        kd.search_batch(client, queries.head(10), dask_client=dc, npartitions=1, limit=100)
        t_remote, remote = median_time(lambda: kd.search_batch(client, queries, dask_client=dc, npartitions=1, limit=100),
                                       args.repeat, warmup=0)
    rows.append({"what": "search_batch in-process (50k docs, 1000 queries)", "seconds": t_local})
    rows.append({"what": "same on a 1-worker LocalCluster", "seconds": t_remote, "overhead": f"{t_remote / t_local:.2f}x",
                 "equal": bool(local.equals(remote))})

    # scale: sharded BM25 over a large corpus, 2 workers
    t0 = time.perf_counter()
    big = synthetic(args.docs, seed=5)
    rows.append({"what": f"generate {args.docs} synthetic docs", "seconds": time.perf_counter() - t0})
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, silence_logs=50, memory_limit=0) as cluster, distributed.Client(cluster) as dc:
        base = dc.run(rss_mb)
        t0 = time.perf_counter()
        sharded = kd.ShardedBM25(big, args.shards, dask_client=dc, tokenizer=plain, fields=("content",))
        t_build = time.perf_counter() - t0
        per_worker = {w: m - base[w] for w, m in dc.run(rss_mb).items()}
        index_bytes = sum(dc.submit(lambda s: int(s.t_docs.nbytes + s.t_w.nbytes + s.t_ptr.nbytes), sh, pure=False).result()
                          for sh in sharded.shards)
        qs = queries.head(200)
        sharded.search(qs, k=100)
        t_q, got = median_time(lambda: sharded.search(qs, k=100), args.repeat, warmup=0)
    rows.append({"what": f"ShardedBM25 build ({args.shards} shards, 2 workers)", "seconds": t_build,
                 "index_MB_per_1M_docs": f"{index_bytes / 1e6 * 1e6 / args.docs:.0f}"})
    rows.append({"what": "worker peak RSS growth (MB)", "seconds": 0.0, "per_worker": {k[-5:]: round(v) for k, v in per_worker.items()}})
    rows.append({"what": "ShardedBM25 search, 200 queries top-100", "seconds": t_q, "qps": f"{len(qs) / t_q:,.0f}"})
    t0 = time.perf_counter()
    whole = BM25Retriever(big, tokenizer=plain, fields=("content",))
    t_whole = time.perf_counter() - t0
    d, s, c = whole.score_texts(list(qs["query"]), 100)
    same = all(list(got[got.qid == q].doc_id) == list(whole.table.ids[d[i, : c[i]]]) for i, q in enumerate(qs["qid"]))
    rows.append({"what": "unsharded build in-process", "seconds": t_whole, "index_MB": f"{(whole.t_docs.nbytes + whole.t_w.nbytes) / 1e6:.0f}",
                 "sharded_topk_equal": same})
    report(rows)


if __name__ == "__main__":
    main()
