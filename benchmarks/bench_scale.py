"""BM25 at scale: a streamed build from a JSONL.gz file, load, and top-k throughput, vs bm25s.

Rerun: ``python bench_scale.py --docs 250000 1000000 2000000 --dir /work/cache/scale``. The
synthetic corpus of MS MARCO passage lengths (lognormal, mean ~55 words) over a Zipf vocabulary of
200,000 made-up words (exponent 1.05) is written once per size to ``--dir`` as
``corpus-<docs>.jsonl.gz`` (BEIR records ``_id``, ``title``, ``text``; streamed block by block,
seeded: ``bench_stream_build.write_corpus``), with ``--queries`` queries of 2-8 words from the
same Zipf law (``queries-<n>.txt``). Each measurement runs in its own fresh process, one at a time:

- ``build``: ``BM25Retriever.build(corpus, index_dir, memory_limit=--memory-limit)`` (which
  loads the index at the end): wall time, peak RSS (``VmHWM``: ``ru_maxrss`` of RUSAGE_SELF keeps
  this driver's peak across fork and exec), the peak of its RSS plus its tokenising workers'
  (``bench_stream_build.TreeRss``, sampled every 50 ms: the workers fork from a forkserver, so
  RUSAGE_CHILDREN never sees them) and the index's bytes on disk;
- ``query``: ``BM25Retriever.load(index_dir, verify=--verify)`` (memory-mapped; ``"auto"``, the
  default, checks an index above 256 MiB quickly: no digests, the postings read block by block
  from the files, the documents' batches when first read; ``"full"`` reads every byte), after
  a 3-document index was built and loaded (imports, kernels): wall time and the resident memory
  it added (``/proc/self/statm``: all, and file-backed), then queries/s of ``score_texts``
  (texts in, tokenised; ``pruning="auto"``) at each ``--k``; the top-100 result is checked
  equal, bit for bit, to ``pruning="none"`` (the exhaustive kernel);
- ``bm25s`` (numba backend, all cores; up to ``--bm25s-max`` documents: it holds every text and
  token list in memory): the texts read into a list, ``bm25s.tokenize`` (English stopwords,
  Snowball stemmer) and ``BM25().index`` timed as its build, then ``tokenize`` + ``retrieve`` of
  the same query texts at each k.

Query times are medians of ``--repeat`` interleaved rounds (``_common.median_times``) after one
warm-up. Growth per doubling between sizes n1 < n2 is ``(t2 / t1) ** (1 / log2(n2 / n1))``:
2.0 is linear.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import header, median_times
from bench_stream_build import TreeRss, vm_hwm_mb, words, write_corpus

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_mb() -> tuple[float, float]:
    """Resident memory of this process now, MB: all of it (``/proc/self/statm``) and the part
    backed by files (mapped arrays, libraries: statm's ``shared``)."""
    fields = Path("/proc/self/statm").read_text().split()
    return int(fields[1]) * PAGE / 2**20, int(fields[2]) * PAGE / 2**20


def write_queries(path: Path, n: int, vocab: int = 200_000, seed: int = 0) -> None:
    """``n`` queries of 2-8 words drawn from the corpus's Zipf law, one a line."""
    rng = np.random.default_rng(seed + 1)
    vocabulary = np.array(words(vocab, seed), dtype=object)  # the corpus's words, in the same order
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    lengths = rng.integers(2, 9, n)
    ids = rng.choice(vocab, size=int(lengths.sum()), p=p / p.sum())
    ends = np.cumsum(lengths)
    path.write_text("".join(" ".join(vocabulary[ids[e - m:e]]) + "\n" for e, m in zip(ends, lengths, strict=True)))


def child_build(corpus: Path, out: Path, limit: int) -> dict:
    from kolm_search import BM25Retriever

    tree = TreeRss()
    t0 = time.perf_counter()
    BM25Retriever.build(corpus, out, memory_limit=limit or None, progress=False)
    seconds = time.perf_counter() - t0
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"seconds": seconds, "peak_rss_mb": vm_hwm_mb(), "index_mb": size / 2**20, "tree_peak_mb": tree.close(),
            "waited_children_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0}


def child_query(index: Path, texts: list[str], ks: list[int], repeat: int, verify: str = "auto") -> dict:
    import tempfile

    from kolm_search import BM25Retriever

    with tempfile.TemporaryDirectory() as tmp:  # imports and kernels loaded before the measured load
        docs = [{"id": str(i), "content": t} for i, t in enumerate(texts[:3])]
        BM25Retriever.build(docs, Path(tmp) / "i", progress=False).score_texts(texts[:2], 10)
    before = resident_mb()
    t0 = time.perf_counter()
    ret = BM25Retriever.load(index, verify=verify)
    load_s = time.perf_counter() - t0
    after = resident_mb()
    fns = {k: (lambda k=k: ret.score_texts(texts, k)) for k in ks}
    t = median_times(fns, repeat=repeat, warmup=1)
    auto, none = ret.score_texts(texts, 100), ret.score_texts(texts, 100, pruning="none")
    same = all(a.tobytes() == b.tobytes() for a, b in zip(auto, none, strict=True))
    return {"load_s": load_s, "load_rss_mb": after[0] - before[0], "load_file_mb": after[1] - before[1],
            "rss_after_queries_mb": resident_mb()[0] - before[0], "seconds": {str(k): t[k] for k in ks},
            "pruned_equal_exhaustive": same, "peak_rss_mb": vm_hwm_mb()}


def child_bm25s(corpus: Path, texts: list[str], ks: list[int], repeat: int) -> dict:
    import gzip

    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    t0 = time.perf_counter()
    with gzip.open(corpus, "rt", encoding="utf-8") as fh:
        docs = [json.loads(line)["text"] for line in fh]
    tokens = bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False)
    del docs
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numba")
    model.index(tokens, show_progress=False)
    del tokens
    build_s = time.perf_counter() - t0
    threads = os.cpu_count() or 1

    def run(k: int) -> object:
        q = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return model.retrieve(q, k=k, show_progress=False, n_threads=threads)

    t = median_times({k: (lambda k=k: run(k)) for k in ks}, repeat=repeat, warmup=1)
    return {"build_s": build_s, "peak_rss_mb": vm_hwm_mb(), "seconds": {str(k): t[k] for k in ks}}


