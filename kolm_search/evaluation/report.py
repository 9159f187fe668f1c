"""Tables for papers and notes: :func:`compare`'s result as Markdown or LaTeX (booktabs).

One row per run, one column per metric, the mean in each cell; the best value of each metric
in bold (every run tied with it at the printed precision); a significant difference from the
baseline marked ``†`` (higher) or ``‡`` (lower), read from the ``significant`` and ``delta``
columns; a caption naming the test, the correction, alpha and the number of queries. Written
by hand (no jinja2, no tabulate), so nothing optional is needed at call time.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search.errors import KolmValueError

__all__ = [
    "ComparisonTable", "baseline_letters", "caption_text", "grid", "latex_escape", "markdown_escape", "run_label",
    "to_latex", "to_markdown", "used_marks",
]

TEST_NAMES = {"t": "paired t-test", "wilcoxon": "Wilcoxon signed-rank test",
              "fisher": "Fisher's randomisation test", "bootstrap": "paired bootstrap test",
              "tukey": "Tukey's HSD over all runs"}
CORRECTION_NAMES = {"none": "no correction for multiple testing", "bonferroni": "Bonferroni correction",
                    "holm": "Holm-Bonferroni correction", "bh": "Benjamini-Hochberg false discovery rate control",
                    "by": "Benjamini-Yekutieli false discovery rate control"}
_COLUMNS = ("run", "metric", "mean", "delta", "significant")
_MARKDOWN_SPECIAL = frozenset("\\|*_`[]<>~&")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LATEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


class ComparisonTable(pd.DataFrame):
    """:func:`~kolm_search.evaluation.compare`'s DataFrame, with :meth:`to_markdown`,
    :meth:`to_latex` and :meth:`to_html` rendering the report (the test, correction and baseline
    ride in ``.attrs["compare"]``); in a notebook it shows as the report table
    (:meth:`_repr_html_`; ``pd.DataFrame(table)`` for the frame itself).

    ``per_query`` (``{metric: DataFrame qid x run}``) and ``curves`` (DataFrame recall level x
    run, the precision-recall curves) are the scores the pictures are drawn from; compare() keeps
    them. Any frame derived from it (a selection, a copy) is a plain DataFrame without them;
    :func:`to_markdown` and :func:`to_latex` of this module take those too."""

    _metadata = ["per_query", "curves"]  # noqa: RUF012  (pandas reads this list of attribute names)

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    def _repr_html_(self) -> str:
        from kolm_search.evaluation.report_html import html_table

        return html_table(self)

    def to_html(self, buf: Any = None, *, digits: int = 4, caption: str | None = None,
                title: str | None = None, plots: bool = True, **settings: Any) -> str:
        """The report as one self-contained HTML page (the table, and with ``plots`` its
        pictures as inline SVG, extra ``plot``; :mod:`kolm_search.evaluation.report_html`),
        written to ``buf`` (a path, replaced whole, or a file object) when given."""
        from kolm_search.evaluation.report_html import to_html

        text = to_html(self, digits=digits, caption=caption, title=title, plots=plots, **settings)
        if buf is None or hasattr(buf, "write"):
            return _write(text, buf)
        _replace(Path(buf), text)
        return text

    def to_markdown(self, buf: Any = None, *, digits: int = 4, caption: str | None = None,
                    **settings: Any) -> str:
        """The report as a Markdown table with a pandoc ``Table:`` caption (see the module)."""
        return _write(to_markdown(self, digits=digits, caption=caption, **settings), buf)

    def to_latex(self, buf: Any = None, *, digits: int = 4, caption: str | None = None,
                 label: str | None = None, **settings: Any) -> str:
        """The report as a LaTeX ``table`` with booktabs rules (``\\usepackage{booktabs}``)."""
        return _write(to_latex(self, digits=digits, caption=caption, label=label, **settings), buf)


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file beside it, renamed over it."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write(text: str, buf: Any) -> str:
    if buf is not None:
        if hasattr(buf, "write"):
            buf.write(text)
        else:
            from pathlib import Path

            Path(buf).write_text(text, encoding="utf-8")
    return text


def _settings(table: pd.DataFrame, given: dict[str, Any]) -> dict[str, Any]:
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


def markdown_escape(text: str) -> str:
    """``text`` as the content of one Markdown table cell: CommonMark's inline syntax and the
    cell separator ``|`` backslash-escaped, each line break (``\\n``, ``\\r``, ``\\r\\n``) written
    ``<br>`` so the cell stays on its row."""
    escaped = "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in text)
    return _LINE_BREAK.sub("<br>", escaped)


def latex_escape(text: str) -> str:
    """``text`` for LaTeX: its special characters escaped, each line break a space (a blank line
    would end the paragraph inside a ``tabular``)."""
    return _LINE_BREAK.sub(" ", "".join(_LATEX_ESCAPES.get(c, c) for c in text))


def to_markdown(table: pd.DataFrame, *, digits: int = 4, caption: str | None = None, **settings: Any) -> str:
    """Markdown (GitHub/pandoc pipe table, caption as pandoc's ``Table:`` paragraph).

    ``settings`` (``baseline``, ``test``, ``correction``, ``alpha``, ``n_resamples``,
    ``n_queries``, ``self_hits_dropped``) override those :func:`compare` stored in ``table.attrs``.
    """
    conf = _settings(table, settings)
    runs, metrics, cells = grid(table, digits, conf)
    esc = markdown_escape
    lines = ["| Run | " + " | ".join(esc(m) for m in metrics) + " |", "|:--|" + "--:|" * len(metrics)]
    for run in runs:
        parts = []
        for metric in metrics:
            text, bold, mark = cells.get((run, metric), ("", False, ""))
            parts.append((f"**{text}**" if bold else text) + mark)
        lines.append(f"| {esc(run_label(run, conf))} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n\nTable: " + caption_text(conf, used_marks(cells), caption, esc) + "\n"


def _tex_marks(marks: str) -> str:
    """``†a‡b`` as LaTeX superscripts: ``$^{\\dagger a}$$^{\\ddagger b}$``."""
    out = []
    for sign, letter in re.findall(r"([†‡])([a-z]?)", marks):
        symbol = r"\dagger" if sign == "†" else r"\ddagger"
        out.append("$^{" + symbol + r"\mathrm{" + letter + "}}$" if letter else "$^" + symbol + "$")
    return "".join(out)


def to_latex(table: pd.DataFrame, *, digits: int = 4, caption: str | None = None, label: str | None = None,
             **settings: Any) -> str:
    """A LaTeX ``table`` environment: booktabs rules (``\\usepackage{booktabs}``), best value
    ``\\textbf``, marks ``$^\\dagger$`` (higher) and ``$^\\ddagger$`` (lower), the caption
    naming the test and the correction. Run and metric names are escaped."""
    conf = _settings(table, settings)
    runs, metrics, cells = grid(table, digits, conf)
    esc = latex_escape
    text = esc(caption_text(conf, used_marks(cells), caption)).replace(" < ", " $<$ ")
    lines = [r"\begin{table}[t]", r"  \centering",
             r"  \caption{" + text.replace("†", r"$^\dagger$").replace("‡", r"$^\ddagger$") + "}"]
    if label:
        lines.append(r"  \label{" + label + "}")
    lines += [r"  \begin{tabular}{l" + "r" * len(metrics) + "}", r"    \toprule",
              "    Run & " + " & ".join(esc(m) for m in metrics) + r" \\", r"    \midrule"]
    for run in runs:
        parts = []
        for metric in metrics:
            value, bold, mark = cells.get((run, metric), ("", False, ""))
            parts.append((r"\textbf{" + value + "}" if bold else value) + _tex_marks(mark))
        lines.append(f"    {esc(run_label(run, conf))} & " + " & ".join(parts) + r" \\")
    lines += [r"    \bottomrule", r"  \end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"
