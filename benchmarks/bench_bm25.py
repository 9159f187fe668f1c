"""BM25: kolm_search's batch retrieval vs bm25s (numba and numpy backends) and rank_bm25.

Rerun: ``python benchmarks/bench_bm25.py --docs 200000 --queries 1000`` and
``python benchmarks/bench_bm25.py --dataset cranfield`` (any BEIR folder or name). Same tokens for
every library (kolm's tokenizer output is handed to the others); scores are checked equal.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from _common import header, median_time, report


def synthetic(n_docs: int, n_queries: int, vocab: int = 50_000, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.05
    p /= p.sum()
    lengths = rng.integers(20, 120, n_docs)
    tokens = rng.choice(vocab, size=int(lengths.sum()), p=p)
    words = np.array([f"t{i}" for i in range(vocab)], dtype=object)
    splits = np.split(words[tokens], np.cumsum(lengths)[:-1])
    docs = [" ".join(s) for s in splits]
    queries = [" ".join(words[rng.choice(vocab, int(rng.integers(2, 8)), p=p)]) for _ in range(n_queries)]
    return docs, queries


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dataset", default=None, help="a BEIR folder or name (title + text) instead of synthetic data")
    ap.add_argument("--rank-bm25-queries", type=int, default=20)
    args = ap.parse_args()
    import bm25s

    from kolm_search import BM25Retriever, Tokenizer

    if args.dataset:
        from kolm_search.io import load_dataset

        ds = load_dataset(args.dataset)
        docs = [f"{t or ''} {c}".strip() for t, c in zip(ds.corpus["title"], ds.corpus["content"], strict=True)]
        queries = list(ds.queries["query"])
        tok = Tokenizer()
        label = f"{ds.name} ({len(docs)} docs, {len(queries)} queries)"
    else:
        docs, queries = synthetic(args.docs, args.queries)
        tok = Tokenizer(stopwords=None, stemmer=None)
        label = f"synthetic ({len(docs)} docs, {len(queries)} queries)"
    header(f"BM25 top-{args.k}, {label}")
    frame = pd.DataFrame({"id": [str(i) for i in range(len(docs))], "content": docs})
    doc_tokens = [tok(d) for d in docs]
    q_tokens = [tok(q) for q in queries]
    rows = []

    t0 = time.perf_counter()
    ret = BM25Retriever(frame, tokenizer=tok, fields=("content",), n_threads=args.threads)
    rows.append({"what": "kolm index build incl. tokenising", "seconds": time.perf_counter() - t0})
    t_ki, _ = median_time(lambda: ret.index_tokens(doc_tokens), 1, 0)
    rows.append({"what": "kolm index from the same tokens", "seconds": t_ki})
    t0 = time.perf_counter()
    ret.score_texts(queries[:2], args.k)
    rows.append({"what": "kolm first query (Numba compile or cache load)", "seconds": time.perf_counter() - t0})
    q_ptr, q_ids_k = ret.encode(queries)
    t_k, (kd, ks, kc) = median_time(lambda: ret.score_encoded(q_ptr, q_ids_k, args.k), args.repeat)
    rows.append({"what": "kolm score_encoded (token ids given)", "seconds": t_k, "qps": f"{len(queries) / t_k:,.0f}"})
    t_ke, _ = median_time(lambda: ret.score_texts(queries, args.k), args.repeat)
    rows.append({"what": "kolm score_texts (tokenise + score + top-k)", "seconds": t_ke, "qps": f"{len(queries) / t_ke:,.0f}"})

    t0 = time.perf_counter()
    model = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numba")
    model.index(doc_tokens, show_progress=False)
    t_index_bm25s = time.perf_counter() - t0
    rows.append({"what": "bm25s index (from the same tokens)", "seconds": t_index_bm25s,
                 "kolm_index_speedup": f"{t_index_bm25s / t_ki:.2f}x"})
    vocab = model.vocab_dict
    q_ids = [[vocab[t] for t in q if t in vocab] or [0] for q in q_tokens]
    model.retrieve(q_ids[:2], k=args.k, show_progress=False, n_threads=args.threads or 0)
    t_b, (bd, bs) = median_time(lambda: model.retrieve(q_ids, k=args.k, show_progress=False, n_threads=args.threads or 0), args.repeat)
    rows.append({"what": "bm25s numba backend retrieve (token ids given)", "seconds": t_b, "qps": f"{len(queries) / t_b:,.0f}",
                 "kolm_speedup": f"{t_b / t_k:.2f}x"})
    t_be, _ = median_time(lambda: model.retrieve([[vocab[t] for t in tok(q) if t in vocab] or [0] for q in queries],
                                                 k=args.k, show_progress=False, n_threads=args.threads or 0), args.repeat)
    rows.append({"what": "bm25s tokenise (same tokenizer) + retrieve", "seconds": t_be, "qps": f"{len(queries) / t_be:,.0f}",
                 "kolm_speedup": f"{t_be / t_ke:.2f}x"})
    # equal scores: compare kolm's scores for bm25s's documents
    mism = 0
    for q in range(min(len(queries), 200)):
        full = model.get_scores(q_ids[q])
        n = int(kc[q])
        mism += int(not np.allclose(ks[q, :n], full[kd[q, :n]], rtol=2e-6))
    rows.append({"what": "score check vs bm25s.get_scores (first 200 queries)", "seconds": 0.0, "mismatching_queries": mism})
    np_model = bm25s.BM25(method="lucene", k1=1.5, b=0.75, backend="numpy")
    np_model.index(doc_tokens, show_progress=False)
    nq = min(len(queries), 200)
    t_np, _ = median_time(lambda: np_model.retrieve(q_ids[:nq], k=args.k, show_progress=False), 1, 0)
    rows.append({"what": f"bm25s numpy backend ({nq} queries)", "seconds": t_np, "qps": f"{nq / t_np:,.0f}"})
    try:
        from rank_bm25 import BM25Okapi

        rb = BM25Okapi(doc_tokens, k1=1.5, b=0.75)
        nr = args.rank_bm25_queries
        t_rb, _ = median_time(lambda: [np.argsort(-rb.get_scores(q))[: args.k] for q in q_tokens[:nr]], 1, 0)
        rows.append({"what": f"rank_bm25 BM25Okapi ({nr} queries)", "seconds": t_rb, "qps": f"{nr / t_rb:,.1f}"})
    except ImportError:
        pass
    report(rows)


if __name__ == "__main__":
    main()
