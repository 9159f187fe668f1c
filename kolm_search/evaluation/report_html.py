"""The HTML report of a comparison: :meth:`ComparisonTable._repr_html_` (the table, for notebooks)
and :meth:`ComparisonTable.to_html` (one self-contained page: the table and its pictures as
inline SVG drawn by matplotlib, no script, no file or network fetched).

The table is the Markdown/LaTeX report's (:mod:`kolm_search.evaluation.report`): one row per run,
one column per metric, the best value of each metric bold, ``†``/``‡`` (with the baseline's letter
when there are several) where the run is significantly above/below a baseline, and a caption
naming the test, the correction and alpha. The page adds, per metric, the bars with their 95 %
intervals and marks, each run's per-query differences from each baseline as win/loss bars, and
the runs' precision-recall curves (:mod:`kolm_search.evaluation.plots`).
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

from kolm_search.evaluation.report_cells import caption_text, grid, report_settings, run_label, used_marks

__all__ = ["html_table", "to_html"]

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 72em;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.kolm-report { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
table.kolm-report caption { caption-side: bottom; text-align: left; font-size: 0.85em; color: #555; padding-top: 0.5em;
                            max-width: 60em; }
table.kolm-report th, table.kolm-report td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; }
table.kolm-report th { border-bottom: 2px solid #444; text-align: right; }
table.kolm-report th:first-child, table.kolm-report td:first-child { text-align: left; }
table.kolm-report td { text-align: right; }
table.kolm-report sup { color: #b00; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.85em; color: #555; }
.kolm-grid { display: flex; flex-wrap: wrap; gap: 1em; } .kolm-grid figure { flex: 1 1 28em; }
"""


def html_table(table: pd.DataFrame, *, digits: int = 4, caption: str | None = None, **settings: Any) -> str:
    """The report table as an HTML ``<table class="kolm-report">`` with its caption; every name
    and value escaped."""
    conf = report_settings(table, settings)
    runs, metrics, cells = grid(table, digits, conf)
    esc = html.escape
    head = "<tr><th>Run</th>" + "".join(f"<th>{esc(m)}</th>" for m in metrics) + "</tr>"
    body = []
    for run in runs:
        parts = []
        for metric in metrics:
            text, bold, mark = cells.get((run, metric), ("", False, ""))
            value = f"<b>{esc(text)}</b>" if bold else esc(text)
            parts.append(f"<td>{value}{f'<sup>{esc(mark)}</sup>' if mark else ''}</td>")
        body.append(f"<tr><td>{esc(run_label(run, conf))}</td>" + "".join(parts) + "</tr>")
    cap = esc(caption_text(conf, used_marks(cells), caption))
    return (f'<table class="kolm-report">\n<caption>{cap}</caption>\n<thead>{head}</thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody>\n</table>")


def _figures(table: Any, conf: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(section, svg, caption)`` of every picture the table's kept scores allow."""
    from kolm_search._extras import require

    plt = require("matplotlib.pyplot", "plot")
    from kolm_search.evaluation.plots import draw_bars, draw_deltas, draw_pr, svg

    per_query: dict[str, pd.DataFrame] = getattr(table, "per_query", None) or {}
    curves = getattr(table, "curves", None)
    out = []
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kolm_search"}):  # text as text: small, selectable
        for metric in dict.fromkeys(table["metric"].astype(str)):
            scores = per_query.get(metric)
            if scores is None:
                continue
            fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * scores.shape[1] + 1.5), 3.6))
            draw_bars(ax, table, metric, scores, conf)
            out.append(("Metrics", svg(fig), f"{metric}: each run's mean over {len(scores)} queries, the 95% interval "
                        "of the mean (Student's t) above it, and its significance marks."))
        for base in (str(b) for b in conf["baselines"]):
            for metric, scores in per_query.items():
                for run in scores.columns:
                    if str(run) == base or base not in scores.columns:
                        continue
                    fig, ax = plt.subplots(figsize=(5.2, 3.0))
                    draw_deltas(ax, scores, run, base, metric)
                    out.append(("Per-query differences", svg(fig), f"{metric}: {run} minus {base}, one bar per query "
                                "(green: a win, red: a loss)."))
        if isinstance(curves, pd.DataFrame) and not curves.empty:
            fig, ax = plt.subplots(figsize=(5.2, 4.0))
            draw_pr(ax, curves)
            out.append(("Precision-recall", svg(fig), "Interpolated precision at recall 0, 0.1, ..., 1 (trec_eval's "
                        "iprec_at_recall), mean over the queries."))
    return out


def to_html(table: pd.DataFrame, *, digits: int = 4, caption: str | None = None, title: str | None = None,
            plots: bool = True, **settings: Any) -> str:
    """One self-contained HTML page: the report table and, with ``plots`` (extra ``plot``) and
    the per-query scores :func:`compare` keeps, its pictures as inline SVG."""
    conf = report_settings(table, settings)
    esc = html.escape
    name = title or "Comparison of " + ", ".join(str(r) for r in dict.fromkeys(table["run"].astype(str)))
    parts = [f"<h1>{esc(name)}</h1>", html_table(table, digits=digits, caption=caption, **settings)]
    if plots:
        figures = _figures(table, conf)
        if not figures:
            parts.append("<p>No pictures: the per-query scores are not kept with this table (compare()'s result "
                         "keeps them).</p>")
        section = None
        for heading, picture, text in figures:
            if heading != section:
                if section is not None:
                    parts.append("</div>")
                parts.append(f"<h2>{esc(heading)}</h2>\n<div class=\"kolm-grid\">")
                section = heading
            parts.append(f"<figure>{picture}<figcaption>{esc(text)}</figcaption></figure>")
        if section is not None:
            parts.append("</div>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{esc(name)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n" + "\n".join(parts)
            + "\n</body>\n</html>\n")
