"""The cells of a report, shared by its Markdown, LaTeX and HTML renderings and its pictures:
the compare settings a table carries, each (run, metric) cell's text, boldness and significance
marks, run labels and the caption (:mod:`kolm_search.evaluation.report`,
:mod:`kolm_search.evaluation.report_html`, :mod:`kolm_search.evaluation.plots`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from kolm_search.errors import KolmValueError

__all__ = ["CORRECTION_NAMES", "TEST_NAMES", "baseline_letters", "caption_text", "grid", "report_settings",
           "run_label", "used_marks"]

TEST_NAMES = {"t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test",
              "fisher": "Fisher's randomisation test", "bootstrap": "paired bootstrap test",
              "tukey": "Tukey's HSD over all runs"}
CORRECTION_NAMES = {"none": "no correction for multiple testing", "bonferroni": "Bonferroni correction",
                    "holm": "Holm-Bonferroni correction", "bh": "Benjamini-Hochberg false discovery rate control",
                    "by": "Benjamini-Yekutieli false discovery rate control"}
_COLUMNS = ("run", "metric", "mean", "delta", "significant")


def report_settings(table: pd.DataFrame, given: dict[str, Any]) -> dict[str, Any]:
    """The compare settings: the table's ``attrs["compare"]`` overridden by ``given``."""
    known = {"baseline", "baselines", "test", "correction", "alpha", "ci", "n_resamples", "n_queries",
             "self_hits_dropped"}
    unknown = set(given) - known
    if unknown:
        raise KolmValueError(f"unknown report setting(s) {sorted(unknown)}; known: {sorted(known)}")
    settings = {**dict(table.attrs.get("compare", {})), **{k: v for k, v in given.items() if v is not None}}
    missing = [k for k in ("baseline", "test", "correction", "alpha") if k not in settings]
    if missing:
        raise KolmValueError(f"the table does not say its {missing} (it is not compare()'s result); pass them")
    if "baseline" in given or not settings.get("baselines"):
        settings["baselines"] = [settings["baseline"]]
    return settings


def baseline_letters(settings: dict[str, Any]) -> dict[str, str]:
    """Baseline name -> the letter its marks carry (none when there is one baseline)."""
    bases = [str(b) for b in settings["baselines"]]
    return {b: "" for b in bases} if len(bases) == 1 else {b: chr(ord("a") + i) for i, b in enumerate(bases)}


def grid(table: pd.DataFrame, digits: int, settings: dict[str, Any]
         ) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[str, bool, str]]]:
    """Runs, metrics and ``{(run, metric): (value text, bold, marks)}``: ``†`` (higher) or ``‡``
    (lower) per baseline the run differs from significantly, followed by the baseline's letter
    when there are several."""
    missing = [c for c in _COLUMNS if c not in table.columns]
    if missing:
        raise KolmValueError(f"a report needs compare()'s columns; missing {missing}, has {list(table.columns)}")
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 15:
        raise KolmValueError(f"digits must be an integer in [0, 15], got {digits!r}")
    letters = baseline_letters(settings)
    base_of = (table["baseline"].astype(str) if "baseline" in table.columns else
               pd.Series(str(settings["baseline"]), index=table.index))
    runs = list(dict.fromkeys(table["run"].astype(str)))
    metrics = list(dict.fromkeys(table["metric"].astype(str)))
    cells: dict[tuple[str, str], tuple[str, bool, str]] = {}
    for metric in metrics:
        rows = table[table["metric"].astype(str) == metric]
        means = {str(r.run): float(r.mean) for r in rows.itertuples(index=False)}
        rounded = {run: round(m, digits) for run, m in means.items()}
        finite = [v for v in rounded.values() if math.isfinite(v)]
        best = max(finite) if finite and len(rounded) > 1 else None
        marks = dict.fromkeys(means, "")
        for r, base in zip(rows.itertuples(index=False), base_of[rows.index], strict=True):
            if bool(r.significant) and base in letters:
                marks[str(r.run)] += ("†" if float(r.delta) > 0 else "‡") + letters[base]
        for run, mean in means.items():
            text = f"{mean:.{digits}f}" if math.isfinite(mean) else "n/a"
            cells[(run, metric)] = (text, best is not None and rounded[run] == best, marks[run])
    return runs, metrics, cells


def run_label(run: str, settings: dict[str, Any]) -> str:
    """A run's name in a report, a baseline's followed by "(baseline)" or "(baseline a)"."""
    letters = baseline_letters(settings)
    if run not in letters:
        return run
    return f"{run} (baseline)" if len(letters) == 1 else f"{run} (baseline {letters[run]})"


def used_marks(cells: dict[tuple[str, str], tuple[str, bool, str]]) -> set[str]:
    return {m for _, _, text in cells.values() for m in ("†", "‡") if m in text}


def caption_text(settings: dict[str, Any], marks: set[str], caption: str | None, name: Any = str) -> str:
    """The caption (``caption`` itself when given); ``name`` renders the baselines' names."""
    if caption is not None:
        return caption
    test = TEST_NAMES.get(settings["test"], str(settings["test"]))
    if settings["test"] in ("fisher", "bootstrap") and settings.get("n_resamples"):
        test += f" with {int(settings['n_resamples']):,} resamples"
    correction = CORRECTION_NAMES.get(settings["correction"], str(settings["correction"]))
    letters = baseline_letters(settings)
    n = settings.get("n_queries")
    text = f"Mean over {n} queries; best" if n is not None else "Means; best"
    against = (f"the baseline {name(str(settings['baseline']))}" if len(letters) == 1 else
               "the baselines " + ", ".join(f"{name(b)} ({x})" for b, x in letters.items()))
    text += f" per metric in bold. Significance against {against}: two-sided {test}, {correction}, p < {settings['alpha']:g}"
    if marks:
        which = "" if len(letters) == 1 else " than the baseline of the letter"
        text += "; " + ", ".join(f"{m} significantly {'higher' if m == '†' else 'lower'}{which}" for m in sorted(marks))
    text += "."
    if settings.get("self_hits_dropped"):
        text += " Documents whose id is the query's were removed from the runs before scoring, as BEIR does."
    return text
