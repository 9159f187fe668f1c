"""Phase 1 of a streaming build: a corpus read in chunks, checked, its documents written to a
documents file (Arrow IPC, :class:`~kolm_search.engine.mapped_table.DocumentsWriter`) and (for
BM25) its postings counted and spilled (:mod:`.spill`).

:func:`count_corpus` returns a :class:`CountedCorpus`: what :func:`~.stream_build.write_counted`
weighs and saves as an index, and what a shard of a sharded build reports to the client (its
statistics, its ids' hashes) before it is weighted with the collection's statistics
(:mod:`kolm_search.distributed.shard_build`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._progress import progress_bar
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.mapped_table import DocumentsWriter, MappedDocumentTable
from kolm_search.errors import FrameValidationError, KolmValueError
from kolm_search.io.corpus_stream import CorpusChunk
from kolm_search.retrievers.chunk_counter import ChunkCounter, CountedChunk
from kolm_search.retrievers.postings import CollectionStats, Postings
from kolm_search.retrievers.spill import SpilledPostings

__all__ = ["CountedCorpus", "count_corpus"]

_SAMPLE = 32  # documents of the tokenizer's round trip (BM25Retriever.config)


class _Places:
    """Where each document came from, and the 64-bit hashes of the ids, for the duplicate check."""

    def __init__(self) -> None:
        self.hashes: list[npt.NDArray[np.uint64]] = []
        self.chunks: list[tuple[str, str, npt.NDArray[np.int64]]] = []
        self.starts = [0]

    def add(self, chunk: CorpusChunk) -> None:
        self.hashes.append(pd.util.hash_array(chunk.table.ids.astype(object)).astype(np.uint64))
        self.chunks.append((chunk.where, chunk.unit, chunk.numbers))
        self.starts.append(self.starts[-1] + len(chunk.table))

    def place(self, doc: int) -> str:
        k = int(np.searchsorted(self.starts, doc, side="right")) - 1
        where, unit, numbers = self.chunks[k]
        return f"{where}: {unit} {int(numbers[doc - self.starts[k]])}"

    def check_unique(self, ids_of: Callable[[npt.NDArray[np.int64]], list[str]]) -> None:
        """Refuse a duplicate id (a hash collision is told apart by ``ids_of`` rows)."""
        if len(self.hashes) < 2:
            return  # within a chunk, its table checked
        h = np.concatenate(self.hashes)
        order = np.argsort(h, kind="stable")
        same = np.flatnonzero(h[order][1:] == h[order][:-1])
        if not len(same):
            return
        pairs = np.stack([order[same], order[same + 1]], axis=1)
        ids = ids_of(np.unique(pairs))
        by_row = dict(zip(np.unique(pairs).tolist(), ids, strict=True))
        dups = [(int(a), int(b)) for a, b in pairs if by_row[int(a)] == by_row[int(b)]]
        if dups:
            first, second = min(dups, key=lambda p: p[1])
            raise FrameValidationError(f"{self.place(second)}: duplicate document id {by_row[second]!r} "
                                       f"(first at {self.place(first)})")


def _read_ids(documents: Path, rows: npt.NDArray[np.int64]) -> list[str]:
    return [str(v) for v in MappedDocumentTable(documents).ids_of(rows)]


@dataclass
class CountedCorpus:
    """Phase 1 of a build (:func:`count_corpus`): documents read, checked, written to a documents
    file and (for BM25) counted and spilled, in folder ``root``.

    Attributes
    ----------
    root : Path
        The folder of its files (removed by whoever made it).
    spill : SpilledPostings or None
        The spilled postings (None: the documents only, for a dense index).
    places : where each document came from, and its id's hash
    head : DocumentTable
        The first (up to 32) documents: a probe's sample.
    table_path : Path
        The documents file (:class:`~kolm_search.engine.mapped_table.MappedDocumentTable` reads it).
    """

    root: Path
    spill: SpilledPostings | None
    places: _Places
    head: DocumentTable
    table_path: Path

    @property
    def n_docs(self) -> int:
        return self.places.starts[-1]

    def stats(self) -> CollectionStats:
        """The counted documents' own statistics (vocabulary, document frequencies, size, length)."""
        if self.spill is None:
            raise KolmValueError("documents read without counting have no BM25 statistics")
        total = int(sum(int(x.sum()) for x in self.spill.lengths))
        n = self.spill.n_docs
        return CollectionStats(df=dict(zip(self.spill.vocab, self.spill.df.tolist(), strict=True)), n_docs=n,
                               avgdl=float(total) / n if n else 0.0, total_len=total)

    def id_hashes(self) -> npt.NDArray[np.uint64]:
        """64-bit hashes of the ids (``pandas.util.hash_array``), uint64 (n_docs,)."""
        return np.concatenate(self.places.hashes) if self.places.hashes else np.zeros(0, np.uint64)

    def ids_at(self, rows: npt.ArrayLike) -> list[str]:
        """The ids of documents ``rows`` (int, < n_docs)."""
        return _read_ids(self.table_path, np.asarray(rows, np.int64))

    def place(self, row: int) -> str:
        """Where document ``row`` came from: ``"corpus.jsonl: line 12"``."""
        return self.places.place(row)


def _spill(spill: SpilledPostings, counted: CountedChunk) -> None:
    spill.add_counted(counted.new_terms, Postings([], counted.t_ptr, counted.p_doc, counted.tf, counted.lengths))


def count_corpus(chunks: Iterable[CorpusChunk], root: Path, tokenizer: Any, fields: Sequence[str], *,
                 n_jobs: int | None = None, progress: bool | None = None) -> CountedCorpus:
    """Phase 1 (and 2: ids unique among these documents): read ``chunks``, write their documents
    to ``root / "documents.arrow"`` and, unless ``tokenizer`` is None, count and spill their
    postings into ``root``."""
    spill = None if tokenizer is None else SpilledPostings(root)
    places = _Places()
    sample: list[DocumentTable] = []
    table_path = root / "documents.arrow"
    counter = ChunkCounter(tokenizer, n_jobs) if tokenizer is not None else contextlib.nullcontext()
    with DocumentsWriter(table_path) as writer, progress_bar(None, "bm25 build: read", "doc", progress=progress) as bar, \
            counter:
        pending = None
        for chunk in chunks:  # reads chunk k + 1 while the workers count chunk k
            table = chunk.table
            places.add(chunk)
            if sum(map(len, sample)) < _SAMPLE:
                sample.append(table.take(np.arange(min(len(table), _SAMPLE))))
            writer.write(table)
            if isinstance(counter, ChunkCounter) and spill is not None:
                submitted = counter.submit(table.text_array(fields), places.starts[-2])
                if pending is not None:
                    _spill(spill, counter.collect(pending))
                pending = submitted
            bar.update(len(table))
        if isinstance(counter, ChunkCounter) and spill is not None and pending is not None:
            _spill(spill, counter.collect(pending))
    if spill is not None:  # the chunks' Arrow buffers are gone: hand the pool's cached pages back before weighing
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    places.check_unique(lambda rows: _read_ids(table_path, rows))
    head = DocumentTable.concat(sample) if sample else DocumentTable(pd.DataFrame(columns=["id", "content"]))
    return CountedCorpus(root, spill, places, head.take(np.arange(min(len(head), _SAMPLE))), table_path)
