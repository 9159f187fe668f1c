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
from collections.abc import Callable, Iterable, Sequence
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
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmError, KolmTypeError, KolmValueError

__all__ = ["Counted", "Merger", "WorkerMaps", "await_chunk", "chunk_seconds", "count_ids", "count_texts", "encode_array",
           "encode_texts", "encode_tokens", "resolve_n_jobs", "term_major"]

#: (lengths int64 (n,), distinct terms per document int64 (n,), term ids int32 (nnz,), tf int32 (nnz,))
Counted = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int32]]

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


def _row_error(row: int, exc: Exception) -> KolmValueError:
    what = str(exc) if isinstance(exc, KolmError) else f"{type(exc).__name__}: {exc}"
    return KolmValueError(f"document row {row}: tokenising failed: {what}")


def _token_list(tokens: Iterable[str], row: int) -> Sequence[str]:
    """``tokens`` as a list or tuple, read once (a generator cannot be read twice); a str (whose
    characters would become the tokens) or a non-iterable is a ``KolmTypeError``."""
    if isinstance(tokens, list | tuple):
        return tokens
    if isinstance(tokens, str | bytes):
        raise KolmTypeError(f"document row {row}: a tokenizer must return a list of str, got a "
                            f"{type(tokens).__name__} ({tokens[:40]!r})")
    try:
        return list(tokens)
    except TypeError as exc:
        raise KolmTypeError(f"document row {row}: tokens must be an iterable of str ({exc})") from exc
    except Exception as exc:  # raised while a lazy tokenizer runs
        raise _row_error(row, exc) from exc


def _bad_token(tokens: Sequence[Any], row: int) -> KolmError | None:
    """The error for the first token of ``tokens`` that is not a non-empty str (None: all are)."""
    for pos, t in enumerate(tokens):
        if not isinstance(t, str):
            return KolmTypeError(f"document row {row}: token {pos} is {t!r:.40} of type {type(t).__name__}; "
                                 "a tokenizer must return a list of non-empty str")
        if not t:
            return KolmValueError(f"document row {row}: token {pos} is the empty string; "
                                  "a tokenizer must return a list of non-empty str")
    return None


def _tokenize(tokenizer: Callable[[str], Iterable[str]], text: str, row: int) -> Sequence[str]:
    try:
        tokens = tokenizer(text)
    except Exception as exc:
        raise _row_error(row, exc) from exc
    return _token_list(tokens, row)


def encode_texts(tokenizer: Callable[[str], Sequence[str]], texts: Iterable[str], start: int,
                 vocab: dict[str, int], word_ids: dict[str, int]) -> tuple[list[int], list[int]]:
    """Term ids of texts, back to back, and the number of ids per text.

    A plain :class:`Tokenizer` is applied word by word (:meth:`Tokenizer.words`), each
    distinct word mapped once through ``word_ids`` (-1 for a stopword, dropped by
    :func:`count_ids`); any other callable is called per text. New terms enter ``vocab``
    in order of first occurrence. An error names the document row (``start`` + position).
    """
    if type(tokenizer) is not Tokenizer:  # a subclass may override __call__: call it
        lists = (_tokenize(tokenizer, text, row) for row, text in enumerate(texts, start))
        return encode_tokens(lists, vocab, start)
    row = start
    ids: list[int] = []
    lens: list[int] = []
    get, words, term, setdefault = word_ids.__getitem__, tokenizer.words, tokenizer.term, vocab.setdefault
    drop = tokenizer.drop_phrases
    try:
        for row, text in enumerate(texts, start):  # noqa: B007 (the row an error names)
            ws = drop(words(text))
            n0 = len(ids)
            try:
                ids += map(get, ws)
            except KeyError:  # new words: map them (in order, so new terms enter in order)
                del ids[n0:]
                for w in ws:
                    if w not in word_ids:
                        t = term(w)
                        word_ids[w] = -1 if t is None else setdefault(t, len(vocab))
                ids += map(get, ws)
            lens.append(len(ids) - n0)
    except Exception as exc:
        raise _row_error(row, exc) from exc
    return ids, lens


