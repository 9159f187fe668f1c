"""What a newcomer tripped on (issue 30, part 5): clean --help texts, download --list, progress
bars that can be silenced, qrels lines for queries a dataset does not have reported."""

from __future__ import annotations

import argparse
import json
import re
import warnings
from pathlib import Path

import pytest

from kolm_search import BM25Retriever
from kolm_search.cli import build_parser, main
from kolm_search.io import load_dataset, packaged_datasets


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_help_shows_each_default_once_and_never_none() -> None:
    for name, parser in _subparsers().items():
        text = " ".join(parser.format_help().split())
        assert "(default: None)" not in text and "(default: False)" not in text, name
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            shown = parser._get_formatter()._expand_help(action) if action.help else ""
            assert len(re.findall(r"\bdefault\b", shown, flags=re.I)) <= 1, (name, action.dest, shown)
            if action.required:
                assert "default" not in shown.lower(), (name, action.dest)
    fuse = " ".join(_subparsers()["fuse"].format_help().split())
    assert "(default: all) (default" not in fuse and "the fused run (TREC text, .gz or parquet)" in fuse


def test_download_list(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "beir" / "scifact").mkdir(parents=True)  # as download_beir leaves it
    assert main(["download", "--list", "--cache-dir", str(tmp_path)]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines()[1:])
    assert lines["cranfield"].startswith("packaged") and lines["scifact"] == "in the cache"
    assert lines["arguana"] == "downloadable" and len(lines) > 10
    assert main(["download"]) == 2 and "--list" in capsys.readouterr().err


def test_index_build_progress_can_be_shown_and_silenced(capsys: pytest.CaptureFixture[str]) -> None:
    docs = [{"id": str(i), "content": f"word{i % 97} common text {i}"} for i in range(2000)]
    BM25Retriever(docs, progress=True, n_jobs=1)
    assert "indexing" in capsys.readouterr().err
    BM25Retriever(docs, n_jobs=1)  # small: silent by default
    BM25Retriever(docs, progress=False, n_jobs=1)
    assert capsys.readouterr().err == ""


def test_qrels_of_unknown_queries_are_reported(tmp_path: Path) -> None:
    import gzip
    import shutil

    root = tmp_path / "mini"
    shutil.copytree(packaged_datasets()["cranfield"], root)
    qrels = next((root / "qrels").glob("test.tsv*"))
    opener = gzip.open if qrels.suffix == ".gz" else open
    with opener(qrels, "rt") as fh:
        text = fh.read()
    with opener(qrels, "wt") as fh:
        fh.write(text.rstrip("\n") + "\nnot-a-query\t1\t1\nnot-a-query\t2\t1\nalso-missing\t3\t2\n")
    with pytest.warns(UserWarning, match=r"3 judgement\(s\) of 2 queries .*'not-a-query', 'also-missing'") as record:
        ds = load_dataset(root)
    assert str(root) in str(record[0].message) and len(ds.qrels) == 1612 + 3  # reported, kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset("cranfield")  # a clean dataset says nothing


def test_notebook_extra_and_test_commands_are_documented() -> None:
    root = Path(__file__).resolve().parents[1]
    toml = (root / "pyproject.toml").read_text()
    extra = re.search(r"^notebook = \[(.*?)\]", toml, flags=re.M | re.S)
    assert extra and all(p in extra.group(1) for p in ("nbconvert", "ipykernel", "ipywidgets"))
    readme = (root / "README.md").read_text()
    assert "python -m pytest -q -m \"not slow\"" in readme and re.search(r"about \d+ min", readme)
    nb = json.loads((root / "notebooks" / "01_quickstart.ipynb").read_text())
    source = "".join("".join(c["source"]) for c in nb["cells"])
    assert 'Path("..", "cache")' in source and "nbconvert --to notebook --execute" in source
