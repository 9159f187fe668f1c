"""Tokenising and counting a streamed corpus chunk by chunk, on one pool of worker processes kept
for the whole build, the next chunk read while the workers count this one.

A streaming build (:mod:`.stream_count`) reads a chunk of documents, hands its texts to
:meth:`ChunkCounter.submit` (which queues them on the workers and returns at once), reads the
next chunk, submits it, and only then takes the first chunk's counts (:meth:`ChunkCounter.collect`):
reading, checking and writing a chunk overlaps the counting of the one before. At most two
chunks are in flight.

The workers and their word maps live as long as the counter: a worker stems each distinct
word once per build, not once per chunk, and reports only the terms new to it. Every chunk's
term ids are ids of one vocabulary in order of first occurrence over the corpus (the workers'
ids mapped by :class:`~._parallel.WorkerMaps`, chunks collected in row order), so the counts
do not depend on how the corpus was cut or how many processes counted it. Texts travel as
``pyarrow`` string arrays (their buffers, no Python string per document) and are split by
:func:`~._encode.encode_array`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.engine.arrow_strings import buffers
from kolm_search.errors import KolmError
from kolm_search.retrievers._encode import Counted
from kolm_search.retrievers._parallel import (
    _START_SECONDS,
    Merger,
    WorkerMaps,
    _context,
    _count_chunk,
    _stop,
    _tokenizer_blob,
    _worker,
    await_chunk,
    chunk_seconds,
    resolve_n_jobs,
    term_major,
)

__all__ = ["ChunkCounter", "CountedChunk"]

_PARALLEL_MIN_CHARS = 16_000_000  # a smaller chunk, before any pool started, is counted in this process
_MIN_TASK, _MAX_TASK = 2_000, 50_000  # documents per worker task


@dataclass(frozen=True)
class CountedChunk:
    """One chunk's postings in the build's term ids.

    Attributes
    ----------
    new_terms : list of str
        The terms this chunk added to the vocabulary (ids ``n_terms - len(new_terms)`` on).
    t_ptr : int64 (n_terms + 1,)
        Term-major pointers over the whole vocabulary so far (terms absent from the chunk empty).
    p_doc : int32 (nnz,)
        Rows within the chunk, ascending within a term.
    tf : int32 (nnz,)
    lengths : int64 (n_docs,)
    """

    new_terms: list[str]
    t_ptr: npt.NDArray[np.int64]
    p_doc: npt.NDArray[np.int32]
    tf: npt.NDArray[np.int32]
    lengths: npt.NDArray[np.int64]


@dataclass
class _Pending:
    texts: Any  # the chunk's texts (counted at collection when no pool counts them)
    start: int
    tasks: list[tuple[int, int, Future[Any]]] = field(default_factory=list)  # (first row, stop row, future)
    chars: list[int] = field(default_factory=list)


def _text_bytes(texts: Any) -> int:
    """Bytes of text in a ``pyarrow`` string array (what deadlines and the choice of a pool count)."""
    if not len(texts):
        return 0
    offsets, _ = buffers(texts)
    return int(offsets[-1]) - int(offsets[0])


class ChunkCounter:
    """Counts chunks of texts on ``n_jobs`` processes (see the module); a context manager that
    ends its workers on exit (at once, on an error).

    Parameters
    ----------
    tokenizer : Tokenizer or picklable callable str -> list of str
    n_jobs : int, optional
        Processes (default: the usable cores; 1 in a daemonic process).
    chunk_timeout : float, optional
        Seconds to wait for each task after the previous one arrived (default 60 s plus 1 s per
        100 kB of its text; the build's first task 60 s more).
    """

    def __init__(self, tokenizer: Callable[[str], Sequence[str]], n_jobs: int | None = None,
                 chunk_timeout: float | None = None) -> None:
        self.tokenizer = tokenizer
        self.jobs = resolve_n_jobs(n_jobs)
        self.chunk_timeout = chunk_timeout
        self._merger = Merger()
        self._maps = WorkerMaps(self._merger)
        self._word_ids: dict[str, int] = {}  # this process's words, when it counts a chunk itself
        self._pool: ProcessPoolExecutor | None = None
        self._key = os.urandom(16)
        self._blob: bytes | None = None
        self._first = True
        self._rows = 0

    def __enter__(self) -> ChunkCounter:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if kind is None:
            pool.shutdown(wait=True)
        else:
            _stop(pool)

    def submit(self, texts: Any, start: int) -> _Pending:
        """Queue ``texts`` (a ``pyarrow`` string array without nulls, or a list of str), the
        documents from row ``start`` on; :meth:`collect` takes their counts, in submission order."""
        import pyarrow as pa

        pending = _Pending(texts, start)
        n = len(texts)
        self._rows = max(self._rows, start + n)
        chars = _text_bytes(texts) if isinstance(texts, pa.Array) else sum(map(len, texts))
        if self._pool is None and (self.jobs == 1 or chars < _PARALLEL_MIN_CHARS):
            return pending  # counted here, in order, when collected
        if self._pool is None or self._blob is None:
            self._blob = _tokenizer_blob(self.tokenizer)
            try:
                self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=_context())
            except (OSError, ValueError) as exc:
                raise KolmError(f"could not start tokenising worker processes ({type(exc).__name__}: {exc}); pass "
                                "n_jobs=1 to tokenise in this process") from exc
        step = min(max(-(-n // (4 * self.jobs)), _MIN_TASK), _MAX_TASK)
        for lo in range(0, n, step):
            part = texts[lo:lo + step]
            if isinstance(part, pa.Array):  # a slice pickles its whole parent's buffers: copy it
                part = pa.concat_arrays([part])
            try:
                future = self._pool.submit(_worker, self._key, self._blob, part, start + lo)
            except (BrokenProcessPool, OSError, EOFError, RuntimeError) as exc:
                raise KolmError(f"could not start tokenising worker processes ({type(exc).__name__}: {exc}); pass "
                                "n_jobs=1 to tokenise in this process") from exc
            pending.tasks.append((start + lo, start + min(lo + step, n), future))
            pending.chars.append(int(chars * len(part) / max(n, 1)))
        pending.texts = None  # the tasks hold them
        return pending

    def collect(self, pending: _Pending) -> CountedChunk:
        """The counts of a submitted chunk (chunks are collected in the order submitted)."""
        n_before = len(self._merger.vocab)
        if not pending.tasks:
            texts = pending.texts
            if texts is not None and len(texts):
                self._merger.add(_count_chunk(self.tokenizer, texts, pending.start, self._merger.vocab, self._word_ids))
        for (lo, hi, future), chars in zip(pending.tasks, pending.chars, strict=True):
            wait = self.chunk_timeout if self.chunk_timeout is not None else chunk_seconds(chars)
            if self._first:
                wait, self._first = wait + _START_SECONDS, False
            self._maps.add(*await_chunk(future, lo, hi, self._rows, wait))
        parts: list[Counted] = self._merger.take_parts()
        vocab = self._merger.vocab
        t_ptr, p_doc, tf, lengths = term_major(parts, len(vocab))
        return CountedChunk(list(islice(vocab, n_before, None)), t_ptr, p_doc, tf, lengths)
