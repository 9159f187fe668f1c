"""BM25 index build end to end (tokenise + count + weight): n_jobs=1 vs n_jobs=2, and bm25s.

Rerun: ``python bench_index.py --docs 1000000 --repeat 3``. A synthetic corpus: ``--docs``
documents of 50-100 words drawn from a Zipfian vocabulary (Cranfield's words by frequency,
then made-up syllable words up to ``--vocab``). Each timed build is
``BM25Retriever(table, n_jobs=j, n_threads=j)`` on a ready DocumentTable (the table's texts,
tokenising, counting and weighting), with this process pinned to ``j`` cores (its workers, forked
from the forkserver, are not pinned; with ``n_jobs=1`` there are none): "n_jobs=1" is the build
on one core, "n_jobs=2" on two; the peer is ``bm25s.tokenize`` (same stopwords and Snowball stemmer)
plus ``bm25s.BM25().index``. Rounds interleave the builds (see ``_common.median_times``); the
index built with n_jobs=2 is checked equal to n_jobs=1's (on the first 100,000 documents). This
process's CPU seconds are printed beside wall time: with n_jobs=2 they are the serial part.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _common import header, median_times, peak_rss_mb, report

CRANFIELD = Path(__file__).resolve().parents[1] / "kolm_search" / "data" / "cranfield" / "corpus.jsonl.gz"


def vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """Cranfield's words, most frequent first, then random syllable words (``size`` in all)."""
    counts: dict[str, int] = {}
    with gzip.open(CRANFIELD, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            for w in re.findall(r"[a-z]{2,}", f"{doc.get('title', '')} {doc.get('text', '')}".lower()):
                counts[w] = counts.get(w, 0) + 1
    words = sorted(counts, key=lambda w: -counts[w])[:size]
    seen = set(words)
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "st", "tr", "pl", "gr"]
    nuclei = ["a", "e", "i", "o", "u", "ea", "ou", "io"]
    codas = ["", "n", "r", "s", "t", "l", "nd", "st"]
    while len(words) < size:
        n = int(rng.integers(2, 5))
        w = "".join(onsets[rng.integers(len(onsets))] + nuclei[rng.integers(len(nuclei))]
                    + codas[rng.integers(len(codas))] for _ in range(n))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return np.array(words, dtype=object)


def corpus(n_docs: int, vocab_size: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = vocabulary(vocab_size, rng)
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    p /= p.sum()
    docs: list[str] = []
    for start in range(0, n_docs, 100_000):  # blocks keep the token arrays small
        lengths = rng.integers(50, 101, min(100_000, n_docs - start))
        flat = words[rng.choice(len(words), size=int(lengths.sum()), p=p)].tolist()
        ends = np.cumsum(lengths).tolist()
        docs += [" ".join(flat[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    return docs


def cpu_seconds() -> float:
    """CPU seconds of this process (pool workers are the forkserver's children, not counted)."""
    t = os.times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--vocab", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-bm25s", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from kolm_search import BM25Retriever, Tokenizer
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.retrievers.postings import Postings

    t0 = time.perf_counter()
    docs = corpus(args.docs, args.vocab, args.seed)
    table = DocumentTable.from_frame(pd.DataFrame({"id": [str(i) for i in range(len(docs))], "content": docs}))
    header(f"BM25 index build, synthetic {len(docs):,} docs "
           f"({sum(map(len, docs)) / 1e6:,.0f} M chars; generated in {time.perf_counter() - t0:.0f} s)")
    tok = Tokenizer()
    rows: list[dict[str, Any]] = []
    for what in ("first pool start-up in a process (forkserver)", "later pool start-up"):
        t0 = time.perf_counter()
        Postings.from_texts(["flow wing"] * 4, tok, n_jobs=2, chunk=2)
        rows.append({"what": what, "seconds": time.perf_counter() - t0})

    cpu: dict[str, list[float]] = {}

    def build(n_jobs: int) -> Any:
        """On ``n_jobs`` cores: this process pinned to them, ``n_jobs`` processes and weighting threads."""
        every = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if every is not None:
            os.sched_setaffinity(0, sorted(every)[:n_jobs])
        try:
            c0 = cpu_seconds()
            ret = BM25Retriever(table, tokenizer=tok, fields=("content",), n_jobs=n_jobs, n_threads=n_jobs)
            cpu.setdefault(f"kolm n_jobs={n_jobs}", []).append(cpu_seconds() - c0)
        finally:
            if every is not None:
                os.sched_setaffinity(0, every)
        return ret

    def peer() -> Any:
        import bm25s
        import Stemmer

        c0 = cpu_seconds()
        tokens = bm25s.tokenize(docs, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        model = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
        model.index(tokens, show_progress=False)
        cpu.setdefault("bm25s tokenize + index", []).append(cpu_seconds() - c0)
        return model

    fns: dict[str, Any] = {f"kolm n_jobs={j}": (lambda j=j: build(j)) for j in args.jobs}
    if not args.no_bm25s:
        fns["bm25s tokenize + index"] = peer
    samples: dict[str, list[float]] = {}
    times = median_times(fns, repeat=args.repeat, warmup=0, samples=samples)
    base = times.get("kolm n_jobs=1")
    for name, sec in times.items():
        row: dict[str, Any] = {"what": name, "seconds": sec, "parent_cpu_s": f"{float(np.median(cpu[name])):.1f}",
                               "rounds": " ".join(f"{t:.1f}" for t in samples[name])}
        if base and name.startswith("kolm") and name != "kolm n_jobs=1":
            paired = np.median(np.array(samples["kolm n_jobs=1"]) / np.array(samples[name]))
            row["speedup_vs_n_jobs_1"] = f"{base / sec:.2f}x (paired rounds {paired:.2f}x)"
        if name.startswith("bm25s"):
            for k in times:
                if k.startswith("kolm"):
                    row[f"{k.split()[1]}_faster"] = f"{sec / times[k]:.2f}x"
        rows.append(row)
    if len(args.jobs) > 1:  # on the first 100,000 documents (still split among the workers)
        part = DocumentTable.from_frame(table.frame.iloc[:100_000].reset_index(drop=True))
        one, many = (BM25Retriever(part, tokenizer=tok, fields=("content",), n_jobs=j)
                     for j in (args.jobs[0], args.jobs[-1]))
        same = one.vocab == many.vocab and all(np.array_equal(getattr(one, a), getattr(many, a))
                                               for a in ("t_ptr", "t_docs", "t_w", "doc_len"))
        rows.append({"what": f"index n_jobs={args.jobs[-1]} equals n_jobs={args.jobs[0]}", "seconds": 0.0,
                     "equal": same, "terms": len(one.vocab), "postings": len(one.t_docs)})
    rows.append({"what": "peak RSS of this process (MB)", "seconds": 0.0, "rss": f"{peak_rss_mb():,.0f}",
                 "load_avg_1min_at_end": f"{os.getloadavg()[0]:.1f}"})
    report(rows, args.json)


if __name__ == "__main__":
    main()
