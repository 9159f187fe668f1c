"""The quickstart notebook runs end to end (nbclient), on Cranfield."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "01_quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_executes(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Run in a fresh folder holding what an earlier run of the notebook would have left:
    Cranfield's vectors in ``cache/embeddings.sqlite`` (the session's store, embedded for real
    once per test session; the queries are embedded here)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib", reason="extra 'plot' not installed")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        store = request.getfixturevalue("cranfield_store")("auto")
    except ImportError:  # no model installed: the notebook falls back to LSA
        pass
    else:
        (tmp_path / "cache").mkdir()
        shutil.copy(store, tmp_path / "cache" / "embeddings.sqlite")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("ndcg@10" in str(o) for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the plot is shown inline
