"""Postings of a corpus counted chunk by chunk, spilled to disk, and read back term block by block.

A streaming build (:mod:`.stream_build`) counts each chunk of documents into :class:`Postings`
whose term ids it maps into one vocabulary (numbered in order of first occurrence over the
corpus, as an in-memory build numbers them). :class:`SpilledPostings` writes each chunk's
postings to raw files, grouped by global term id, and keeps only a term index per chunk
(term ids int32 and pointers int64) and the collection's document frequencies.

:meth:`SpilledPostings.blocks` then yields the corpus's term-major postings a block of terms at
a time: for terms ``[a, b)`` it reads each chunk's contiguous slice of them (``np.fromfile``
at an offset, no memory map whose pages would stay resident) and orders them by term,
stably, so that within a term documents ascend (chunks hold ascending rows). The blocks
together are exactly :meth:`Postings.from_tokens` of the whole corpus.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmError, KolmValueError
from kolm_search.retrievers.postings import Postings

__all__ = ["Block", "SpilledPostings", "gather_ranges"]

_MAX_DOCS = int(np.iinfo(np.int32).max)


def gather_ranges(starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Positions ``starts[i] .. starts[i] + lengths[i] - 1`` of every range, back to back, int64 (sum(lengths),)."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) + np.repeat(np.asarray(starts, np.int64) - (ends - lengths), lengths)


@dataclass(frozen=True)
class Block:
    """The corpus's postings of terms ``[start, stop)``.

    Attributes
    ----------
    start, stop : int
        Global term ids.
    t_ptr : int64 (stop - start + 1,)
        Pointers into this block's postings (from 0).
    p_doc : int32 (nnz_block,)
        Document rows (global), ascending within a term.
    tf : int32 (nnz_block,)
    """

    start: int
    stop: int
    t_ptr: npt.NDArray[np.int64]
    p_doc: npt.NDArray[np.int32]
    tf: npt.NDArray[np.int32]


@dataclass(frozen=True)
class _Chunk:
    terms: npt.NDArray[np.int32]  # global term ids, ascending (V_chunk,)
    ptr: npt.NDArray[np.int64]  # postings of terms[i]: [ptr[i], ptr[i + 1]) of the chunk's files (V_chunk + 1,)
    docs: Path
    tf: Path


class SpilledPostings:
    """Counted chunks of a corpus, in row order, spilled as raw files in folder ``root``.

    Attributes
    ----------
    vocab : dict str -> int
        The global vocabulary, in order of first occurrence.
    df : int64 (V,)
        Document frequency of each term so far.
    n_docs, nnz : int
    lengths : list of int64 arrays
        Each chunk's document lengths (tokens).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.vocab: dict[str, int] = {}
        self.df = np.zeros(0, np.int64)
        self.n_docs = 0
        self.nnz = 0
        self.lengths: list[npt.NDArray[np.int64]] = []
        self._chunks: list[_Chunk] = []

    def add(self, postings: Postings) -> None:
        """Spill one chunk's postings (its documents follow the previous chunks')."""
        if self.n_docs + postings.n_docs > _MAX_DOCS:
            raise KolmValueError(f"more than {_MAX_DOCS} documents exceed one index's int32 limit; shard the corpus")
        setdefault, vocab = self.vocab.setdefault, self.vocab
        to_global = np.asarray([setdefault(t, len(vocab)) for t in postings.vocab], np.int64)
        self._add(to_global, postings)

    def add_counted(self, new_terms: list[str], postings: Postings) -> None:
        """Spill one chunk's postings counted in this corpus's term ids (:class:`~.chunk_counter.CountedChunk`):
        ``postings.t_ptr`` spans the whole vocabulary, ``new_terms`` its last terms, new to it."""
        if self.n_docs + postings.n_docs > _MAX_DOCS:
            raise KolmValueError(f"more than {_MAX_DOCS} documents exceed one index's int32 limit; shard the corpus")
        vocab = self.vocab
        for t in new_terms:
            if vocab.setdefault(t, len(vocab)) != len(vocab) - 1:
                raise KolmError(f"term {t!r} counted as new was already known (a build bug)")
        if len(postings.t_ptr) != len(vocab) + 1:
            raise KolmError(f"a chunk counted over {len(postings.t_ptr) - 1} terms, the vocabulary has {len(vocab)} "
                            "(a build bug)")
        present = np.flatnonzero(np.diff(postings.t_ptr))
        t_ptr = np.concatenate([postings.t_ptr[present], postings.t_ptr[-1:]])  # absent terms hold nothing
        self._add(present.astype(np.int64), Postings([], t_ptr, postings.p_doc, postings.tf, postings.lengths))

    def _add(self, to_global: npt.NDArray[np.int64], postings: Postings) -> None:
        """Spill postings whose term ``i`` is term ``to_global[i]`` of the vocabulary."""
        vocab = self.vocab
        local_df = np.diff(postings.t_ptr)
        if len(vocab) > len(self.df):
            self.df = np.concatenate([self.df, np.zeros(len(vocab) - len(self.df), np.int64)])
        self.df[to_global] += local_df
        order = np.argsort(to_global)
        ptr = np.zeros(len(order) + 1, np.int64)
        np.cumsum(local_df[order], out=ptr[1:])
        if np.all(order[1:] > order[:-1]):  # terms already in global order: the postings as they are
            p_doc, tf = postings.p_doc, np.asarray(postings.tf, np.int32)
        else:
            take = gather_ranges(postings.t_ptr[:-1][order], local_df[order])
            p_doc, tf = postings.p_doc[take], np.asarray(postings.tf, np.int32)[take]
        k = len(self._chunks)
        chunk = _Chunk(to_global[order].astype(np.int32), ptr, self.root / f"chunk{k}.docs", self.root / f"chunk{k}.tf")
        try:
            (p_doc.astype(np.int64) + self.n_docs).astype(np.int32).tofile(chunk.docs)
            tf.tofile(chunk.tf)
        except OSError as exc:
            raise KolmError(f"{chunk.docs.parent}: cannot spill postings to disk: {exc}") from exc
        self._chunks.append(chunk)
        self.lengths.append(np.asarray(postings.lengths, np.int64))
        self.n_docs += postings.n_docs
        self.nnz += int(ptr[-1])

    def t_ptr(self) -> npt.NDArray[np.int64]:
        """Global pointers int64 (V + 1,) of the term-major postings."""
        out = np.zeros(len(self.df) + 1, np.int64)
        np.cumsum(self.df, out=out[1:])
        return out

    def blocks(self, max_postings: int) -> Iterator[Block]:
        """The term-major postings in blocks of whole terms, each of at most ``max_postings``
        postings (or one term, if longer)."""
        t_ptr = self.t_ptr()
        n_terms = len(self.df)
        start = 0
        while start < n_terms:
            stop = int(np.searchsorted(t_ptr, t_ptr[start] + max_postings, side="right")) - 1
            stop = min(max(stop, start + 1), n_terms)
            yield self._block(start, stop, t_ptr)
            start = stop

    def _block(self, start: int, stop: int, t_ptr: npt.NDArray[np.int64]) -> Block:
        terms, docs, tfs = [], [], []
        for c in self._chunks:
            i0, i1 = np.searchsorted(c.terms, [start, stop])
            if i0 == i1:
                continue
            p0, p1 = int(c.ptr[i0]), int(c.ptr[i1])
            terms.append(np.repeat(c.terms[i0:i1], np.diff(c.ptr[i0:i1 + 1])))
            try:
                docs.append(np.fromfile(c.docs, np.int32, count=p1 - p0, offset=4 * p0))
                tfs.append(np.fromfile(c.tf, np.int32, count=p1 - p0, offset=4 * p0))
            except OSError as exc:
                raise KolmError(f"{c.docs.parent}: cannot read spilled postings back: {exc}") from exc
        ptr = t_ptr[start:stop + 1] - t_ptr[start]
        if not terms:
            return Block(start, stop, ptr, np.zeros(0, np.int32), np.zeros(0, np.int32))
        order = np.argsort(np.concatenate(terms), kind="stable")
        return Block(start, stop, ptr, np.concatenate(docs)[order], np.concatenate(tfs)[order])
