"""The HTML report in a real browser (Debian's chromium, headless; ``.ci/run`` installs it): the
page loads without a console message, every table cell and every figure is in the rendered DOM,
nothing is fetched from elsewhere, and a screenshot is not blank. Also the notebook form
(``_repr_html_``) and the report's content against the compare frame, without a browser."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import compare
from kolm_search.evaluation.report import grid, run_label

pytest.importorskip("matplotlib", reason="extra 'plot' not installed")
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _runs(seed: int = 0, n_q: int = 30) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(rng.integers(0, 3)) * int(d % 3 == 0)) for q in range(n_q)
                          for d in range(15)], columns=["qid", "doc_id", "relevance"])
    rel = qrels["relevance"].to_numpy()
    return {name: qrels[["qid", "doc_id"]].assign(score=rng.random(len(qrels)) + s * rel)
            for name, s in (("base <b>", 0.3), ("good & fine", 1.5), ("bad", -0.5))}, qrels


class _Page(HTMLParser):
    """Table cells (text, in order, per row) and figures of a rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.svgs = 0
        self.paths = 0
        self.figcaptions = 0
        self.caption = ""
        self.in_caption = False
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "svg":
            self.svgs += 1
        elif tag in ("path", "rect", "text", "use"):
            self.paths += 1
        elif tag == "figcaption":
            self.figcaptions += 1
        elif tag == "caption":
            self.in_caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "caption":
            self.in_caption = False

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)
        if self.in_caption:
            self.caption += data


def _expected_rows(table: Any) -> list[list[str]]:
    conf = table.attrs["compare"]
    runs, metrics, cells = grid(table, 4, conf)
    return [["Run", *metrics]] + [[run_label(r, conf), *(cells[(r, m)][0] + cells[(r, m)][2] for m in metrics)]
                                  for r in runs]


def test_report_content_and_notebook_form(tmp_path: Path) -> None:
    runs, qrels = _runs()
    table = compare(runs, qrels, ["ndcg@10", "P@5"], baseline=["base <b>", "bad"])
    page = _Page()
    page.feed(table._repr_html_())
    assert page.rows == _expected_rows(table) and page.svgs == 0
    assert "Benjamini" not in page.caption and "Holm-Bonferroni correction" in page.caption
    assert "paired t-test" in page.caption and "p < 0.05" in page.caption
    text = table.to_html(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text() == text and "<b>html" not in text  # names escaped
    full = _Page()
    full.feed(text)
    n_figures = 2 + 2 * 2 * 2 + 1  # bars per metric; per (baseline, metric) two runs' deltas; one PR plot
    assert full.svgs == n_figures == full.figcaptions and full.rows == _expected_rows(table)
    assert all(r.startswith("#") for r in full.refs)  # self-contained: nothing fetched
    assert "No pictures" in _derived(table).to_html()  # a table without per-query scores: the table, and a note


def _derived(table: Any) -> Any:
    from kolm_search.evaluation.report import ComparisonTable

    plain = ComparisonTable(pd.DataFrame(table))
    plain.attrs = dict(table.attrs)
    return plain


@pytest.mark.skipif(BROWSER is None, reason="no chromium/chrome browser on this machine (.ci/run installs Debian's)")
def test_report_in_a_headless_browser(tmp_path: Path) -> None:
    pil = pytest.importorskip("PIL.Image", reason="Pillow (matplotlib's dependency) not installed")
    runs, qrels = _runs(1)
    table = compare(runs, qrels, ["ndcg@10", "map"], test="tukey")
    path = tmp_path / "report.html"
    table.to_html(path)
    profile = tmp_path / "profile"
    profile.mkdir()
    common = [str(BROWSER), *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*common, "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console  # no script error, warning or log line
    page = _Page()
    page.feed(dom.stdout)
    assert page.rows == [[html.unescape(c) for c in row] for row in _expected_rows(table)]
    assert page.svgs == 2 + 2 * 2 + 1 and page.paths > 50
    assert "Tukey's HSD over all runs" in page.caption
    shot = tmp_path / "shot.png"
    out = subprocess.run([*common, "--window-size=1200,1600", f"--screenshot={shot}", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    image = np.asarray(pil.open(shot).convert("RGB"), dtype=np.int16)
    assert image.shape[:2] == (1600, 1200)
    ink = (np.abs(image - 255).sum(axis=2) > 60).mean()  # share of pixels that are not (near) white
    colours = len(np.unique(image.reshape(-1, 3)[::97], axis=0))
    assert ink > 0.02 and colours > 20, (ink, colours)
    assert re.search(r"#4C72B0|4c72b0", dom.stdout)  # the bars' colour, drawn


def test_cli_compare_writes_the_html_page(tmp_path: Path) -> None:
    from kolm_search import write_qrels, write_run
    from kolm_search.cli import main

    runs, qrels = _runs(2)
    paths = []
    for i, run in enumerate(runs.values()):
        write_run(run, tmp_path / f"r{i}.trec")
        paths.append(str(tmp_path / f"r{i}.trec"))
    write_qrels(qrels, tmp_path / "q.txt")
    assert main(["compare", *paths, "--qrels", str(tmp_path / "q.txt"), "--metrics", "ndcg@10", "--format", "html",
                 "-o", str(tmp_path / "out" / "report.html")]) == 0
    page = _Page()
    page.feed((tmp_path / "out" / "report.html").read_text())
    assert page.svgs == 1 + 2 + 1 and [r[0] for r in page.rows] == ["Run", "r0.trec (baseline)", "r1.trec", "r2.trec"]
