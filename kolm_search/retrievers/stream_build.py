"""A BM25 index built from a corpus streamed in chunks, its memory bounded by ``memory_limit``.

:func:`build_bm25` is what :meth:`BM25Retriever.build <kolm_search.retrievers.bm25.BM25Retriever.build>`
runs. Its phases:

1. **read and count** (:func:`kolm_search.io.corpus_stream.corpus_chunks`,
   :func:`~.stream_count.count_corpus`): each chunk of documents is checked, its rows appended
   to a documents file (Arrow IPC, :class:`~kolm_search.engine.mapped_table.DocumentsWriter`),
   its texts tokenised and counted
   (:meth:`Postings.from_texts`, on ``n_jobs`` processes) and its postings spilled
   (:class:`~.spill.SpilledPostings`); only a term index per chunk, the vocabulary, and 24
   bytes per document (length, id hash, line) stay in memory;
2. **check**: ids unique over the whole corpus (their 64-bit hashes sorted; a collision is
   confirmed on the ids themselves), else the duplicate's place is named;
3. **merge and weigh** (:func:`write_counted`): blocks of terms are read back term-major and
   weighted with the collection's statistics (its own, or a sharded collection's) (:func:`~.bm25_weights.weigh_postings`, elementwise, so a block's
   weights are those of the whole), written to ``.npy`` files one block after another;
4. **save**: :func:`~._persist.save_index` copies the files into the index folder and
   switches its manifest, all or nothing.

Every file of phases 1-3 lives in a temporary folder beside the target, removed when the build
ends, however it ends; the target is touched only by phase 4, so a refused corpus or a failed
build leaves the folder as it was. The index equals ``BM25Retriever(documents, ...)`` of the
same documents saved to ``path``, array for array.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import filelock
import numpy as np
import numpy.lib.format as npy_format
import numpy.typing as npt
import pandas as pd

from kolm_search._params import positive_int
from kolm_search._progress import progress_bar
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmError, KolmValueError
from kolm_search.io.corpus_stream import corpus_chunks
from kolm_search.retrievers._persist import FileSource, Payload, save_index
from kolm_search.retrievers.bm25_weights import weigh_postings
from kolm_search.retrievers.bounds import index_bounds
from kolm_search.retrievers.postings import CollectionStats, Postings
from kolm_search.retrievers.stream_count import CountedCorpus, count_corpus

__all__ = ["BuildSummary", "StreamedIndex", "build_bm25", "default_memory_limit", "write_counted"]

_BYTES_PER_CHAR = 12  # a chunk's memory per character of text: strings, frame, tokens, counts
_BYTES_PER_POSTING = 64  # a block's memory per posting: gathered, sorted, weighted, temporaries
_COPY_BYTES = 1 << 24


def default_memory_limit() -> int:
    """A quarter of the machine's physical memory, in bytes (4 GiB where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


@dataclass(frozen=True)
class BuildSummary:
    """What a streaming build wrote: ``path``, ``n_docs``, ``n_terms``, ``nnz`` (postings),
    ``chunks`` (of documents read) and ``blocks`` (of terms weighted)."""

    path: Path
    n_docs: int
    n_terms: int
    nnz: int
    chunks: int
    blocks: int


class StreamedIndex(Protocol):
    """What a streaming build asks of the index it builds (a :class:`BM25Retriever` over a few
    documents, made by the ``probe`` given to :func:`build_bm25`): its parameters, and the
    payload of its files (:meth:`BM25Retriever.streamed_payload`)."""

    @property
    def method(self) -> str: ...

    @property
    def k1(self) -> float: ...

    @property
    def b(self) -> float: ...

    @property
    def delta(self) -> float: ...

    @property
    def n_threads(self) -> int | None: ...

    @property
    def fields(self) -> tuple[str, ...]: ...

    @property
    def tokenizer(self) -> Any: ...


    def config(self) -> dict[str, Any]: ...

    def streamed_payload(self, n_docs: int, vocab: list[str], arrays: Mapping[str, FileSource],
                         documents: FileSource, *, own_stats: bool = True) -> Payload: ...


