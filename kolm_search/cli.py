"""The ``kolm-search`` command: eval, fuse, compare, rerank, download.

Examples::

    kolm-search eval cranfield --pipeline bm25 --metrics ndcg@10,recall@100
    kolm-search eval scifact --pipeline hybrid --run-out runs/scifact-hybrid.trec
    kolm-search fuse a.trec b.trec --method rrf --k 60 -o fused.trec
    kolm-search compare a.trec b.trec --qrels qrels.tsv --test t --format latex
    kolm-search rerank run.trec --dataset cranfield --reranker mmr -o reranked.trec
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


def _unsupervised_methods() -> list[str]:
    from kolm_search.fusion.methods import FUSION_METHODS, METHODS, canonical_method

    return [m for m in FUSION_METHODS if not METHODS[canonical_method(m)].supervised]


def _metrics(text: str) -> list[str]:
    import re

    from kolm_search.evaluation.metrics import parse_metric

    # commas inside parentheses belong to a measure's parameters: RBP(p=0.5,rel=2)
    names = [m.strip() for m in re.split(r",(?![^()]*\))", text) if m.strip()]
    for name in names:
        parse_metric(name)
    return names


def _embedder(model: str, corpus: Any) -> Any:
    from kolm_search.adapters import load_embedder
    from kolm_search.doctable import DocumentTable

    texts = DocumentTable.from_frame(corpus).texts() if model == "lsa" else None
    return load_embedder(model, texts)


def _build(pipeline: str, corpus: Any, model: str) -> Any:
    from kolm_search import presets

    if pipeline == "bm25":
        return presets.bm25(corpus)
    if pipeline.startswith("bm25-"):  # bm25-rm3, bm25-bo1, bm25-kl: pseudo-relevance feedback
        return presets.bm25(corpus, feedback=pipeline[len("bm25-"):])
    embedder = _embedder(model, corpus)
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
    from kolm_search.evaluation.self_hits import drop_self_hits
    from kolm_search.io import load_dataset, write_run

    metrics = _metrics(args.metrics)
    dataset = load_dataset(args.dataset, split=args.split, cache_dir=args.cache_dir)
    queries = dataset.judged_queries()
    print(f"{dataset}; evaluating {len(queries)} judged queries", file=sys.stderr)
    client = _build(args.pipeline, dataset.corpus, args.model)
    drop = {"auto": dataset.drop_self_hits, "drop": True, "keep": False}[args.self_hits]
    run = run_queries(client, queries, limit=args.limit + int(drop), progress=not args.quiet, desc=args.pipeline)
    if drop:
        run, n = drop_self_hits(run, args.limit)
        why = "as BEIR's evaluation does" if args.self_hits == "auto" else "--self-hits drop"
        print(f"dropped {n} self-hits (documents whose id is the query's) from the run before scoring, {why}; "
              f"searched {args.limit + 1} per query and kept the {args.limit} best others "
              f"(--self-hits keep to keep them)", file=sys.stderr)
    scores = evaluate(run, dataset.qrels, metrics, drop_self_hits=False)
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
                    correction=args.correction, seed=args.seed, alpha=args.alpha)
    if args.format == "markdown":
        print(table.to_markdown(), end="")
    elif args.format == "latex":
        print(table.to_latex(), end="")
    elif args.format == "csv":
        print(table.to_csv(index=False), end="")
    else:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 50):
            print(table.to_string())
    return 0


class _Raw(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, description and examples kept as written."""


_RUN_SUFFIXES = (".trec", ".txt", ".run", ".gz", ".tsv", ".parquet", ".pq")
RERANKERS = ("mmr", "cross-encoder", "onnx-cross-encoder", "llm-pointwise", "llm-listwise")


def _reranker(args: argparse.Namespace, dataset: Any, cache: Path | None) -> Any:
    """The reranker ``--reranker`` names, its model calls through the caches under ``cache``."""
    import os

    from kolm_search import adapters
    from kolm_search.errors import KolmValueError

    score_cache = adapters.ScoreCache(cache / "scores.sqlite") if cache is not None else None
    if args.reranker == "mmr":
        embedder = _embedder(args.model or "auto", dataset.corpus)
        if cache is not None:
            embedder = adapters.CachedEmbedder(embedder, cache / "embeddings.sqlite")
        return adapters.MMRReranker(embedder, lambda_=args.mmr_lambda)
    if args.reranker in ("cross-encoder", "onnx-cross-encoder"):
        if args.model in (None, "auto"):
            raise KolmValueError(f"--model FOLDER (a cross-encoder) is required for --reranker {args.reranker}")
        if args.reranker == "cross-encoder":
            return adapters.CrossEncoderReranker(args.model, score_cache=score_cache)
        return adapters.OnnxCrossEncoderReranker(args.model, score_cache=score_cache)
    if not (args.llm_url and args.llm_model):
        raise KolmValueError(f"--llm-url and --llm-model are required for --reranker {args.reranker}")
    client = adapters.OpenAICompatibleClient(args.llm_url, args.llm_model, os.environ.get(args.llm_api_key_env) or None,
                                             timeout=args.llm_timeout)
    if args.reranker == "llm-pointwise":
        return adapters.LLMPointwiseReranker(client, mode=args.llm_mode, max_concurrency=args.llm_concurrency,
                                             score_cache=score_cache)
    return adapters.LLMListwiseReranker(client, window=args.window, step=args.step,
                                        max_concurrency=args.llm_concurrency, score_cache=score_cache)


