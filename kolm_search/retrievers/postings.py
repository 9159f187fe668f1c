"""Unweighted term-major postings of a tokenised corpus, and collection-wide BM25 statistics.

Building a BM25 index has two phases: counting (which needs only the documents at hand) and
weighting (which needs the document frequencies, size and mean length of the whole
collection). :class:`Postings` is the result of the first phase, so a corpus shard can be
tokenised and counted once where it lives, report its :class:`CollectionStats`, and be
weighted with the merged statistics without tokenising again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np
import numpy.typing as npt

from kolm_search._params import positive_int, seconds
from kolm_search.errors import KolmValueError
from kolm_search.retrievers._encode import count_ids, encode_tokens
from kolm_search.retrievers._parallel import Merger, count_texts, resolve_n_jobs, term_major

__all__ = ["CollectionStats", "PROGRESS_DOCS", "Postings"]

PROGRESS_DOCS = 50_000  # corpora this large show a progress bar while they are indexed, by default

_MAX_DOCS = np.iinfo(np.int32).max
_MIN_CHUNK, _MAX_CHUNK = 2_000, 50_000  # default documents per task of Postings.from_texts
_PARALLEL_MIN_CHARS = 16_000_000  # smaller corpora tokenise in under ~2 s: worker start-up would not pay


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
        chunk = positive_int("chunk", chunk)
        merger, it, start = Merger(), iter(token_lists), 0
        while batch := list(islice(it, chunk)):
            ids, lens = encode_tokens(batch, merger.vocab, start)
            start += len(batch)
            del batch
            merger.add(count_ids(np.asarray(ids, np.int32), np.asarray(lens, np.int64), len(merger.vocab)))
        return cls(*merger.finish())

    @classmethod
    def from_texts(cls, texts: Sequence[str], tokenizer: Callable[[str], Sequence[str]], *, n_jobs: int | None = None,
                   chunk: int | None = None, chunk_timeout: float | None = None,
                   progress: bool | None = None) -> Postings:
        """Tokenise and count texts, on several processes for a large corpus.

        Equal to ``Postings.from_tokens(tokenizer(t) for t in texts)`` (same vocabulary order,
        same arrays) whatever ``n_jobs`` and ``chunk``.

        Parameters
        ----------
        texts : sequence of str (n_docs,)
            One text per document, in row order.
        tokenizer : Tokenizer or picklable callable str -> list of str
        n_jobs : int, optional
            Processes tokenising and counting (default: the usable cores; 1 in a daemonic
            process, which cannot have children). Workers are forked from a forkserver (or
            spawned), which imports the main script: like any multiprocessing code, a script
            needs an ``if __name__ == "__main__":`` guard.
        chunk : int, optional
            Documents per task; a corpus of one chunk is counted in this process. Default:
            the whole corpus if its text is under 16 M characters (starting worker processes,
            about a second, would cost more than they save), else a quarter of each process's
            share, from 2,000 to 50,000 documents.
        chunk_timeout : float, optional
            Seconds to wait for each chunk after the previous one (default 60 s plus 1 s per
            100 kB of its text; the first chunk 60 s more for starting the workers).
        progress : bool, optional
            A progress bar on stderr (a step per chunk); None (default) shows one for
            :data:`PROGRESS_DOCS` documents or more.

        Raises
        ------
        KolmValueError
            Bad ``n_jobs``/``chunk``; a document that fails to tokenise (its row named).
        KolmTypeError
            A tokenizer that cannot be sent to worker processes.
        KolmError
            A worker process died or overran its deadline (the pool is stopped).
        """
        jobs = resolve_n_jobs(n_jobs)
        texts = texts if isinstance(texts, list) else list(texts)
        if len(texts) > _MAX_DOCS:
            raise KolmValueError(f"{len(texts)} documents exceed one index's int32 limit; shard the corpus")
        if chunk is None:
            try:
                size = sum(map(len, texts))
            except TypeError:  # not str: fails in this process, naming the row
                size = 0
            share = -(-len(texts) // (4 * jobs))
            chunk = max(len(texts), 1) if size < _PARALLEL_MIN_CHARS else min(max(share, _MIN_CHUNK), _MAX_CHUNK)
        chunk = positive_int("chunk", chunk)
        chunk_timeout = seconds("chunk_timeout", chunk_timeout)
        show = len(texts) >= PROGRESS_DOCS if progress is None else bool(progress)
        return cls(*count_texts(texts, tokenizer, jobs, chunk, chunk_timeout, show).finish())

    @classmethod
    def from_arrays(cls, vocab: list[str], terms: npt.NDArray[np.int32], lengths: npt.NDArray[np.int64]) -> Postings:
        """Count term ids (int32 (n_tokens,), documents' tokens back to back; ``lengths`` (n_docs,));
        ``terms`` is left as it was (counting sorts a copy)."""
        lengths = np.asarray(lengths, np.int64)
        return cls(vocab, *term_major([count_ids(np.array(terms, np.int32), lengths, len(vocab))], len(vocab)))

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
