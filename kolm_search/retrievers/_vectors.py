"""Embedding helpers shared by the dense retriever and its incremental segments: a corpus
embedded in batches, and rows scaled to unit length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import inline, run_sync
from kolm_search.contract.port_calls import embed_all
from kolm_search.contract.ports import Embedder

__all__ = ["embed_texts", "normalise_rows"]


def normalise_rows(mat: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit L2 norm (zero rows stay zero), float32 (n, d).

    Each row is first divided by its largest magnitude, so squares neither overflow (rows
    beyond 1e19) nor underflow (rows below 1e-19): every non-zero row comes out unit.
    """
    mat = np.asarray(mat, dtype=np.float32)
    if mat.size == 0:
        return mat.copy()
    scale = np.max(np.abs(mat), axis=1, keepdims=True)
    out = mat / np.where(scale > 0, scale, np.float32(1))
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.where(norms > 0, norms, np.float32(1))).astype(np.float32, copy=False)


async def _embed_async(embedder: Any, texts: list[str], batch_size: int) -> npt.NDArray[np.float32]:
    rows = [await embed_all(embedder, texts[i:i + batch_size], call=inline) for i in range(0, len(texts), batch_size)]
    return np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)


def embed_texts(embedder: Embedder, texts: Sequence[str], *, batch_size: int = 4096) -> npt.NDArray[np.float32]:
    """Embed ``texts`` in batches (``embed_many`` when available) as float32 (n, d), checked
    (a ``KolmValueError`` naming the count, shape or non-finite values)."""
    return run_sync(_embed_async(embedder, list(texts), batch_size))
