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
