"""BM25 at scale: a streamed build from a JSONL.gz file, load, and top-k throughput, vs bm25s.

Rerun: ``python bench_scale.py --docs 250000 1000000 2000000 --dir /work/cache/scale``. The
synthetic corpus of MS MARCO passage lengths (lognormal, mean ~55 words) over a Zipf vocabulary of
200,000 made-up words (exponent 1.05) is written once per size to ``--dir`` as
``corpus-<docs>.jsonl.gz`` (BEIR records ``_id``, ``title``, ``text``; streamed block by block,
seeded: ``bench_stream_build.write_corpus``), with ``--queries`` queries of 2-8 words from the
same Zipf law (``queries-<n>.txt``). Per size:

- ``build`` (its own fresh process): ``BM25Retriever.build(corpus, index_dir,
  memory_limit=--memory-limit)`` (which loads the index at the end): wall time, peak RSS
  (``VmHWM``: ``ru_maxrss`` of RUSAGE_SELF keeps this driver's peak across fork and exec), the
  peak of its RSS plus its tokenising workers' (``bench_stream_build.TreeRss``, sampled every
  50 ms: the workers fork from a forkserver, so RUSAGE_CHILDREN never sees them) and the index's
  bytes on disk;
- two query processes kept alive side by side (paired processes: one process holding both
  indexes would pass 6 GB at 2M): ``bm25s`` (numba backend, all cores; up to ``--bm25s-max``
  documents) reads the texts into a list, ``bm25s.tokenize`` (English stopwords, Snowball
  stemmer) and ``BM25().index`` (its build: time and peak RSS), then answers ``tokenize`` +
  ``retrieve`` of the query texts; ``kolm`` loads the index (``BM25Retriever.load(index_dir,
  verify=--verify)``, memory-mapped; ``"auto"``, the default, checks an index above 256 MiB
  quickly: no digests, the postings read block by block from the files, the documents' batches
  when first read; ``"full"`` reads every byte; after a 3-document index was built and loaded,
  so imports and kernels are not counted: wall time and the resident memory it added,
  ``/proc/self/statm``, all and file-backed) and answers ``score_texts`` (texts in, tokenised)
  with ``pruning="auto"`` (``kolm``) and ``pruning="none"`` (``kolm_none``, the exhaustive kernel);
- rounds: one warm-up, then ``--repeat`` timed rounds, each running every k on kolm (auto, then
  none), then on bm25s (then on ``--baseline``: another checkout's kolm_search on the same index,
  for before and after figures), each call timed in its process; medians per side and the
  median of the rounds' ratios; at every k the result of ``"auto"`` is checked equal, bit for
  bit, to ``pruning="none"`` (the exhaustive kernel; the run fails otherwise). The load average
  is printed with the table.

``--reuse`` queries the indexes already in ``--dir`` (kolm's ``index-<docs>``; bm25s's
``bm25s-<docs>``, saved by the first run with ``--reuse``) instead of building them. Growth per
doubling between sizes n1 < n2 is ``(t2 / t1) ** (1 / log2(n2 / n1))``: 2.0 is linear.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import header
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


class _Server:
    """A query child kept alive between rounds (``--child serve-kolm|serve-bm25s``): it reads one
    command a line on stdin (``run <k> [auto|none]``, ``check <k>``, ``quit``) and answers one
    JSON line."""

    def __init__(self, *argv: str, pythonpath: str | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=pythonpath) if pythonpath else None
        self.proc = subprocess.Popen([sys.executable, __file__, "--child", *argv], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"query child {self.proc.args} ended: {self.proc.wait()}")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> dict:
        out = self.ask("quit")
        self.proc.wait(timeout=60)
        return out


def _serve(run: Callable[[int, str], Any], check: Callable[[int], bool], ready: dict) -> None:
    """Answer the parent's commands (see :class:`_Server`) until ``quit``."""
    import gc

    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "quit":
            print(json.dumps({"peak_rss_mb": vm_hwm_mb(), "rss_mb": resident_mb()[0]}), flush=True)
            return
        k, how = int(arg[0]), arg[1] if len(arg) > 1 else "auto"
        if cmd == "check":
            print(json.dumps({"same": check(k)}), flush=True)
            continue
        gc.collect()
        t0 = time.perf_counter()
        out = run(k, how)
        seconds = time.perf_counter() - t0
        del out
        print(json.dumps({"seconds": seconds}), flush=True)


