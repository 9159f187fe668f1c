"""Phase-2 lookups through document bitmaps of frequent terms against block galloping (issue 28).

Times ``pruned_topk`` on a saved index with and without bitmaps (terms of document frequency at
least ``n_docs / div``), alternating rounds in one process, and checks both give the exhaustive
kernel's results bit for bit. Run from ``benchmarks/``::

    PYTHONPATH=<checkout> nice -n 5 python bench_bitmaps.py /work/cache/h28p/scale/index-1000000 \
        /work/cache/h28p/scale/queries-1000.txt --div 64 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from kolm_search import BM25Retriever
from kolm_search._kernels import load
from kolm_search.engine.selection import Selections
from kolm_search.retrievers.bm25_weights import reduce_offsets
from kolm_search.retrievers.bounds import prune_queries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("queries")
    ap.add_argument("--div", type=float, nargs="+", default=[64.0])
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lookup-bits", type=float, nargs="+", default=[2.0])
    a = ap.parse_args()
    r = BM25Retriever.load(a.index)
    texts = open(a.queries).read().splitlines()
    q_ptr, q_ids = r.encode(texts)
    m = len(q_ptr) - 1
    w = np.ones(len(q_ids), np.float32)
    off = np.ascontiguousarray(reduce_offsets(r.nonocc[q_ids] * w, q_ptr), np.float32)
    n_docs = len(r.table)
    sel = Selections.none(m)
    pruned, sparse, bm = load("pruned"), load("sparse"), load("bitmaps")
    df = np.diff(r.t_ptr)
    used = np.unique(q_ids)
    maps = {}
    for div in a.div:
        terms = used[df[used] >= n_docs / div]
        t0 = time.perf_counter()
        bits, rank = bm.term_bitmaps(r.t_ptr, r.t_docs, terms, n_docs, n_threads=a.threads)
        t1 = time.perf_counter() - t0
        slot = np.full(len(df), -1, np.int64)
        slot[terms] = np.arange(len(terms))
        maps[div] = (slot, bits, rank)
        print(f"div {div}: {len(terms)} terms, {(bits.nbytes + rank.nbytes) / 1e6:.0f} MB, built in {t1:.2f} s")
    print("load average", os.getloadavg())
    for k in a.k:
        prune = prune_queries(q_ptr, q_ids, w, r.t_ptr, off, sel.ids, sel.ptr, sel.mask_of, k)
        want = sparse.sparse_topk(q_ptr, q_ids, w, r.t_ptr, r.t_docs, r.t_w, off, *sel.arrays(), n_docs, k,
                                  n_threads=a.threads, t_min=r.t_min)
        variants = {"blocks": {}}
        for div in a.div:
            for lb in a.lookup_bits:
                variants[f"bits/{div:g} lb{lb:g}"] = {"bitmaps": maps[div], "lookup_bits": lb}
        times = {name: [] for name in variants}
        for rnd in range(a.rounds + 1):
            for name, kw in variants.items():
                t0 = time.perf_counter()
                got = pruned.pruned_topk(q_ptr, q_ids, w, r.t_ptr, r.t_docs, r.t_w, r.t_max, r.b_max, r.b_last, off,
                                         *sel.arrays(), n_docs, k, n_threads=a.threads, prune=prune, t_min=r.t_min,
                                         **kw)
                dt = time.perf_counter() - t0
                if rnd:
                    times[name].append(dt)
                else:
                    same = all(x.tobytes() == y.tobytes() for x, y in zip(got, want, strict=True))
                    assert same, name
        base = times["blocks"]
        for name, ts in times.items():
            ratio = statistics.median([b / t for b, t in zip(base, ts, strict=True)])
            print(f"k={k:5d} {name:22s} median {statistics.median(ts):.3f} s  speed-up x{ratio:.2f}")
    print("load average", os.getloadavg())


if __name__ == "__main__":
    main()
