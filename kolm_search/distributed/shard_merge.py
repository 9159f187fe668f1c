"""The exact merge of shards' top-k into the collection's top-k, and the run it makes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

__all__ = ["merge_parts", "merge_topk", "to_run"]


def merge_topk(parts: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]],
               offsets: Sequence[int], k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Merge per-shard top-k results into the global top-k.

    Each part is ``(docs (m, k_s), scores (m, k_s), counts (m,))`` with shard-local codes; a
    shard's codes are shifted by its offset. Order: score descending, ties by global code, so
    the merge equals the unsharded top-k exactly when shards are contiguous code ranges.
    """
    docs, scores, counts, _ = merge_parts([(*p, None) for p in parts], offsets, k)
    return docs, scores, counts


def merge_parts(parts: Sequence[tuple[Any, Any, Any, Any]], offsets: Sequence[int], k: int,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64], Any]:
    """:func:`merge_topk` of parts that may carry the ids of their documents (object (m, k_s),
    else None): ``(docs, scores, counts, ids or None)``, ``docs`` -1 and ``scores`` 0 past ``counts``."""
    m = parts[0][0].shape[0] if parts else 0
    valid = [np.arange(p[0].shape[1])[None, :] < np.asarray(p[2])[:, None] for p in parts]
    big = np.iinfo(np.int64).max
    codes = np.concatenate([np.where(v, p[0] + off, big) for p, v, off in zip(parts, valid, offsets, strict=True)]
                           + [np.zeros((m, 0), np.int64)], axis=1)
    keys = np.concatenate([np.where(v, -p[1].astype(np.float64), np.inf) for p, v in zip(parts, valid, strict=True)]
                          + [np.zeros((m, 0))], axis=1)
    order = np.lexsort((codes, keys), axis=-1)[:, :k]
    counts = np.minimum(sum((np.asarray(p[2], np.int64) for p in parts), np.zeros(m, np.int64)), k)
    keep = np.arange(order.shape[1])[None, :] < counts[:, None]
    out_d = np.full((m, k), -1, np.int64)
    out_s = np.zeros((m, k), np.float32)
    width = order.shape[1]
    out_d[:, :width] = np.where(keep, np.take_along_axis(codes, order, axis=1), -1)
    out_s[:, :width] = np.where(keep, -np.take_along_axis(keys, order, axis=1), 0).astype(np.float32)
    ids = None
    if parts and all(p[3] is not None for p in parts):
        ids = np.full((m, k), None, dtype=object)
        picked = np.take_along_axis(np.concatenate([p[3] for p in parts], axis=1), order, axis=1)
        ids[:, :width][keep] = picked[keep]
    return out_d, out_s, counts, ids


def to_run(qids: Sequence[Any], ids: npt.NDArray[np.object_], scores: npt.NDArray[np.float32],
            counts: npt.NDArray[np.int64]) -> pd.DataFrame:
    keep = np.arange(ids.shape[1])[None, :] < counts[:, None]
    return pd.DataFrame({"qid": np.repeat(np.asarray(qids, dtype=object), counts), "doc_id": ids[keep],
                         "rank": (np.cumsum(keep, axis=1) - 1)[keep].astype(np.int64),
                         "score": scores[keep].astype(np.float64)})
