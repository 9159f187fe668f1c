"""``kolm-search eval RUN... --qrels QRELS``, trec_eval's way: every trec_eval measure it prints
(``-m all_trec``, per query with ``-q``, with ``-J``, ``-l``) equals pytrec_eval's on the same
files (a Cranfield BM25 run and random tie-heavy runs); QRELS a file or a dataset name (also for
``compare``); every output format read back; the dataset form unchanged; ambiguous input refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import pytrec_eval

from kolm_search import presets, write_qrels, write_run
from kolm_search.cli import main
from kolm_search.io import read_qrels, read_run


def _pytrec(run_path: Path, qrels_path: Path, level: int = 1, judged_only: bool = False) -> dict[str, Any]:
    run, qrels = read_run(run_path), read_qrels(qrels_path)
    r: dict[str, dict[str, float]] = {}
    for q, d, s in run[["qid", "doc_id", "score"]].itertuples(index=False, name=None):
        r.setdefault(str(q), {})[str(d)] = float(s)
    j: dict[str, dict[str, int]] = {}
    for q, d, v in qrels[["qid", "doc_id", "relevance"]].itertuples(index=False, name=None):
        j.setdefault(str(q), {})[str(d)] = int(v)
    measures = pytrec_eval.supported_measures - {"runid", "relstring"}
    return pytrec_eval.RelevanceEvaluator(j, measures, relevance_level=level, judged_docs_only_flag=judged_only).evaluate(r)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["eval", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def _check(got: dict[str, Any], want: dict[str, Any]) -> None:
    [run] = got["runs"]
    assert set(run["per_query"]) == set(want)
    names = [m for m in got["measures"]]
    assert len(names) >= 90
    for name in names:
        values = [want[q][name] for q in want]
        if not name.startswith("gm_"):  # trec_eval prints no per-query gm_map / gm_bpref
            for q in want:
                ours = run["per_query"][q][name]
                assert (ours is None and np.isnan(want[q][name])) or abs(ours - want[q][name]) <= 1e-9, (name, q)
        summary = pytrec_eval.compute_aggregated_measure(name, values)
        ours = run["summary"][name]
        assert (ours is None and np.isnan(summary)) or ours == pytest.approx(summary, rel=1e-9, abs=1e-12), name


@pytest.fixture(scope="module")
def cran_files(cranfield: dict[str, pd.DataFrame], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("cli-eval")
    run = presets.bm25(cranfield["corpus"]).search_batch(cranfield["queries"], limit=100).run
    write_run(run, folder / "bm25.trec")
    write_qrels(cranfield["qrels"], folder / "qrels.txt")
    return folder / "bm25.trec", folder / "qrels.txt"


def test_all_trec_on_cranfield_equals_pytrec_eval(cran_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    run, qrels = cran_files
    _check(_json(capsys, str(run), "--qrels", str(qrels), "-m", "all_trec", "-q"), _pytrec(run, qrels))
    _check(_json(capsys, str(run), "--qrels", str(qrels), "-m", "all_trec", "-q", "-J", "-l", "2"),
           _pytrec(run, qrels, level=2, judged_only=True))


@pytest.mark.parametrize("seed", range(3))
def test_random_tie_heavy_runs_equal_pytrec_eval(seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(seed)
    rows, qrows = [], []
    for q in range(30):
        for d in rng.choice(50, rng.integers(1, 40), replace=False):
            rows.append((f"q{q}", f"d{d}", float(rng.integers(0, 4))))  # four scores: ties everywhere
        for d in rng.choice(50, rng.integers(1, 20), replace=False):
            qrows.append((f"q{q}", f"d{d}", int(rng.integers(0, 4))))
    write_run(pd.DataFrame(rows, columns=["qid", "doc_id", "score"]), tmp_path / "run.trec")
    write_qrels(pd.DataFrame(qrows, columns=["qid", "doc_id", "relevance"]), tmp_path / "qrels.txt")
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.txt"
    level, judged = (1, False) if seed % 2 == 0 else (2, True)
    argv = [str(run), "--qrels", str(qrels), "-m", "all_trec", "-q", "-l", str(level)] + (["-J"] if judged else [])
    _check(_json(capsys, *argv), _pytrec(run, qrels, level, judged))


def test_table_is_trec_eval_layout(cran_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = cran_files
    assert main(["eval", str(run), "--qrels", str(qrels), "-q", "-m", "P.5,10", "-m", "num_ret", "-m", "runid"]) == 0
    lines = capsys.readouterr().out.splitlines()
    want = _pytrec(run, qrels)
    assert lines[0].split("\t") == ["runid".ljust(22), "all", "bm25.trec"]
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(r) == 3 and len(r[0]) == 22 for r in rows)
    per_query = [r for r in rows if r[1] != "all"]
    assert len(per_query) == 3 * len(want)
    for name, qid, value in per_query:
        assert float(value) == pytest.approx(want[qid][name.strip()], abs=5e-5)
    summary = {r[0].strip(): r[2] for r in rows if r[1] == "all"}
    assert summary["num_ret"] == str(sum(int(v["num_ret"]) for v in want.values()))  # counts as integers
    assert summary["P_5"] == f"{np.mean([v['P_5'] for v in want.values()]):.4f}"


def test_default_measures_are_official(cran_files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = cran_files
    assert main(["eval", str(run), "--qrels", str(qrels)]) == 0
    names = [line.split("\t")[0].strip() for line in capsys.readouterr().out.splitlines()]
    assert names[:7] == ["runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map"]
    assert names[-9:] == [f"P_{k}" for k in (5, 10, 15, 20, 30, 100, 200, 500, 1000)] and len(names) == 30


def test_qrels_by_dataset_name_and_several_runs(cran_files: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = cran_files
    by_file = _json(capsys, str(run), "--qrels", str(qrels), "-m", "ndcg_cut.10", "-m", "nDCG@10")
    by_name = _json(capsys, str(run), "--qrels", "cranfield", "-m", "ndcg_cut.10", "-m", "nDCG@10")
    assert by_file == by_name
    assert by_name["runs"][0]["summary"]["ndcg_cut_10"] == pytest.approx(0.3730, abs=5e-5)
    other = tmp_path / "sub" / "bm25.trec"  # same file name in another folder: runs are named by their paths
    other.parent.mkdir()
    write_run(read_run(run).assign(score=lambda f: -f["score"]), other)
    both = _json(capsys, str(run), str(other), "--qrels", "cranfield", "-m", "P.5")
    assert [r["run"] for r in both["runs"]] == [str(run), str(other)]
    assert main(["compare", str(run), str(other), "--qrels", "cranfield", "--metrics", "P@5", "--format", "csv"]) == 0
    table = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert table["run"].tolist() == [str(run), str(other)]
    assert table["mean"].iloc[0] == pytest.approx(both["runs"][0]["summary"]["P_5"])


def test_formats_and_output_file(cran_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                 ) -> None:
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py (test extra) not installed")
    run, qrels = cran_files
    base = [str(run), "--qrels", str(qrels), "-m", "map", "-m", "P.5", "-q"]
    want = _pytrec(run, qrels)
    assert main(["eval", *base, "--format", "csv", "-o", str(tmp_path / "out" / "eval.csv")]) == 0
    assert capsys.readouterr().out == ""
    table = pd.read_csv(tmp_path / "out" / "eval.csv", dtype={"qid": str}, keep_default_na=False)
    assert list(table.columns) == ["run", "qid", "map", "P_5"] and len(table) == len(want) + 1
    for row in table.itertuples(index=False):
        if row.qid:
            assert row.map == want[row.qid]["map"] and row.P_5 == want[row.qid]["P_5"]  # full precision
        else:
            assert row.map == pytest.approx(np.mean([v["map"] for v in want.values()]), rel=1e-12)
    assert main(["eval", *base, "--format", "markdown"]) == 0
    md = markdown_it.MarkdownIt("commonmark").enable("table").parse(capsys.readouterr().out)
    assert sum(t.type == "tr_open" for t in md) == 1 + len(want) + 1
    assert main(["eval", *base, "--format", "latex", "--digits", "3"]) == 0
    latex = capsys.readouterr().out
    assert latex.count(r"\\") == 1 + len(want) + 1 and r"\toprule" in latex and "bm25.trec & all & " in latex


def test_dataset_form_unchanged_and_ambiguous_input_refused(cran_files: tuple[Path, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    run, qrels = cran_files
    assert main(["eval", "cranfield", "--metrics", "ndcg@10,recall@100", "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "run                  ndcg@10    recall@100", "cranfield/bm25        0.3730        0.7381"]
    cases = [
        (["eval", str(run)], "is a file: to evaluate it as a run give --qrels"),
        (["eval", "cranfield", "--qrels", str(qrels)], "run file 'cranfield' does not exist (a dataset?"),
        (["eval", str(run), "--qrels", str(qrels), "--pipeline", "bm25"], "--pipeline belongs to the dataset form"),
        (["eval", str(run), "--qrels", str(tmp_path / "none.txt")], "neither a qrels file nor a dataset"),
        (["eval", str(run), str(run), "--qrels", str(qrels)], "is given twice"),
        (["eval", "cranfield", "scifact"], "without --qrels, eval takes one dataset"),
        (["eval", str(run), "--qrels", str(qrels), "-m", "P.x"], "P takes cutoffs"),
        (["eval", str(run), "--qrels", str(qrels), "-m", "relstring"], "not computed"),
        (["eval", str(run), "--qrels", str(qrels), "-m", "map", "--metrics", "map"], "not both"),
        (["eval", str(run), "--qrels", str(qrels), "-l", "0"], "-l LEVEL must be"),
    ]
    for argv, message in cases:
        assert main(argv) == 1, argv
        assert message in capsys.readouterr().err, argv
    # the dataset form takes the report options too
    got = _json(capsys, "cranfield", "-m", "ndcg_cut.10", "--quiet")
    assert got["runs"][0]["run"] == "cranfield/bm25"
    assert got["runs"][0]["summary"]["ndcg_cut_10"] == pytest.approx(0.3730, abs=5e-5)


def test_eval_cli_imports_no_heavy_package() -> None:
    """What ``kolm-search eval`` imports before it reads a file: no model, plotting, learning or
    statistics package (their import would be most of a small evaluation's time)."""
    code = ("import sys, kolm_search.cli, kolm_search.cli.evaluate;"
            "print([m for m in ('torch', 'sklearn', 'matplotlib', 'scipy.stats', 'numba', 'transformers',"
            "'sentence_transformers', 'ir_measures', 'pytrec_eval', 'statsmodels') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_interrupt_while_runs_are_read_does_not_wait_for_the_qrels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The qrels are read on a thread beside the runs: Ctrl-C during the runs' read ends the
    command at once (the qrels' thread, a daemon, still blocked), and bad qrels with a bad run
    name the qrels first."""
    import threading

    from kolm_search.cli import evaluate as cli_eval
    from kolm_search.errors import KolmValueError

    release = threading.Event()
    monkeypatch.setattr(cli_eval, "load_qrels_arg", lambda *a: release.wait(60))

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("kolm_search.io.read_run", interrupted)
    (tmp_path / "r.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    with pytest.raises(KeyboardInterrupt):
        main(["eval", str(tmp_path / "r.trec"), "--qrels", "x.txt", "--quiet"])
    assert not release.is_set()  # returned while the qrels' read was still waiting
    release.set()

    def bad_qrels(*args: Any) -> Any:
        raise KolmValueError("qrels x.txt: line 3 is bad")

    def bad_run(*args: Any, **kwargs: Any) -> Any:
        raise KolmValueError("run r.trec: line 1 is bad")

    monkeypatch.setattr(cli_eval, "load_qrels_arg", bad_qrels)
    monkeypatch.setattr("kolm_search.io.read_run", bad_run)
    assert main(["eval", str(tmp_path / "r.trec"), "--qrels", "x.txt", "--quiet"]) != 0
    assert "qrels x.txt: line 3 is bad" in capsys.readouterr().err
