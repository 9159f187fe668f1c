"""Load and query an index that is already built, once: the figures of the largest size.

Rerun (the 8.8M row of benchmarks/README "BM25 at 8.8M documents"; the index was built by
``python bench_scale.py --docs 8800000 --dir /work/cache/lazy --bm25s-max 0``):

    python bench_scale_query.py /work/cache/lazy/index-8800000 --queries 6980 --k 10 100 1000

:mod:`bench_scale` times every k in warm-up and repeated rounds against bm25s; at 8.8M
documents (bm25s does not fit) that is an hour on a shared machine, so this script loads the
index once in a fresh process and times one pass of each k, after compiling the kernels on a
small index. It prints, as JSON lines: the load's seconds and the resident memory it added;
each k's seconds over all queries; whether ``pruning="auto"`` equals the exhaustive kernel
(every array, bit for bit) on the first ``--check`` queries at top-100; the resident memory at
the end (the postings' pages that the queries read, file-backed). Queries: bench_scale's
(``queries-<n>.txt`` beside the index, written if absent).

``--cold`` first drops the index's files from the page cache (``posix_fadvise(DONTNEED)`` on
each, which any reader may ask), as after a reboot or after another job filled the memory: the
load and the first pass then read from the disk. A quick load (``verify="auto"`` above 256 MiB)
checks each term's postings when the first search reads them, so the first k's pass includes
those checks (``--verify full`` checks everything at load instead).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from _common import header
from bench_scale import resident_mb, write_queries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index", type=Path)
    ap.add_argument("--queries", type=int, default=6980, help="queries (MS MARCO dev: 6980)")
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--check", type=int, default=300, help="queries compared with pruning='none' at top-100")
    ap.add_argument("--verify", choices=["auto", "full", "quick"], default="auto")
    ap.add_argument("--cold", action="store_true", help="drop the index's files from the page cache before loading")
    args = ap.parse_args()
    header("Load and query an existing BM25 index")
    from kolm_search import BM25Retriever

    qfile = args.index.parent / f"queries-{args.queries}.txt"
    if not qfile.exists():
        write_queries(qfile, args.queries)
    texts = qfile.read_text().splitlines()
    with tempfile.TemporaryDirectory() as tmp:  # imports and kernels compiled before the measured load
        docs = [{"id": str(i), "content": t} for i, t in enumerate(texts[:50])]
        BM25Retriever.build(docs, Path(tmp) / "i", progress=False).score_texts(texts[:5], 10)
    out: dict[str, object] = {"load_avg_before": os.getloadavg()}
    if args.cold:
        out["evicted_mb"] = evict(args.index)
    before = resident_mb()
    t0 = time.perf_counter()
    ret = BM25Retriever.load(args.index, verify=args.verify)
    out.update(load_s=time.perf_counter() - t0, load_rss_mb=resident_mb()[0] - before[0])
    print(json.dumps(out), flush=True)
    for k in args.k:
        t0 = time.perf_counter()
        ret.score_texts(texts, k)
        out[f"top{k}_s"] = time.perf_counter() - t0
        print(json.dumps({f"top{k}_s": out[f"top{k}_s"]}), flush=True)
    auto = ret.score_texts(texts[:args.check], 100)
    none = ret.score_texts(texts[:args.check], 100, pruning="none")
    out["pruned_equal_exhaustive"] = all(a.tobytes() == b.tobytes() for a, b in zip(auto, none, strict=True))
    out.update(rss_end_mb=resident_mb()[0] - before[0], load_avg_after=os.getloadavg())
    print(json.dumps(out), flush=True)


def evict(index: Path) -> float:
    """Drop the files of ``index`` (links followed) from the page cache; their megabytes."""
    total = 0
    for path in Path(os.path.realpath(index)).rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                total += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return total / 2**20


if __name__ == "__main__":
    main()