def serve_kolm(index: Path, texts: list[str], verify: str) -> None:
    import tempfile

    from kolm_search import BM25Retriever

    with tempfile.TemporaryDirectory() as tmp:  # imports and kernels loaded before the measured load
        docs = [{"id": str(i), "content": t} for i, t in enumerate(texts[:3])]
        BM25Retriever.build(docs, Path(tmp) / "i", progress=False).score_texts(texts[:2], 10)
    before = resident_mb()
    t0 = time.perf_counter()
    ret = BM25Retriever.load(index, verify=verify)  # type: ignore[arg-type]
    load_s = time.perf_counter() - t0
    after = resident_mb()

    def check(k: int) -> bool:  # pruning="auto" equals the exhaustive kernel, bit for bit
        auto, none = ret.score_texts(texts, k), ret.score_texts(texts, k, pruning="none")
        return all(a.tobytes() == b.tobytes() for a, b in zip(auto, none, strict=True))

    _serve(lambda k, how: ret.score_texts(texts, k, pruning=how), check,
           {"load_s": load_s, "load_rss_mb": after[0] - before[0], "load_file_mb": after[1] - before[1]})


def serve_bm25s(corpus: Path, texts: list[str], saved: Path | None) -> None:
    import gzip

    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    if saved is not None and (saved / "build.json").exists():
        model = bm25s.BM25.load(saved, mmap=False)
        built = json.loads((saved / "build.json").read_text())
    else:
        t0 = time.perf_counter()
        with gzip.open(corpus, "rt", encoding="utf-8") as fh:
            docs = [json.loads(line)["text"] for line in fh]
        tokens = bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False)
        del docs
        model = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numba")
        model.index(tokens, show_progress=False)
        del tokens
        built = {"build_s": time.perf_counter() - t0, "build_peak_rss_mb": vm_hwm_mb()}
        if saved is not None:
            model.save(saved)
            (saved / "build.json").write_text(json.dumps(built))
    threads = os.cpu_count() or 1

    def run(k: int, how: str) -> object:
        q = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return model.retrieve(q, k=k, show_progress=False, n_threads=threads)

    _serve(run, lambda k: True, built)


