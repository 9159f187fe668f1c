"""Odd run and metric names in reports and in ``compare`` (issue 25, defects 10 and 11).

A Markdown report is read back with a real CommonMark + GFM-tables parser (markdown-it-py): a
name holding newlines, pipes or Markdown syntax stays one cell of one row and reads back as
itself (a newline as ``<br>``). ``compare`` refuses two run names whose text is equal (``1`` and
``"1"``), naming both, instead of showing one row."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kolm_search import BM25Retriever, KolmValueError, compare
from kolm_search.evaluation import Experiment

markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (test extra) not installed")


def _data(n_q: int = 8) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(0)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(d % 3 == 0)) for q in range(n_q) for d in range(6)],
                         columns=["qid", "doc_id", "relevance"])
    run = qrels[["qid", "doc_id"]].assign(score=rng.random(len(qrels)))
    return run, qrels


def _cells(markdown: str) -> list[list[str]]:
    """The rendered table's rows of cell texts (inline HTML kept as written)."""
    md = markdown_it.MarkdownIt("commonmark").enable("table")
    tokens = md.parse(markdown)
    rows: list[list[str]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "tr_open":
            rows.append([])
        elif tok.type in ("th_open", "td_open"):
            inline = tokens[i + 1]
            rows[-1].append("".join(child.content if child.type in ("text", "html_inline", "code_inline") else ""
                                    for child in (inline.children or [])))
    return rows


NAMES = ["two\nlines", "a|b", "cr\rlf\r\n", "*bold*", "`code`", "<b>html</b>", "x\\|y", "[link](u)", "~~s~~", "&amp;"]


def test_odd_run_names_stay_one_cell_of_one_row() -> None:
    run, qrels = _data()
    runs = {name: run.assign(score=run["score"] + i) for i, name in enumerate(["base", *NAMES])}
    table = compare(runs, qrels, ["P@5"])
    rows = _cells(table.to_markdown())
    assert len(rows) == 1 + len(runs) and all(len(r) == 2 for r in rows), rows
    shown = [r[0].removesuffix(" (baseline)") for r in rows[1:]]
    assert shown == [re.sub(r"\r\n|\r|\n", "<br>", n) for n in runs]
    assert "\n\n" not in table.to_markdown().split("Table: ")[1].rstrip("\n")  # the caption is one paragraph


def test_a_newline_in_the_baseline_name_keeps_the_caption_one_paragraph() -> None:
    run, qrels = _data()
    table = compare({"my\n\nbase|line": run, "other": run.assign(score=-run["score"])}, qrels, ["P@5"])
    text = table.to_markdown()
    caption = text.split("\nTable: ")[1]
    assert caption.count("\n") == 1 and "my<br><br>base\\|line" in caption
    assert len(_cells(text)) == 3
    latex = table.to_latex()
    assert "\n\n" not in latex  # a blank line would end a LaTeX paragraph inside the tabular


@settings(max_examples=25, deadline=None)
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12),
                min_size=2, max_size=4, unique=True))
def test_any_names_give_one_row_each(names: list[str]) -> None:
    run, qrels = _data(4)
    shows = [any(ch.isprintable() and not ch.isspace() for ch in n) for n in names]
    if len({n for n in names}) != len(names) or not all(shows):  # a name showing nothing: refused (below)
        with pytest.raises(KolmValueError, match="named|text is equal"):
            compare({name: run for name in names}, qrels, ["P@5"], test="t")
        return
    runs = {name: run for name in names}
    rows = _cells(compare(runs, qrels, ["P@5"], test="t").to_markdown())
    assert len(rows) == 1 + len(names) and all(len(r) == 2 for r in rows)


@pytest.mark.parametrize("names", [(1, "1"), ("1", 1), (1.5, "1.5"), ("base", 2, "2")])
def test_compare_refuses_names_whose_text_is_equal(names: tuple[Any, ...]) -> None:
    run, qrels = _data()
    runs = {name: run.assign(score=run["score"] * (i + 1)) for i, name in enumerate(names)}
    with pytest.raises(KolmValueError, match="names") as info:
        compare(runs, qrels, ["P@5"])
    text = str(info.value)
    a, b = [n for n in names if str(n) == str(names[-1])]
    assert repr(a) in text and repr(b) in text


@pytest.mark.parametrize("blank", ["", " ", "\n", "\t \u2003", "\u200b", "\u200b\u2060 \ufeff", "\ud800"])
def test_compare_and_an_experiment_refuse_a_blank_name(blank: str) -> None:
    """A blank name rendered as a row without a name on main."""
    run, qrels = _data()
    with pytest.raises(KolmValueError, match="shows nothing as text.*visible character"):
        compare({"base": run, blank: run.assign(score=-run["score"])}, qrels, ["P@5"])
    with pytest.raises(KolmValueError, match="blank"):
        Experiment({blank: BM25Retriever(pd.DataFrame({"id": ["a"], "content": ["x"]}))}, object(), ["P@5"])


def test_distinct_non_string_names_are_kept() -> None:
    run, qrels = _data()
    table = compare({1: run, 2: run.assign(score=-run["score"])}, qrels, ["P@5"])
    assert table["run"].tolist() == [1, 2]