def cmd_rerank(args: argparse.Namespace) -> int:
    from kolm_search.io import default_cache_dir, load_dataset, read_run, write_run
    from kolm_search.rerank import rerank_run

    dataset = load_dataset(args.dataset, split=args.split, cache_dir=args.cache_dir)
    cache = None if args.no_cache else Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    run = read_run(args.run)
    reranker = _reranker(args, dataset, cache)  # a missing option: KolmValueError, reported by main
    output = Path(args.output)
    to_file = output.suffix in _RUN_SUFFIXES
    folder = output.with_name(output.name + ".parts") if to_file else output
    out = rerank_run(run, dataset, reranker, top_k=args.top_k, batch_size=args.batch_size, progress=not args.quiet,
                     output=folder, restart=args.restart)
    if to_file:
        write_run(out, output, tag=f"kolm_{args.reranker}")
    missing = out.attrs.get("missing", [])
    if missing:
        print(f"warning: {len(missing)} run documents are not in the corpus, e.g. {missing[0]}", file=sys.stderr)
    where = f"{output} (resumable parts in {folder})" if to_file else f"{folder} (read it with kolm_search.io.read_run)"
    print(f"re-ranked {out.qid.nunique()} queries into {where}", file=sys.stderr)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from kolm_search.io import download_beir

    path = download_beir(args.name, args.cache_dir, progress=not args.quiet)
    print(path)
    return 0


_MODEL_HELP = ("embedder: 'auto' (the packaged MiniLM on sentence-transformers with the 'embeddings' extra, "
               "else on onnxruntime with the 'onnx' extra, no torch), 'minilm', 'minilm-onnx', 'lsa' (no model "
               "needed) or a sentence-transformers model folder")
_RERANK_DESCRIPTION = """\
Re-rank each query's top-k of a run. The job goes through the run in chunks of
--batch-size queries and writes each finished chunk atomically as a part of a
parquet dataset with a manifest: run the same command again after a crash or
Ctrl-C and it computes only the parts not yet written (with other arguments it
refuses, naming what differs, unless --restart). Embeddings and scores are
cached under --cache-dir, so a second job over the same documents calls the
model only for what it has not seen."""
_RERANK_EXAMPLES = """examples:
  # MMR on MiniLM embeddings, resumable; parts in reranked.trec.parts/
  kolm-search rerank bm25.trec --dataset cranfield --reranker mmr -o reranked.trec
  # an exported cross-encoder on onnxruntime (no torch), output kept as a folder of parts
  kolm-search rerank bm25.trec --dataset cranfield --reranker onnx-cross-encoder --model ce-onnx/ -o job/
  # RankGPT-style listwise re-ranking on any OpenAI-compatible server (key from $OPENAI_API_KEY)
  kolm-search rerank bm25.trec --dataset cranfield --reranker llm-listwise --top-k 20 \\
      --llm-url http://127.0.0.1:8000/v1 --llm-model qwen2.5-7b-instruct -o llm.trec
"""
_DATASET_HELP = ("a BEIR folder, a packaged collection (cranfield), a BEIR name downloaded on first use (e.g. scifact) "
                 "or an ir_datasets id (irds:beir/arguana, extra irds)")


