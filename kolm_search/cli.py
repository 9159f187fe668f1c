"""The ``kolm-search`` command: eval, fuse, compare, rerank, download.

Examples::

    kolm-search eval cranfield --pipeline bm25 --metrics ndcg@10,recall@100
    kolm-search eval scifact --pipeline hybrid --run-out runs/scifact-hybrid.trec
    kolm-search eval run.trec --qrels qrels.txt -m official -m ndcg_cut.10 -q --format csv -o run.csv
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


def _unsupervised_methods() -> list[str]:
    from kolm_search.fusion.methods import FUSION_METHODS, METHODS, canonical_method

    return [m for m in FUSION_METHODS if not METHODS[canonical_method(m)].supervised]


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
    from kolm_search.cli_eval import load_qrels_arg, parse_metric_list, run_names, write_output
    from kolm_search.evaluation.compare import compare
    from kolm_search.io import read_run

    metrics = parse_metric_list(args.metrics)
    runs = {name: read_run(p) for name, p in zip(run_names(args.runs), args.runs, strict=True)}
    table = compare(runs, load_qrels_arg(args.qrels, args.split, args.cache_dir), metrics, baseline=args.baseline,
                    test=args.test, correction=args.correction, ci=args.ci, seed=args.seed, alpha=args.alpha)
    if args.format == "markdown":
        text = table.to_markdown()
    elif args.format == "latex":
        text = table.to_latex()
    elif args.format == "csv":
        text = table.to_csv(index=False)
    elif args.format == "html":
        from kolm_search._extras import require

        require("matplotlib", "plot").use("Agg")  # no display needed
        text = table.to_html()
    else:
        import pandas as pd

        with pd.option_context("display.width", 250, "display.max_columns", 50):
            text = table.to_string() + "\n"
    write_output(text, args.output)
    return 0


def cmd_rerank(args: argparse.Namespace) -> int:
    from kolm_search.adapters import CrossEncoderReranker, MMRReranker
    from kolm_search.cli_eval import embedder_for
    from kolm_search.io import load_dataset, read_run, write_run
    from kolm_search.rerank import rerank_run

    dataset = load_dataset(args.dataset, split=args.split, cache_dir=args.cache_dir)
    run = read_run(args.run)
    reranker: Any
    if args.reranker == "cross-encoder":
        if args.model in (None, "auto"):
            print("kolm-search rerank: error: --model FOLDER (a cross-encoder) is required for --reranker "
                  "cross-encoder", file=sys.stderr)
            return 1
        reranker = CrossEncoderReranker(args.model)
    else:
        reranker = MMRReranker(embedder_for(args.model or "auto", dataset.corpus), lambda_=args.mmr_lambda)
    out = rerank_run(run, dataset, reranker, top_k=args.top_k, progress=not args.quiet)
    write_run(out, args.output, tag=f"kolm_{args.reranker}")
    missing = out.attrs.get("missing", [])
    if missing:
        print(f"warning: {len(missing)} run documents are not in the corpus, e.g. {missing[0]}", file=sys.stderr)
    print(f"re-ranked {out.qid.nunique()} queries into {args.output}", file=sys.stderr)
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from kolm_search.io import beir_registry, default_cache_dir, download_beir, packaged_datasets

    if args.list:
        cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
        width = max(len(n) for n in beir_registry())
        print(f"{'name':<{width}}  status")
        for name in sorted(packaged_datasets()):
            print(f"{name:<{width}}  packaged (no download)")
        for name in sorted(beir_registry()):
            here = (cache / "beir" / name).is_dir()  # where download_beir puts it
            print(f"{name:<{width}}  {'in the cache' if here else 'downloadable'}")
        return 0
    if not args.name:
        print("kolm-search download: error: give a dataset name (kolm-search download --list shows them)",
              file=sys.stderr)
        return 2
    path = download_beir(args.name, args.cache_dir, progress=not args.quiet)
    print(path)
    return 0


_MODEL_HELP = ("embedder: 'auto' (the packaged MiniLM on sentence-transformers with the 'embeddings' extra, "
               "else on onnxruntime with the 'onnx' extra, no torch), 'minilm', 'minilm-onnx', 'lsa' (no model "
               "needed) or a sentence-transformers model folder")
_DATASET_HELP = ("a BEIR folder, a packaged collection (cranfield), a BEIR name downloaded on first use (e.g. scifact) "
                 "or an ir_datasets id (irds:beir/arguana, extra irds)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default once: not when its help already says it, not for a required
    option, a flag, or a default of None (nothing is set)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text.lower() or action.required or action.default in (None, False, argparse.SUPPRESS)
                or not action.option_strings):
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from kolm_search import __version__
    from kolm_search.cli_eval import add_eval_parser
    from kolm_search.evaluation.stats import CORRECTIONS, TESTS
    from kolm_search.fusion.normalize import NORMALIZATIONS

    parser = argparse.ArgumentParser(prog="kolm-search", description="Build, run and measure search pipelines.",
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"kolm-search {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{eval,fuse,compare,rerank,download}")
    fmt = HelpFormatter

    add_eval_parser(sub, fmt, _MODEL_HELP)

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
    p.add_argument("--qrels", required=True, help="the judgements: a qrels file (TREC, BEIR tsv, .gz or parquet) or a "
                   "dataset whose qrels are used (cranfield, scifact, a BEIR folder, irds:...)")
    p.add_argument("--split", default=None, help="qrels split of a dataset: of a BEIR folder (default: test), or "
                   "appended to an ir_datasets id")
    p.add_argument("--cache-dir", help="dataset cache (default: $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--metrics", default="ndcg@10,map", help="comma-separated metric names")
    p.add_argument("--baseline", action="append", metavar="RUN",
                   help="the baseline run (its file name, or its path when two file names are equal); repeat for "
                        "several baselines, each compared with every other run (default: the first run)")
    p.add_argument("--test", choices=list(TESTS), default="t",
                   help="paired two-sided test, or Tukey's HSD over every run (tukey)")
    p.add_argument("--correction", choices=list(CORRECTIONS), default=None,
                   help="multiple-testing correction over each metric's comparisons (bh, by: Benjamini-Hochberg, "
                        "-Yekutieli false discovery rate; default: holm, and none for tukey)")
    p.add_argument("--ci", choices=["t", "bootstrap"], default="t",
                   help="confidence interval of each mean difference, at 1 - alpha")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level on the corrected p-values")
    p.add_argument("--seed", type=int, default=0, help="seed of the randomised tests and intervals")
    p.add_argument("--format", choices=["table", "markdown", "latex", "csv", "html"], default="table",
                   help="output: the full frame as text, a Markdown or LaTeX (booktabs) report of the means with "
                        "the best in bold and significance marks, the frame as CSV, or one self-contained HTML page "
                        "with the report and its pictures (extra plot)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output here (replaced whole) instead of stdout")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("rerank", help="re-rank each query's top-k of a run", formatter_class=fmt)
    p.add_argument("run", help="the run to re-rank (TREC text, .gz or parquet)")
    p.add_argument("--dataset", required=True, help=_DATASET_HELP + "; gives documents and query texts")
    p.add_argument("--reranker", choices=["cross-encoder", "mmr"], default="mmr", help="re-ranking method")
    p.add_argument("--model", default="auto", help="for mmr, the " + _MODEL_HELP + "; for cross-encoder, a model folder")
    p.add_argument("--top-k", type=int, default=100, help="documents re-ranked per query")
    p.add_argument("--mmr-lambda", type=float, default=0.7, help="MMR trade-off: 1 keeps relevance, 0 maximises diversity")
    p.add_argument("--split", default=None, help="qrels split: of a BEIR folder (default test), or appended to an "
                   "ir_datasets id")
    p.add_argument("--cache-dir", help="dataset cache (default $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("-o", "--output", required=True, help="the re-ranked run (TREC text, .gz or parquet)")
    p.set_defaults(func=cmd_rerank)

    p = sub.add_parser("download", help="download a BEIR dataset into the cache", formatter_class=fmt)
    p.add_argument("name", nargs="?", help="a BEIR dataset name (--list shows them)")
    p.add_argument("--list", action="store_true", help="list the datasets that can be downloaded, the packaged ones "
                   "and those already in the cache, and exit")
    p.add_argument("--cache-dir", help="dataset cache (default: $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
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
