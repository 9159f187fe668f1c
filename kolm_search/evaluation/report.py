"""Tables for papers and notes: :func:`compare`'s result as Markdown or LaTeX (booktabs).

One row per run, one column per metric, the mean in each cell; the best value of each metric
in bold (every run tied with it at the printed precision); a significant difference from the
baseline marked ``†`` (higher) or ``‡`` (lower), read from the ``significant`` and ``delta``
columns; a caption naming the test, the correction, alpha and the number of queries. Written
by hand (no jinja2, no tabulate), so nothing optional is needed at call time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search.evaluation.report_cells import (
    CORRECTION_NAMES,
    TEST_NAMES,
    baseline_letters,
    caption_text,
    grid,
    report_settings,
    run_label,
    used_marks,
)
from kolm_search.io._atomic import write_text

__all__ = [
    "CORRECTION_NAMES", "ComparisonTable", "TEST_NAMES", "baseline_letters", "caption_text", "grid", "latex_escape",
    "markdown_escape", "run_label", "to_latex", "to_markdown", "used_marks",
]

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
    :func:`to_markdown` and :func:`to_latex` of this module take those too. A table read from an
    experiment's cache makes the two when they are first read (:meth:`defer`)."""

    _metadata = ["per_query", "curves"]  # noqa: RUF012  (pandas reads this list of attribute names)

    @property
    def per_query(self) -> dict[str, pd.DataFrame]:
        """``{metric: DataFrame qid x run}``: each query's score."""
        return self._kept("per_query")

    @per_query.setter
    def per_query(self, value: dict[str, pd.DataFrame]) -> None:
        self._keep("per_query", value)

    @property
    def curves(self) -> pd.DataFrame:
        """DataFrame recall level x run: the interpolated precision-recall curves."""
        return self._kept("curves")

    @curves.setter
    def curves(self, value: pd.DataFrame) -> None:
        self._keep("curves", value)

    def defer(self, *, per_query: Callable[[], dict[str, pd.DataFrame]],
              curves: Callable[[], pd.DataFrame]) -> None:
        """Set :attr:`per_query` and :attr:`curves` as the functions that make them, each called
        when its value is first read (a table read back from a cache, its checks made, need not
        build frames a caller may never look at)."""
        self._keep("per_query", _Deferred(per_query))
        self._keep("curves", _Deferred(curves))

    def _keep(self, name: str, value: Any) -> None:
        self.__dict__.setdefault("_kept_parts", {})[name] = value

    def _kept(self, name: str) -> Any:
        parts = self.__dict__.get("_kept_parts", {})
        if name not in parts:
            raise AttributeError(f"'ComparisonTable' object has no attribute {name!r}")
        value = parts[name]
        if isinstance(value, _Deferred):
            value = parts[name] = value.make()
        return value

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
        write_text(Path(buf), text)
        return text

    def to_markdown(self, buf: Any = None, *, digits: int = 4, caption: str | None = None,
                    **settings: Any) -> str:
        """The report as a Markdown table with a pandoc ``Table:`` caption (see the module)."""
        return _write(to_markdown(self, digits=digits, caption=caption, **settings), buf)

    def to_latex(self, buf: Any = None, *, digits: int = 4, caption: str | None = None,
                 label: str | None = None, **settings: Any) -> str:
        """The report as a LaTeX ``table`` with booktabs rules (``\\usepackage{booktabs}``)."""
        return _write(to_latex(self, digits=digits, caption=caption, label=label, **settings), buf)


class _Deferred:
    """A value made when first read (:meth:`ComparisonTable.defer`)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def _write(text: str, buf: Any) -> str:
    if buf is not None:
        if hasattr(buf, "write"):
            buf.write(text)
        else:
            from pathlib import Path

            Path(buf).write_text(text, encoding="utf-8")
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
    conf = report_settings(table, settings)
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
    conf = report_settings(table, settings)
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
