"""compare()/Experiment reports in Markdown and LaTeX: parsed back, the bold cells are the best
values, the marks are where the compare frame says p < alpha, the caption names the test and
the correction; nothing optional (jinja2, tabulate) is imported."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import Dataset, Experiment, KolmValueError, compare, write_qrels, write_run
from kolm_search.cli import main
from kolm_search.evaluation.report import CORRECTION_NAMES, TEST_NAMES, ComparisonTable, to_latex, to_markdown


def _data(seed: int, n_q: int = 25) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """A baseline, a clearly better, a clearly worse and a copy of the baseline (ties)."""
    rng = np.random.default_rng(seed)
    qrels = pd.DataFrame([(f"q{q}", f"d{d}", int(d % 4 == 0) * int(rng.integers(1, 3))) for q in range(n_q)
                          for d in range(12)], columns=["qid", "doc_id", "relevance"])
    rel = qrels["relevance"].to_numpy()

    def run(signal: float) -> pd.DataFrame:
        return qrels[["qid", "doc_id"]].assign(score=rng.random(len(qrels)) + signal * rel)

    base = run(0.3)
    return {"base": base, "good_run": run(3.0), "bad|run": run(-1.0), "same": base.copy()}, qrels


def _parse_markdown(text: str) -> tuple[list[str], dict[tuple[str, str], str], str]:
    lines = text.strip().splitlines()
    split = [re.split(r"(?<!\\)\|", line)[1:-1] for line in lines if line.startswith("|")]
    header = [c.strip() for c in split[0]]
    cells = {}
    for row in split[2:]:
        name = row[0].strip().replace(" (baseline)", "").replace("\\", "")
        for metric, cell in zip(header[1:], row[1:], strict=True):
            cells[(name, metric.replace("\\", ""))] = cell.strip()
    caption = next(line for line in lines if line.startswith("Table: "))
    return [h.replace("\\", "") for h in header[1:]], cells, caption


def _parse_latex(text: str) -> tuple[list[str], dict[tuple[str, str], str], str]:
    body = text.split(r"\midrule")[1].split(r"\bottomrule")[0]
    head = text.split(r"\toprule")[1].split(r"\midrule")[0]
    header = [h.strip().rstrip("\\").strip() for h in head.split(" & ")]
    cells = {}
    for line in body.strip().splitlines():
        parts = [p.strip() for p in line.strip().removesuffix(r"\\").split(" & ")]
        name = parts[0].replace(" (baseline)", "")
        for metric, cell in zip(header[1:], parts[1:], strict=True):
            cells[(name, metric)] = cell
    caption = re.search(r"\\caption\{(.*)\}\n", text)
    assert caption is not None
    return header[1:], cells, caption.group(1)


def _check(table: pd.DataFrame, parsed: tuple[list[str], dict[tuple[str, str], str], str], *, latex: bool,
           digits: int = 4) -> None:
    metrics, cells, caption = parsed
    assert metrics == [m.replace("_", r"\_") if latex else m for m in dict.fromkeys(table["metric"])]
    bold = (r"\\textbf\{(.*?)\}" if latex else r"\*\*(.*?)\*\*")
    up, down = (r"$^\dagger$", r"$^\ddagger$") if latex else ("†", "‡")
    for metric in dict.fromkeys(table["metric"]):
        rows = table[table["metric"] == metric]
        best = max(round(m, digits) for m in rows["mean"])
        for r in rows.itertuples(index=False):
            name = r.run.replace("_", r"\_") if latex else r.run
            cell = cells[(name, metric.replace("_", r"\_") if latex else metric)]
            is_bold = re.search(bold, cell) is not None
            assert is_bold == (round(r.mean, digits) == best), (r.run, metric, cell)
            number = re.sub(bold, r"\1", cell).replace(up, "").replace(down, "").replace("‡", "").replace("†", "")
            assert float(number) == pytest.approx(r.mean, abs=10 ** -digits)
            significant = r.p_adjusted < table.attrs["compare"]["alpha"]  # from the frame's own p-values
            assert cell.endswith(down) == (significant and r.delta < 0), (r.run, metric, cell)
            assert cell.endswith(up) == (significant and r.delta > 0), (r.run, metric, cell)
    conf = table.attrs["compare"]
    assert TEST_NAMES[conf["test"]] in caption.replace("\\", "")
    assert CORRECTION_NAMES[conf["correction"]] in caption
    assert f"{conf['alpha']:g}" in caption and "base" in caption


@pytest.mark.parametrize(("test", "correction", "seed"), [("t", "holm", 0), ("wilcoxon", "bonferroni", 1),
                                                          ("fisher", "none", 2), ("bootstrap", "holm", 3)])
def test_reports_parse_back_to_the_compare_frame(test: Any, correction: Any, seed: int) -> None:
    runs, qrels = _data(seed)
    table = compare(runs, qrels, ["ndcg@10", "map", "precision@5"], test=test, correction=correction,
                    n_resamples=2000, alpha=0.05)
    assert isinstance(table, ComparisonTable)
    assert table["significant"].any()  # the example has marks to check
    _check(table, _parse_markdown(table.to_markdown()), latex=False)
    _check(table, _parse_latex(table.to_latex()), latex=True)
    text = table.to_latex(label="tab:runs")
    for piece in (r"\begin{table}", r"\toprule", r"\midrule", r"\bottomrule", r"\label{tab:runs}", r"\end{tabular}"):
        assert piece in text
    assert text.count(r"\\") == 1 + table["run"].nunique()  # header + one line per run
    assert "bad\\|run" in table.to_markdown() and "good\\_run" in table.to_latex()
    # 'same' copies the baseline: tied, never marked
    same = table[table.run == "same"]
    assert not same["significant"].any() and (same["delta"] == 0).all()


def test_digits_ties_and_plain_frames() -> None:
    runs, qrels = _data(4)
    table = compare(runs, qrels, ["ndcg@10"])
    _check(table, _parse_markdown(table.to_markdown(digits=1)), latex=False, digits=1)
    plain = table.copy()  # a derived frame: a plain DataFrame, the settings kept in attrs
    assert type(plain) is pd.DataFrame and to_markdown(plain) == table.to_markdown()
    bare = pd.DataFrame(table.to_dict("list"))
    with pytest.raises(KolmValueError, match="baseline"):
        to_latex(bare)
    assert to_latex(bare, baseline="base", test="t", correction="holm", alpha=0.05) == table.to_latex().replace(
        "Mean over 25 queries", "Means")
    with pytest.raises(KolmValueError, match="digits"):
        table.to_latex(digits=-1)
    with pytest.raises(KolmValueError, match="missing"):
        to_markdown(plain.drop(columns="delta"))
    buf = io.StringIO()
    assert table.to_latex(buf, caption="My caption") == buf.getvalue() and r"\caption{My caption}" in buf.getvalue()


def test_no_jinja2_or_tabulate_needed(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("jinja2", "tabulate"):
                    raise ImportError(f"blocked {name}")
        sys.meta_path.insert(0, Block())
        import pandas as pd
        from kolm_search import compare
        run = pd.DataFrame({"qid": ["1", "1", "2"], "doc_id": ["a", "b", "a"], "score": [1.0, 0.5, 2.0]})
        qrels = pd.DataFrame({"qid": ["1", "2"], "doc_id": ["b", "a"], "relevance": [1, 1]})
        table = compare({"x": run, "y": run.assign(score=-run.score)}, qrels, ["map"])
        assert r"\\toprule" in table.to_latex() and "| Run |" in table.to_markdown()
        try:  # the blocker works: pandas' own LaTeX needs jinja2
            pd.DataFrame(table).to_latex()
            sys.exit("jinja2 was not blocked")
        except (ImportError, AttributeError):
            pass
        assert "jinja2" not in sys.modules and "tabulate" not in sys.modules
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


class _Client:
    """A fake pipeline answering from a fixed run."""

    def __init__(self, run: pd.DataFrame) -> None:
        self.frame = run

    def search_batch(self, queries: pd.DataFrame, **kw: Any) -> Any:
        class Result:
            run = self.frame[self.frame["qid"].isin(set(queries["qid"]))]
        return Result()


def test_experiment_result_renders() -> None:
    runs, qrels = _data(5)
    queries = pd.DataFrame({"qid": sorted(set(qrels.qid)), "query": "q"})
    ds = Dataset(corpus=pd.DataFrame({"id": [], "title": [], "content": []}), queries=queries, qrels=qrels, name="syn")
    exp = Experiment({n: _Client(r) for n, r in runs.items()}, ds, ["ndcg@10", "map"], progress=False,
                     correction="bonferroni")
    table = exp.run()
    assert isinstance(table, ComparisonTable)
    _check(table, _parse_latex(table.to_latex()), latex=True)
    assert "Bonferroni correction" in table.to_markdown()


def test_cli_compare_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs, qrels = _data(6)
    paths = []
    for name, run in runs.items():
        safe = re.sub(r"\W", "_", name) + ".trec"
        write_run(run, tmp_path / safe)
        paths.append(str(tmp_path / safe))
    write_qrels(qrels, tmp_path / "qrels.txt")
    args = ["compare", *paths, "--qrels", str(tmp_path / "qrels.txt"), "--metrics", "ndcg@10,map"]
    assert main([*args, "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(frame.columns)[:3] == ["run", "metric", "mean"] and len(frame) == 8
    table = compare({Path(p).name: r for p, r in zip(paths, runs.values(), strict=True)}, qrels, ["ndcg@10", "map"])
    np.testing.assert_allclose(frame["mean"].to_numpy(), table["mean"].to_numpy(), rtol=0, atol=1e-12)
    assert main([*args, "--format", "markdown"]) == 0
    assert capsys.readouterr().out.strip() == table.to_markdown().strip()
    assert main([*args, "--format", "latex", "--alpha", "0.01"]) == 0
    out = capsys.readouterr().out
    assert r"\toprule" in out and "0.01" in out
