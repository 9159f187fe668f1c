"""Peak memory of a streaming BM25 build (``BM25Retriever.build``) vs an in-memory build vs bm25s.

Rerun: ``python bench_stream_build.py --docs 250000 1000000``. A synthetic corpus of MS MARCO
passage lengths (lognormal, mean ~55 words) over a Zipf vocabulary of 200,000 made-up words
(exponent 1.05) is written once per size to ``--dir`` as ``corpus-<docs>.jsonl.gz`` (BEIR
records). Each build runs in its own fresh process (paired processes, one at a time) that
reports its wall time, its peak RSS (``VmHWM``; ``ru_maxrss`` would include this driver's, which a
child inherits across fork and exec) and the peak of its RSS plus its tokenising workers'
(psutil, sampled every 50 ms; workers are forked from the forkserver):

- ``stream``: ``kolm_search.retrievers.stream_build.build_bm25`` (what ``BM25Retriever.build``
  runs before it loads the index) from the file to an index folder, at the default ``memory_limit`` (a quarter of the machine's RAM)
  and at the ``--limit`` values given;
- ``in-memory``: the corpus read (``load_beir``'s reader) into a DataFrame, then
  ``BM25Retriever(frame)`` and ``save``;
- ``bm25s``: the texts read into a list, ``bm25s.tokenize`` (English stopwords, Snowball stemmer)
  and ``BM25().index`` (in memory; it has no streaming build).

The stream index is checked equal, array for array, to the in-memory one.

Paired with another checkout: ``python bench_stream_build.py --docs 1000000 --dir DIR --compare
OTHER_TREE --rounds 3 --limit 1073741824`` runs ``BM25Retriever.build(corpus, index_dir,
memory_limit=LIMIT)`` (the streamed build, loaded at the end, as ``bench_scale.py`` times it),
each in its own process niced by 5, alternating this checkout's ``kolm_search`` with
``OTHER_TREE``'s (``PYTHONPATH``; the order swapped every round; ``--work DIR`` holds the indexes), notes the load average before
each run, checks the two indexes equal, and prints the median ratio of the other's time to this one's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def words(size: int, seed: int) -> list[str]:
    """``size`` distinct made-up words of 2-4 syllables."""
    rng = np.random.default_rng(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr", "pl", "gr"]
    nuclei = ["a", "e", "i", "o", "u", "ea", "ou", "io"]
    codas = ["", "n", "r", "s", "t", "l", "nd", "st"]
    out: dict[str, None] = {}
    while len(out) < size:
        n = int(rng.integers(2, 5))
        out["".join(onsets[rng.integers(len(onsets))] + nuclei[rng.integers(len(nuclei))]
                    + codas[rng.integers(len(codas))] for _ in range(n))] = None
    return list(out)


def write_corpus(path: Path, n_docs: int, vocab: int = 200_000, seed: int = 0, block: int = 50_000) -> None:
    """BEIR records of ``n_docs`` synthetic passages, gzip-compressed, written block by block."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array(words(vocab, seed), dtype=object)
    cdf = np.cumsum(1.0 / np.arange(1, vocab + 1) ** 1.05)
    cdf /= cdf[-1]
    sigma = 0.5
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=1) as fh:
        for lo in range(0, n_docs, block):
            n = min(block, n_docs - lo)
            lengths = np.maximum(1, np.rint(rng.lognormal(np.log(55) - sigma**2 / 2, sigma, n))).astype(np.int64)
            toks = vocabulary[np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right"), vocab - 1)]
            ends = np.cumsum(lengths)
            fh.writelines(json.dumps({"_id": str(lo + i), "title": "", "text": " ".join(toks[e - n_:e])}) + "\n"
                          for i, (e, n_) in enumerate(zip(ends.tolist(), lengths.tolist(), strict=True)))
    tmp.rename(path)


class TreeRss:
    """The largest summed RSS of this process and all its descendants (the tokenising workers,
    forked from the forkserver, are grandchildren), sampled every 50 ms on a thread."""

    def __init__(self) -> None:
        import threading

        import psutil

        self.me, self.peak, self.stop = psutil.Process(), 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psutil

        while not self.stop.wait(0.05):
            total = 0
            for p in [self.me, *self.me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)

    def close(self) -> float:
        self.stop.set()
        self.thread.join()
        return self.peak / 2**20


def vm_hwm_mb() -> float:
    """This process's peak RSS (``VmHWM`` of /proc/self/status): unlike ``getrusage``'s
    ``ru_maxrss``, which keeps the parent's peak across fork and exec, it counts this program only."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child(mode: str, corpus: Path, out: Path, limit: int | None) -> None:
    """One build in this process; prints ``{"seconds", "peak_rss_mb", ...}`` as JSON."""
    tree = TreeRss()
    t0 = time.perf_counter()
    extra: dict[str, object] = {}
    if mode == "stream":
        from kolm_search.retrievers.bm25 import BM25Retriever
        from kolm_search.retrievers.stream_build import build_bm25

        s = build_bm25(corpus, out, lambda t: BM25Retriever(t, n_jobs=1, progress=False), memory_limit=limit,
                       progress=False)
        extra = {"chunks": s.chunks, "blocks": s.blocks, "nnz": s.nnz, "terms": s.n_terms}
    elif mode == "build":
        from kolm_search.retrievers.bm25 import BM25Retriever

        BM25Retriever.build(corpus, out, memory_limit=limit, progress=False)
    elif mode == "in-memory":
        from kolm_search.io.beir import _read_corpus
        from kolm_search.retrievers.bm25 import BM25Retriever

        BM25Retriever(_read_corpus(corpus), progress=False).save(out)
    else:
        import bm25s
        import Stemmer

        with gzip.open(corpus, "rt", encoding="utf-8") as fh:
            texts = [json.loads(line)["text"] for line in fh]
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        bm25s.BM25(method="lucene", k1=1.5, b=0.75).index(tokens, show_progress=False)
    seconds = time.perf_counter() - t0
    rss = vm_hwm_mb()
    import kolm_search

    print(json.dumps({"seconds": seconds, "peak_rss_mb": rss, "tree_peak_rss_mb": tree.close(),
                      "module": kolm_search.__file__, **extra}))


def same_index(a: Path, b: Path) -> bool:
    from kolm_search.retrievers.bm25 import BM25Retriever

    x, y = BM25Retriever.load(a), BM25Retriever.load(b)
    return x.vocab == y.vocab and all(np.array_equal(getattr(x, n), getattr(y, n))
                                      for n in ("t_ptr", "t_docs", "t_w", "nonocc", "doc_len", "tf", "t_max", "b_max"))


def compare(corpus: Path, work: Path, other: Path, rounds: int, limit: int) -> None:
    """Paired, alternating builds of this checkout and ``other`` (see the module)."""
    import os
    import statistics

    trees = {"this": Path(__file__).resolve().parents[1], "other": other.resolve()}
    print(f"# paired streamed builds of {corpus.name}, memory_limit={limit:,}; this = {trees['this']}, "
          f"other = {trees['other']}")
    print("| round | checkout | seconds | peak RSS (MB) | with workers (MB) | load average before (1/5/15 min) |")
    print("| --- | --- | --- | --- | --- | --- |")
    seconds: dict[str, list[float]] = {"this": [], "other": []}
    for r in range(rounds):
        for name in ("other", "this") if r % 2 == 0 else ("this", "other"):
            out = work / f"index-{name}"
            shutil.rmtree(out, ignore_errors=True)
            load = "/".join(f"{x:.1f}" for x in os.getloadavg())
            env = {**os.environ, "PYTHONPATH": str(trees[name])}
            res = subprocess.run(["nice", "-n", "5", sys.executable, __file__, "--child", "build", str(corpus), str(out),
                                  str(limit)], check=True, capture_output=True, text=True, env=env)
            got = json.loads(res.stdout.strip().splitlines()[-1])
            seconds[name].append(got["seconds"])
            if not got["module"].startswith(str(trees[name])):
                raise SystemExit(f"{name}: imported {got['module']}, not {trees[name]}'s kolm_search")
            print(f"| {r + 1} | {name} | {got['seconds']:.1f} | {got['peak_rss_mb']:,.0f} | {got['tree_peak_rss_mb']:,.0f} "
                  f"| {load} |", flush=True)
        print(f"| {r + 1} | other / this | {seconds['other'][-1] / seconds['this'][-1]:.2f}x | | | equal: "
              f"{same_index(work / 'index-this', work / 'index-other')} |", flush=True)
    ratios = [o / t for o, t in zip(seconds["other"], seconds["this"], strict=True)]
    print(f"\nmedian other / this: {statistics.median(ratios):.2f}x (rounds: {', '.join(f'{x:.2f}' for x in ratios)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/kolm-bench-stream"))
    ap.add_argument("--limit", type=int, nargs="*", default=[1 << 30, 256 << 20], help="memory_limit bytes")
    ap.add_argument("--no-bm25s", action="store_true")
    ap.add_argument("--compare", type=Path, help="another checkout: paired builds of this one and it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp"), help="--compare writes its indexes under this folder")
    ap.add_argument("--child", nargs=4, metavar=("MODE", "CORPUS", "OUT", "LIMIT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, corpus, out, limit = args.child
        child(mode, Path(corpus), Path(out), int(limit) or None)
        return
    if args.compare:
        for n in args.docs:
            corpus = args.dir / f"corpus-{n}.jsonl.gz"
            if not corpus.exists():
                write_corpus(corpus, n)
            work = args.work / f"kolm-bench-compare-{n}"
            work.mkdir(parents=True, exist_ok=True)
            compare(corpus, work, args.compare, args.rounds, args.limit[0] if args.limit else 1 << 30)
            shutil.rmtree(work, ignore_errors=True)
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    print(f"# streaming BM25 build; argv: {' '.join(sys.argv)}")
    print("| documents | build | memory_limit | seconds | peak RSS (MB) | peak RSS with workers (MB, sampled) | chunks | equal |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in args.docs:
        corpus = args.dir / f"corpus-{n}.jsonl.gz"
        if not corpus.exists():
            write_corpus(corpus, n)
        runs = [("in-memory", 0), ("stream", 0), *(("stream", lim) for lim in args.limit)]
        runs += [] if args.no_bm25s else [("bm25s", 0)]
        for mode, limit in runs:
            out = args.dir / f"index-{n}-{mode}-{limit}"
            shutil.rmtree(out, ignore_errors=True)
            res = subprocess.run([sys.executable, __file__, "--child", mode, str(corpus), str(out), str(limit)],
                                 check=True, capture_output=True, text=True)
            r = json.loads(res.stdout.strip().splitlines()[-1])
            equal = same_index(out, args.dir / f"index-{n}-in-memory-0") if mode == "stream" else ""
            shown = "" if mode != "stream" else f"{limit / 2**20:.0f} MB" if limit else "default (1/4 RAM)"
            print(f"| {n:,} | {mode} | {shown} | {r['seconds']:.1f} | {r['peak_rss_mb']:,.0f} | "
                  f"{r['tree_peak_rss_mb']:,.0f} | {r.get('chunks', '')} | {equal} |", flush=True)
            if mode == "stream" and limit:
                shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
