"""Saving and loading a :class:`~kolm_search.retrievers.bm25.BM25Retriever`: the payload that
:meth:`~BM25Files.save` writes all or nothing (:mod:`kolm_search.retrievers._persist`: the
configuration, the weighted arrays, the term and block maxima, the term frequencies of an index
with its own statistics, the vocabulary and the documents), the payload of a streaming build's
files, and :meth:`~BM25Files.load`, which checks what it reads
(:func:`~kolm_search.retrievers.bm25_saved.read_bm25`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from kolm_search._params import one_of
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.text import Tokenizer
from kolm_search.engine.tokenizers import tokenizer_config
from kolm_search.errors import KolmValueError
from kolm_search.retrievers._persist import FileSource, Payload, save_index
from kolm_search.retrievers._saved import SavedFiles, Verify, open_index, retrying
from kolm_search.retrievers.bm25_saved import ARRAYS, FILES_SINCE, FORMAT, VERSION, DeferredCheck, read_bm25
from kolm_search.retrievers.bm25_weights import BM25_METHODS, Method
from kolm_search.retrievers.bounds import PRUNINGS, Pruning

__all__ = ["BM25Files"]

S = TypeVar("S", bound="BM25Files")
_SAMPLE = 32  # documents tokenised before and after the tokenizer's round trip at save


class BM25Files:
    """``save``, ``load`` and the payloads of a BM25 index, for a class that has its ``table``,
    parameters, arrays, ``vocab``, ``merge()`` and ``_from_arrays(table, arrays, vocab, ...)``
    (:class:`~kolm_search.retrievers.bm25.BM25Retriever`)."""

    if TYPE_CHECKING:
        table: DocumentTable
        fields: tuple[str, ...]
        tokenizer: Tokenizer
        method: Method
        k1: float
        b: float
        delta: float
        fusion_k: float
        own_stats: bool | None
        vocab: list[str]
        pruning: Pruning
        _tf_unchecked: DeferredCheck | None

        @property
        def tf(self) -> npt.NDArray[np.int32] | None: ...

        @property
        def t_max(self) -> npt.NDArray[np.float32]: ...

        @property
        def b_max(self) -> npt.NDArray[np.float32]: ...

        def merge(self) -> None: ...

        @classmethod
        def _from_arrays(cls: type[S], table: DocumentTable, arrays: Mapping[str, Any], vocab: list[str], *,
                         own_stats: bool | None, **config: Any) -> S: ...

    def config(self) -> dict[str, Any]:
        """The manifest's ``config``; a tokenizer that cannot be restored raises (see :meth:`save`)."""
        sample = self.table.take(np.arange(min(_SAMPLE, len(self.table)))).texts(self.fields)
        return {"method": self.method, "k1": self.k1, "b": self.b, "delta": self.delta,
                "tokenizer": tokenizer_config(self.tokenizer, sample), "fields": list(self.fields),
                "fusion_k": self.fusion_k}

    def _payload(self) -> Payload:
        """What :meth:`save` writes, pending changes merged, checked in memory."""
        self.merge()
        arrays = {name: np.asarray(getattr(self, name)).astype(dtype, copy=False) for name, (_, dtype) in ARRAYS.items()}
        stats = "unknown" if self.own_stats is None else "own" if self.own_stats and self.tf is not None else "external"
        if stats == "own":
            arrays["tf"] = np.asarray(self.tf).astype(np.int32, copy=False)
        arrays["term_max"] = np.asarray(self.t_max, np.float32)
        arrays["block_max"] = np.asarray(self.b_max, np.float32)
        return Payload(FORMAT, VERSION, {"config": self.config(), "n_docs": len(self.table), "stats": stats},
                       arrays=arrays, blobs={"vocab": list(self.vocab)}, tables={"documents": self.table})

    def streamed_payload(self, n_docs: int, vocab: list[str], arrays: Mapping[str, FileSource],
                         documents: FileSource, *, own_stats: bool = True) -> Payload:
        """What :meth:`save` writes for an index of this configuration whose files are on disk
        already (a streaming build, :mod:`kolm_search.retrievers.stream_build`, whose probe over
        the corpus's first documents this is): ``arrays`` the ``.npy`` files of ``t_ptr, t_docs,
        t_w, nonocc, doc_len, term_max, block_max`` and, with its own statistics, ``tf``
        (``own_stats`` False: a shard weighted with a collection's statistics, saved without ``tf``),
        ``documents`` the documents file of the table
        (:class:`~kolm_search.engine.mapped_table.DocumentsWriter`)."""
        need = {*ARRAYS, "term_max", "block_max", *(("tf",) if own_stats else ())}
        if set(arrays) != need:
            raise KolmValueError(f"a BM25 payload has arrays {sorted(arrays)}; it needs {sorted(need)}")
        stats = "own" if own_stats else "external"
        return Payload(FORMAT, VERSION, {"config": self.config(), "n_docs": n_docs, "stats": stats},
                       blobs={"vocab": list(vocab)},
                       files={**{name: ("npy", f) for name, f in arrays.items()}, "documents": ("arrow", documents)})

    def save(self, path: str | Path) -> None:
        """Write the index to folder ``path``, replacing any index there all or nothing.

        Pending changes are merged first. Term frequencies (``tf``) are written when the index
        has its own statistics, so that a loaded index can take further changes; each term's and
        each block of postings' largest weight (``term_max``, ``block_max``: what pruning reads) always. Everything is
        built and checked before the first byte is written: a tokenizer that a loaded index
        could not rebuild (a function such as ``str.split``, an unregistered subclass; see
        :func:`kolm_search.register_tokenizer`) raises ``KolmTypeError`` naming its class and
        leaves the folder as it was. Then the files are written beside the old ones and one
        rename of ``manifest.json`` switches to them: a kill at any point leaves the old index
        or the new one (:mod:`kolm_search.retrievers._persist`).
        """
        save_index(path, self._payload())

    @classmethod
    def load(cls: type[S], path: str | Path, *, mmap: bool = True, n_threads: int | None = None,
             pruning: Pruning = "auto", verify: Verify = "auto") -> S:
        """Load an index written by :meth:`save` (arrays and documents memory-mapped by default).

        Every file is checked before any search can read what it holds, as ``verify`` says
        (:mod:`kolm_search.retrievers.bm25_saved`): ``"full"`` reads every byte (each file's
        size and sha256 against the manifest, array dtypes, shapes, pointers, document rows,
        finite weights, weights equal to those of the saved term frequencies, term and block
        maxima equal to the postings', the document table whole); ``"quick"`` checks sizes,
        headers and pointers, without the digests, and each term's postings (term and block
        maxima included) when a search first reads them (:mod:`~kolm_search.retrievers.postings_gate`:
        load time grows with the vocabulary only; whatever reads the whole postings checks every
        term first), the term frequencies when first read, the documents' rows when first
        read; ``"auto"`` (default)
        checks an index of up to 256 MiB in full and a larger one quickly. A damaged index raises
        ``KolmValueError`` naming the file and the key or position, never a crash. Format
        versions 1 and 2 (before file maps), 3 (before term maxima), 4 (documents in parquet,
        read whole) and 5 (before block maxima) still load; the bounds that pruning reads are
        computed from the postings by every load (the saved maxima are compared with them), so
        an older index prunes as a new one does.
        """
        root = Path(path)
        one_of("pruning", pruning, PRUNINGS)

        def read() -> S:
            body, files = open_index(root, files_since=FILES_SINCE, verify=verify)
            out = cls._from_saved(files, body, mmap=mmap, n_threads=n_threads)
            out.pruning = pruning
            return out

        return retrying(root, read)

    @classmethod
    def _from_saved(cls: type[S], files: SavedFiles, body: dict[str, Any], *, mmap: bool = True,
                    n_threads: int | None = None) -> S:
        """The index of one manifest ``body`` (or a composite's child), checked, and its files."""
        saved = read_bm25(files, body, BM25_METHODS, mmap=mmap, n_threads=n_threads)
        out = cls._from_arrays(saved.table, {**saved.arrays, "bounds": saved.bounds, "gate": saved.postings}, saved.vocab,
                               own_stats=saved.own_stats, n_threads=n_threads, **saved.config)
        out._tf_unchecked = saved.deferred
        return out
