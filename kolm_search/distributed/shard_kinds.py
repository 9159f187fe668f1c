"""What differs between sharded BM25 and dense indexes: their shards' write, load and search tasks.

Write (phases 3-4 of :func:`~.shard_build.build_shards`): BM25 merges the shards' statistics
on the client and weighs every shard with them; dense reads each shard's rows of the vectors
file (or embeds its documents on the worker) and builds its own ANN index. Then the manifest.

Load: a task per shard loads its folder (memory-mapped) on a worker and checks it against
the manifest (:func:`~.sharded_store.checked_shard`); the Future keeps it there, and Dask
loads it again from disk if the worker dies. Search: a task per shard returns its top-k with
the documents' ids, merged exactly on the client (:func:`~.shard_merge.merge_parts`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.distributed.shard_build import ShardBuild, shard_entries, step, write_shard
from kolm_search.distributed.sharded_store import ShardEntry, save_sharded
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.postings import CollectionStats
from kolm_search.retrievers.stream_count import CountedCorpus

__all__ = ["load_bm25", "load_dense", "score_bm25", "search_dense", "write_bm25", "write_dense"]

Part = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.object_]]


def _with_ids(ids_of: Callable[[npt.NDArray[np.int64]], Any], docs: npt.NDArray[np.int64],
              scores: npt.NDArray[np.float32], counts: npt.NDArray[np.int64]) -> Part:
    """A shard's top-k ``(docs, scores, counts)`` with the ids of its documents (``ids_of(codes)``:
    a table's :meth:`~kolm_search.engine.doctable.DocumentTable.ids_of`, which on a mapped shard
    reads only these ids)."""
    ids = np.full(docs.shape, None, dtype=object)
    valid = np.arange(docs.shape[1])[None, :] < counts[:, None]
    ids[valid] = np.asarray(ids_of(docs[valid]), dtype=object)
    return docs, scores, counts, ids


# -- BM25 ------------------------------------------------------------------------------------
def _bm25_shard(counted: CountedCorpus, folder: str, shard: int, params: dict[str, Any], stats: CollectionStats,
                limit: int) -> tuple[int, str]:
    from kolm_search.retrievers.bm25 import BM25Retriever
    from kolm_search.retrievers.stream_build import write_counted

    def probe(table: DocumentTable) -> BM25Retriever:
        return BM25Retriever(table, **params, n_jobs=1, progress=False)

    def save(c: CountedCorpus, target: Path) -> None:
        work = Path(tempfile.mkdtemp(prefix="write-", dir=c.root))  # its own: a task run twice never shares files
        try:
            write_counted(c, target, probe(c.head.take(np.arange(0))), probe, limit=limit, stats=stats, progress=False,
                          work=work)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return write_shard(counted, folder, shard, save)


def write_bm25(build: ShardBuild, counted: list[Any], reports: list[tuple[Any, ...]], folder: Path, *,
               params: dict[str, Any], limit: int) -> None:
    """Merge the shards' statistics, weigh every shard with them, save the manifest (with the
    merged vocabulary and document frequencies, for BM25L/BM25+ query constants)."""
    from kolm_search.retrievers._saved import read_json

    stats = CollectionStats.merge([r[2] for r in reports])
    shipped = build.dc.scatter(stats, broadcast=True, hash=False, timeout=build.deadline.left())
    futures = [build.submit(_bm25_shard, c, str(folder / f"shard-{i:03d}"), i, params, shipped, limit)
               for i, c in enumerate(counted)]
    written = build.wait(futures, [f"shard {i} (write)" for i in range(len(counted))])
    entries = shard_entries(folder, written, reports)
    config = read_json(folder / "shard-000" / "manifest.json")["config"]
    vocab = list(stats.df)
    save_sharded(folder.parent, "bm25", config, entries, meta={"stats": {"n_docs": stats.n_docs,
                                                                          "total_len": int(stats.total_len or 0)}},
                 arrays={"df": np.fromiter((stats.df[t] for t in vocab), np.int64, len(vocab))},
                 blobs={"vocab": vocab})


def load_bm25(root: str, entry: ShardEntry, shard: int, config: dict[str, Any], n_threads: int | None,
              pruning: Any) -> Any:
    """On a worker: shard ``shard`` of the sharded index in ``root``, checked."""
    from kolm_search.distributed.sharded_store import checked_shard
    from kolm_search.retrievers.bm25 import BM25Retriever

    out = BM25Retriever.load(Path(root) / entry.folder, n_threads=n_threads, pruning=pruning)
    if out.own_stats is not False:
        raise KolmValueError(f"{Path(root) / entry.folder}: shard {shard} was weighted with its own statistics, "
                             "not the collection's")
    checked_shard(root, entry, shard, len(out.table), config)
    return out


def score_bm25(shard_index: Any, texts: list[str], k: int, offsets: npt.NDArray[np.float32], shard: int) -> Part:
    """On a worker: the shard's top-``k`` of each text, with the collection's per-query constants."""
    step(f"score {shard}")
    return _with_ids(shard_index.table.ids_of, *shard_index.score_texts(texts, k, offsets=offsets))


# -- dense -----------------------------------------------------------------------------------
def _dense_shard(counted: CountedCorpus, folder: str, shard: int, params: dict[str, Any], vectors: str | None,
                 offset: int, embedder: Any) -> tuple[int, str]:
    from kolm_search.engine.mapped_table import MappedDocumentTable
    from kolm_search.retrievers._saved import load_array
    from kolm_search.retrievers.dense import DenseRetriever

    def save(c: CountedCorpus, target: Path) -> None:
        table = MappedDocumentTable(c.table_path, n_docs=c.n_docs)
        if vectors is None:
            index = DenseRetriever(table, embedder, **params)
        else:
            rows = load_array(Path(vectors), "float", 2, mmap=True)[offset:offset + c.n_docs]
            try:
                index = DenseRetriever(table, embeddings=np.asarray(rows, np.float32), **params)
            except KolmValueError as exc:
                raise KolmValueError(f"{vectors}: rows {offset}..{offset + c.n_docs - 1} (shard {shard}): {exc}") from exc
        index.save(target)

    return write_shard(counted, folder, shard, save)


def write_dense(build: ShardBuild, counted: list[Any], reports: list[tuple[Any, ...]], folder: Path, *,
                params: dict[str, Any], vectors: str | None, embedder: Any) -> None:
    """Build every shard's dense index over its rows of ``vectors`` (or embedded), save the manifest."""
    from kolm_search.retrievers._saved import load_array, read_json

    sizes = [int(r[0]) for r in reports]
    total = sum(sizes)
    if vectors is not None:
        shape = load_array(Path(vectors), "float", 2, mmap=True).shape  # the header only is read
        if shape[0] != total:
            raise KolmValueError(f"{vectors}: holds {shape[0]} vectors; the corpus has {total} documents "
                                 "(one row per document, in corpus order)")
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    futures = [build.submit(_dense_shard, c, str(folder / f"shard-{i:03d}"), i, params, vectors, int(offsets[i]), embedder)
               for i, c in enumerate(counted)]
    written = build.wait(futures, [f"shard {i} (write)" for i in range(len(counted))])
    entries = shard_entries(folder, written, reports)
    first = read_json(folder / "shard-000" / "manifest.json")
    save_sharded(folder.parent, "dense", first["config"], entries,
                 meta={"index": str(params.get("index", "exact")), "dim": first["dim"]})


def load_dense(root: str, entry: ShardEntry, shard: int, config: dict[str, Any], n_threads: int | None) -> Any:
    """On a worker: dense shard ``shard`` of the sharded index in ``root``, checked."""
    from kolm_search.distributed.sharded_store import checked_shard
    from kolm_search.retrievers.dense import DenseRetriever

    out = DenseRetriever.load(Path(root) / entry.folder, n_threads=n_threads)
    checked_shard(root, entry, shard, len(out.table), config)
    return out


def search_dense(shard_index: Any, vectors: npt.NDArray[np.float32], k: int, shard: int) -> Part:
    """On a worker: the shard's top-``k`` of each query vector (exact, or its ANN index's)."""
    step(f"score {shard}")
    if len(shard_index.table) == 0:
        m = len(vectors)
        return (np.full((m, 0), -1, np.int64), np.zeros((m, 0), np.float32), np.zeros(m, np.int64),
                np.zeros((m, 0), object))
    return _with_ids(shard_index.table.ids_of, *shard_index.search_vectors(vectors, k))
