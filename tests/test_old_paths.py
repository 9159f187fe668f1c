"""The documented paths of modules that moved into packages (README, "Layout") still import,
as the very module objects of their new paths, in a fresh interpreter and in this one."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kolm_search

#: old ``kolm_search.<name>`` -> where the module lives now
OLD_PATHS = {
    "doctable": "engine.doctable",
    "filters": "engine.filters",
    "ids": "engine.ids",
    "interop": "engine.interop",
    "ports": "contract.ports",
    "presets": "recipes.presets",
    "rerank": "jobs.rerank",
    "runs": "engine.runs",
    "selection": "engine.selection",
    "stages": "contract.stages",
}


def test_the_table_is_the_packages() -> None:
    assert {old: m.__name__ for old, m in kolm_search._OLD_PATHS.items()} == {
        old: f"kolm_search.{new}" for old, new in OLD_PATHS.items()}


@pytest.mark.parametrize(("old", "new"), sorted(OLD_PATHS.items()))
def test_an_old_path_is_the_same_module(old: str, new: str) -> None:
    module = importlib.import_module(f"kolm_search.{new}")
    assert importlib.import_module(f"kolm_search.{old}") is module
    assert getattr(kolm_search, old) is module
    for name in module.__all__:  # from kolm_search.<old> import <name>
        assert getattr(sys.modules[f"kolm_search.{old}"], name) is getattr(module, name)


def test_old_paths_in_a_fresh_interpreter() -> None:
    """``import kolm_search.ports`` first thing (no ``import kolm_search`` before it), as a user's
    script would, and ``from ... import``: the same objects as the new paths."""
    lines = [f"import kolm_search.{old} as o{i}; import kolm_search.{new} as n{i}; assert o{i} is n{i}"
             for i, (old, new) in enumerate(sorted(OLD_PATHS.items()))]
    code = "\n".join(["from kolm_search.ports import Updatable", "from kolm_search.rerank import rerank_run",
                      "from kolm_search.presets import bm25", *lines,
                      "import kolm_search.contract.ports as p, kolm_search.jobs.rerank as r",
                      "assert Updatable is p.Updatable and rerank_run is r.rerank_run"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_moved_module_the_readme_names_by_its_old_path_is_kept() -> None:
    """Nothing the README or the notebook still names at the root is missing from the table."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "README.md").read_text(encoding="utf-8") + (root / "notebooks" / "01_quickstart.ipynb").read_text(
        encoding="utf-8")
    named = set(re.findall(r"(?<![\w.])kolm_search\.([a-z_]+)", text))
    at_root = {p.stem for p in Path(kolm_search.__file__).parent.glob("*.py")}
    packages = {p.parent.name for p in Path(kolm_search.__file__).parent.glob("*/__init__.py")}
    assert named - at_root - packages <= set(OLD_PATHS), sorted(named - at_root - packages - set(OLD_PATHS))
