"""BM25 top-k with exact dynamic pruning (block-max MaxScore) vs the exhaustive kernel vs bm25s.

Rerun: ``python bench_pruning.py --docs 250000 1000000 --repeat 3``. A synthetic corpus of MS MARCO
passage lengths (lognormal, mean ~55 words) over a Zipf vocabulary of 200,000 words (exponent
1.05), generated in this process as token ids; 1,000 queries of 2-8 words from the same Zipf law.
kolm's index is built from those ids (``Postings.from_arrays``, Lucene BM25, k1 1.5, b 0.75); bm25s
(numba backend, ``n_threads`` = kolm's threads) indexes the same ids (``BM25.index((ids, vocab))``).
For each k: ``score_encoded`` with ``pruning="auto"`` (the retriever's default), with every query
pruned (the kernel called directly), with ``pruning="none"`` (the exhaustive kernel), and bm25s's
``retrieve``; rounds interleave them (``_common.median_times``). Every pruned result is checked
equal, bit for bit, to the exhaustive kernel's; bm25s's top-k scores are checked equal to kolm's
(to float32 rounding: ties may order differently).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import pandas as pd
from _common import header, median_times, peak_rss_mb, report


def corpus(n_docs: int, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids int32 (n_tokens,) of ``n_docs`` documents back to back, their lengths, and the
    Zipf probabilities of the vocabulary."""
    rng = np.random.default_rng(seed)
    sigma = 0.5
    lengths = np.maximum(1, np.rint(rng.lognormal(np.log(55) - sigma**2 / 2, sigma, n_docs))).astype(np.int64)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    p /= p.sum()
    cdf = np.cumsum(p)
    tokens = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right"), vocab - 1)
    return tokens.astype(np.int32), lengths, p


def queries(n: int, p: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    lengths = rng.integers(2, 9, n)
    ids = rng.choice(len(p), size=int(lengths.sum()), p=p).astype(np.int64)
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), ids


def run(n_docs: int, args: argparse.Namespace) -> list[dict]:
    import bm25s

    from kolm_search import BM25Retriever, Tokenizer
    from kolm_search._kernels import load
    from kolm_search.engine.selection import Selections
    from kolm_search.retrievers.postings import Postings

    rows: list[dict] = []
    t0 = time.perf_counter()
    tokens, lengths, p = corpus(n_docs, args.vocab, args.seed)
    words = [f"t{i}" for i in range(args.vocab)]
    q_ptr, q_ids = queries(args.queries, p, args.seed)
    rows.append({"what": f"[{n_docs:,}] corpus generated ({tokens.size:,} tokens)", "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    postings = Postings.from_arrays(words, tokens, lengths)
    frame = pd.DataFrame({"id": np.arange(n_docs).astype(str), "content": ""})
    ret = BM25Retriever(frame, postings=postings, tokenizer=Tokenizer(stopwords=None, stemmer=None),
                        fields=("content",), n_threads=args.threads)
    del postings
    rows.append({"what": f"[{n_docs:,}] kolm index from the ids", "seconds": time.perf_counter() - t0,
                 "postings": f"{ret.t_docs.size:,}"})
    t0 = time.perf_counter()
    ends = np.cumsum(lengths)
    doc_ids = [a.tolist() for a in np.split(tokens, ends[:-1])]
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numba")
    model.index((doc_ids, {w: i for i, w in enumerate(words)}), show_progress=False)
    del doc_ids
    rows.append({"what": f"[{n_docs:,}] bm25s index from the same ids", "seconds": time.perf_counter() - t0})
    del tokens
    bq = [q_ids[a:b].tolist() for a, b in itertools.pairwise(q_ptr)]
    threads = args.threads or 0
    weights = np.ones(len(q_ids), np.float32)
    offsets = np.zeros(len(q_ptr) - 1, np.float32)
    sel = Selections.none(len(q_ptr) - 1)
    pruned = load("pruned")

    for k in args.k:
        every = pruned.prunable(q_ptr, q_ids, weights, ret.t_ptr, offsets, sel.ids, sel.ptr, sel.mask_of, k)
        fns = {
            "auto": lambda k=k: ret.score_encoded(q_ptr, q_ids, k, pruning="auto"),
            "all": lambda k=k, every=every: pruned.pruned_topk(
                q_ptr, q_ids, weights, ret.t_ptr, ret.t_docs, ret.t_w, ret.t_max, ret.b_max, ret.b_last, offsets,
                *sel.arrays(), n_docs, k, n_threads=args.threads, prune=every, t_min=ret.t_min),
            "none": lambda k=k: ret.score_encoded(q_ptr, q_ids, k, pruning="none"),
            "bm25s": lambda k=k: model.retrieve(bq, k=k, show_progress=False, n_threads=threads),
        }
        t = median_times(fns, repeat=args.repeat, warmup=1)
        auto, every_out, none = fns["auto"](), fns["all"](), fns["none"]()
        same = all(a.tobytes() == c.tobytes() for out in (auto, every_out) for a, c in zip(out, none, strict=True))
        b_docs, b_scores = fns["bm25s"]()
        ks = np.sort(none[1], axis=1)[:, ::-1]
        agree = np.allclose(np.sort(b_scores, axis=1)[:, ::-1][:, : ks.shape[1]], ks, rtol=2e-6, atol=1e-6)
        n_q = len(q_ptr) - 1
        for name, label in (("auto", 'pruning="auto"'), ("all", "every query pruned"), ("none", 'pruning="none"'),
                            ("bm25s", "bm25s numba")):
            row = {"what": f"[{n_docs:,}] top-{k} {label}", "seconds": t[name], "qps": f"{n_q / t[name]:,.0f}"}
            if name != "bm25s":
                row["vs_bm25s"] = f"{t['bm25s'] / t[name]:.2f}x"
                row["vs_exhaustive"] = f"{t['none'] / t[name]:.2f}x"
            rows.append(row)
        rows.append({"what": f"[{n_docs:,}] top-{k} checks", "seconds": 0.0, "pruned_equal_exhaustive": same,
                     "bm25s_scores_equal": bool(agree)})
        assert same, "pruned results differ from the exhaustive kernel's"
    rows.append({"what": f"[{n_docs:,}] peak RSS so far (MB)", "seconds": 0.0, "rss": f"{peak_rss_mb():,.0f}"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, nargs="+", default=[250_000, 1_000_000])
    ap.add_argument("--vocab", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    header("BM25 top-k: exact dynamic pruning vs exhaustive vs bm25s")
    rows: list[dict] = []
    for n in args.docs:
        rows += run(n, args)
        report(rows[-(4 + 5 * len(args.k)):])
    print()
    report(rows)


if __name__ == "__main__":
    main()
