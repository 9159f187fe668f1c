"""Corpus-sharded retrieval: shards live on workers, an exact merge gives the global top-k."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._extras import require
from kolm_search._params import one_of, positive_int
from kolm_search.distributed.query_parallel import _gather
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.bm25 import query_offsets
from kolm_search.retrievers.postings import CollectionStats

__all__ = ["ShardedBM25", "ShardedDense", "merge_topk"]


def merge_topk(parts: Sequence[tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]],
               offsets: Sequence[int], k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Merge per-shard top-k results into the global top-k.

    Each part is ``(docs (m, k_s), scores (m, k_s), counts (m,))`` with shard-local codes; a
    shard's codes are shifted by its offset. Order: score descending, ties by global code, so
    the merge equals the unsharded top-k exactly when shards are contiguous code ranges.
    """
    m = parts[0][0].shape[0]
    out_d = np.full((m, k), -1, np.int64)
    out_s = np.zeros((m, k), np.float32)
    counts = np.zeros(m, np.int64)
    for q in range(m):
        d = np.concatenate([p[0][q, : p[2][q]] + off for p, off in zip(parts, offsets, strict=True)])
        s = np.concatenate([p[1][q, : p[2][q]] for p in parts])
        order = np.lexsort((d, -s.astype(np.float64)))[:k]
        counts[q] = order.size
        out_d[q, : order.size] = d[order]
        out_s[q, : order.size] = s[order]
    return out_d, out_s, counts


def _to_run(table_ids: npt.NDArray[np.object_], qids: Sequence[Any], docs: npt.NDArray[np.int64],
            scores: npt.NDArray[np.float32], counts: npt.NDArray[np.int64]) -> pd.DataFrame:
    keep = np.arange(docs.shape[1])[None, :] < counts[:, None]
    return pd.DataFrame({"qid": np.repeat(np.asarray(qids, dtype=object), counts), "doc_id": table_ids[docs[keep]],
                         "rank": (np.cumsum(keep, axis=1) - 1)[keep].astype(np.int64),
                         "score": scores[keep].astype(np.float64)})


def _bounds(n: int, n_shards: int) -> npt.NDArray[np.int64]:
    return np.linspace(0, n, positive_int("n_shards", n_shards) + 1).astype(np.int64)


def _count_shard(frame: pd.DataFrame, kwargs: dict[str, Any]) -> tuple[DocumentTable, Any]:
    """Tokenise and count a shard once, where it lives (phase 1 of the build)."""
    from kolm_search.engine.text import Tokenizer
    from kolm_search.retrievers.postings import Postings

    tok = kwargs.get("tokenizer") or Tokenizer()
    table = DocumentTable.from_frame(frame)
    texts = table.texts(tuple(kwargs.get("fields", ("title", "content"))))
    return table, Postings.from_tokens(tok(t) for t in texts)


def _shard_stats(counted: tuple[DocumentTable, Any]) -> Any:
    return counted[1].stats()


def _build_bm25_shard(counted: tuple[DocumentTable, Any], stats: Any, kwargs: dict[str, Any]) -> Any:
    """Weight a counted shard with the collection-wide statistics (phase 2)."""
    from kolm_search.retrievers.bm25 import BM25Retriever

    table, postings = counted
    return BM25Retriever(table, stats=stats, postings=postings, **kwargs)


def _shard_size(shard: Any) -> int:
    return len(shard.table)


def _score_shard(shard: Any, texts: list[str], k: int, offsets: Any) -> Any:
    return shard.score_texts(texts, k, offsets=offsets)


