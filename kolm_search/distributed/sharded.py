"""Corpus-sharded retrieval: shards live on workers, an exact merge gives the global top-k.

A sharded index is built from a corpus in memory (the constructors: the client ships each
shard its documents) or by the workers from the corpus files (:meth:`ShardedBM25.build`,
:meth:`ShardedDense.build`: :mod:`.shard_build`, no document passes through the client), saved
as a folder and loaded again (:meth:`~ShardedBM25.load`: :mod:`.sharded_store`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._extras import require
from kolm_search._params import one_of, positive_int
from kolm_search.distributed import shard_kinds as kinds
from kolm_search.distributed._wait import Deadline, cluster_workers, results
from kolm_search.distributed.shard_build import build_shards
from kolm_search.distributed.shard_merge import merge_parts, to_run
from kolm_search.distributed.sharded_store import ShardedManifest, open_sharded
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.bm25 import query_offsets
from kolm_search.retrievers.postings import CollectionStats

__all__ = ["ShardedBM25", "ShardedDense"]

_BUILD_SECONDS = 14_400.0  # a build's default deadline
_SEARCH_SECONDS = 600.0  # a search's or a load's


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


def _load(cls: Any, path: str | Path, dask_client: Any, kind: str, timeout: float, loader: Any,
          *args: Any) -> tuple[Any, ShardedManifest]:
    """A sharded index of ``cls`` whose shards are loaded on the workers (checked there)."""
    require("distributed", "dask")
    deadline = Deadline(timeout, f"loading the sharded index {path}")
    manifest = open_sharded(Path(path).expanduser(), kind)
    self = cls.__new__(cls)
    self.dask_client, self.path = dask_client, manifest.root
    workers = cluster_workers(dask_client, deadline)
    self.workers = [workers[i % len(workers)] for i in range(len(manifest.shards))]
    self.bounds = manifest.offsets
    self.shards = [dask_client.submit(loader, str(manifest.root), e, i, manifest.config, *args, workers=[w],
                                      allow_other_workers=True, pure=False)
                   for i, (e, w) in enumerate(zip(manifest.shards, self.workers, strict=True))]
    self.shard_sizes = results([dask_client.submit(_shard_size, s, pure=False) for s in self.shards],
                               [f"shard {i} (load)" for i in range(len(self.shards))], deadline)
    return self, manifest


class ShardedBM25:
    """BM25 over a corpus split into ``n_shards`` contiguous shards, each held by a worker.

    Statistics are gathered from every shard first (document frequencies, size, mean length)
    and each shard is built with the collection-wide values, so scores equal the unsharded
    index's and the merged top-k equals its top-k (ties by corpus order).

    Parameters
    ----------
    documents : DataFrame ``id, content[, title]`` (or DocumentTable)
        Shipped from the client to the workers; for a corpus in files use :meth:`build`.
    n_shards : int
    dask_client : distributed.Client
    **bm25_kwargs
        Passed to :class:`~kolm_search.retrievers.bm25.BM25Retriever`.
    """

    def __init__(self, documents: Any, n_shards: int, *, dask_client: Any, **bm25_kwargs: Any) -> None:
        require("distributed", "dask")
        frame = documents.frame if isinstance(documents, DocumentTable) else DocumentTable.from_frame(documents).frame
        self.bounds = _bounds(len(frame), n_shards)
        self.dask_client, self.path = dask_client, None
        self._configure(bm25_kwargs)
        deadline = Deadline(_BUILD_SECONDS, "the sharded build")
        workers = cluster_workers(dask_client, deadline)
        pieces = [frame.iloc[a:b].reset_index(drop=True) for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]
        self.workers = [workers[i % len(workers)] for i in range(len(pieces))]
        frames = [dask_client.scatter(p, workers=[w], hash=False, timeout=deadline.left())
                  for p, w in zip(pieces, self.workers, strict=True)]
        del pieces
        counted = [dask_client.submit(_count_shard, f, dict(bm25_kwargs), workers=[w], pure=False)
                   for f, w in zip(frames, self.workers, strict=True)]
        del frames  # the counted shard holds its own table
        stats_f = [dask_client.submit(_shard_stats, c, workers=[w], pure=False) for c, w in zip(counted, self.workers, strict=True)]
        self._stats: CollectionStats | None = CollectionStats.merge(
            results(stats_f, [f"shard statistics {i}" for i in range(len(stats_f))], deadline))
        self.shards = [dask_client.submit(_build_bm25_shard, c, self._stats, dict(bm25_kwargs), workers=[w], pure=False)
                       for c, w in zip(counted, self.workers, strict=True)]
        self.shard_sizes = results([dask_client.submit(_shard_size, s, pure=False) for s in self.shards],
                                   [f"shard build {i}" for i in range(len(self.shards))], deadline)
        del counted, stats_f  # released on the workers: only the weighted shards stay

    _manifest: ShardedManifest  # of a loaded index

    def _configure(self, kwargs: dict[str, Any]) -> None:
        from kolm_search.engine.text import Tokenizer

        self.tokenizer = kwargs.get("tokenizer") or Tokenizer()
        self.method = kwargs.get("method", "lucene")
        self.k1 = float(kwargs.get("k1", 1.5))
        self.delta = float(kwargs.get("delta", 0.5))

    @property
    def stats(self) -> CollectionStats:
        """The collection's statistics (of a loaded index: read from its folder on first use)."""
        if self._stats is None:
            from kolm_search.retrievers import _validate as check

            files, body = self._manifest.files, self._manifest.body
            vocab = check.vocabulary(files.path("vocab", "json"), files.json("vocab"))
            df = files.array("df", "int", 1, mmap=False)
            if len(df) != len(vocab):
                raise KolmValueError(f"{self.path}: df.npy holds {len(df)} values for {len(vocab)} terms")
            n, total = int(body["stats"]["n_docs"]), int(body["stats"]["total_len"])
            self._stats = CollectionStats(df=dict(zip(vocab, df.tolist(), strict=True)), n_docs=n,
                                          avgdl=float(total) / n if n else 0.0, total_len=total)
        return self._stats

    @classmethod
    def build(cls, source: Any, path: str | Path, *, n_shards: int, dask_client: Any, chunk_size: int | None = None,
              memory_limit: int | None = None, timeout: float = _BUILD_SECONDS, n_threads: int | None = None,
              pruning: Any = "auto", **bm25_kwargs: Any) -> ShardedBM25:
        """Build a sharded index from corpus files, each shard by a worker from its part of them.

        The shards' scores and the merged top-k (ties included) equal those of
        ``BM25Retriever.build(source, ...)`` on one machine. Steps, failures and recovery:
        :mod:`kolm_search.distributed.shard_build`.

        Parameters
        ----------
        source : str, Path or list of paths
            ``.jsonl[.gz]`` / ``.tsv[.gz]`` files, a BEIR folder, parquet files or folders, as
            :meth:`BM25Retriever.build` takes them; cut into ``n_shards`` parts of about equal
            bytes (:mod:`kolm_search.io.corpus_parts`).
        path : str or Path
            The sharded index's folder, on storage the client and every worker see; replaced
            all or nothing.
        n_shards : int
            One per worker is best (a parquet row group is never cut: a shard may be empty).
        dask_client : distributed.Client
        chunk_size, memory_limit
            Per shard, as :meth:`BM25Retriever.build` takes them (default limit: a quarter of
            the smallest worker's Dask memory limit).
        timeout : float
            Seconds the whole build may take (default 4 hours).
        n_threads, pruning
            Of the loaded shards (:meth:`load`).
        **bm25_kwargs
            ``method, k1, b, delta, tokenizer, fields, fusion_k`` as the constructor takes them.

        Raises
        ------
        FrameValidationError
            Bad input, naming the file and line (JSONL, TSV) or row group and row (parquet),
            as the single-machine build does; no index is written.
        DistributedError
            A shard's task failed after Dask's retries, or ``timeout`` passed; the folder keeps
            the index it held.
        """
        from kolm_search.engine.doctable import DocumentTable
        from kolm_search.retrievers.bm25 import BM25Retriever

        require("distributed", "dask")
        params: dict[str, Any] = {name: bm25_kwargs[name] for name in ("method", "k1", "b", "delta", "tokenizer", "fields", "fusion_k")
                  if name in bm25_kwargs}
        unknown = set(bm25_kwargs) - set(params)
        if unknown:
            raise KolmValueError(f"ShardedBM25.build got unknown BM25 parameter(s) {sorted(unknown)}")
        params["n_threads"] = n_threads
        probe = BM25Retriever(DocumentTable(pd.DataFrame(columns=["id", "content"])), **params, n_jobs=1, progress=False)
        probe.config()  # the parameters and the tokenizer's round trip, before any task
        limit = positive_int("memory_limit", memory_limit, none=True)
        build_shards("bm25", source, path, positive_int("n_shards", n_shards), dask_client, tokenizer=probe.tokenizer,
                     fields=probe.fields, chunk_size=positive_int("chunk_size", chunk_size, none=True),
                     memory_limit=limit, timeout=timeout,
                     write=lambda b, c, r, f: kinds.write_bm25(b, c, r, f, params=params,
                                                               limit=limit or b.memory_limit()))
        return cls.load(path, dask_client=dask_client, n_threads=n_threads, pruning=pruning)

    @classmethod
    def load(cls, path: str | Path, *, dask_client: Any, n_threads: int | None = None, pruning: Any = "auto",
             timeout: float = _SEARCH_SECONDS) -> ShardedBM25:
        """Load a sharded index built by :meth:`build`: each shard memory-mapped on a worker and
        checked against the manifest (a shard missing, damaged, replaced or of another build
        raises naming it); a shard whose worker dies is loaded again by Dask from the folder."""
        from kolm_search.retrievers import _validate as check
        from kolm_search.retrievers.bm25 import BM25_METHODS
        from kolm_search.retrievers.bounds import PRUNINGS

        one_of("pruning", pruning, PRUNINGS)
        self, manifest = _load(cls, path, dask_client, "bm25", timeout, kinds.load_bm25, n_threads, pruning)
        self._configure(check.bm25_config(manifest.root / "manifest.json", manifest.config, BM25_METHODS))
        self._stats, self._manifest = None, manifest
        return self

    def search(self, queries: pd.DataFrame | Sequence[str], k: int = 100, *,
               timeout: float = _SEARCH_SECONDS) -> pd.DataFrame:
        """Global top-``k`` of every query as a run DataFrame ``qid, doc_id, rank, score``.

        Raises
        ------
        DistributedError
            A shard's task failed after Dask's retries (a shard whose worker died is loaded
            again first), or ``timeout`` passed; nothing partial is returned.
        """
        frame = queries if isinstance(queries, pd.DataFrame) else pd.DataFrame({"qid": np.arange(len(queries)), "query": list(queries)})
        texts = list(frame["query"])
        deadline = Deadline(timeout, "the sharded search")
        offsets = (query_offsets(self.stats, texts, self.tokenizer, self.method, self.k1, self.delta)
                   if self.method in ("bm25l", "bm25+") else np.zeros(len(texts), np.float32))
        futures = [self.dask_client.submit(kinds.score_bm25, s, texts, k, offsets, i, pure=False)
                   for i, s in enumerate(self.shards)]
        parts = results(futures, [f"shard {i}" for i in range(len(futures))], deadline)
        _, scores, counts, ids = merge_parts(parts, list(self.bounds[:-1]), k)
        return to_run(list(frame["qid"]), ids, scores, counts)


