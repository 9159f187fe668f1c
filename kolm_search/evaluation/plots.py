"""The pictures of a comparison (matplotlib, extra ``plot``), drawn from a
:class:`~kolm_search.evaluation.report.ComparisonTable` and the per-query scores and curves that
:func:`~kolm_search.evaluation.compare` keeps with it; :meth:`ComparisonTable.to_html` and
:meth:`~kolm_search.evaluation.Experiment.plot` both draw these.

- :func:`draw_bars`: each run's mean of one metric, its 95 % interval (Student's t over the
  queries) drawn and written above the bar, and the significance marks of the table (``†``/``‡``,
  with the baseline's letter when there are several);
- :func:`draw_deltas`: one run minus a baseline, query by query, as win (above 0) and loss (below
  0) bars sorted from the largest win, the counts in the title;
- :func:`draw_pr`: the interpolated precision-recall curve of each run (trec_eval's 11 points).
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.evaluation.report_cells import grid

__all__ = ["COLORS", "draw_bars", "draw_deltas", "draw_pr", "mean_interval", "svg"]

COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974",
          "#64B5CD")
WIN, LOSS = "#2E7D32", "#C62828"


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``values`` and Student's t interval of it (the mean twice below two values)."""
    from scipy import stats

    x = np.asarray(values, np.float64)
    mean = float(x.mean()) if x.size else float("nan")
    if x.size < 2 or float(x.std()) == 0.0:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return mean, mean - half, mean + half


def draw_bars(ax: Any, table: pd.DataFrame, metric: str, per_query: pd.DataFrame, settings: dict[str, Any],
              digits: int = 3) -> None:
    """Bars of ``metric`` for every run with labelled 95 % intervals and significance marks."""
    runs, _, cells = grid(table, digits, settings)
    means, lows, highs = [], [], []
    for run in runs:
        mean, low, high = mean_interval(per_query[run].to_numpy()) if run in per_query else (np.nan,) * 3
        means.append(mean)
        lows.append(mean - low)
        highs.append(high - mean)
    x = np.arange(len(runs))
    ax.bar(x, means, yerr=[lows, highs], capsize=4, color=[COLORS[i % len(COLORS)] for i in range(len(runs))],
           error_kw={"elinewidth": 1, "ecolor": "#333333"})
    top = max((m + h for m, h in zip(means, highs, strict=True) if np.isfinite(m + h)), default=1.0)
    for i, run in enumerate(runs):
        if not np.isfinite(means[i]):
            continue
        mark = cells.get((run, metric), ("", False, ""))[2]
        label = f"{means[i]:.{digits}f}{mark}\n[{means[i] - lows[i]:.{digits}f}, {means[i] + highs[i]:.{digits}f}]"
        ax.text(i, means[i] + highs[i] + 0.02 * top, label, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, runs, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, top * 1.3 if top > 0 else 1)
    ax.set_title(f"{metric}: mean, 95% interval, significance", fontsize=9)


def draw_deltas(ax: Any, per_query: pd.DataFrame, run: str, baseline: str, metric: str) -> None:
    """Per-query ``run - baseline`` as win (green) and loss (red) bars, sorted."""
    delta = np.sort((per_query[run] - per_query[baseline]).to_numpy())[::-1]
    edges = np.arange(len(delta) + 1) - 0.5  # one bar per query, drawn as two filled steps (a small SVG)
    heights = np.append(delta, delta[-1] if len(delta) else 0.0)
    ax.fill_between(edges, 0, heights, where=heights > 1e-12, step="post", color=WIN, linewidth=0, interpolate=False)
    ax.fill_between(edges, 0, heights, where=heights < -1e-12, step="post", color=LOSS, linewidth=0,
                    interpolate=False)
    ax.axhline(0, color="black", linewidth=0.8)
    wins, losses = int((delta > 1e-12).sum()), int((delta < -1e-12).sum())
    ax.set_title(f"{metric}: {run} - {baseline}, per query\n{wins} wins, {len(delta) - wins - losses} ties, "
                 f"{losses} losses", fontsize=9)
    ax.set_xlabel("queries, largest win first", fontsize=8)
    ax.set_xlim(-0.5, max(len(delta), 1) - 0.5)


def draw_pr(ax: Any, curves: pd.DataFrame) -> None:
    """Interpolated precision at recall 0..1 (rows) of every run (columns)."""
    for i, run in enumerate(curves.columns):
        ax.plot(curves.index.to_numpy(), curves[run].to_numpy(), marker="o", markersize=3, label=str(run),
                color=COLORS[i % len(COLORS)])
    ax.set_xlabel("recall", fontsize=8)
    ax.set_ylabel("interpolated precision", fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("precision-recall (11 points, mean over queries)", fontsize=9)


def svg(fig: Any) -> str:
    """The figure as an inline ``<svg>`` element (its XML prologue and DOCTYPE dropped; ids made
    unique to the figure, so several can share one page); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    prefix = f"f{id(fig):x}-"
    text = re.sub(r'id="([^"]+)"', lambda m: f'id="{prefix}{m.group(1)}"', text)
    return re.sub(r'(url\(#|xlink:href="#|href="#)([^)"]+)', lambda m: f"{m.group(1)}{prefix}{m.group(2)}", text)
