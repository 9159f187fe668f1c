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
    """Peak resident set of this process since the last :func:`warm` (VmHWM, MB; Linux)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM")) / 1024.0


def rss_now_mb() -> float:
    """Current resident set (VmRSS, MB; Linux)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024.0


def warm() -> float:
    """Import and run the BM25 kernels once, then reset the peak (clear_refs); returns the RSS."""
    from kolm_search import BM25Retriever

    BM25Retriever(pd.DataFrame({"id": ["a", "b"], "content": ["x y", "y z"]})).score_texts(["y"], 2)
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return rss_mb()


def index_bytes(ret) -> int:
    return int(ret.t_docs.nbytes + ret.t_w.nbytes + ret.t_ptr.nbytes)


def build_whole(frame: pd.DataFrame, kwargs: dict) -> object:
    from kolm_search import BM25Retriever

    return BM25Retriever(frame, **kwargs)


def cluster(n_workers: int, threads: int):
    import distributed

    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                                    dashboard_address="127.0.0.1:0", silence_logs=50, memory_limit=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-scale", action="store_true", help="only the 1-worker overhead")
    args = ap.parse_args()
    import distributed

    from kolm_search import distributed as kd
    from kolm_search import presets
    from kolm_search.engine.text import Tokenizer

    header(f"Dask: overhead, and {args.docs} docs in {args.shards} shards")
    plain = Tokenizer(stopwords=None, stemmer=None)
    kwargs = {"tokenizer": plain, "fields": ("content",)}
    rng = np.random.default_rng(1)
    rows = []

    # overhead: the same batch in-process vs on a 1-worker cluster, the pipeline shipped once (kd.ship)
    small = synthetic(50_000, seed=3)
    client = presets.bm25(small, **kwargs)
    for n_q in (args.queries, 10 * args.queries):
        queries = pd.DataFrame({"qid": range(n_q), "query": [" ".join(f"t{j}" for j in rng.integers(0, 3000, 4))
                                                              for _ in range(n_q)]})
        t_local, local = median_time(lambda q=queries: client.search_batch(q, limit=100).run, args.repeat)
        with cluster(1, 2) as cl, distributed.Client(cl) as dc:
            shipped = kd.ship(client, dc)
            kd.search_batch(shipped, queries.head(10), dask_client=dc, npartitions=1, limit=100)
            t_remote, remote = median_time(lambda q=queries, s=shipped, c=dc: kd.search_batch(s, q, dask_client=c, npartitions=1,
                                                                             limit=100), args.repeat)
        rows.append({"what": f"search_batch in-process (50k docs, {n_q} queries)", "seconds": t_local})
        rows.append({"what": "  same on a 1-worker LocalCluster, pipeline shipped", "seconds": t_remote,
                     "overhead": f"{t_remote / t_local:.2f}x", "equal": bool(local.equals(remote))})
    if args.skip_scale:
        report(rows)
        return

    t0 = time.perf_counter()
    big = synthetic(args.docs, seed=5)
    rows.append({"what": f"generate {args.docs} synthetic docs", "seconds": time.perf_counter() - t0})
    qs = pd.DataFrame({"qid": range(200), "query": [" ".join(f"t{j}" for j in rng.integers(0, 3000, 4)) for _ in range(200)]})

    # unsharded, on one worker process (so its memory is measured the same way)
    with cluster(1, 1) as cl, distributed.Client(cl) as dc:
        base = dc.run(warm)
        t0 = time.perf_counter()
        big_f = dc.scatter(big, hash=False)  # the documents count in both cases
        whole = dc.submit(build_whole, big_f, kwargs, pure=False)
        whole_bytes = dc.submit(index_bytes, whole, pure=False).result()
        t_whole = time.perf_counter() - t0
        del big_f
        whole_peak = next(m - base[w] for w, m in dc.run(rss_mb).items())
        whole_now = next(m - base[w] for w, m in dc.run(rss_now_mb).items())
        want = dc.submit(lambda r, t: r.score_texts(t, 100), whole, list(qs["query"]), pure=False).result()
        ids = dc.submit(lambda r: r.table.ids, whole, pure=False).result()
    rows.append({"what": "unsharded build, one worker", "seconds": t_whole,
                 "index_MB_per_1M_docs": f"{whole_bytes / args.docs:.0f}", "peak_RSS_growth_MB": round(whole_peak),
                 "resident_growth_MB": round(whole_now)})

    # sharded: one shard per worker
    with cluster(args.shards, 1) as cl, distributed.Client(cl) as dc:
        base = dc.run(warm)
        t0 = time.perf_counter()
        sharded = kd.ShardedBM25(big, args.shards, dask_client=dc, **kwargs)
        t_build = time.perf_counter() - t0
        peaks = [m - base[w] for w, m in dc.run(rss_mb).items()]
        now = [m - base[w] for w, m in dc.run(rss_now_mb).items()]
        shard_bytes = [dc.submit(index_bytes, sh, pure=False).result() for sh in sharded.shards]
        sharded.search(qs, k=100)
        t_q, got = median_time(lambda: sharded.search(qs, k=100), args.repeat, warmup=0)
    rows.append({"what": f"ShardedBM25 build, {args.shards} shards on {args.shards} workers", "seconds": t_build,
                 "speedup_vs_unsharded": f"{t_whole / t_build:.2f}x"})
    rows.append({"what": "  shard index size / unsharded index", "seconds": 0.0,
                 "per_shard": [f"{b / whole_bytes:.3f}" for b in shard_bytes]})
    rows.append({"what": "  worker peak RSS growth / unsharded worker's", "seconds": 0.0,
                 "per_worker": [f"{p / whole_peak:.3f}" for p in peaks], "MB": [round(p) for p in peaks]})
    rows.append({"what": "  worker resident growth after build / unsharded's", "seconds": 0.0,
                 "per_worker": [f"{p / whole_now:.3f}" for p in now], "MB": [round(p) for p in now]})
    rows.append({"what": "ShardedBM25 search, 200 queries top-100", "seconds": t_q, "qps": f"{len(qs) / t_q:,.0f}"})
    d, s, c = want
    same = all(list(got[got.qid == q].doc_id) == list(ids[d[i, : c[i]]])
               and np.allclose(got[got.qid == q].score, s[i, : c[i]], rtol=1e-6) for i, q in enumerate(qs["qid"]))
    rows.append({"what": "  sharded top-k equal to the unsharded top-k", "seconds": 0.0, "equal": same})
    report(rows)


if __name__ == "__main__":
    main()
