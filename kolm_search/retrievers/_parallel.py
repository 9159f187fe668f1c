"""Tokenising and counting a corpus in chunks, in this process or in worker processes.

Each chunk of documents is tokenised and counted on its own into doc-major counts, a CSR of
(document, term) -> tf. A worker process numbers terms across all its chunks and reports the
terms each chunk added; :class:`WorkerMaps` maps those into the one global vocabulary (one dict
lookup per term new to the worker, then ``np.take``) and :class:`Merger` builds the term-major
postings in O(nnz) (SciPy's CSR to CSC conversion, a counting sort). Merging the chunks in row
order gives the vocabulary in order of first occurrence, so the postings do not depend on how
the corpus was split or how many processes counted it.

Worker processes are forked from a ``"forkserver"`` (``"spawn"`` where there is none), never
from this process, which may run Numba or BLAS threads: the server is a fresh single-threaded
process that imports this module once, so later pools start in milliseconds. The tokenizer
travels pickled (a :class:`Tokenizer` as its configuration) and is rebuilt once per worker.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from kolm_search._kernels import usable_cores
from kolm_search._params import positive_int
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError
from kolm_search.retrievers._encode import Counted, count_ids, encode_array, encode_texts

__all__ = ["Merger", "WorkerMaps", "await_chunk", "chunk_seconds", "count_texts", "resolve_n_jobs", "term_major"]

_START_SECONDS = 60.0  # added to the first chunk's deadline: starting the workers
_SECONDS_PER_CHUNK = 60.0  # chunk deadline: this plus one second per 100 kB of text (100x slower than usual)
_BYTES_PER_SECOND = 100_000
_MAX_DOCS = np.iinfo(np.int32).max
_STATE: dict[bytes, Any] = {}  # in a worker: (token, tokenizer, term ids, word ids) of one build


@functools.cache
def _context() -> BaseContext:
    """The forkserver context, the server preloading this module, else spawn.

    The preload list is set once per process, through the public
    ``set_forkserver_preload``, to ``["__main__", this module]`` (the default list plus this
    module); it takes effect if the server has not started yet. A program that sets its own
    preload list afterwards should include ``kolm_search.retrievers._parallel`` in it.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["__main__", __name__])
    return ctx


def resolve_n_jobs(n_jobs: Any) -> int:
    """Processes to use: ``None`` -> the usable cores; 1 inside a daemonic process (no children)."""
    n = usable_cores() if n_jobs is None else positive_int("n_jobs", n_jobs, none=True)
    return 1 if multiprocessing.current_process().daemon else max(n, 1)