def encode_tokens(token_lists: Iterable[Sequence[str]], vocab: dict[str, int], start: int = 0,
                  ) -> tuple[list[int], list[int]]:
    """Term ids of token lists, back to back, and their lengths (new terms enter ``vocab``).

    A token list that is not a list or tuple (a generator, say) is read once into a list:
    its tokens are mapped twice when some are new. Tokens must be non-empty str: anything else
    (a str instead of a list, a tuple or number token, an empty string) raises
    ``KolmTypeError``/``KolmValueError`` naming its document row (``start`` + position) and
    token. Only tokens new to ``vocab`` are checked: every term in it passed the check.
    """
    ids: list[int] = []
    lens: list[int] = []
    get, setdefault = vocab.__getitem__, vocab.setdefault
    for row, given in enumerate(token_lists, start):
        tokens = _token_list(given, row)
        n0 = len(ids)
        try:
            ids += map(get, tokens)
        except (KeyError, TypeError):  # new (or unhashable) tokens: check, then number them
            del ids[n0:]
            bad = _bad_token(tokens, row)
            if bad is not None:
                raise bad from None
            ids += [setdefault(t, len(vocab)) for t in tokens]
        lens.append(len(ids) - n0)
    return ids, lens


def encode_array(tokenizer: Callable[[str], Sequence[str]], texts: Any, start: int, vocab: dict[str, int],
                 word_ids: dict[str, int]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """:func:`encode_texts` of a ``pyarrow`` string array without nulls: term ids int32 (n_ids,)
    (-1 for a stopword) and ids per text int64 (n,), the same values.

    A plain :class:`Tokenizer` splits all the texts at once (:meth:`Tokenizer.words_array`)
    and the words are numbered by Arrow (``dictionary_encode``: each distinct word once, in
    order of first occurrence), so only the distinct words are looked up in ``word_ids``, in
    that order (new terms enter ``vocab`` as :func:`encode_texts` enters them). Any other
    tokenizer, or a failure, goes through :func:`encode_texts` (which names the row).
    """
    import pyarrow.compute as pc

    if type(tokenizer) is not Tokenizer:
        ids, lens = encode_texts(tokenizer, texts.to_pylist(), start, vocab, word_ids)
        return np.asarray(ids, np.int32), np.asarray(lens, np.int64)
    try:
        words, counts = tokenizer.words_array(texts)
        coded = pc.dictionary_encode(words)
        distinct = coded.dictionary.to_pylist()
        known = list(map(word_ids.get, distinct))
        if None in known:  # new words, in order of first occurrence: map them in that order
            term, setdefault = tokenizer.term, vocab.setdefault
            for i, w in enumerate(distinct):
                if known[i] is None:
                    t = term(w)
                    known[i] = word_ids[w] = -1 if t is None else setdefault(t, len(vocab))
        remap = np.asarray(known, np.int32)
        codes = coded.indices.to_numpy(zero_copy_only=False) if len(coded) else np.zeros(0, np.int32)
        return remap[codes], counts
    except Exception:  # find the row: the text-by-text path names it
        ids, lens = encode_texts(tokenizer, texts.to_pylist(), start, vocab, word_ids)
        return np.asarray(ids, np.int32), np.asarray(lens, np.int64)


def count_ids(ids: npt.NDArray[np.int32], lens: npt.NDArray[np.int64], n_vocab: int) -> Counted:
    """Doc-major counts of term ids (int32 (n_ids,), -1 = dropped) in documents of ``lens`` ids."""
    n = int(lens.shape[0])
    keep = ids >= 0
    if not keep.all():
        ids = ids[keep]
        lens = np.bincount(np.repeat(np.arange(n, dtype=np.int64), lens)[keep], minlength=n).astype(np.int64)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    m = sp.csr_matrix((np.ones(ids.shape[0], np.int32), ids, ptr), shape=(n, n_vocab))
    m.sum_duplicates()  # one entry per (document, term), its data the count
    return (lens.astype(np.int64, copy=False), np.diff(m.indptr).astype(np.int64),
            m.indices.astype(np.int32, copy=False), m.data.astype(np.int32, copy=False))


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
