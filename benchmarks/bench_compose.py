"""Stage algebra (issue 27): what composing, sharing and caching cost, in one process.

Rerun: ``python benchmarks/bench_compose.py`` (Cranfield or ``--corpus``, then a 100,000-document synthetic
corpus; ``--docs`` changes its size). Rows:

- ``hybrid``: ``search_batch`` (limit 10) through ``Fuse(bm25 % 100, dense % 100)`` against
  ``presets.hybrid(depth=100)`` and against the wiring before stages existed (a
  ``CompositeRetriever([bm25, dense], depth=100)``): ratios of medians of paired rounds;
- ``experiment``: an ``Experiment`` of five MMR rerankers over one ``bm25 % 100`` against the
  slowest of the five pipelines run alone (its own BM25 included), the same with five MMR
  rerankers over ``bm25 % 20`` (cheaper than the first stage), and with five columnar rerankers
  (a document-length prior, vectorised: the cost of sharing itself); ``--rerankers`` picks some;
- ``cached``: the same experiment's ``exp.run()`` again over its ``cache_dir`` against its first,
  then the same for ``run_pipelines()`` alone (the runs, no measure table: what the cache holds).

The experiment rows time ``exp.run()``, the table of measures an experiment is run for (its
runs, then their per-query values, tests and precision-recall curves), against the slowest of
the five pipelines timed the same way (an ``Experiment`` of that pipeline alone, ``.run()``);
the cached rows time ``exp.run()`` too (a second one finds its measure table in ``cache_dir/tables``
and reads no run), and then ``run_pipelines()`` alone. An experiment keeps
a stage pipeline's run as codes and measures it from them; the rows "run_pipelines() only" (against the pipeline's
``pipe(queries)``) and "every run as a DataFrame" (``run_pipelines()`` and then
``exp.runs[name]`` of every pipeline, the work ``pipe(queries)`` does five times) time the runs
without the table, as earlier figures did.

The embedder is a lookup of precomputed random vectors (64 dimensions) by text, so the figures
are the engine's, not a model's.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _common import header, median_times, report

from kolm_search import (
    BM25Retriever,
    CompositeRetriever,
    DenseRetriever,
    Experiment,
    Fuse,
    SearchClient,
    presets,
)
from kolm_search.adapters import MMRReranker
from kolm_search.compose import RerankerStage
from kolm_search.compose.frame_ops import rescored
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.io import Dataset, load_dataset


class LookupEmbedder:
    """Vectors of known texts from a table; others hashed into a seed (deterministic)."""

    def __init__(self, texts: list[str], dim: int = 64, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.dim = dim
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = rng.standard_normal((len(texts), dim)).astype(np.float32)

    def _one(self, text: str) -> np.ndarray:
        row = self.rows.get(text)
        if row is not None:
            return self.matrix[row]
        return np.random.default_rng(abs(hash(text)) % (2**32)).standard_normal(self.dim).astype(np.float32)

    def embed(self, text: str) -> np.ndarray:
        return self._one(text)

    def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def fingerprint(self) -> str:
        return f"lookup-{len(self.rows)}-{self.dim}"


class LengthPrior(RerankerStage):
    """``score + weight * log(1 + length)`` of each candidate, re-sorted (``frame_ops.rescored``):
    a columnar reranker."""

    def __init__(self, lengths: np.ndarray, weight: float) -> None:
        self.lengths, self.weight = lengths, weight

    def stage_params(self) -> dict[str, Any]:
        return {"weight": self.weight}

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        assert candidates is not None
        return rescored(candidates, candidates.score + self.weight * np.log1p(self.lengths[candidates.doc]))


def synthetic(n_docs: int, n_queries: int, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    vocab = 20_000
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    docs = [" ".join(f"w{t}" for t in rng.choice(vocab, size=int(rng.integers(5, 60)), p=p)) for _ in range(n_docs)]
    queries = [" ".join(f"w{t}" for t in rng.choice(2000, size=int(rng.integers(2, 6)))) for _ in range(n_queries)]
    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(n_docs)], "title": "", "content": docs})
    q = pd.DataFrame({"qid": [f"q{i}" for i in range(n_queries)], "query": queries})
    qrels = pd.DataFrame({"qid": q["qid"], "doc_id": [f"d{i}" for i in rng.integers(0, n_docs, n_queries)],
                          "relevance": 1})
    return Dataset(name="synthetic", corpus=corpus, queries=q, qrels=qrels)


def hybrid_rows(name: str, ds: Dataset, repeat: int) -> list[dict[str, Any]]:
    table = DocumentTable.coerce(ds.corpus)
    emb = LookupEmbedder(table.texts())
    bm25, dense = BM25Retriever(table), DenseRetriever(table, emb, embeddings=emb.matrix)
    queries = ds.queries if name.startswith("synthetic") else ds.judged_queries()

    def client(retriever: Any) -> SearchClient:
        return SearchClient({"planner": DefaultQueryPlanner(), "retriever": retriever, "embedder": emb})

    clients = {"composed": client(Fuse(bm25 % 100, dense % 100)),
               "before": client(CompositeRetriever([bm25, dense], depth=100)),
               "preset": presets.hybrid(table, emb, depth=100, embeddings=emb.matrix)}
    fns = {k: (lambda c=c: c.search_batch(queries, limit=10)) for k, c in clients.items()}
    samples: dict[str, list[float]] = {}
    med = median_times(fns, repeat=repeat, samples=samples)
    ratio = {k: float(np.median(np.array(samples["composed"]) / np.array(samples[k]))) for k in ("before", "preset")}
    return [{"what": f"{name} hybrid: Fuse(bm25 % 100, dense % 100)", "seconds": med["composed"],
             "vs_preset": round(ratio["preset"], 3), "vs_before": round(ratio["before"], 3),
             "queries": len(queries), "docs": len(table)},
            {"what": f"{name} hybrid: presets.hybrid(depth=100)", "seconds": med["preset"]},
            {"what": f"{name} hybrid: CompositeRetriever (before)", "seconds": med["before"]}]


KINDS = {"mmr": "MMR rerankers (depth 100)", "mmr20": "MMR rerankers (depth 20)",
         "prior": "columnar rerankers"}


def experiment_rows(name: str, ds: Dataset, repeat: int, kind: str) -> list[dict[str, Any]]:
    table = DocumentTable.coerce(ds.corpus)
    emb = LookupEmbedder(table.texts())
    first = BM25Retriever(table) % (20 if kind == "mmr20" else 100)
    lengths = np.array([len(t.split()) for t in table.texts()], np.float64)
    pipes: dict[str, Any] = {f"{kind}{w}": first >> (LengthPrior(lengths, w) if kind == "prior" else
                                                      MMRReranker(emb, lambda_=w)) for w in (0.5, 0.6, 0.7, 0.8, 0.9)}
    queries = ds.queries if name.startswith("synthetic") else ds.judged_queries()
    label = KINDS[kind]

    def experiment(cache: Path | None = None, measured: bool = True, frames: bool = False,
                   only: str | None = None) -> Experiment:
        chosen = pipes if only is None else {only: pipes[only]}
        exp = Experiment(chosen, ds, ["ndcg@10"], limit=100, progress=False, cache_dir=cache, drop_self_hits=False)
        if measured:
            exp.run()  # the table of measures (compare: per-query values, tests, curves)
        else:
            exp.run_pipelines()
        if frames:
            for key in chosen:
                exp.runs[key]
        return exp

    singles = {f"single {k}": (lambda k=k: experiment(only=k)) for k in pipes}  # its run and its table
    plain = {f"plain {k}": (lambda p=p: p(queries, limit=100)) for k, p in pipes.items()}  # its run alone
    fns = {"experiment": experiment, "pipelines": lambda: experiment(measured=False),
           "with_frames": lambda: experiment(measured=False, frames=True), **singles, **plain}
    med = median_times(fns, repeat=repeat)
    slowest = max(med[k] for k in singles)
    slowest_plain = max(med[k] for k in plain)
    rows = [{"what": f"{name} Experiment of 5 {label} over one BM25, exp.run() (runs and measure table)",
             "seconds": med["experiment"], "vs_slowest_single": round(med["experiment"] / slowest, 3)},
            {"what": f"{name} slowest single pipeline ({label}), Experiment of it, .run()", "seconds": slowest},
            {"what": f"{name} same Experiment, run_pipelines() only", "seconds": med["pipelines"],
             "vs_slowest_plain": round(med["pipelines"] / slowest_plain, 3)},
            {"what": f"{name} same Experiment, run_pipelines(), every run as a DataFrame",
             "seconds": med["with_frames"], "vs_slowest_plain": round(med["with_frames"] / slowest_plain, 3)},
            {"what": f"{name} slowest single pipeline ({label}), pipe(queries)", "seconds": slowest_plain}]
    for measured, call in ((True, "exp.run()"), (False, "run_pipelines()")):
        firsts, seconds, undecoded = [], [], []
        for _ in range(repeat):
            folder = Path(tempfile.mkdtemp(prefix="kolm-bench-compose-"))
            try:  # each run after a garbage collection, untimed (as median_times does)
                gc.collect()
                t0 = time.perf_counter()
                experiment(folder, measured=measured)
                firsts.append(time.perf_counter() - t0)
                gc.collect()
                t0 = time.perf_counter()
                again = experiment(folder, measured=measured)
                seconds.append(time.perf_counter() - t0)
                assert not again.shared.computed
                del again
                if measured:  # its table's bytes not decoded in this process before (as in a new session)
                    from kolm_search.evaluation.table_cache import clear_decoded  # (here: bench_rerun_pair
                    clear_decoded()  # imports this module over trees that have none)
                    gc.collect()
                    t0 = time.perf_counter()
                    experiment(folder, measured=measured)
                    undecoded.append(time.perf_counter() - t0)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        rows.append({"what": f"{name} same Experiment ({label}), {call} with cache_dir, first",
                     "seconds": float(np.median(firsts))})
        rows.append({"what": f"{name} same Experiment ({label}), {call} over the cache, second",
                     "seconds": float(np.median(seconds)),
                     "vs_first": round(float(np.median(np.array(seconds) / np.array(firsts))), 4)})
        if undecoded:
            rows.append({"what": f"{name} same Experiment ({label}), {call} over the cache, its table not decoded "
                                 "in this process before", "seconds": float(np.median(undecoded)),
                         "vs_first": round(float(np.median(np.array(undecoded) / np.array(firsts))), 4)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=("hybrid", "experiment"), default=None)
    ap.add_argument("--no-synthetic", action="store_true")
    ap.add_argument("--corpus", nargs="+", default=["cranfield"],
                    help="collections by name or BEIR folder (default cranfield; e.g. ../../shared/data/npl)")
    ap.add_argument("--rerankers", nargs="+", choices=tuple(KINDS), default=list(KINDS),
                    help="which experiments to run (default all)")
    args = ap.parse_args()
    header("stage algebra: composed vs fixed wiring, shared prefixes, cached reruns")
    rows: list[dict[str, Any]] = []
    sets = [(Path(c).name, load_dataset(c)) for c in args.corpus]
    if not args.no_synthetic:
        sets.append((f"synthetic{args.docs}", synthetic(args.docs, args.queries)))
    for name, ds in sets:
        if args.only in (None, "hybrid"):
            rows += hybrid_rows(name, ds, args.repeat)
        if args.only in (None, "experiment"):
            for kind in args.rerankers:
                rows += experiment_rows(name, ds, args.repeat, kind)
    report(rows)


if __name__ == "__main__":
    main()
