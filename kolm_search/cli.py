"""The ``kolm-search`` command: eval, fuse, compare, rerank, download.

Examples::

    kolm-search eval ../shared/data/cranfield --pipeline bm25 --metrics ndcg@10,recall@100
    kolm-search eval scifact --pipeline hybrid --run-out runs/scifact-hybrid.trec
    kolm-search fuse a.trec b.trec --method rrf --k 60 -o fused.trec
    kolm-search compare a.trec b.trec --qrels qrels.tsv --test t
    kolm-search rerank run.trec --dataset ../shared/data/cranfield --reranker mmr --model lsa -o reranked.trec
    kolm-search download scifact
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["main"]

DEFAULT_METRICS = "ndcg@10,recall@100,map,mrr"


def _metrics(text: str) -> list[str]:
    from kolm_search.evaluation.metrics import parse_metric

    names = [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        parse_metric(name)
    return names


def _build(pipeline: str, corpus: Any, model: str | None) -> Any:
    from kolm_search import presets

    if pipeline == "bm25":
        return presets.bm25(corpus)
    from kolm_search.adapters import LSAEmbedder, SentenceTransformerEmbedder
    from kolm_search.doctable import DocumentTable

    if model == "lsa":
        embedder: Any = LSAEmbedder(DocumentTable.from_frame(corpus).texts())
    else:
        embedder = SentenceTransformerEmbedder(model or "minilm")
    if pipeline == "dense":
        return presets.dense(corpus, embedder)
    return presets.hybrid(corpus, embedder)


def _print_table(rows: dict[str, dict[str, float]], metrics: Sequence[str]) -> None:
    width = max([len(n) for n in rows] + [8])
    print(f"{'run':<{width}}  " + "  ".join(f"{m:>12}" for m in metrics))
    for name, values in rows.items():
        print(f"{name:<{width}}  " + "  ".join(f"{values[m]:>12.4f}" for m in metrics))


def cmd_eval(args: argparse.Namespace) -> int:
    from kolm_search.evaluation import evaluate
    from kolm_search.evaluation.runner import run_queries
    from kolm_search.io import load_dataset, write_run

    metrics = _metrics(args.metrics)
    dataset = load_dataset(args.dataset, split=args.split, cache_dir=args.cache_dir)
    queries = dataset.judged_queries()
    print(f"{dataset}; evaluating {len(queries)} judged queries", file=sys.stderr)
    client = _build(args.pipeline, dataset.corpus, args.model)
    run = run_queries(client, queries, limit=args.limit, progress=not args.quiet, desc=args.pipeline)
    scores = evaluate(run, dataset.qrels, metrics)
    assert isinstance(scores, dict)
    _print_table({f"{dataset.name}/{args.pipeline}": scores}, metrics)
    if args.run_out:
        write_run(run, args.run_out, tag=f"kolm_{args.pipeline}")
        print(f"run written to {args.run_out}", file=sys.stderr)
    return 0


def cmd_fuse(args: argparse.Namespace) -> int:
    from kolm_search.fusion import fuse
    from kolm_search.io import read_run, write_run

    runs = [read_run(p) for p in args.runs]
    weights = [float(w) for w in args.weights.split(",")] if args.weights else None
    fused = fuse(runs, method=args.method, k=args.k, weights=weights, norm=args.norm, limit=args.limit)
    write_run(fused, args.output, tag=f"kolm_{args.method}")
    print(f"fused {len(runs)} runs ({len(fused)} rows) into {args.output}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from kolm_search.evaluation.compare import compare
    from kolm_search.io import read_qrels, read_run

    metrics = _metrics(args.metrics)
    runs = {Path(p).name: read_run(p) for p in args.runs}
    table = compare(runs, read_qrels(args.qrels), metrics, baseline=args.baseline, test=args.test,
                    correction=args.correction, seed=args.seed)
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 50):
        print(table.to_string())
    return 0


def cmd_rerank(args: argparse.Namespace) -> int:
    from kolm_search.adapters import (
        CrossEncoderReranker,
        LSAEmbedder,
        MMRReranker,
        SentenceTransformerEmbedder,
    )
    from kolm_search.doctable import DocumentTable
    from kolm_search.io import load_dataset, read_run, write_run
    from kolm_search.rerank import rerank_run

    dataset = load_dataset(args.dataset, split=args.split, cache_dir=args.cache_dir)
    run = read_run(args.run)
    reranker: Any
    if args.reranker == "cross-encoder":
        if not args.model:
            print("kolm-search rerank: error: --model is required for the cross-encoder", file=sys.stderr)
            return 1
        reranker = CrossEncoderReranker(args.model)
    else:
        if args.model == "lsa":
            embedder: Any = LSAEmbedder(DocumentTable.from_frame(dataset.corpus).texts())
        else:
            embedder = SentenceTransformerEmbedder(args.model or "minilm")
        reranker = MMRReranker(embedder, lambda_=args.mmr_lambda)
    out = rerank_run(run, dataset, reranker, top_k=args.top_k, progress=not args.quiet)
    write_run(out, args.output, tag=f"kolm_{args.reranker}")
    missing = out.attrs.get("missing", [])
    if missing:
        print(f"warning: {len(missing)} run documents are not in the corpus, e.g. {missing[0]}", file=sys.stderr)
    print(f"re-ranked {out.qid.nunique()} queries into {args.output}", file=sys.stderr)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from kolm_search.io import download_beir

    path = download_beir(args.name, args.cache_dir, progress=not args.quiet)
    print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kolm-search", description="Build, run and measure search pipelines.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("eval", help="evaluate a preset pipeline on a BEIR dataset (folder or name)")
    p.add_argument("dataset", help="a BEIR folder, or a BEIR name downloaded on first use (e.g. scifact)")
    p.add_argument("--pipeline", choices=["bm25", "dense", "hybrid"], default="bm25")
    p.add_argument("--metrics", default=DEFAULT_METRICS, help=f"comma-separated (default {DEFAULT_METRICS})")
    p.add_argument("--run-out", help="write the run here (TREC text; .gz or .parquet by extension)")
    p.add_argument("--limit", type=int, default=100, help="documents retrieved per query (default 100)")
    p.add_argument("--split", default="test")
    p.add_argument("--model", help="dense/hybrid embedder: a sentence-transformers model folder, 'minilm' "
                   "(packaged all-MiniLM-L6-v2, extra 'embeddings'; the default) or 'lsa' (no model needed)")
    p.add_argument("--cache-dir", help="dataset cache (default $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("fuse", help="fuse TREC runs")
    p.add_argument("runs", nargs="+")
    p.add_argument("--method", choices=["rrf", "combsum", "combmnz"], default="rrf")
    p.add_argument("--k", type=float, default=60)
    p.add_argument("--weights", help="comma-separated, one per run")
    p.add_argument("--norm", choices=["min-max", "z-score"], default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("compare", help="compare runs with significance tests")
    p.add_argument("runs", nargs="+")
    p.add_argument("--qrels", required=True)
    p.add_argument("--metrics", default="ndcg@10,map")
    p.add_argument("--baseline", help="file name of the baseline run (default: the first)")
    p.add_argument("--test", choices=["t", "wilcoxon", "fisher", "bootstrap"], default="t")
    p.add_argument("--correction", choices=["none", "bonferroni", "holm"], default="holm")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("rerank", help="re-rank each query's top-k of a run")
    p.add_argument("run")
    p.add_argument("--dataset", required=True, help="a BEIR folder or name (documents and query texts)")
    p.add_argument("--reranker", choices=["cross-encoder", "mmr"], default="mmr")
    p.add_argument("--model", help="cross-encoder folder; for mmr an embedder: model folder, 'minilm' or 'lsa'")
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument("--mmr-lambda", type=float, default=0.7)
    p.add_argument("--split", default="test")
    p.add_argument("--cache-dir")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_rerank)

    p = sub.add_parser("download", help="download a BEIR dataset into the cache")
    p.add_argument("name")
    p.add_argument("--cache-dir")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_download)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code (2 for usage errors, 1 for failures)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from kolm_search.errors import DownloadError, KolmTypeError, KolmValueError, SearchError

    try:
        return int(args.func(args))
    except (KolmValueError, KolmTypeError, SearchError, DownloadError, ImportError, FileNotFoundError) as exc:
        print(f"kolm-search {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