class ShardedBM25:
    """BM25 over a corpus split into ``n_shards`` contiguous shards, each held by a worker.

    Statistics are gathered from every shard first (document frequencies, size, mean length)
    and each shard is built with the collection-wide values, so scores equal the unsharded
    index's and the merged top-k equals its top-k.

    Parameters
    ----------
    documents : DataFrame ``id, content[, title]`` (or DocumentTable)
    n_shards : int
    dask_client : distributed.Client
    **bm25_kwargs
        Passed to :class:`~kolm_search.retrievers.bm25.BM25Retriever`.
    """

    def __init__(self, documents: Any, n_shards: int, *, dask_client: Any, **bm25_kwargs: Any) -> None:
        require("distributed", "dask")
        frame = documents.frame if isinstance(documents, DocumentTable) else DocumentTable.from_frame(documents).frame
        self.ids = frame["id"].to_numpy(dtype=object)
        self.bounds = _bounds(len(frame), n_shards)
        self.dask_client = dask_client
        from kolm_search.engine.text import Tokenizer

        self.tokenizer = bm25_kwargs.get("tokenizer") or Tokenizer()
        self.method = bm25_kwargs.get("method", "lucene")
        self.k1 = float(bm25_kwargs.get("k1", 1.5))
        self.delta = float(bm25_kwargs.get("delta", 0.5))
        workers = list(dask_client.scheduler_info()["workers"])
        pieces = [frame.iloc[a:b].reset_index(drop=True) for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]
        self.workers = [workers[i % len(workers)] for i in range(len(pieces))]
        frames = [dask_client.scatter(p, workers=[w], hash=False) for p, w in zip(pieces, self.workers, strict=True)]
        del pieces
        counted = [dask_client.submit(_count_shard, f, dict(bm25_kwargs), workers=[w], pure=False)
                   for f, w in zip(frames, self.workers, strict=True)]
        del frames  # the counted shard holds its own table
        stats_f = [dask_client.submit(_shard_stats, c, workers=[w], pure=False) for c, w in zip(counted, self.workers, strict=True)]
        self.stats = CollectionStats.merge(_gather(dask_client, stats_f, "shard statistics"))
        self.shards = [dask_client.submit(_build_bm25_shard, c, self.stats, dict(bm25_kwargs), workers=[w], pure=False)
                       for c, w in zip(counted, self.workers, strict=True)]
        self.shard_sizes = _gather(dask_client, [dask_client.submit(_shard_size, s, pure=False) for s in self.shards],
                                   "shard build")
        del counted, stats_f  # released on the workers: only the weighted shards stay

    def search(self, queries: pd.DataFrame | Sequence[str], k: int = 100) -> pd.DataFrame:
        """Global top-``k`` of every query as a run DataFrame ``qid, doc_id, rank, score``."""
        frame = queries if isinstance(queries, pd.DataFrame) else pd.DataFrame({"qid": np.arange(len(queries)), "query": list(queries)})
        texts = list(frame["query"])
        offsets = query_offsets(self.stats, texts, self.tokenizer, self.method, self.k1, self.delta)
        futures = [self.dask_client.submit(_score_shard, s, texts, k, offsets, workers=[w], pure=False)
                   for s, w in zip(self.shards, self.workers, strict=True)]
        parts = _gather(self.dask_client, futures, "shard")
        docs, scores, counts = merge_topk(parts, list(self.bounds[:-1]), k)
        return _to_run(self.ids, list(frame["qid"]), docs, scores, counts)


def _dense_shard(emb: npt.NDArray[np.float32], metric: str) -> npt.NDArray[np.float32]:
    if metric == "cosine":
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return np.ascontiguousarray(emb / np.where(norms > 0, norms, 1.0), dtype=np.float32)
    return np.ascontiguousarray(emb, dtype=np.float32)


def _search_dense_shard(emb: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32], k: int) -> Any:
    from kolm_search.retrievers.dense import exact_topk

    return exact_topk(vectors, emb, k)


class ShardedDense:
    """Exact dense retrieval over document embeddings split into shards held by workers.

    Parameters
    ----------
    ids : sequence of str
        Document ids, row-aligned with ``embeddings``.
    embeddings : float32 (n_docs, d)
    n_shards : int
    dask_client : distributed.Client
    metric : {"cosine", "ip"}
    """

    def __init__(self, ids: Sequence[str], embeddings: npt.ArrayLike, n_shards: int, *, dask_client: Any,
                 metric: str = "cosine") -> None:
        require("distributed", "dask")
        emb = np.asarray(embeddings, dtype=np.float32)
        if emb.ndim != 2 or emb.shape[0] != len(ids):
            raise KolmValueError(f"embeddings must have shape ({len(ids)}, d), got {emb.shape}")
        one_of("metric", metric, ("cosine", "ip"))
        self.ids = np.asarray(list(ids), dtype=object)
        self.metric = metric
        self.bounds = _bounds(len(ids), n_shards)
        self.dask_client = dask_client
        workers = list(dask_client.scheduler_info()["workers"])
        self.workers = [workers[i % len(workers)] for i in range(n_shards)]
        raw = [dask_client.scatter(emb[a:b], workers=[w], hash=False) for a, b, w in zip(self.bounds[:-1], self.bounds[1:], self.workers, strict=True)]
        self.shards = [dask_client.submit(_dense_shard, r, metric, workers=[w], pure=False) for r, w in zip(raw, self.workers, strict=True)]
        _gather(dask_client, self.shards, "shard build")

    def search(self, qids: Sequence[Any], vectors: npt.ArrayLike, k: int = 100) -> pd.DataFrame:
        """Global top-``k`` of each query vector as a run DataFrame."""
        q = np.asarray(vectors, dtype=np.float32)
        if self.metric == "cosine":
            norms = np.linalg.norm(q, axis=1, keepdims=True)
            q = (q / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        q_f = self.dask_client.scatter(q, broadcast=True, hash=False)
        futures = [self.dask_client.submit(_search_dense_shard, s, q_f, k, workers=[w], pure=False)
                   for s, w in zip(self.shards, self.workers, strict=True)]
        parts = _gather(self.dask_client, futures, "shard")
        docs, scores, counts = merge_topk(parts, list(self.bounds[:-1]), k)
        return _to_run(self.ids, list(qids), docs, scores, counts)
