"""``kolm-search eval``: two forms, told apart by ``--qrels``.

- ``kolm-search eval RUN... --qrels QRELS [-m MEASURE]... [-q] [-J] [-l LEVEL] [-c]
  [--format table|markdown|latex|csv|json] [-o FILE]`` evaluates run files the trec_eval way
  (its ``-m`` names and nicknames, :mod:`kolm_search.evaluation.trec_names`; default
  ``official``). Every positional argument must be an existing run file.
- ``kolm-search eval DATASET [--pipeline bm25] [--metrics ...]`` runs a preset pipeline over a
  dataset (a BEIR folder, a packaged or BEIR name, an ir_datasets id) and evaluates it; it takes
  one positional argument, never a file, and prints the one-line table unless an output option
  of the run form (``-m``, ``-q``, ``-J``, ``-l``, ``-c``, ``--format``, ``-o``) is given.

``QRELS`` is a qrels file or a dataset whose qrels are used (:func:`kolm_search.io.load_qrels`).
A file given without ``--qrels``, a missing run file, or an option of one form given to the other
is an error that says which form was read and why.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "add_eval_parser", "build_client", "cmd_eval", "embedder_for", "load_qrels_arg", "parse_metric_list", "run_names",
    "write_output",
]

_DATASET_ONLY = {"pipeline": "--pipeline", "run_out": "--run-out", "limit": "--limit", "model": "--model"}
_REPORT_OPTIONS = {"measures": "-m", "per_query": "-q", "judged_only": "-J", "level": "-l", "complete": "-c",
                   "format": "--format", "output": "-o"}
DEFAULT_METRICS = "ndcg@10,recall@100,map,mrr"
_DATASET_HELP = ("a BEIR folder, a packaged collection (cranfield), a BEIR name downloaded on first use (e.g. scifact) "
                 "or an ir_datasets id (irds:beir/arguana, extra irds)")


def add_eval_parser(sub: Any, formatter: type[argparse.HelpFormatter], model_help: str) -> None:
    from kolm_search.evaluation.eval_report import FORMATS

    p = sub.add_parser("eval", help="evaluate run files against qrels (trec_eval's way), or a preset pipeline on a "
                       "dataset", formatter_class=formatter, description=(
                       "Two forms, told apart by --qrels. With --qrels, every positional argument is an existing run "
                       "file, evaluated the trec_eval way (-m names and nicknames; default official). Without it, the "
                       "one positional argument is a dataset (never a file) and --pipeline runs over it."))
    p.add_argument("targets", nargs="+", metavar="RUN_OR_DATASET",
                   help="run files (TREC text, .gz or parquet) when --qrels is given; else one dataset: " + _DATASET_HELP)
    p.add_argument("--qrels", help="the judgements: a qrels file (TREC, BEIR tsv, .gz or parquet) or a dataset "
                   "whose qrels are used (cranfield, scifact, a BEIR folder, irds:...)")
    p.add_argument("-m", "--measure", action="append", dest="measures", metavar="MEASURE",
                   help="a measure, repeatable: trec_eval names and nicknames (official, all_trec, set, P, P.5,10, "
                        "ndcg_cut.10, iprec_at_recall, map, ...) or ir_measures ones (nDCG@10, RR, P(rel=2)@5); "
                        "default: official with --qrels, else --metrics")
    p.add_argument("-q", "--per-query", action="store_true", help="also each query's values (trec_eval -q)")
    p.add_argument("-J", "--judged-only", action="store_true",
                   help="rank only judged documents: unjudged ones leave every ranking first (trec_eval -J)")
    p.add_argument("-l", "--level", type=int, metavar="LEVEL",
                   help="the least grade counted relevant by binary measures (trec_eval -l; default: 1)")
    p.add_argument("-c", "--complete", action="store_true",
                   help="average over every judged query; those a run misses score 0 (trec_eval -c)")
    p.add_argument("--format", choices=FORMATS, help="output: trec_eval's table (the default), Markdown, LaTeX "
                   "(booktabs), CSV or JSON (full precision)")
    p.add_argument("--digits", type=int, default=4, help="decimals of table, Markdown and LaTeX output")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output here (replaced whole) instead of stdout")
    p.add_argument("--pipeline", choices=["bm25", "bm25-rm3", "bm25-bo1", "bm25-kl", "dense", "hybrid"],
                   help="dataset form: the preset to run (bm25-rm3/-bo1/-kl: BM25 with pseudo-relevance "
                        "feedback; default: bm25)")
    p.add_argument("--metrics", help=f"comma-separated metric names (default: {DEFAULT_METRICS} for a dataset)")
    p.add_argument("--run-out", help="dataset form: write the run here (TREC text; .gz or .parquet by extension)")
    p.add_argument("--limit", type=int, help="dataset form: documents retrieved per query (default: 100)")
    p.add_argument("--split", default=None, help="qrels split of a dataset: of a BEIR folder (default: test), or "
                   "appended to an ir_datasets id")
    p.add_argument("--model", help="dataset form: " + model_help + " (dense and hybrid pipelines; default: auto)")
    p.add_argument("--cache-dir", help="dataset cache (default: $KOLM_SEARCH_CACHE or ~/.cache/kolm_search)")
    p.add_argument("--self-hits", choices=["auto", "drop", "keep"], default="auto",
                   help="documents whose id is the query's: 'auto' drops them where BEIR's evaluation does (BEIR "
                        "datasets; it matters for arguana and quora), 'drop' always, 'keep' never")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)


def parse_metric_list(text: str) -> list[str]:
    """A comma-separated list of metric names, each checked."""
    import re

    from kolm_search.evaluation.metrics import parse_metric

    # commas inside parentheses belong to a measure's parameters: RBP(p=0.5,rel=2)
    names = [m.strip() for m in re.split(r",(?![^()]*\))", text) if m.strip()]
    for name in names:
        parse_metric(name)
    return names


def embedder_for(model: str, corpus: Any) -> Any:
    from kolm_search.adapters import load_embedder
    from kolm_search.engine.doctable import DocumentTable

    texts = DocumentTable.from_frame(corpus).texts() if model == "lsa" else None
    return load_embedder(model, texts)


def build_client(pipeline: str, corpus: Any, model: str, *, progress: bool | None = None) -> Any:
    """The preset client ``pipeline`` over ``corpus`` (``progress``: the index build's bar)."""
    from kolm_search import presets

    quiet: dict[str, Any] = {} if progress is None else {"progress": progress}
    if pipeline == "bm25":
        return presets.bm25(corpus, **quiet)
    if pipeline.startswith("bm25-"):  # bm25-rm3, bm25-bo1, bm25-kl: pseudo-relevance feedback
        return presets.bm25(corpus, feedback=pipeline[len("bm25-"):], **quiet)
    embedder = embedder_for(model, corpus)
    if pipeline == "dense":
        return presets.dense(corpus, embedder)
    return presets.hybrid(corpus, embedder, bm25_kwargs=quiet)


def load_qrels_arg(text: str, split: str | None, cache_dir: str | None) -> Any:
    """``--qrels``: a file, or a dataset's qrels."""
    from kolm_search.errors import KolmValueError
    from kolm_search.io import load_qrels

    try:
        return load_qrels(text, split, cache_dir=cache_dir)
    except KolmValueError as exc:
        raise KolmValueError(f"--qrels {text!r} is neither a qrels file nor a dataset: {exc}") from exc


def run_names(paths: Sequence[str]) -> list[str]:
    """Names of run files in reports: their file names, or the paths as given when two file
    names are equal; a path given twice is refused."""
    from kolm_search.errors import KolmValueError

    resolved = [str(Path(p).resolve()) for p in paths]
    for i, r in enumerate(resolved):
        if r in resolved[:i]:
            raise KolmValueError(f"run file {paths[i]!r} is given twice")
    names = [Path(p).name for p in paths]
    return names if len(set(names)) == len(names) else [str(p) for p in paths]


def write_output(text: str, path: str | None) -> None:
    """``text`` to stdout, or to ``path`` replaced whole (a temporary file beside it, renamed)."""
    if path is None:
        sys.stdout.write(text)
        return
    from kolm_search.io._atomic import write_text

    write_text(path, text)
    print(f"written to {path}", file=sys.stderr)


def _measures(args: argparse.Namespace, default: str | None) -> list[str]:
    from kolm_search.errors import KolmValueError
    from kolm_search.evaluation.trec_names import expand_measures

    if args.measures and args.metrics:
        raise KolmValueError("give measures either with -m (repeatable) or with --metrics (comma-separated), not both")
    if args.measures:
        return expand_measures(args.measures)
    if args.metrics or default is None:
        return parse_metric_list(args.metrics or DEFAULT_METRICS)
    return expand_measures([default])


def _report(runs: dict[str, Any], qrels: Any, args: argparse.Namespace, measures: list[str],
            drop_self_hits: bool | None) -> int:
    from kolm_search.evaluation import evaluate
    from kolm_search.evaluation.eval_report import RunEvaluation, format_evaluations
    from kolm_search.evaluation.measures import aggregate, metric_list, parse_measure
    from kolm_search.evaluation.trec_names import RUNID

    runid = RUNID in measures
    names = [m for m in measures if m != RUNID]
    specs = [parse_measure(m) for m in metric_list(names)]
    results = []
    from kolm_search.errors import FrameValidationError

    for name, run in runs.items():
        try:
            table = evaluate(run, qrels, names, per_query=True, relevance_level=args.level or 1,
                             missing="zero" if args.complete else "ignore", drop_self_hits=drop_self_hits,
                             judged_only=args.judged_only)
        except FrameValidationError as exc:
            raise FrameValidationError(f"run {name}: {exc}") from exc
        results.append(RunEvaluation(name, aggregate(table, specs), table if args.per_query else None))
    text = format_evaluations(results, specs, args.format or "table", digits=args.digits, runid=runid)
    write_output(text, args.output)
    return 0


class _Beside:
    """``fn(*args)`` on a daemon thread; :meth:`result` waits for it and returns its value or
    raises its exception. A daemon: an interrupt (Ctrl-C) of the main thread ends the command
    without waiting for it (a download it runs writes all or nothing)."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self._thread.start()

    def _run(self, fn: Any, *args: Any) -> None:
        try:
            self._value = fn(*args)
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value


def cmd_eval(args: argparse.Namespace) -> int:
    from kolm_search.errors import KolmValueError

    if args.level is not None and args.level < 1:
        raise KolmValueError(f"-l LEVEL must be an integer >= 1, got {args.level}")
    if args.qrels is None:
        return _dataset_form(args)
    given = [flag for dest, flag in _DATASET_ONLY.items() if getattr(args, dest) is not None]
    if given:
        raise KolmValueError(f"{', '.join(given)} {'belongs' if len(given) == 1 else 'belong'} to the dataset form (kolm-search eval DATASET --pipeline "
                             "...); with --qrels the positional arguments are run files to evaluate")
    for target in args.targets:
        if not Path(target).is_file():
            hint = " (a dataset? the dataset form runs a pipeline on it and takes no --qrels)" \
                if not Path(target).exists() and "/" not in target and "." not in target else ""
            what = "is a folder, not a run file" if Path(target).is_dir() else "does not exist"
            raise KolmValueError(f"run file {target!r} {what}{hint}")
    from kolm_search.io import read_run

    qrels_read = _Beside(load_qrels_arg, args.qrels, args.split, args.cache_dir)  # the qrels read beside the runs
    try:
        # evaluate refuses a document given twice for a query (naming it): no need to check at reading too
        runs = {name: read_run(path, progress=None if not args.quiet else False, check_duplicates=False)
                for name, path in zip(run_names(args.targets), args.targets, strict=True)}
    except Exception:
        qrels_read.result()  # bad qrels are named first, as when they were read before the runs
        raise
    qrels = qrels_read.result()
    drop = {"auto": None, "drop": True, "keep": False}[args.self_hits]
    return _report(runs, qrels, args, _measures(args, "official"), drop)


def _dataset_form(args: argparse.Namespace) -> int:
    from kolm_search.errors import KolmValueError
    from kolm_search.evaluation.runner import run_queries
    from kolm_search.evaluation.self_hits import drop_self_hits
    from kolm_search.io import load_dataset, write_run

    if len(args.targets) != 1:
        raise KolmValueError(f"without --qrels, eval takes one dataset, got {len(args.targets)} arguments; to "
                             "evaluate run files give --qrels QRELS")
    target = args.targets[0]
    if Path(target).is_file():
        raise KolmValueError(f"{target!r} is a file: to evaluate it as a run give --qrels QRELS; without --qrels "
                             "the argument is a dataset (" + _DATASET_HELP + ")")
    pipeline, limit, model = args.pipeline or "bm25", 100 if args.limit is None else args.limit, args.model or "auto"
    report = any(getattr(args, dest) not in (None, False) for dest in _REPORT_OPTIONS)
    metrics = _measures(args, None)
    dataset = load_dataset(target, split=args.split, cache_dir=args.cache_dir)
    queries = dataset.judged_queries()
    print(f"{dataset}; evaluating {len(queries)} judged queries", file=sys.stderr)
    client = build_client(pipeline, dataset.corpus, model, progress=False if args.quiet else None)
    drop = {"auto": dataset.drop_self_hits, "drop": True, "keep": False}[args.self_hits]
    run = run_queries(client, queries, limit=limit + int(drop), progress=not args.quiet, desc=pipeline)
    if drop:
        run, n = drop_self_hits(run, limit)
        why = "as BEIR's evaluation does" if args.self_hits == "auto" else "--self-hits drop"
        print(f"dropped {n} self-hits (documents whose id is the query's) from the run before scoring, {why}; "
              f"searched {limit + 1} per query and kept the {limit} best others "
              f"(--self-hits keep to keep them)", file=sys.stderr)
    name = f"{dataset.name}/{pipeline}"
    if report:
        _report({name: run}, dataset.qrels, args, metrics, False)
    else:
        from kolm_search.evaluation import evaluate

        scores = evaluate(run, dataset.qrels, metrics, drop_self_hits=False)
        assert isinstance(scores, dict)
        _print_table({name: scores}, metrics)
    if args.run_out:
        write_run(run, args.run_out, tag=f"kolm_{pipeline}")
        print(f"run written to {args.run_out}", file=sys.stderr)
    return 0


def _print_table(rows: dict[str, dict[str, float]], metrics: Sequence[str]) -> None:
    width = max([len(n) for n in rows] + [8])
    print(f"{'run':<{width}}  " + "  ".join(f"{m:>12}" for m in metrics))
    for name, values in rows.items():
        print(f"{name:<{width}}  " + "  ".join(f"{values[m]:>12.4f}" for m in metrics))