class _SpilledFile:
    """A file of the temporary folder, copied into the index (a :class:`~._persist.FileSource`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def copy_to(self, fp: BinaryIO) -> None:
        with self.path.open("rb") as src:
            while data := src.read(_COPY_BYTES):
                fp.write(data)


class _NpyWriter:
    """A 1-d ``.npy`` file of ``n`` values of ``dtype``, written block by block."""

    def __init__(self, path: Path, dtype: type[np.generic], n: int) -> None:
        self.path, self.dtype, self.n, self.written = path, np.dtype(dtype), n, 0
        self.fp = path.open("wb")
        header = npy_format.header_data_from_array_1_0(np.empty(0, self.dtype))
        header["shape"] = (n,)
        npy_format.write_array_header_1_0(self.fp, header)

    def write(self, values: npt.ArrayLike) -> None:
        arr = np.ascontiguousarray(values, self.dtype)
        self.fp.write(arr.tobytes())
        self.written += len(arr)

    def close(self) -> _SpilledFile:
        self.fp.close()
        if self.written != self.n:
            raise KolmError(f"{self.path}: wrote {self.written} values of {self.n} (a build bug)")
        return _SpilledFile(self.path)


def _npy(root: Path, name: str, values: npt.ArrayLike, dtype: type[np.generic]) -> _SpilledFile:
    arr = np.asarray(values, dtype)
    w = _NpyWriter(root / f"{name}.npy", dtype, len(arr))
    w.write(arr)
    return w.close()


def build_bm25(source: Any, path: str | Path, probe: Callable[[DocumentTable], StreamedIndex], *, chunk_size: int | None = None,
               memory_limit: int | None = None, n_jobs: int | None = None,
               progress: bool | None = None) -> BuildSummary:
    """Index ``source`` (see :func:`~kolm_search.io.corpus_stream.corpus_chunks`) into folder
    ``path``; ``probe(table)`` is an index of the build's parameters over ``table`` (the
    corpus's first documents: :meth:`BM25Retriever.config` samples them).

    Parameters
    ----------
    chunk_size : int, optional
        Most documents read and counted at a time (default: as many as ``memory_limit`` allows).
    memory_limit : int, optional
        Bytes that a chunk of documents and a block of postings may take (default
        :func:`default_memory_limit`). Per document (24 bytes) and per term (the vocabulary)
        state comes on top.
    n_jobs, progress
        As :meth:`Postings.from_texts` takes them; the bars count documents, then postings.

    Raises
    ------
    FrameValidationError
        A document that makes no table row, or a duplicate id, naming where it is; nothing is
        written to ``path``.
    KolmError
        The build ran out of memory or of disk space, or the disk failed (saying which, the
        spill folder or the index folder named); ``path`` is left as it was.
    """
    target = Path(path).expanduser()
    limit = positive_int("memory_limit", memory_limit, none=True) or default_memory_limit()
    chunk_size = positive_int("chunk_size", chunk_size, none=True)
    empty = probe(DocumentTable(pd.DataFrame(columns=["id", "content"])))  # checks the parameters
    empty.config()  # and that the tokenizer can be saved, before any document is read
    if target.exists() and not target.is_dir():
        raise KolmValueError(f"{target}: not a folder; an index is saved to a folder")
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(parent, target.name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=parent))
    owner = filelock.FileLock(str(tmp / _OWNER))
    try:
        owner.acquire(timeout=0)
        return _build(source, target, tmp, empty, probe, chunk_size=chunk_size, limit=limit, n_jobs=n_jobs, progress=progress)
    except MemoryError as exc:
        raise KolmError(f"{target}: the build ran out of memory (memory_limit={limit:,} bytes sizes its chunks "
                        "and blocks; documents, the vocabulary and the workers come on top): pass a smaller "
                        "memory_limit= or chunk_size=; the folder was left as it was") from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise KolmError(f"{tmp}: the build ran out of disk space (its spill files and the index need about "
                            "twice the index's size beside the target); the folder was left as it was") from exc
        raise KolmError(f"{tmp}: the build failed on disk: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        owner.release()


_OWNER = "owner.lock"  # held by the running build (an OS lock: a killed build's is free)
_DEAD_AFTER_SECONDS = 60.0


def _remove_dead_builds(parent: Path, name: str) -> None:
    """Remove the spill folders of ``name``'s builds that died (killed: no ``finally`` ran):
    those whose owner lock is free and that are older than a minute (a build that has just
    made its folder has not yet taken the lock)."""
    for folder in parent.glob(f".{name}.building-*"):
        try:
            if not folder.is_dir() or time.time() - folder.stat().st_mtime < _DEAD_AFTER_SECONDS:
                continue
            lock = filelock.FileLock(str(folder / _OWNER))
            lock.acquire(timeout=0)
        except (OSError, filelock.Timeout):  # a running build's, or gone meanwhile
            continue
        try:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            lock.release()


def _build(source: Any, target: Path, tmp: Path, params: StreamedIndex,
           probe: Callable[[DocumentTable], StreamedIndex], *, chunk_size: int | None,
           limit: int, n_jobs: int | None, progress: bool | None) -> BuildSummary:
    chunks = corpus_chunks(source, chunk_size=chunk_size, chunk_chars=max(1, limit // _BYTES_PER_CHAR))
    counted = count_corpus(chunks, tmp, params.tokenizer, params.fields, n_jobs=n_jobs, progress=progress)
    return write_counted(counted, target, params, probe, limit=limit, progress=progress, release=True)


def write_counted(counted: CountedCorpus, target: Path, params: StreamedIndex,
                  probe: Callable[[DocumentTable], StreamedIndex], *, limit: int, stats: CollectionStats | None = None,
                  progress: bool | None = None, release: bool = False, work: Path | None = None) -> BuildSummary:
    """Phases 3 and 4: weigh the spilled postings, with ``stats`` (a shard of a collection:
    collection-wide document frequencies, size and mean length) or the documents' own, and
    save the index to ``target``; ``release`` frees the counts as it goes (``counted`` cannot
    be written again). The weighted arrays are written to folder ``work`` (default
    ``counted.root``) before they are copied into the index."""
    spill = counted.spill
    if spill is None:
        raise KolmValueError("documents read without counting cannot make a BM25 index")
    tmp = counted.root if work is None else work
    lengths = np.concatenate(spill.lengths) if spill.lengths else np.zeros(0, np.int64)
    vocab = list(spill.vocab)
    if release:
        spill.lengths.clear()
        spill.vocab.clear()
    if stats is None:
        n, df = spill.n_docs, spill.df.astype(np.float64)
        avgdl = float(int(lengths.sum())) / n if n else 0.0
    else:
        n, avgdl = int(stats.n_docs), float(stats.avgdl)
        try:
            df = np.array([stats.df[t] for t in vocab], dtype=np.float64)
        except KeyError as exc:
            raise KolmValueError(f"collection stats lack token {exc.args[0]!r} of this shard") from exc
    t_ptr = spill.t_ptr()
    nnz = int(t_ptr[-1])
    kept = ("t_docs", np.int32), *((("tf", np.int32),) if stats is None else ()), ("t_w", np.float32)
    out = {name: _NpyWriter(tmp / f"out_{name}.npy", dtype, nnz) for name, dtype in kept}
    nonocc, t_max = np.zeros(len(vocab), np.float32), np.zeros(len(vocab), np.float32)
    b_max: list[np.ndarray] = []  # blocks never cross terms: each block of terms' block maxima, in order
    n_blocks = 0
    with progress_bar(nnz, "bm25 build: weigh", "posting", progress=progress) as bar:
        for block in spill.blocks(max(1, limit // _BYTES_PER_POSTING)):
            part = Postings(vocab[block.start:block.stop], block.t_ptr, block.p_doc, block.tf, lengths)
            t_w, block_nonocc = weigh_postings(part, df[block.start:block.stop], n, avgdl, method=params.method,
                                               k1=params.k1, b=params.b, delta=params.delta,
                                               n_threads=params.n_threads)
            nonocc[block.start:block.stop] = block_nonocc
            bounds = index_bounds(block.t_ptr - block.t_ptr[0], block.p_doc, t_w, n_threads=params.n_threads)
            t_max[block.start:block.stop] = bounds["t_max"]
            b_max.append(bounds["b_max"])
            out["t_docs"].write(block.p_doc)
            if "tf" in out:
                out["tf"].write(block.tf)
            out["t_w"].write(t_w)
            n_blocks += 1
            bar.update(len(t_w))
    files = {name: w.close() for name, w in out.items()}
    spilled = {"t_ptr": _npy(tmp, "out_t_ptr", t_ptr, np.int64), **files,
               "nonocc": _npy(tmp, "out_nonocc", nonocc, np.float32),
               "doc_len": _npy(tmp, "out_doc_len", lengths, np.int64),
               "term_max": _npy(tmp, "out_term_max", t_max, np.float32),
               "block_max": _npy(tmp, "out_block_max", np.concatenate([np.zeros(0, np.float32), *b_max]), np.float32)}
    first = probe(counted.head)
    save_index(target, first.streamed_payload(counted.n_docs, vocab, spilled, _SpilledFile(counted.table_path),
                                              own_stats=stats is None))
    return BuildSummary(target, counted.n_docs, len(vocab), nnz, len(counted.places.chunks), n_blocks)
