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
    from kolm_search.cli.evaluate import load_qrels_arg, parse_metric_list, run_names, write_output
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


_RUN_SUFFIXES = (".trec", ".txt", ".run", ".gz", ".tsv", ".parquet", ".pq")
RERANKERS = ("mmr", "cross-encoder", "onnx-cross-encoder", "llm-pointwise", "llm-listwise")


def _reranker(args: argparse.Namespace, dataset: Any, cache: Path | None) -> Any:
    """The reranker ``--reranker`` names, its model calls through the caches under ``cache``."""
    import os

    from kolm_search import adapters
    from kolm_search.cli.evaluate import embedder_for
    from kolm_search.errors import KolmValueError

    score_cache = adapters.ScoreCache(cache / "scores.sqlite") if cache is not None else None
    if args.reranker == "mmr":
        embedder = embedder_for(args.model or "auto", dataset.corpus)
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
    from kolm_search.jobs.rerank import rerank_run

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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default once: not when its help already says it, not for a required
    option, a flag, or a default of None (nothing is set)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text.lower() or action.required or action.default in (None, False, argparse.SUPPRESS)
                or not action.option_strings):
            return text
        return super()._get_help_string(action)


class _Raw(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """:class:`HelpFormatter` keeping the description and the examples as written."""


def build_parser() -> argparse.ArgumentParser:
    from kolm_search import __version__
    from kolm_search.cli.evaluate import add_eval_parser
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
