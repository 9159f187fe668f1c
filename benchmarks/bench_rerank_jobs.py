"""Batch re-ranking jobs that survive: what resumability, the score cache and the LLM rerankers cost.

Rerun from ``benchmarks/``: ``python bench_rerank_jobs.py --part jobs|cache|llm|overhead --repeat 3``
(``jobs`` and ``cache`` need the ``embeddings`` extra: MiniLM on sentence-transformers). Rows:

- ``jobs``: MMR on MiniLM over 100 Cranfield queries x top-100 of a BM25 run. The in-memory
  ``rerank_run``; the same job with ``output=`` (one part, the same chunk: the cost of the
  fingerprint, the part, its record and reading it back; target at most 1.05x); the job in
  parts of 10 queries through a fresh embedding cache (what ``kolm-search rerank`` does:
  resumable at 10 queries, each document embedded once however many parts it is in), against
  the model-bound time, embedding the run's distinct documents once (target within 1.3x); and
  that job again over the warm embedding cache.
- ``cache``: a cross-encoder of MiniLM's size (all-MiniLM-L6-v2's encoder weights under a
  randomly initialised classification head: the cost of a real model, no ranking claim) over
  30 queries x top-100, cold score cache, then warm (target: warm at most 5 % of cold).
- ``overhead``: the job's own cost as the run grows (a reranker that costs nothing), in memory
  and with ``output=``.
- ``llm``: the LLM rerankers against a chat server (another process, ``_fake_llm.py``) that
  answers after a fixed 50 ms: requests per second against ``max_concurrency / 0.05`` (target at
  least 0.8x), and the most requests in flight.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import header, median_times, report


def cranfield_run(n_queries: int, depth: int) -> tuple[Any, Any, Any]:
    from kolm_search import presets
    from kolm_search.io import load_dataset

    ds = load_dataset("cranfield")
    queries = ds.queries.head(n_queries)
    return ds, queries, presets.bm25(ds.corpus).search_batch(queries, limit=depth).run


def distinct_texts(ds: Any, run: Any) -> list[str]:
    docs = ds.corpus.set_index("id").loc[run["doc_id"].unique()]
    return [f"{t} {c}" if isinstance(t, str) and t else c for t, c in zip(docs["title"], docs["content"], strict=True)]


def jobs(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from kolm_search.adapters import CachedEmbedder, MMRReranker, SentenceTransformerEmbedder
    from kolm_search.jobs.rerank import rerank_run

    ds, queries, run = cranfield_run(args.queries, 100)
    texts = distinct_texts(ds, run)
    emb = SentenceTransformerEmbedder("minilm", batch_size=64)
    header(f"MMR on MiniLM, {len(queries)} Cranfield queries x top-100 ({len(texts)} distinct documents)")
    counter = iter(range(10**6))

    def fresh(name: str) -> Path:
        return work / f"{name}-{next(counter)}"

    warm = CachedEmbedder(emb, work / "warm.sqlite")
    warm.embed_many(texts + list(queries["query"]))
    calls = {
        "model": lambda: emb.embed_many(texts),
        "memory": lambda: rerank_run(run, ds, MMRReranker(emb, lambda_=0.7), progress=False),
        "output": lambda: rerank_run(run, ds, MMRReranker(emb, lambda_=0.7), progress=False, output=fresh("out")),
        "parts": lambda: rerank_run(run, ds, MMRReranker(CachedEmbedder(emb, fresh("emb") / "e.sqlite"), lambda_=0.7),
                                    batch_size=10, progress=False, output=fresh("parts")),
        "warm": lambda: rerank_run(run, ds, MMRReranker(warm, lambda_=0.7), batch_size=10, progress=False,
                                   output=fresh("warm")),
    }
    samples: dict[str, list[float]] = {}
    t = median_times(calls, args.repeat, warmup=0, samples=samples)
    paired = statistics.median(o / m for o, m in zip(samples["output"], samples["memory"], strict=True))
    return [{"what": f"embed the run's {len(texts)} distinct documents once (model-bound)", "seconds": t["model"]},
            {"what": "rerank_run in memory (one chunk)", "seconds": t["memory"]},
            {"what": "rerank_run(output=...), the same chunk as one part", "seconds": t["output"],
             "vs_in_memory": f"{t['output'] / t['memory']:.3f}x", "paired_median": f"{paired:.3f}x"},
            {"what": "rerank_run(output=..., batch_size=10), fresh embedding cache", "seconds": t["parts"],
             "vs_model_bound": f"{t['parts'] / t['model']:.2f}x"},
            {"what": "the same over the warm embedding cache", "seconds": t["warm"],
             "vs_cold": f"{100 * t['warm'] / t['parts']:.1f} %"}]


class Identity:
    """A reranker that costs nothing: what is left is the job's own cost."""

    def fingerprint(self) -> str:
        return "Identity/1"

    def rerank_batch(self, items: Any) -> list[list[Any]]:
        return [list(docs) for docs, _ in items]

    def rerank(self, docs: Any, context: Any) -> list[Any]:
        return list(docs)


