"""The quickstart notebook runs end to end the way its first cell says (``jupyter nbconvert
--execute``, extra ``notebook``), on Cranfield, from ``notebooks/``: it uses the repository's
``cache/`` (the README's), prints no warning about missing widgets, and shows its plot."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_executes_with_the_notebook_extra(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A copy of the repository's layout: ``notebooks/01_quickstart.ipynb`` and ``cache/`` holding
    what the README's blocks would have left there (Cranfield's vectors, embedded for real once
    per test session)."""
    for module in ("nbconvert", "ipykernel", "ipywidgets", "matplotlib"):
        pytest.importorskip(module, reason="extra 'notebook' not installed")
    (tmp_path / "notebooks").mkdir()
    shutil.copy(NOTEBOOK, tmp_path / "notebooks" / NOTEBOOK.name)
    try:
        store = request.getfixturevalue("cranfield_store")("auto")
    except ImportError:  # no model installed: the notebook falls back to LSA
        store = None
    else:
        (tmp_path / "cache").mkdir()
        shutil.copy(store, tmp_path / "cache" / "embeddings.sqlite")
    out = subprocess.run([sys.executable, "-m", "nbconvert", "--to", "notebook", "--execute", "--output", "ran.ipynb",
                          "--ExecutePreprocessor.timeout=600", str(tmp_path / "notebooks" / NOTEBOOK.name)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    nb = json.loads((tmp_path / "notebooks" / "ran.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = json.dumps(outputs)
    assert "ndcg@10" in text and "IProgress" not in text and "TqdmWarning" not in out.stderr
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot is shown inline
    assert not (tmp_path / "notebooks" / "cache").exists()  # the repository's cache/, not one beside the notebook
    if store is not None:
        assert (tmp_path / "cache" / "embeddings.sqlite").stat().st_size >= store.stat().st_size
