"""Hostile probes of a quick load's postings gate (:mod:`kolm_search.retrievers.postings_gate`):
a damaged index, its manifest resealed, loaded quickly, must fail with ``KolmValueError``
naming the file and position through every public path that reads the damage, never answer
as if the damage were not there."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kolm_search import BM25Retriever, KolmValueError
from tests.conftest import synthetic_corpus
from tests.reliability.indexes import file_of, reseal


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("probes") / "i"
    texts = synthetic_corpus(400, 60, seed=5)
    BM25Retriever([{"id": f"d{i}", "content": t} for i, t in enumerate(texts)], method="bm25+").save(root)
    return root


def _copy(saved: Path, tmp_path: Path) -> tuple[Path, BM25Retriever]:
    d = tmp_path / "bad"
    shutil.copytree(saved, d)
    return d, BM25Retriever.load(saved, verify="full")


@pytest.mark.parametrize("verify", ["full", "quick"])
def test_a_wide_document_row_that_an_int32_cast_would_wrap_into_range_is_refused(saved: Path, tmp_path: Path,
                                                                                 verify: str) -> None:
    """Rows saved as int64 (any integer dtype loads): row ``2**32 + r`` must not become row ``r``."""
    d, ref = _copy(saved, tmp_path)
    t = ref._vocab_index["w1"]
    pos = int(ref.t_ptr[t]) + 1
    path = file_of(d, "t_docs")
    a = np.load(path).astype(np.int64)
    a[pos] += 2**32  # wraps to the row it was: the int32 postings would look sound
    np.save(path, a)
    reseal(d)
    with pytest.raises(KolmValueError, match=rf"t_docs\.[0-9a-f]{{32}}\.npy: document row {a[pos]} at position {pos}"):
        ret = BM25Retriever.load(d, verify=verify)  # type: ignore[arg-type]
        ret.score_texts(["w1"], 10)
