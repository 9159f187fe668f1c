"""Unweighted term-major postings of a tokenised corpus, and collection-wide BM25 statistics.

Building a BM25 index has two phases: counting (which needs only the documents at hand) and
weighting (which needs the document frequencies, size and mean length of the whole
collection). :class:`Postings` is the result of the first phase, so a corpus shard can be
tokenised and counted once where it lives, report its :class:`CollectionStats`, and be
weighted with the merged statistics without tokenising again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmValueError

__all__ = ["CollectionStats", "Postings"]

_MAX_DOCS = np.iinfo(np.int32).max


@dataclass(frozen=True)
class CollectionStats:
    """Collection-wide BM25 statistics, so that a shard scores exactly like the whole index.

    Attributes
    ----------
    df : dict token -> document frequency over the whole collection
    n_docs : int
    avgdl : float
        Mean document length (tokens) over the whole collection.
    total_len : int, optional
        Total tokens; when every part has it, a merge divides exact integers, so a sharded
        ``avgdl`` equals the unsharded one to the last bit.
    """

    df: Mapping[str, int]
    n_docs: int
    avgdl: float
    total_len: int | None = None

    @classmethod
    def from_tokens(cls, token_lists: Iterable[Sequence[str]]) -> CollectionStats:
        """Statistics of tokenised documents (one token list per document)."""
        return Postings.from_tokens(token_lists).stats()

    @classmethod
    def merge(cls, parts: Sequence[CollectionStats]) -> CollectionStats:
        """Statistics of the union of disjoint parts (gathered from shards)."""
        df: dict[str, int] = {}
        for p in parts:
            for t, c in p.df.items():
                df[t] = df.get(t, 0) + int(c)
        n = sum(p.n_docs for p in parts)
        if all(p.total_len is not None for p in parts):
            exact = sum(int(p.total_len or 0) for p in parts)
            return cls(df=df, n_docs=n, avgdl=float(exact) / n if n else 0.0, total_len=exact)
        total = sum(p.avgdl * p.n_docs for p in parts)
        return cls(df=df, n_docs=n, avgdl=total / n if n else 0.0)


@dataclass(frozen=True)
class Postings:
    """Term frequencies of a corpus, grouped by term, documents ascending within a term.

    Attributes
    ----------
    vocab : list of str (V,)
        Terms in order of first occurrence; a term's id is its position.
    t_ptr : int64 (V + 1,)
        Term ``t``'s postings are ``[t_ptr[t], t_ptr[t + 1])``; ``np.diff(t_ptr)`` is the
        local document frequency.
    p_doc : int32 (nnz,)
        Document row of each posting.
    tf : int32 (nnz,)
        Occurrences of the term in that document.
    lengths : int64 (n_docs,)
        Tokens per document.
    """

    vocab: list[str]
    t_ptr: npt.NDArray[np.int64]
    p_doc: npt.NDArray[np.int32]
    tf: npt.NDArray[np.int32]
    lengths: npt.NDArray[np.int64]

    @property
    def n_docs(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def p_term(self) -> npt.NDArray[np.int64]:
        """Term id of each posting, int64 (nnz,)."""
        return np.repeat(np.arange(len(self.vocab), dtype=np.int64), np.diff(self.t_ptr))

    @classmethod
    def from_tokens(cls, token_lists: Iterable[Sequence[str]], *, chunk: int = 4096) -> Postings:
        """Count tokenised documents (any iterable: a generator keeps memory to one chunk).

        Parameters
        ----------
        token_lists : iterable of sequence of str
            One token list per document, in row order.
        chunk : int
            Documents encoded per step (token strings never outlive their chunk).
        """
        vocab: dict[str, int] = {}
        term_chunks: list[npt.NDArray[np.int32]] = []
        len_chunks: list[npt.NDArray[np.int64]] = []
        ids: list[int] = []
        lens: list[int] = []
        setdefault = vocab.setdefault
        for tokens in token_lists:
            before = len(ids)
            ids.extend([setdefault(t, len(vocab)) for t in tokens])
            lens.append(len(ids) - before)
            if len(lens) >= chunk:
                term_chunks.append(np.asarray(ids, np.int32))
                len_chunks.append(np.asarray(lens, np.int64))
                ids, lens = [], []
        term_chunks.append(np.asarray(ids, np.int32))
        len_chunks.append(np.asarray(lens, np.int64))
        lengths = np.concatenate(len_chunks)
        if lengths.shape[0] > _MAX_DOCS:
            raise KolmValueError(f"{lengths.shape[0]} documents exceed one index's int32 limit; shard the corpus")
        terms = np.concatenate(term_chunks)
        del term_chunks
        return cls.from_arrays(list(vocab), terms, lengths)

    @classmethod
    def from_arrays(cls, vocab: list[str], terms: npt.NDArray[np.int32], lengths: npt.NDArray[np.int64]) -> Postings:
        """Count term ids (int32 (n_tokens,), documents' tokens back to back; ``lengths`` (n_docs,))."""
        n_docs, n_vocab = int(lengths.shape[0]), len(vocab)
        docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
        key, tf = np.unique(terms.astype(np.int64) * max(n_docs, 1) + docs, return_counts=True)  # term-major
        del docs
        p_term = key // max(n_docs, 1)
        t_ptr = np.zeros(n_vocab + 1, np.int64)
        np.cumsum(np.bincount(p_term, minlength=n_vocab), out=t_ptr[1:])
        return cls(vocab=vocab, t_ptr=t_ptr, p_doc=(key % max(n_docs, 1)).astype(np.int32),
                   tf=tf.astype(np.int32), lengths=lengths)

    def stats(self) -> CollectionStats:
        """This corpus's own :class:`CollectionStats` (mergeable across shards)."""
        df = np.diff(self.t_ptr).tolist()
        n = self.n_docs
        total = int(self.lengths.sum())
        return CollectionStats(df=dict(zip(self.vocab, df, strict=True)), n_docs=n,
                               avgdl=float(total) / n if n else 0.0, total_len=total)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays (vocabulary strings excluded)."""
        return int(self.t_ptr.nbytes + self.p_doc.nbytes + self.tf.nbytes + self.lengths.nbytes)
