"""The command line's surface: every option documented, --version, defaults shown."""

from __future__ import annotations

import argparse

import pytest

from kolm_search import __version__
from kolm_search.cli import build_parser, main


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_option_has_help_text() -> None:
    subs = _subparsers()
    assert set(subs) == {"eval", "fuse", "compare", "rerank", "download"}
    for name, parser in subs.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


def test_version_and_rerank_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"kolm-search {__version__}"
    text = _subparsers()["rerank"].format_help()
    for default in ("(default: mmr)", "(default: auto)", "(default: 100)", "(default: 0.7)"):
        assert default in " ".join(text.split()), default


def test_misspelt_dataset_path_says_it_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "./no/such/folder", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "does not exist" in err and "scifact" not in err
