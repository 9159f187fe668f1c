"""Dask scale-out: overhead of a 1-worker LocalCluster, a sharded 1M-document BM25 index built
from a DataFrame, and one built by the workers from a corpus file.

Rerun: ``python benchmarks/bench_distributed.py --docs 1000000 --shards 4`` (in memory), and
``python benchmarks/bench_distributed.py --file-docs 1000000 --dir /work/cache/h28d`` (from a file).

From a file (``--file-docs``): the synthetic corpus of ``bench_stream_build.write_corpus`` (MS
MARCO passage lengths, a Zipf vocabulary of 200,000 made-up words) written once to
``--dir/corpus-<n>.jsonl.gz`` and decompressed to ``corpus-<n>.jsonl``; 1,000 queries of 2-8 words
(``bench_scale.write_queries``). Each build runs in its own process, the modes one after another,
``--rounds`` times: ``single`` is ``BM25Retriever.build(corpus.jsonl, memory_limit=1 GB)`` (its
tokenising on the usable cores, then the merge, save and load in one process); ``sharded`` is
``ShardedBM25.build(corpus.jsonl, n_shards=--file-shards, memory_limit=1 GB)`` on a fresh
``LocalCluster`` of ``--file-workers`` single-threaded workers (each shard reads its byte range,
counts, is weighed with the merged statistics, saved and loaded on its worker; the cluster's
start-up is timed apart); ``sharded-gz`` the same from the ``.jsonl.gz`` file (each shard
decompresses the file from its start to its last line). Peak RSS: the process tree (the driver,
the scheduler, nannies and workers, or the tokenising processes), sampled every 50 ms, and each
worker's own peak (VmHWM). Then the top-100 of every query (``score_texts``; ``search``) timed,
median of 3, and checked equal (ids, ranks and float32 scores) to the single-machine run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

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


def _vm_hwm_mb() -> float:
    from bench_stream_build import vm_hwm_mb

    return vm_hwm_mb()


def file_child(mode: str, corpus: Path, out: Path, queries: Path, shards: int, workers: int, limit: int) -> dict:
    """One build from ``corpus`` in this process, then the queries; the run saved beside ``out``."""
    import distributed
    from bench_stream_build import TreeRss, vm_hwm_mb

    from kolm_search import BM25Retriever
    from kolm_search import distributed as kd

    texts = queries.read_text().splitlines()
    qs = pd.DataFrame({"qid": [str(i) for i in range(len(texts))], "query": texts})
    tree = TreeRss()
    res: dict = {}
    if mode == "single":
        t0 = time.perf_counter()
        ix = BM25Retriever.build(corpus, out, memory_limit=limit, progress=False)
        res["seconds"] = time.perf_counter() - t0
        res["tree_peak_mb"] = tree.close()
        res["peak_rss_mb"] = vm_hwm_mb()

        def search() -> pd.DataFrame:
            d, sc, c = ix.score_texts(texts, 100)
            keep = np.arange(100)[None, :] < c[:, None]
            return pd.DataFrame({"qid": np.repeat(qs["qid"].to_numpy(object), c), "doc_id": ix.table.ids[d[keep]],
                                 "rank": (np.cumsum(keep, axis=1) - 1)[keep], "score": sc[keep].astype(np.float64)})

        res["query_seconds"], run = median_time(search, 3)
    else:
        t0 = time.perf_counter()
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                                      dashboard_address="127.0.0.1:0", silence_logs=50) as cl, \
                distributed.Client(cl) as dc:
            dc.wait_for_workers(workers, timeout=120)
            dc.run(lambda: __import__("kolm_search.distributed.shard_kinds"))
            res["cluster_seconds"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            sh = kd.ShardedBM25.build(corpus, out, n_shards=shards, dask_client=dc, memory_limit=limit)
            res["seconds"] = time.perf_counter() - t0
            res["tree_peak_mb"] = tree.close()
            res["worker_peak_mb"] = sorted(round(v) for v in dc.run(_vm_hwm_mb).values())
            res["peak_rss_mb"] = vm_hwm_mb()
            res["shard_sizes"] = [int(x) for x in sh.shard_sizes]
            res["query_seconds"], run = median_time(lambda: sh.search(qs, k=100), 3)
    res["index_mb"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    run.to_parquet(out.with_suffix(".run.parquet"))
    return res


def file_build(args: argparse.Namespace) -> None:
    """Sharded vs single-machine builds from one corpus file, each in its own process."""
    import gzip
    import json
    import shutil
    import subprocess
    import sys

    from bench_scale import write_queries
    from bench_stream_build import write_corpus

    n = args.file_docs
    args.dir.mkdir(parents=True, exist_ok=True)
    gz, plain, queries = args.dir / f"corpus-{n}.jsonl.gz", args.dir / f"corpus-{n}.jsonl", args.dir / "queries-1000.txt"
    if not gz.exists():
        write_corpus(gz, n)
    if not plain.exists():
        with gzip.open(gz, "rb") as src, open(plain.with_suffix(".tmp"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
        plain.with_suffix(".tmp").rename(plain)
    if not queries.exists():
        write_queries(queries, 1000)
    header(f"Dask: a BM25 index of {n:,} docs built from a file, sharded vs single-machine")
    print("| round | build | seconds | cluster start (s) | peak RSS, process tree (MB) | workers' peak RSS (MB) | "
          "index (MB) | 1,000 queries top-100 (s) | equal to single | load average |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in range(args.rounds):
        for mode in args.modes:
            out = args.dir / f"index-{n}-{mode}"
            shutil.rmtree(out, ignore_errors=True)
            corpus = gz if mode == "sharded-gz" else plain
            cmd = [sys.executable, __file__, "--file-child", mode, str(corpus), str(out), str(queries),
                   str(args.file_shards), str(args.file_workers), str(args.limit)]
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=3600)
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            got = pd.read_parquet(out.with_suffix(".run.parquet"))
            want = pd.read_parquet(args.dir / f"index-{n}-single.run.parquet") if mode != "single" else got
            equal = got.reset_index(drop=True).equals(want.reset_index(drop=True))
            load = " / ".join(f"{x:.1f}" for x in __import__("os").getloadavg())
            print(f"| {r + 1} | {mode} | {res['seconds']:.1f} | {res.get('cluster_seconds', 0):.1f} | "
                  f"{res['tree_peak_mb']:,.0f} | {res.get('worker_peak_mb', '')} | {res['index_mb']:,.0f} | "
                  f"{res['query_seconds']:.2f} | {equal} | {load} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--file-docs", type=int, default=0, help="build from a corpus file of this many docs instead")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kolm-bench-distributed"))
    ap.add_argument("--file-shards", type=int, default=2)
    ap.add_argument("--file-workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=1 << 30, help="memory_limit (bytes) of each build or shard")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["single", "sharded", "sharded-gz"])
    ap.add_argument("--file-child", nargs=7, help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-scale", action="store_true", help="only the 1-worker overhead")
    args = ap.parse_args()
    if args.file_child:
        import json

        mode, corpus, out, queries, shards, workers, limit = args.file_child
        print(json.dumps(file_child(mode, Path(corpus), Path(out), Path(queries), int(shards), int(workers), int(limit))))
        return
    if args.file_docs:
        file_build(args)
        return
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
