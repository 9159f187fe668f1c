"""Shared fixtures: the Cranfield collection (read in place from ../shared/data) and corpora."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
CRANFIELD = Path(os.environ.get("KOLM_CRANFIELD", ROOT.parent / "shared" / "data" / "cranfield"))


def _need_cranfield() -> Path:
    if not (CRANFIELD / "corpus.jsonl").exists():
        pytest.skip(f"Cranfield collection not found at {CRANFIELD} (set KOLM_CRANFIELD to its folder)")
    return CRANFIELD


@pytest.fixture(scope="session")
def cranfield_dir() -> Path:
    return _need_cranfield()


@pytest.fixture(scope="session")
def cranfield(cranfield_dir: Path) -> dict[str, pd.DataFrame]:
    """corpus (id, title, content), queries (qid, query), qrels (qid, doc_id, relevance)."""
    docs = [json.loads(line) for line in (cranfield_dir / "corpus.jsonl").read_text().splitlines() if line]
    queries = [json.loads(line) for line in (cranfield_dir / "queries.jsonl").read_text().splitlines() if line]
    qrels = pd.read_csv(cranfield_dir / "qrels" / "test.tsv", sep="\t", dtype={"query-id": str, "corpus-id": str})
    return {
        "corpus": pd.DataFrame({"id": [d["_id"] for d in docs], "title": [d.get("title") or None for d in docs],
                                "content": [d["text"] for d in docs]}),
        "queries": pd.DataFrame({"qid": [q["_id"] for q in queries], "query": [q["text"] for q in queries]}),
        "qrels": qrels.rename(columns={"query-id": "qid", "corpus-id": "doc_id", "score": "relevance"}),
    }


def synthetic_corpus(n_docs: int, vocab: int, seed: int, max_len: int = 40) -> list[str]:
    """Zipf-ish random documents of tokens ``w0..w{vocab-1}``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    p /= p.sum()
    return [" ".join(f"w{t}" for t in rng.choice(vocab, size=int(rng.integers(1, max_len)), p=p)) for _ in range(n_docs)]