def spawn(*argv: str) -> dict:
    res = subprocess.run([sys.executable, __file__, "--child", *argv], check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def per_doubling(n1: int, t1: float, n2: int, t2: float) -> str:
    return f"{(t2 / t1) ** (1 / math.log2(n2 / n1)):.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/work/cache/scale"))
    ap.add_argument("--queries", type=int, default=1000, help="queries (MS MARCO dev: 6980)")
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--memory-limit", type=int, default=1 << 30, help="bytes; 0: the default (1/4 RAM)")
    ap.add_argument("--bm25s-max", type=int, default=2_000_000, help="largest corpus bm25s is run on")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--verify", choices=["auto", "full", "quick"], default="auto", help="how load checks the index")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, *rest = args.child
        if mode == "build":
            out = child_build(Path(rest[0]), Path(rest[1]), int(rest[2]))
        else:
            texts = Path(rest[1]).read_text().splitlines()
            if mode == "query":
                out = child_query(Path(rest[0]), texts, args.k, args.repeat, args.verify)
            else:
                out = child_bm25s(Path(rest[0]), texts, args.k, args.repeat)
        print(json.dumps(out))
        return
    header("BM25 at scale: streamed build, load, top-k vs bm25s")
    args.dir.mkdir(parents=True, exist_ok=True)
    qfile = args.dir / f"queries-{args.queries}.txt"
    if not qfile.exists():
        write_queries(qfile, args.queries)
    ks = [str(k) for k in args.k]
    results: dict[int, dict] = {}
    for n in args.docs:
        corpus = args.dir / f"corpus-{n}.jsonl.gz"
        if not corpus.exists():
            t0 = time.perf_counter()
            write_corpus(corpus, n)
            print(f"[{n:,}] corpus written in {time.perf_counter() - t0:.0f} s", flush=True)
        index = args.dir / f"index-{n}"
        shutil.rmtree(index, ignore_errors=True)
        r = {"build": spawn("build", str(corpus), str(index), str(args.memory_limit))}
        r["query"] = spawn("query", str(index), str(qfile), "--verify", args.verify, "--k", *ks,
                           "--repeat", str(args.repeat))
        r["bm25s"] = (spawn("bm25s", str(corpus), str(qfile), "--k", *ks, "--repeat", str(args.repeat))
                      if n <= args.bm25s_max else None)
        results[n] = r
        print(f"[{n:,}] {json.dumps(r)}", flush=True)

    limit = f"{args.memory_limit / 2**20:,.0f} MB" if args.memory_limit else "default (1/4 RAM)"
    print(f"\n{args.queries:,} queries; memory_limit {limit}\n")
    print("| documents | kolm build | kolm peak RSS | with workers | index on disk | load | RSS added by load "
          "(file-backed) | after the queries | bm25s build | bm25s peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, r in results.items():
        b, q, s = r["build"], r["query"], r["bm25s"]
        bs = f"{s['build_s']:.1f} s | {s['peak_rss_mb']:,.0f} MB" if s else "not run | not run"
        print(f"| {n:,} | {b['seconds']:.1f} s | {b['peak_rss_mb']:,.0f} MB | {b['tree_peak_mb']:,.0f} MB | "
              f"{b['index_mb']:,.0f} MB | {q['load_s']:.2f} s | {q['load_rss_mb']:,.0f} MB ({q['load_file_mb']:,.0f} MB) | "
              f"{q['rss_after_queries_mb']:,.0f} MB | {bs} |")
    print("\n| documents | k | kolm queries/s | bm25s queries/s | kolm speed / bm25s | pruned = exhaustive |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, r in results.items():
        for k in ks:
            kt, st = r["query"]["seconds"][k], r["bm25s"]["seconds"][k] if r["bm25s"] else None
            bq = f"{args.queries / st:,.0f} | {st / kt:.2f}x" if st else "not run | "
            print(f"| {n:,} | {k} | {args.queries / kt:,.0f} | {bq} | {r['query']['pruned_equal_exhaustive']} |")
    sizes = list(results)
    if len(sizes) > 1:
        print("\nGrowth per doubling of documents (2.00x = linear):\n")
        print("| from | to | kolm build | " + " | ".join(f"kolm top-{k}" for k in ks) + " |")
        print("| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |")
        for n1, n2 in itertools.pairwise(sizes):
            r1, r2 = results[n1], results[n2]
            cells = [per_doubling(n1, r1["build"]["seconds"], n2, r2["build"]["seconds"])]
            cells += [per_doubling(n1, r1["query"]["seconds"][k], n2, r2["query"]["seconds"][k]) for k in ks]
            print(f"| {n1:,} | {n2:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
