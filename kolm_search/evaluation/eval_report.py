"""The output of ``kolm-search eval RUN... --qrels QRELS``: each run's measures (and per query
with ``-q``) as trec_eval's table, Markdown, LaTeX, CSV or JSON.

- ``table``: trec_eval's three columns ``measure<TAB>qid<TAB>value`` (the measure padded to 22,
  counts as integers, the rest with ``digits`` decimals), per-query lines first, then the
  ``all`` lines; with several runs, one block per run, each opened by its ``runid`` line (one
  run: the ``runid`` line when asked for, as ``-m runid`` or ``official``).
- ``markdown`` / ``latex``: one row per run (and per run and query with ``-q``), one column
  per measure, names escaped as in :mod:`kolm_search.evaluation.report`.
- ``csv``: ``run, qid, <measures>``, full precision; the summary row of each run has an empty
  ``qid`` (a query may be called ``all``).
- ``json``: ``{"measures": [...], "runs": [{"run", "summary": {measure: value},
  "per_query": {qid: {measure: value}}}]}``, full precision, NaN as ``null``.

Per-query values of ``gm_map`` and ``gm_bpref`` are logs that trec_eval does not print; they are
left out of per-query output here too.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from kolm_search.errors import KolmValueError
from kolm_search.evaluation.measures import MeasureSpec
from kolm_search.evaluation.report import latex_escape, markdown_escape

__all__ = ["FORMATS", "RunEvaluation", "format_evaluations"]

FORMATS = ("table", "markdown", "latex", "csv", "json")
Format = Literal["table", "markdown", "latex", "csv", "json"]


@dataclass
class RunEvaluation:
    """One run's results: ``summary`` (measure key -> value) and, with ``-q``, ``per_query``
    (``qid`` plus one column per measure key)."""

    name: str
    summary: dict[str, float]
    per_query: pd.DataFrame | None = None


def _is_count(spec: MeasureSpec) -> bool:
    return spec.aggregate == "sum"


def _text(value: float, count: bool, digits: int) -> str:
    if math.isnan(value):
        return "nan"
    return str(int(value)) if count and float(value).is_integer() else f"{value:.{digits}f}"


def _per_query_keys(specs: Sequence[MeasureSpec]) -> list[str]:
    return [s.key for s in specs if s.aggregate != "gmean"]


def _table(results: Sequence[RunEvaluation], specs: Sequence[MeasureSpec], digits: int, runid: bool) -> str:
    lines: list[str] = []
    counts = {s.key: _is_count(s) for s in specs}
    for i, result in enumerate(results):
        if len(results) > 1 and i:
            lines.append("")
        if runid or len(results) > 1:
            lines.append(f"{'runid':<22}\tall\t{result.name}")
        if result.per_query is not None:
            keys = _per_query_keys(specs)
            for row in result.per_query[["qid", *keys]].itertuples(index=False, name=None):
                lines.extend(f"{k:<22}\t{row[0]}\t{_text(float(v), counts[k], digits)}" for k, v in
                             zip(keys, row[1:], strict=True))
        lines.extend(f"{s.key:<22}\tall\t{_text(result.summary[s.key], counts[s.key], digits)}" for s in specs)
    return "\n".join(lines) + "\n"


def _rows(results: Sequence[RunEvaluation], specs: Sequence[MeasureSpec], digits: int,
          per_query: bool) -> tuple[list[str], list[list[str]]]:
    keys = [s.key for s in specs]
    counts = {s.key: _is_count(s) for s in specs}
    head = ["Run", *(["Query"] if per_query else []), *keys]
    body = []
    for result in results:
        if per_query and result.per_query is not None:
            shown = set(_per_query_keys(specs))
            for row in result.per_query[["qid", *keys]].itertuples(index=False, name=None):
                body.append([result.name, str(row[0]), *(_text(float(v), counts[k], digits) if k in shown else ""
                                                         for k, v in zip(keys, row[1:], strict=True))])
        body.append([result.name, *(["all"] if per_query else []),
                     *(_text(result.summary[k], counts[k], digits) for k in keys)])
    return head, body


def _markdown(head: list[str], body: list[list[str]], n_text: int) -> str:
    lines = ["| " + " | ".join(markdown_escape(h) for h in head) + " |",
             "|" + ":--|" * n_text + "--:|" * (len(head) - n_text)]
    lines += ["| " + " | ".join(markdown_escape(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def _latex(head: list[str], body: list[list[str]], n_text: int) -> str:
    lines = [r"\begin{tabular}{" + "l" * n_text + "r" * (len(head) - n_text) + "}", r"  \toprule",
             "  " + " & ".join(latex_escape(h) for h in head) + r" \\", r"  \midrule"]
    lines += ["  " + " & ".join(latex_escape(c) for c in row) + r" \\" for row in body]
    lines += [r"  \bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _csv(results: Sequence[RunEvaluation], specs: Sequence[MeasureSpec]) -> str:
    keys = [s.key for s in specs]
    frames = []
    for result in results:
        if result.per_query is not None:
            table = result.per_query[["qid", *_per_query_keys(specs)]].copy()
            table.insert(0, "run", result.name)
            frames.append(table)
        frames.append(pd.DataFrame([{"run": result.name, "qid": "", **result.summary}]))
    out = pd.concat(frames, ignore_index=True)[["run", "qid", *keys]]
    buf = io.StringIO()
    out.to_csv(buf, index=False, float_format=lambda x: repr(float(x)))
    return buf.getvalue()


def _number(value: float) -> float | int | None:
    return None if math.isnan(value) else value


def _json(results: Sequence[RunEvaluation], specs: Sequence[MeasureSpec]) -> str:
    runs = []
    for result in results:
        entry: dict[str, object] = {"run": result.name,
                                    "summary": {s.key: _number(float(result.summary[s.key])) for s in specs}}
        if result.per_query is not None:
            keys = _per_query_keys(specs)
            entry["per_query"] = {str(row[0]): {k: _number(float(v)) for k, v in zip(keys, row[1:], strict=True)}
                                  for row in result.per_query[["qid", *keys]].itertuples(index=False, name=None)}
        runs.append(entry)
    return json.dumps({"measures": [s.key for s in specs], "runs": runs}, indent=1, allow_nan=False) + "\n"


def format_evaluations(results: Sequence[RunEvaluation], specs: Sequence[MeasureSpec], fmt: Format = "table", *,
                       digits: int = 4, runid: bool = False) -> str:
    """The results of every run in ``fmt`` (see the module); ``specs`` name the measures, in order."""
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 15:
        raise KolmValueError(f"digits must be an integer in [0, 15], got {digits!r}")
    if fmt == "table":
        return _table(results, specs, digits, runid)
    if fmt == "csv":
        return _csv(results, specs)
    if fmt == "json":
        return _json(results, specs)
    per_query = any(r.per_query is not None for r in results)
    head, body = _rows(results, specs, digits, per_query)
    n_text = 2 if per_query else 1
    if fmt == "markdown":
        return _markdown(head, body, n_text)
    if fmt == "latex":
        return _latex(head, body, n_text)
    raise KolmValueError(f"format must be one of {FORMATS}, got {fmt!r}")