def _dense_shard(emb: npt.NDArray[np.float32], metric: str) -> npt.NDArray[np.float32]:
    if metric == "cosine":
        norms = np.linalg.norm(emb, axis=1, keepdims=True)
        return np.ascontiguousarray(emb / np.where(norms > 0, norms, 1.0), dtype=np.float32)
    return np.ascontiguousarray(emb, dtype=np.float32)


def _search_dense_shard(emb: npt.NDArray[np.float32], vectors: npt.NDArray[np.float32], k: int, ids: Any) -> Any:
    from kolm_search.retrievers.dense import exact_topk

    return kinds._with_ids(lambda codes: np.asarray(ids, dtype=object)[codes], *exact_topk(vectors, emb, k))


class ShardedDense:
    """Dense retrieval over document embeddings split into shards held by workers.

    The constructor ships embeddings in memory to the workers (exact search); :meth:`build`
    has the workers read them (and the documents) from files, each shard with its own ANN index.

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
        all_ids = np.asarray(list(ids), dtype=object)
        self.metric, self.path = metric, None
        self.bounds = _bounds(len(ids), n_shards)
        self.dask_client = dask_client
        deadline = Deadline(_BUILD_SECONDS, "the sharded build")
        workers = cluster_workers(dask_client, deadline)
        self.workers = [workers[i % len(workers)] for i in range(n_shards)]
        spans = list(zip(self.bounds[:-1], self.bounds[1:], self.workers, strict=True))
        raw = [dask_client.scatter(emb[a:b], workers=[w], hash=False, timeout=deadline.left()) for a, b, w in spans]
        self._ids = [dask_client.scatter(all_ids[a:b], workers=[w], hash=False, timeout=deadline.left())
                     for a, b, w in spans]
        self.shards = [dask_client.submit(_dense_shard, r, metric, workers=[w], pure=False) for r, w in zip(raw, self.workers, strict=True)]
        self.shard_sizes = [int(b - a) for a, b, _ in spans]
        results(self.shards, [f"shard build {i}" for i in range(n_shards)], deadline)

    @classmethod
    def build(cls, source: Any, path: str | Path, *, n_shards: int, dask_client: Any, vectors: str | Path | None = None,
              embedder: Any = None, metric: str = "cosine", index: str = "exact", fields: Sequence[str] = ("title", "content"),
              chunk_size: int | None = None, timeout: float = _BUILD_SECONDS, n_threads: int | None = None,
              **index_params: int) -> ShardedDense:
        """Build a sharded dense index from corpus files, each shard by a worker with its own index.

        Parameters
        ----------
        source : str, Path or list of paths
            The documents (ids, texts), as :meth:`ShardedBM25.build` takes them.
        path : str or Path
            The sharded index's folder (shared storage), replaced all or nothing.
        vectors : str or Path, optional
            A ``.npy`` file of float (n_docs, d): one row per document in corpus order; each
            shard memory-maps it and reads its rows only. Else ``embedder`` embeds each shard's
            documents on its worker (it must pickle).
        metric, index, fields, **index_params
            As :class:`~kolm_search.retrievers.dense.DenseRetriever` takes them: ``index`` is
            ``"exact"`` or an ANN index (``"hnsw"``, ``"ivf"``, ``"ivfpq"``, a faiss factory
            string; extra ``ann``), built per shard over its own vectors.
        n_shards, dask_client, chunk_size, timeout
            As :meth:`ShardedBM25.build`.
        n_threads
            Threads of each shard's build and search (default: the worker's cores).

        Raises
        ------
        FrameValidationError, DistributedError
            As :meth:`ShardedBM25.build`; a vectors file whose rows are not the corpus's
            documents raises ``KolmValueError`` naming it.
        """
        from kolm_search.retrievers.ann_spec import AnnSpec

        require("distributed", "dask")
        one_of("metric", metric, ("cosine", "ip"))
        if (vectors is None) == (embedder is None):
            raise KolmValueError("ShardedDense.build needs vectors= (a .npy file) or embedder=, not both")
        if index == "exact" and index_params:
            raise KolmValueError(f"index='exact' takes no index parameters, got {sorted(index_params)}")
        if index != "exact":
            AnnSpec.of(index, index_params)
        vec = None if vectors is None else str(Path(vectors).expanduser())
        params = {"metric": metric, "fields": tuple(fields), "index": index, "n_threads": n_threads, **index_params}
        build_shards("dense", source, path, positive_int("n_shards", n_shards), dask_client, tokenizer=None,
                     fields=fields, chunk_size=positive_int("chunk_size", chunk_size, none=True), memory_limit=None,
                     timeout=timeout,
                     write=lambda b, c, r, f: kinds.write_dense(b, c, r, f, params=params, vectors=vec, embedder=embedder))
        return cls.load(path, dask_client=dask_client, n_threads=n_threads)

    @classmethod
    def load(cls, path: str | Path, *, dask_client: Any, n_threads: int | None = None,
             timeout: float = _SEARCH_SECONDS) -> ShardedDense:
        """Load a sharded dense index built by :meth:`build` (checked as :meth:`ShardedBM25.load`)."""
        self, manifest = _load(cls, path, dask_client, "dense", timeout, kinds.load_dense, n_threads)
        self.metric = manifest.config.get("metric")
        self._ids = None
        return self

    def search(self, qids: Sequence[Any], vectors: npt.ArrayLike, k: int = 100, *,
               timeout: float = _SEARCH_SECONDS) -> pd.DataFrame:
        """Global top-``k`` of each query vector as a run DataFrame (raises as :meth:`ShardedBM25.search`)."""
        q = np.asarray(vectors, dtype=np.float32)
        deadline = Deadline(timeout, "the sharded search")
        if self._ids is not None:  # built in memory: normalised arrays on the workers
            if self.metric == "cosine":
                norms = np.linalg.norm(q, axis=1, keepdims=True)
                q = (q / np.where(norms > 0, norms, 1.0)).astype(np.float32)
            q_f = self.dask_client.scatter(q, broadcast=True, hash=False, timeout=deadline.left())
            futures = [self.dask_client.submit(_search_dense_shard, s, q_f, k, ids, pure=False)
                       for s, ids in zip(self.shards, self._ids, strict=True)]
        else:
            q_f = self.dask_client.scatter(q, broadcast=True, hash=False, timeout=deadline.left())
            futures = [self.dask_client.submit(kinds.search_dense, s, q_f, k, i, pure=False)
                       for i, s in enumerate(self.shards)]
        parts = results(futures, [f"shard {i}" for i in range(len(futures))], deadline)
        _, scores, counts, ids = merge_parts(parts, list(self.bounds[:-1]), k)
        return to_run(list(qids), ids, scores, counts)
