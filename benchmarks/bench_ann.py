"""Approximate dense indexes (``DenseRetriever(index=...)``) against the exact kernel and faiss.

Rerun: ``python benchmarks/bench_ann.py --docs 100000 --queries 1000 --repeat 3`` (and
``--docs 1000000 --kinds hnsw,ivf,ivfpq``). Vectors: a two-level Gaussian mixture of unit
384-d vectors (``--topics`` topics, clusters of ~50 points around them, points around the
clusters), queries drawn from the same mixture: neighbours span clusters, as text embeddings'
do (uniform random vectors are ANN's worst case and unlike them). For each index: build time,
memory (the process's resident growth over the build, and the faiss index's bytes), recall@k
against the exact kernel (the oracle), queries/s of ``search_vectors`` (the whole batch in one
call; median of ``--repeat`` rounds, every method once per round) and its ratio to exact.
``--pipeline`` also times the exact ``search_batch`` of a dense client end to end (query
texts in, responses out; the embedder a dict lookup of the query vectors) against faiss
``IndexFlatIP.search`` of the same vectors.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import time
from typing import Any

import numpy as np
from _common import header, median_times

KINDS = ("exact", "hnsw", "ivf", "ivfpq")
SWEEP = {"hnsw": (("ef_search", 128), ("ef_search", 512)), "ivf": (("nprobe", 8), ("nprobe", 16), ("nprobe", 32)),
         "ivfpq": (("rerank", 4), ("rerank", 8), ("rerank", 16), ("rerank", 32))}


def mixture(n: int, d: int, seed: int, topics: int, per_cluster: int = 50) -> np.ndarray:
    """float32 (n, d) unit vectors: topics ~ N(0, 1), clusters ~ topic + N(0, 0.6^2), points ~
    cluster + N(0, 0.8^2), normalised."""
    rng = np.random.default_rng(seed)
    t = rng.standard_normal((topics, d), dtype=np.float32)
    n_c = max(1, n // per_cluster)
    c = t[rng.integers(0, topics, n_c)] + 0.6 * rng.standard_normal((n_c, d), dtype=np.float32)
    out = np.empty((n, d), np.float32)
    for s in range(0, n, 1 << 16):  # in blocks: no (n, d) float64 or second temporary
        e = min(n, s + (1 << 16))
        block = c[rng.integers(0, n_c, e - s)] + 0.8 * rng.standard_normal((e - s, d), dtype=np.float32)
        out[s:e] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def rss_mb() -> float:
    with open("/proc/self/statm") as fp:
        return int(fp.read().split()[1]) * 4096 / 1e6


def recall(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(g[g >= 0], w[w >= 0])) / max(1, (w >= 0).sum())
                          for g, w in zip(got, want, strict=True)]))


class Lookup:
    """An embedder that returns each query's precomputed vector (``"q<i>"`` -> row i)."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors

    def embed(self, text: str) -> list[float]:
        return self.vectors[int(text[1:])].tolist()

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return self.vectors[[int(t[1:]) for t in texts]]