def build_parser() -> argparse.ArgumentParser:
    from kolm_search import __version__
    from kolm_search.fusion.normalize import NORMALIZATIONS

    parser = argparse.ArgumentParser(prog="kolm-search", description="Build, run and measure search pipelines.",
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"kolm-search {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{eval,fuse,compare,rerank,download}")
    fmt = argparse.ArgumentDefaultsHelpFormatter

    p = sub.add_parser("eval", help="evaluate a preset pipeline on a dataset", formatter_class=fmt)
    p.add_argument("dataset", help=_DATASET_HELP)
    p.add_argument("--pipeline", choices=["bm25", "bm25-rm3", "bm25-bo1", "bm25-kl", "dense", "hybrid"], default="bm25",
                   help="the preset to run (bm25-rm3/-bo1/-kl: BM25 with pseudo-relevance feedback)")
    p.add_argument("--metrics", default=DEFAULT_METRICS, help="comma-separated metric names")
    p.add_argument("--run-out", help="write the run here (TREC text; .gz or .parquet by extension)")
    p.add_argument("--limit", type=int, default=100, help="documents retrieved per query")
    p.add_argument("--split", default=None, help="qrels split: of a BEIR folder (default test), or appended to an "
                   "ir_datasets id")
    p.add_argument("--model", default="auto", help=_MODEL_HELP + " (dense and hybrid pipelines)")
    p.add_argument("--cache-dir", help="dataset cache (default $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--self-hits", choices=["auto", "drop", "keep"], default="auto",
                   help="documents whose id is the query's: 'auto' drops them where BEIR's evaluation does (BEIR "
                        "datasets; it matters for arguana and quora), 'drop' always, 'keep' never")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("fuse", help="fuse TREC runs into one", formatter_class=fmt)
    p.add_argument("runs", nargs="+", help="run files (TREC text, .gz or parquet)")
    p.add_argument("--method", choices=_unsupervised_methods(), default="rrf",
                   help="fusion method (the trained ones need qrels: use fit_fusion in Python)")
    p.add_argument("--k", type=float, default=None, help="RRF constant (60 when not given)")
    p.add_argument("--weights", help="comma-separated weights, one per run")
    p.add_argument("--norm", choices=[*NORMALIZATIONS, "z-score"], default=None, help="score normalisation")
    p.add_argument("--limit", type=int, default=None, help="documents kept per query (default: all)")
    p.add_argument("-o", "--output", required=True, help="the fused run (TREC text, .gz or parquet)")
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("compare", help="compare runs with significance tests", formatter_class=fmt)
    p.add_argument("runs", nargs="+", help="run files; the first is the baseline unless --baseline says otherwise")
    p.add_argument("--qrels", required=True, help="qrels file (TREC, BEIR tsv, .gz or parquet)")
    p.add_argument("--metrics", default="ndcg@10,map", help="comma-separated metric names")
    p.add_argument("--baseline", help="file name of the baseline run (default: the first)")
    p.add_argument("--test", choices=["t", "wilcoxon", "fisher", "bootstrap"], default="t", help="paired test")
    p.add_argument("--correction", choices=["none", "bonferroni", "holm"], default="holm",
                   help="multiple-testing correction")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level on the corrected p-values")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomised tests (fisher, bootstrap)")
    p.add_argument("--format", choices=["table", "markdown", "latex", "csv"], default="table",
                   help="output: the full frame as text, a Markdown or LaTeX (booktabs) report of the means with "
                        "the best in bold and significance marks, or the frame as CSV")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("rerank", help="re-rank each query's top-k of a run (resumable, cached)", formatter_class=_Raw,
                       description=_RERANK_DESCRIPTION, epilog=_RERANK_EXAMPLES)
    p.add_argument("run", help="the run to re-rank (TREC text, .gz or parquet)")
    p.add_argument("--dataset", required=True, help=_DATASET_HELP + "; gives documents and query texts")
    p.add_argument("--reranker", choices=RERANKERS, default="mmr", help="re-ranking method")
    p.add_argument("--model", default="auto", help="for mmr, the " + _MODEL_HELP + "; for cross-encoder, a "
                   "sentence-transformers model folder; for onnx-cross-encoder, a folder with model.onnx and tokenizer.json")
    p.add_argument("--top-k", type=int, default=100, help="documents re-ranked per query")
    p.add_argument("--batch-size", type=int, default=100, help="queries per chunk: one part of the output, the most "
                   "a killed job recomputes")
    p.add_argument("--restart", action="store_true", help="start over in an output folder holding another job (or "
                   "this one); without it a folder of another job is refused, naming what differs")
    p.add_argument("--mmr-lambda", type=float, default=0.7, help="MMR trade-off: 1 keeps relevance, 0 maximises diversity")
    p.add_argument("--llm-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (llm-* rerankers)")
    p.add_argument("--llm-model", help="model name sent to the server (llm-* rerankers)")
    p.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key "
                   "(never passed on the command line; unset: no key)")
    p.add_argument("--llm-mode", choices=["grade", "yes_no"], default="grade", help="llm-pointwise: a 0-3 grade, or "
                   "yes/no scored by the log-probability of yes")
    p.add_argument("--llm-concurrency", type=int, default=8, help="requests in flight at once (llm-* rerankers)")
    p.add_argument("--llm-timeout", type=float, default=30.0, help="seconds per request attempt (llm-* rerankers)")
    p.add_argument("--window", type=int, default=20, help="llm-listwise: passages per prompt")
    p.add_argument("--step", type=int, default=10, help="llm-listwise: how far the window moves up")
    p.add_argument("--split", default=None, help="qrels split: of a BEIR folder (default test), or appended to an "
                   "ir_datasets id")
    p.add_argument("--cache-dir", help="cache folder: datasets, and the embeddings (embeddings.sqlite) and scores "
                   "(scores.sqlite) the rerankers compute (default $KOLM_SEARCH_CACHE or the platform's user cache "
                   "folder, ~/.cache/kolm_search on Linux)")
    p.add_argument("--no-cache", action="store_true", help="compute every embedding and score again (datasets are "
                   "still cached)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-o", "--output", required=True, help="a run file (.trec, .txt, .gz, .parquet: the resumable "
                   "parts go to OUTPUT.parts/ beside it, the file is written when the job is done) or a folder (the "
                   "parts themselves: kolm_search.io.read_run reads it)")
    p.set_defaults(func=cmd_rerank)

    p = sub.add_parser("download", help="download a BEIR dataset into the cache", formatter_class=fmt)
    p.add_argument("name", help="a BEIR dataset name (see kolm_search.io.beir_registry())")
    p.add_argument("--cache-dir", help="dataset cache (default $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
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