def paired_queries(servers: dict[str, _Server], ks: list[int], repeat: int) -> dict:
    """Rounds of every k, each server in turn (``kolm``, ``kolm_none``: the same process with
    ``pruning="none"``, then the others; one warm-up round untimed): per k the medians of each
    one's seconds and of the rounds' ratios (its seconds / kolm's, ``<name>_ratio``)."""
    calls = {"kolm": (servers["kolm"], "auto"), "kolm_none": (servers["kolm"], "none"),
             **{name: (server, "auto") for name, server in servers.items() if name != "kolm"}}
    times: dict[str, dict[str, list[float]]] = {str(k): {name: [] for name in calls} for k in ks}
    for r in range(repeat + 1):
        for k in ks:
            for name, (server, how) in calls.items():
                t = server.ask(f"run {k} {how}")["seconds"]
                if r:
                    times[str(k)][name].append(t)
    out: dict[str, dict[str, Any]] = {}
    for k, t in times.items():
        out[k] = {}
        for name, ts in t.items():
            out[k] |= {name: statistics.median(ts), f"{name}_rounds": ts}
            if name != "kolm":
                out[k][f"{name}_ratio"] = statistics.median(b / a for a, b in zip(t["kolm"], ts, strict=True))
    return out


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
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds (after one warm-up round)")
    ap.add_argument("--reuse", action="store_true",
                    help="query the indexes already in --dir (kolm's index-<docs>, bm25s's bm25s-<docs>, saved by "
                         "an earlier run with --reuse) instead of building them")
    ap.add_argument("--baseline", help="PYTHONPATH of another kolm_search checkout (e.g. /work/main) whose query "
                    "speed on the same index is timed in the same rounds (the index must be in a format it loads)")
    ap.add_argument("--verify", choices=["auto", "full", "quick"], default="auto", help="how kolm's load checks the index")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, *rest = args.child
        if mode == "build":
            print(json.dumps(child_build(Path(rest[0]), Path(rest[1]), int(rest[2]))))
        elif mode == "serve-kolm":
            serve_kolm(Path(rest[0]), Path(rest[1]).read_text().splitlines(), rest[2])
        else:
            serve_bm25s(Path(rest[0]), Path(rest[1]).read_text().splitlines(), Path(rest[2]) if len(rest) > 2 else None)
        return
    header("BM25 at scale: streamed build, load, top-k vs bm25s")
    print(f"load average at the start: {os.getloadavg()}", flush=True)
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
        r: dict[str, Any] = {"build": None}
        if not (args.reuse and (index / "manifest.json").exists()):
            shutil.rmtree(index, ignore_errors=True)
            r["build"] = spawn("build", str(corpus), str(index), str(args.memory_limit))
        other = None
        if n <= args.bm25s_max:  # built (or loaded) first: its build's peak is not shared with kolm's index
            saved = [str(args.dir / f"bm25s-{n}")] if args.reuse else []
            other = _Server("serve-bm25s", str(corpus), str(qfile), *saved)
        kolm = _Server("serve-kolm", str(index), str(qfile), args.verify)
        servers = {"kolm": kolm, **({"bm25s": other} if other else {})}
        if args.baseline:
            servers["baseline"] = _Server("serve-kolm", str(index), str(qfile), args.verify, pythonpath=args.baseline)
        r["load"], r["bm25s_build"] = kolm.ready, other.ready if other else None
        r["load_avg_before"] = os.getloadavg()
        r["query"] = paired_queries(servers, args.k, args.repeat)
        r["load_avg_after"] = os.getloadavg()
        r["same"] = {k: kolm.ask(f"check {k}")["same"] for k in ks}
        if not all(r["same"].values()):
            raise SystemExit(f"[{n:,}] pruning='auto' differs from the exhaustive kernel at k {r['same']}")
        r["kolm_end"], r["bm25s_end"] = kolm.close(), other.close() if other else None
        if args.baseline:
            r["baseline_load"], r["baseline_end"] = servers["baseline"].ready, servers["baseline"].close()
        results[n] = r
        print(f"[{n:,}] {json.dumps(r)}", flush=True)

    limit = f"{args.memory_limit / 2**20:,.0f} MB" if args.memory_limit else "default (1/4 RAM)"
    print(f"\n{args.queries:,} queries; memory_limit {limit}; load average at the end {os.getloadavg()}\n")
    print("| documents | kolm build | kolm peak RSS | with workers | index on disk | load | RSS added by load "
          "(file-backed) | query process peak RSS | bm25s build | bm25s peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, r in results.items():
        b, q, s = r["build"], r["load"], r["bm25s_build"]
        bs = f"{s['build_s']:.1f} s | {s['build_peak_rss_mb']:,.0f} MB" if s else "not run | not run"
        bcells = (f"{b['seconds']:.1f} s | {b['peak_rss_mb']:,.0f} MB | {b['tree_peak_mb']:,.0f} MB | "
                  f"{b['index_mb']:,.0f} MB") if b else "(reused) | | |"
        print(f"| {n:,} | {bcells} | {q['load_s']:.2f} s | {q['load_rss_mb']:,.0f} MB ({q['load_file_mb']:,.0f} MB) | "
              f"{r['kolm_end']['peak_rss_mb']:,.0f} MB | {bs} |")
    base = " baseline queries/s | kolm speed / baseline |" if args.baseline else ""
    print("\n| documents | k | kolm queries/s (auto) | kolm queries/s (none) | bm25s queries/s | "
          "kolm auto / bm25s (median of rounds) | kolm none / bm25s |" + base + " pruned = exhaustive | load average |")
    print("| --- | --- | --- | --- | --- | --- | --- |" + (" --- | --- |" if args.baseline else "") + " --- | --- |")
    for n, r in results.items():
        for k in ks:
            q = r["query"][k]
            none = args.queries / q["kolm_none"]
            if "bm25s" in q:
                to_none = statistics.median(b / a for a, b in zip(q["kolm_none_rounds"], q["bm25s_rounds"], strict=True))
                bq = f"{args.queries / q['bm25s']:,.0f} | {q['bm25s_ratio']:.2f}x | {to_none:.2f}x"
            else:
                bq = "not run | | "
            if args.baseline:
                bq += f" | {args.queries / q['baseline']:,.0f} | {q['baseline_ratio']:.2f}x"
            la = f"{r['load_avg_before'][0]:.1f}-{r['load_avg_after'][0]:.1f}"
            print(f"| {n:,} | {k} | {args.queries / q['kolm']:,.0f} | {none:,.0f} | {bq} | {r['same'][k]} | {la} |")
    sizes = list(results)
    if len(sizes) > 1:
        print("\nGrowth per doubling of documents (2.00x = linear):\n")
        print("| from | to | kolm build | " + " | ".join(f"kolm top-{k}" for k in ks) + " |")
        print("| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |")
        for n1, n2 in itertools.pairwise(sizes):
            r1, r2 = results[n1], results[n2]
            cells = [per_doubling(n1, r1["build"]["seconds"], n2, r2["build"]["seconds"])
                     if r1["build"] and r2["build"] else "(reused)"]
            cells += [per_doubling(n1, r1["query"][k]["kolm"], n2, r2["query"][k]["kolm"]) for k in ks]
            print(f"| {n1:,} | {n2:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