def pipeline(docs: np.ndarray, queries: np.ndarray, k: int, repeat: int) -> None:
    import faiss
    import pandas as pd

    from kolm_search import presets

    table = pd.DataFrame({"id": [f"d{i}" for i in range(len(docs))], "content": [""] * len(docs)})
    client = presets.dense(table, Lookup(queries), embeddings=docs)
    retriever = client.pipeline.modules.retriever
    texts = [f"q{i}" for i in range(len(queries))]
    flat = faiss.IndexFlatIP(docs.shape[1])
    flat.add(docs)
    times = median_times({"search_batch": lambda: client.search_batch(texts, limit=k),
                          "search_vectors": lambda: retriever.search_vectors(queries, k),
                          "faiss": lambda: flat.search(queries, k),
                          "gemm": lambda: queries @ docs.T}, repeat=repeat)
    print(f"\n## exact search_batch, {len(queries)} queries x {len(docs)} x {docs.shape[1]}, top-{k}")
    for name, t in times.items():
        print(f"{name:<15} {t:8.3f} s   faiss / this {times['faiss'] / t:5.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: exact, hnsw, ivf, ivfpq, or factory strings")
    ap.add_argument("--params", default="", help="index parameters for every kind, e.g. nprobe=32,ef_search=128")
    ap.add_argument("--pipeline", action="store_true", help="also time exact search_batch against faiss's flat index")
    ap.add_argument("--sweep", action="store_true",
                    help="also time each built index at other search parameters (ef_search, nprobe, rerank)")
    args = ap.parse_args()
    header(f"dense ANN top-{args.k}: {args.queries} queries x {args.docs} docs x {args.dim} float32 (mixture)")
    import faiss

    from kolm_search.retrievers.ann import AnnIndex
    from kolm_search.retrievers.dense import DenseRetriever, exact_topk

    t0 = time.perf_counter()
    x = mixture(args.docs + args.queries, args.dim, 0, args.topics)
    docs, queries = x[: args.docs], np.ascontiguousarray(x[args.docs:])
    del x
    print(f"vectors generated in {time.perf_counter() - t0:.1f} s; faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} OpenMP threads")
    import pandas as pd

    table = pd.DataFrame({"id": [f"d{i}" for i in range(args.docs)], "content": [""] * args.docs})
    exact_topk(queries[:2], docs[:1000], args.k)  # compile or load the kernel
    want = exact_topk(queries, docs, args.k)[0]
    params: dict[str, Any] = {p.split("=")[0]: int(p.split("=")[1]) for p in args.params.split(",") if p}
    fns: dict[str, Any] = {}
    rows: dict[str, dict[str, Any]] = {}
    for kind in args.kinds.split(","):
        ret: Any = None
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        if kind == "faiss-flat":
            index = faiss.IndexFlatIP(args.dim)
            index.add(docs)
            fns[kind] = lambda index=index: index.search(queries, args.k)[1]
            ann_bytes = docs.nbytes
        else:
            # metric "ip" over the unit vectors (= cosine): every retriever shares ``docs`` (cosine would
            # normalise a copy each, 1.5 GB at 1M)
            ret = DenseRetriever(table, embeddings=docs, metric="ip", index=kind, **({} if kind == "exact" else params))
            fns[kind] = lambda ret=ret: ret.search_vectors(queries, args.k)[0]
            ann_bytes = 0 if ret.ann is None else len(faiss.serialize_index(ret.ann.index))
        build = time.perf_counter() - t0
        got = fns[kind]()
        rows[kind] = {"build_s": build, "rss_mb": rss_mb() - before, "index_mb": ann_bytes / 1e6,
                      "recall": recall(got, want),
                      "factory": "" if kind in ("exact", "faiss-flat") else ret.ann.spec.factory,
                      "params": "" if kind in ("exact", "faiss-flat") else
                      {k: v for k, v in ret.ann.spec.params.items() if k in ("nprobe", "ef_search", "rerank")}}
        print(f"built {kind}: {rows[kind]}", flush=True)
        if args.sweep and ret is not None and ret.ann is not None:
            for name, value in SWEEP.get(kind, ()):
                other = copy.copy(ret)  # the same faiss index, searched with other parameters
                spec = ret.ann.spec
                other.ann = AnnIndex(dataclasses.replace(spec, params={**spec.params, name: value}), ret.ann.index,
                                     ret.ann.live)
                label = f"{kind} {name}={value}"
                fns[label] = lambda other=other: other.search_vectors(queries, args.k)[0]
                rows[label] = {**rows[kind], "recall": recall(fns[label](), want),
                               "params": {k: v for k, v in other.ann.spec.params.items()
                                          if k in ("nprobe", "ef_search", "rerank")}}
    times = median_times(fns, repeat=args.repeat)
    base = times.get("exact")
    print(f"\n| index | build s | resident MB | faiss index MB | recall@{args.k} | queries/s | x exact |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, r in rows.items():
        speed = "" if base is None else f"{base / times[kind]:.1f}x"
        name = f"{kind} (`{r['factory']}`, {r['params']})" if r["factory"] else kind
        print(f"| {name} | {r['build_s']:.1f} | {r['rss_mb']:.0f} | {r['index_mb']:.0f} | {r['recall']:.4f} | "
              f"{args.queries / times[kind]:.0f} | {speed} |")
    if args.pipeline:
        pipeline(docs, queries, args.k, args.repeat)


if __name__ == "__main__":
    main()