def overhead(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    """The job's own cost as the run grows (a reranker that costs nothing), in memory and resumable."""
    import numpy as np
    import pandas as pd

    from kolm_search.jobs.rerank import rerank_run

    header("the job's own cost: a no-op reranker, top-100 of each query, chunks of 1,000 queries")
    rows, counter = [], iter(range(10**6))
    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(20_000)], "content": [f"text {i}" for i in range(20_000)]})
    for n_q in (1_000, 10_000):
        rng = np.random.default_rng(n_q)
        run = pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_q)], 100),
                            "doc_id": [f"d{i}" for i in rng.integers(0, 20_000, n_q * 100)],
                            "score": np.tile(np.arange(100, 0, -1.0), n_q)}).drop_duplicates(["qid", "doc_id"])
        queries = {f"q{i}": f"query {i}" for i in range(n_q)}
        t = median_times({
            "memory": lambda run=run, queries=queries: rerank_run(run, corpus, Identity(), queries=queries, progress=False),
            "output": lambda run=run, queries=queries: rerank_run(run, corpus, Identity(), queries=queries, progress=False,
                                                                  output=work / f"o{next(counter)}"),
        }, args.repeat, warmup=1)
        rows.append({"what": f"{n_q} queries, {len(run)} rows: in memory", "seconds": t["memory"],
                     "us_per_row": f"{1e6 * t['memory'] / len(run):.1f}"})
        rows.append({"what": f"{n_q} queries, {len(run)} rows: output= (parts, records, read back)",
                     "seconds": t["output"], "extra_us_per_row": f"{1e6 * (t['output'] - t['memory']) / len(run):.2f}"})
    return rows


def minilm_cross_encoder(folder: Path) -> Path:
    """MiniLM's encoder under a random single-logit head, saved for sentence-transformers."""
    import torch
    from transformers import BertForSequenceClassification

    from kolm_search.adapters import packaged_minilm_path

    src = packaged_minilm_path()
    torch.manual_seed(0)
    BertForSequenceClassification.from_pretrained(str(src), num_labels=1).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def cache(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from kolm_search.adapters import CrossEncoderReranker, ScoreCache
    from kolm_search.jobs.rerank import rerank_run

    ds, queries, run = cranfield_run(args.cache_queries, 100)
    reranker = CrossEncoderReranker(minilm_cross_encoder(work / "ce"), batch_size=32)
    header(f"a MiniLM-sized cross-encoder, {len(queries)} Cranfield queries x top-100 ({len(run)} pairs)")
    counter = iter(range(10**6))
    cold, warm = [], []
    for _ in range(args.repeat):
        path = work / f"scores-{next(counter)}.sqlite"
        t0 = time.perf_counter()
        rerank_run(run, ds, reranker, progress=False, score_cache=ScoreCache(path))
        cold.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rerank_run(run, ds, reranker, progress=False, score_cache=ScoreCache(path))
        warm.append(time.perf_counter() - t0)
    c, w = statistics.median(cold), statistics.median(warm)
    return [{"what": "rerank_run, cold score cache", "seconds": c, "pairs_per_s": f"{len(run) / c:.0f}"},
            {"what": "rerank_run, warm score cache (zero model calls)", "seconds": w, "vs_cold": f"{100 * w / c:.2f} %"}]


def llm(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    import pandas as pd

    from kolm_search.adapters import LLMListwiseReranker, LLMPointwiseReranker, OpenAICompatibleClient
    from kolm_search.jobs.rerank import rerank_run

    latency, width = 0.05, args.concurrency
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_fake_llm.py")), str(latency)],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        client = OpenAICompatibleClient(f"http://127.0.0.1:{port}/v1", "fake", timeout=30, max_retries=0)
        header(f"LLM rerankers, a server answering after {latency * 1000:.0f} ms, max_concurrency={width}")
        depth, rows = 20, []
        corpus = pd.DataFrame({"id": [f"d{i}" for i in range(depth * 4)], "content": [f"text {i}" for i in range(depth * 4)]})
        for name, make, n_q, per_query in (
                ("LLMPointwiseReranker", lambda: LLMPointwiseReranker(client, max_concurrency=width), args.llm_queries,
                 depth),
                ("LLMListwiseReranker, window 10 step 5",
                 lambda: LLMListwiseReranker(client, window=10, step=5, max_concurrency=width), 5 * args.llm_queries, 3)):
            queries = pd.DataFrame({"qid": [f"q{i}" for i in range(n_q)], "query": [f"query {i}" for i in range(n_q)]})
            run = pd.DataFrame([(f"q{q}", f"d{(q + j) % (depth * 4)}", float(depth - j)) for q in range(n_q)
                                for j in range(depth)], columns=["qid", "doc_id", "score"])
            times = []
            for _ in range(args.repeat):
                reranker = make()
                t0 = time.perf_counter()
                rerank_run(run, corpus, reranker, top_k=depth, queries=queries, progress=False)
                times.append(time.perf_counter() - t0)
            t, requests = statistics.median(times), n_q * per_query
            ideal = width / latency
            rows.append({"what": f"{name}: {requests} requests", "seconds": t, "req_per_s": f"{requests / t:.0f}",
                         "vs_ideal": f"{requests / t / ideal:.2f}x of {ideal:.0f}/s"})
        return rows
    finally:
        server.kill()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=["jobs", "cache", "llm", "overhead", "all"], default="all")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--cache-queries", type=int, default=30)
    ap.add_argument("--llm-queries", type=int, default=80)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for part in (("jobs", "cache", "llm", "overhead") if args.part == "all" else (args.part,)):
            report({"jobs": jobs, "cache": cache, "llm": llm, "overhead": overhead}[part](args, Path(tmp)))


if __name__ == "__main__":
    main()