class Merger:
    """Counted chunks, in row order, into one vocabulary and term-major postings."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self._parts: list[Counted] = []

    def add(self, counted: Counted) -> None:
        """Append the next chunk, its term ids already ids of :attr:`vocab`."""
        self._parts.append(counted)

    def take_parts(self) -> list[Counted]:
        """The chunks added since the last call (the vocabulary stays)."""
        parts, self._parts = self._parts, []
        return parts

    def finish(self) -> tuple[list[str], npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int32],
                              npt.NDArray[np.int64]]:
        """``(vocab, t_ptr int64 (V + 1,), p_doc int32 (nnz,), tf int32 (nnz,), lengths int64 (n,))``."""
        parts, self._parts = self._parts, []
        return (list(self.vocab), *term_major(parts, len(self.vocab)))


def term_major(parts: list[Counted], n_vocab: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32],
                                                             npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """Doc-major counted chunks (global term ids, row order) to ``(t_ptr, p_doc, tf, lengths)``."""
    lengths = np.concatenate([p[0] for p in parts] or [np.zeros(0, np.int64)])
    if lengths.shape[0] > _MAX_DOCS:
        raise KolmValueError(f"{lengths.shape[0]} documents exceed one index's int32 limit; shard the corpus")
    ptr = np.zeros(lengths.shape[0] + 1, np.int64)
    np.cumsum(np.concatenate([p[1] for p in parts] or [np.zeros(0, np.int64)]), out=ptr[1:])
    terms = np.concatenate([p[2] for p in parts] or [np.zeros(0, np.int32)])
    tf = np.concatenate([p[3] for p in parts] or [np.zeros(0, np.int32)])
    parts.clear()
    csc = sp.csr_matrix((tf, terms, ptr), shape=(lengths.shape[0], n_vocab)).tocsc()  # O(nnz); rows ascend per term
    del tf, terms, ptr
    return (csc.indptr.astype(np.int64), csc.indices.astype(np.int32, copy=False),
            csc.data.astype(np.int32, copy=False), lengths)


def _count_chunk(tokenizer: Callable[[str], Sequence[str]], texts: Any, start: int,
                 vocab: dict[str, int], word_ids: dict[str, int]) -> Counted:
    """Counts of ``texts``: a sequence of str, or a ``pyarrow`` string array (:func:`encode_array`)."""
    if isinstance(texts, list | tuple):
        ids, lens = encode_texts(tokenizer, texts, start, vocab, word_ids)
        return count_ids(np.asarray(ids, np.int32), np.asarray(lens, np.int64), len(vocab))
    arr_ids, arr_lens = encode_array(tokenizer, texts, start, vocab, word_ids)
    return count_ids(arr_ids, arr_lens, len(vocab))


def _worker(key: bytes, blob: bytes, texts: Any, start: int) -> tuple[str, int, list[str], Counted]:
    """In a worker process: one chunk's counts in worker-wide term ids, and the terms it added.

    The word and term maps live as long as the worker (for one ``key``, a build), so each
    chunk looks up and stems only words the worker has not seen. Returns ``(worker, n_before,
    new_terms, counted)``: the worker's token, its vocabulary size before this chunk, the terms
    this chunk added (in order of first occurrence, ids ``n_before`` on) and the counts.
    """
    state = _STATE.get(key)
    if state is None:
        try:
            tokenizer = pickle.loads(blob)  # our own bytes, from the parent process
        except Exception as exc:
            raise KolmError(f"a worker process could not rebuild the tokenizer: {type(exc).__name__}: {exc}") from exc
        _STATE.clear()
        state = _STATE[key] = (f"{os.getpid()}-{os.urandom(8).hex()}", tokenizer, {}, {})
    token, tokenizer, vocab, word_ids = state
    n_before = len(vocab)
    counted = _count_chunk(tokenizer, texts, start, vocab, word_ids)
    return token, n_before, list(islice(vocab, n_before, None)), counted


class WorkerMaps:
    """Worker-wide term ids to global ones, each worker's chunks taken in row order.

    A worker takes its chunks in row order and the parent merges all chunks in row order, so
    every term a worker met before a chunk already has a global id, and the terms new to the
    worker come in their order of first occurrence in the chunk: mapping them with
    ``setdefault`` gives the vocabulary of a single pass over the whole corpus.
    """

    def __init__(self, merger: Merger) -> None:
        self.merger = merger
        self._maps: dict[str, npt.NDArray[np.int32]] = {}

    def add(self, worker: str, n_before: int, new_terms: list[str], counted: Counted) -> None:
        old = self._maps.get(worker, np.zeros(0, np.int32))
        if old.shape[0] != n_before:  # cannot happen with ordered queues: never merge wrong ids
            raise KolmError(f"worker {worker} reported {n_before} known terms, the parent holds {old.shape[0]}")
        vocab = self.merger.vocab
        setdefault = vocab.setdefault
        new = np.array([setdefault(t, len(vocab)) for t in new_terms], np.int32)
        remap = self._maps[worker] = np.concatenate([old, new]) if n_before else new
        lengths, row_nnz, terms, tf = counted
        self.merger.add((lengths, row_nnz, remap[terms], tf))


def _tokenizer_blob(tokenizer: Callable[[str], Sequence[str]]) -> bytes:
    """The tokenizer as bytes for the workers, checked to rebuild here first."""
    try:
        blob = pickle.dumps(tokenizer)
        pickle.loads(blob)
    except Exception as exc:
        raise KolmTypeError(f"the tokenizer cannot be sent to worker processes ({type(exc).__name__}: {exc}); "
                            "pass n_jobs=1 to tokenise in this process") from exc
    return blob


def _chars(texts: Sequence[str]) -> int:
    """Characters in ``texts`` (items that are not strings count 0)."""
    try:
        return sum(map(len, texts))
    except TypeError:
        return sum(len(t) for t in texts if isinstance(t, str))


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the pool's workers now (bounded: terminate, then kill)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join(5.0)


def chunk_seconds(chars: int) -> float:
    """The default deadline of a chunk of ``chars`` characters: 60 s plus 1 s per 100 kB."""
    return _SECONDS_PER_CHUNK + chars / _BYTES_PER_SECOND


def await_chunk(future: Any, start: int, stop: int, n_rows: int, wait: float) -> tuple[str, int, list[str], Counted]:
    """The result of :func:`_worker` counting rows ``[start, stop)`` (of ``n_rows``), awaited
    at most ``wait`` seconds; a worker that overran, died or could not send raises
    ``KolmError`` naming the rows (the caller stops the pool)."""
    try:
        result: tuple[str, int, list[str], Counted] = future.result(timeout=wait)
    except FutureTimeout:
        raise KolmError(f"tokenising document rows {start}-{stop - 1} in a worker process took more than "
                        f"{wait:.0f} s; the workers were stopped") from None
    except BrokenProcessPool as exc:
        raise KolmError(
            f"a tokenising worker process died before document rows {start}-{n_rows - 1} were all counted "
            "(killed, out of memory, or a script without an `if __name__ == \"__main__\":` guard, which "
            "worker processes re-import); pass n_jobs=1 to tokenise in this process") from exc
    except KolmError:  # a document's row, or the tokenizer not rebuilt
        raise
    except Exception as exc:  # the chunk or its result could not travel between processes
        raise KolmError(f"tokenising document rows {start}-{stop - 1} in a worker process failed "
                        f"({type(exc).__name__}: {exc}); pass n_jobs=1 to tokenise in this process") from exc
    return result


def count_texts(texts: Sequence[str], tokenizer: Callable[[str], Sequence[str]], n_jobs: int, chunk: int,
                chunk_timeout: float | None, progress: bool = False) -> Merger:
    """Tokenise and count ``texts`` in chunks of ``chunk`` documents on ``n_jobs`` processes.

    ``n_jobs == 1`` or a single chunk: in this process. Otherwise a
    :class:`ProcessPoolExecutor`; each chunk's result is awaited at most ``chunk_timeout``
    seconds (default: 60 s plus 1 s per 100 kB of its text) after the previous one arrived,
    the first 60 s more (starting the workers). ``progress``: a bar on stderr, a step per chunk.
    A failing document raises ``KolmValueError`` naming its row; a worker that dies or
    overruns raises ``KolmError`` naming the rows; the workers are ended either way.
    """
    from tqdm.auto import tqdm

    merger = Merger()
    starts = range(0, len(texts), chunk)
    bar = tqdm(total=len(texts), unit=" docs", desc="indexing", leave=False, disable=not progress)
    try:
        return _count(texts, tokenizer, n_jobs, chunk, chunk_timeout, merger, starts, bar)
    finally:
        bar.close()


def _count(texts: Sequence[str], tokenizer: Callable[[str], Sequence[str]], n_jobs: int, chunk: int,
           chunk_timeout: float | None, merger: Merger, starts: range, bar: Any) -> Merger:
    if n_jobs == 1 or len(starts) < 2:
        word_ids: dict[str, int] = {}
        for s in starts:
            merger.add(_count_chunk(tokenizer, texts[s:s + chunk], s, merger.vocab, word_ids))
            bar.update(min(chunk, len(texts) - s))
        return merger
    blob, key = _tokenizer_blob(tokenizer), os.urandom(16)
    maps = WorkerMaps(merger)
    pool = ProcessPoolExecutor(max_workers=min(n_jobs, len(starts)), mp_context=_context())
    try:
        try:
            futures = [pool.submit(_worker, key, blob, texts[s:s + chunk], s) for s in starts]
        except (BrokenProcessPool, OSError, EOFError) as exc:
            raise KolmError(f"could not start tokenising worker processes ({type(exc).__name__}: {exc}); pass "
                            "n_jobs=1 to tokenise in this process") from exc
        for i, (s, future) in enumerate(zip(starts, futures, strict=True)):
            stop = min(s + chunk, len(texts))
            wait = chunk_timeout
            if wait is None:
                wait = chunk_seconds(_chars(texts[s:stop]))
            maps.add(*await_chunk(future, s, stop, len(texts), wait + (_START_SECONDS if i == 0 else 0.0)))
            bar.update(stop - s)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
    return merger
