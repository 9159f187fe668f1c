"""BM25 over a term-major sparse index, scored for a whole batch in one kernel call.

Weighting (the variants' formulas) lives in :mod:`kolm_search.retrievers.bm25_weights`, scoring
(texts or token ids to top-k) in :mod:`kolm_search.retrievers.bm25_scoring`, saving and loading
in :mod:`kolm_search.retrievers.bm25_files`, reading a saved index in
:mod:`kolm_search.retrievers.bm25_saved`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import one_of, real
from kolm_search.compose.kinds import RetrieverStage
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmValueError
from kolm_search.retrievers._batching import (
    frame_from_topk,
    fuse_expansions,
    retrieve_single,
    text_selections,
)
from kolm_search.retrievers.bm25_files import BM25Files
from kolm_search.retrievers.bm25_saved import DeferredCheck, run_deferred
from kolm_search.retrievers.bm25_scoring import BM25Scoring
from kolm_search.retrievers.bm25_weights import (
    BM25_METHODS,
    Method,
    query_offsets,
    weigh_postings,
)
from kolm_search.retrievers.bounds import PRUNINGS, Pruning, index_bounds
from kolm_search.retrievers.postings import CollectionStats, Postings
from kolm_search.retrievers.segments import Pending, combine_postings, merged_table
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = [
    "BM25Retriever",
    "BM25_METHODS",
    "CollectionStats",
    "Postings",
    "query_offsets",
]


@saved_kind("bm25")
class BM25Retriever(BM25Files, BM25Scoring, RetrieverStage):
    """Sparse BM25 retriever over a :class:`DocumentTable`.

    Parameters
    ----------
    documents : list of SearchDocument, DataFrame, DocumentTable, or another index (its documents)
    method : {"lucene", "robertson", "atire", "bm25l", "bm25+"}, default "lucene"
    k1, b, delta : float
        Usual BM25 parameters (``delta`` for bm25l / bm25+).
    tokenizer : Tokenizer, optional
        Default: lowercase, English stopwords, Snowball stemming.
    fields : sequence of str, default ("title", "content")
        Document fields indexed (joined with a space).
    fusion_k : float, default 60
        RRF constant used to merge the lists of expanded queries.
    n_threads : int, optional
        Kernel threads per search call, and threads weighting the postings at build time
        (default: the usable cores).
    n_jobs : int, optional
        Processes that tokenise and count the documents at build time (default: the usable
        cores; a corpus of under 16 M characters is counted in this process). See
        :meth:`Postings.from_texts`: the result is the same for any value.
    progress : bool, optional
        A progress bar on stderr while the documents are tokenised and counted; None
        (default) shows one for 50,000 documents or more, False never.
    stats : CollectionStats, optional
        Collection-wide statistics: this index is then a shard of a larger collection and
        scores exactly as the whole collection's index would.
    postings : Postings, optional
        Already counted postings of the table's rows (skips tokenisation).
    pruning : {"auto", "none"}, default "auto"
        Top-k by exact dynamic pruning (block-max MaxScore, :mod:`kolm_search._kernels.pruned`)
        for the queries where it pays (long postings for k:
        :func:`~kolm_search.retrievers.bounds.prune_queries`; a query whose rarer terms hold
        too many of its postings is given back), or ``"none"``: every query scores every
        posting of its terms. Results are the same bit for bit; each scoring call may override it.

    Notes
    -----
    Only documents that contain at least one query token are returned; ties in score are
    broken by document order. In ``"vector"`` mode the retriever returns nothing (so a
    hybrid composite degrades to its dense side).
    """

    name = "bm25"
    _tf: npt.NDArray[np.int32] | None = None
    _tf_unchecked: DeferredCheck | None = None  # a quick load's check of _tf, run when it is first read
    own_stats: bool | None = None  # weighted with its own statistics (None: unknown, version 1)

    def __init__(self, documents: Any, *, method: Method = "lucene", k1: float = 1.5, b: float = 0.75,
                 delta: float = 0.5, tokenizer: Tokenizer | None = None,
                 fields: Sequence[str] = ("title", "content"), fusion_k: float = 60,
                 n_threads: int | None = None, stats: CollectionStats | None = None,
                 postings: Postings | None = None, n_jobs: int | None = None, progress: bool | None = None,
                 pruning: Pruning = "auto") -> None:
        self._configure(method=method, k1=k1, b=b, delta=delta, tokenizer=tokenizer, fields=fields,
                        fusion_k=fusion_k, n_threads=n_threads, pruning=pruning)
        self._start_index(DocumentTable.coerce(documents))
        if postings is None:  # token strings live one chunk at a time
            postings = Postings.from_texts(self.table.texts(self.fields), self.tokenizer, n_jobs=n_jobs,
                                           progress=progress)
        self.index_postings(postings, stats=stats)

    def _configure(self, *, method: Method, k1: float, b: float, delta: float, tokenizer: Tokenizer | None,
                   fields: Sequence[str], fusion_k: float, n_threads: int | None, pruning: Pruning = "auto") -> None:
        """Check and set the parameters (of :meth:`__init__` and of a loaded index)."""
        one_of("method", method, BM25_METHODS)
        one_of("pruning", pruning, PRUNINGS)
        k1, delta, fusion_k = (real(name, value, low=0) for name, value in
                               (("k1", k1), ("delta", delta), ("fusion_k", fusion_k)))
        b = real("b", b, low=0, high=1)
        if k1 == 0 and (method == "bm25+" or (method == "bm25l" and delta == 0)):  # weight(tf=0) is 0/0
            raise KolmValueError(f"method {method!r} needs k1 > 0{' or delta > 0' if method == 'bm25l' else ''}")
        self.method: Method = method
        self.k1, self.b, self.delta = k1, b, delta
        self.tokenizer = tokenizer or Tokenizer()
        self.fields = tuple(fields)
        self.fusion_k = fusion_k
        self.n_threads = n_threads
        self.pruning: Pruning = pruning

    @property
    def tf(self) -> npt.NDArray[np.int32] | None:
        """Term frequency of each posting, int32 (nnz,) (None: a shard, or format version 1).
        After a quick load (``verify="quick"``) they are checked when first read, as a full load
        checks them (an update, a feedback model or a save reads them)."""
        if self._tf_unchecked is not None:
            arrays = {"t_ptr": self.t_ptr, "t_docs": self.t_docs, "t_w": self.t_w, "nonocc": self.nonocc,
                      "doc_len": self.doc_len}
            assert self._tf is not None
            self._tf = run_deferred(self._tf_unchecked, arrays, self._tf, self.n_threads)
            self._tf_unchecked = None
        return self._tf

    @tf.setter
    def tf(self, value: npt.NDArray[np.int32] | None) -> None:
        self._tf, self._tf_unchecked = value, None

    @classmethod
    def _from_arrays(cls, table: DocumentTable, arrays: Mapping[str, Any], vocab: list[str], *,
                     own_stats: bool | None, **config: Any) -> BM25Retriever:
        """An index over ``table`` from weighted arrays (``t_ptr``, ``t_docs``, ``t_w``, ``nonocc``,
        ``doc_len``, perhaps ``tf``, ``bounds`` and a quick load's ``gate``) and their ``vocab``, already checked (:meth:`load`'s path);
        ``config`` as :meth:`_configure` takes it."""
        self = cls.__new__(cls)
        self._configure(**config)
        self._start_index(table)
        self._set_arrays(arrays, vocab)
        self.own_stats = own_stats
        return self

    @classmethod
    def build(cls, source: Any, path: str | Path | None = None, *, chunk_size: int | None = None,
              memory_limit: int | None = None, n_jobs: int | None = None, progress: bool | None = None,
              mmap: bool = True, method: Method = "lucene", k1: float = 1.5, b: float = 0.75, delta: float = 0.5,
              tokenizer: Tokenizer | None = None, fields: Sequence[str] = ("title", "content"),
              fusion_k: float = 60, n_threads: int | None = None, pruning: Pruning = "auto") -> BM25Retriever:
        """Build an index from a corpus streamed in chunks, never holding all its texts, save it to
        folder ``path`` and load it (:mod:`kolm_search.retrievers.stream_build`).

        The index equals ``BM25Retriever(documents, ...)`` of the same documents, array for
        array and score for score, whatever ``chunk_size`` and ``memory_limit``.

        Parameters
        ----------
        source : str, Path, DataFrame or iterable
            A ``.jsonl[.gz]`` file of BEIR records, a BEIR folder, a ``.parquet`` file or folder,
            a ``.tsv[.gz]`` file of ``id<TAB>text`` lines, or an iterable of documents (dicts,
            ``SearchDocument`` s) or of DataFrames (:func:`kolm_search.io.corpus_stream.corpus_chunks`).
        path : str or Path, optional
            The index folder, replaced all or nothing. None: a temporary folder, the index loaded
            into memory (``mmap=False``) and the folder removed.
        chunk_size : int, optional
            Most documents read and counted at a time (default: as ``memory_limit`` allows).
        memory_limit : int, optional
            Bytes that a chunk of documents and a block of postings may take (default: a quarter
            of the machine's memory); 24 bytes per document and the vocabulary come on top.
        n_jobs, progress
            Processes tokenising each chunk; progress bars (documents/s, then postings/s).
        mmap : bool
            Load the saved arrays memory-mapped.
        method, k1, b, delta, tokenizer, fields, fusion_k, n_threads, pruning
            As the constructor takes them.

        Raises
        ------
        FrameValidationError
            A broken JSON line, a duplicate id, a missing or non-text field: naming the file and
            the line (JSONL, TSV), the row group and row (parquet) or the position (iterables),
            before anything is written; no temporary file is left.
        """
        from kolm_search.retrievers.stream_build import build_bm25

        def probe(table: DocumentTable) -> BM25Retriever:  # a probe: the parameters, over a few documents
            return cls(table, method=method, k1=k1, b=b, delta=delta, tokenizer=tokenizer, fields=fields,
                       fusion_k=fusion_k, n_threads=n_threads, n_jobs=1, progress=False)

        if path is not None:
            build_bm25(source, path, probe, chunk_size=chunk_size, memory_limit=memory_limit, n_jobs=n_jobs,
                       progress=progress)  # files this build computed, checked and wrote: no digests to read back
            return cls.load(path, mmap=mmap, n_threads=n_threads, pruning=pruning, verify="quick")
        import tempfile

        with tempfile.TemporaryDirectory(prefix="kolm-bm25-") as tmp:
            build_bm25(source, Path(tmp) / "index", probe, chunk_size=chunk_size, memory_limit=memory_limit,
                       n_jobs=n_jobs, progress=progress)
            return cls.load(Path(tmp) / "index", mmap=False, n_threads=n_threads, pruning=pruning, verify="quick")

    # -- indexing ----------------------------------------------------------------------
    def index_tokens(self, token_lists: Iterable[Sequence[str]], *, stats: CollectionStats | None = None) -> None:
        """(Re)build the index from already tokenised documents, one list per table row.

        With ``stats`` (collection-wide document frequencies, size and mean length) this index
        is a shard: its scores equal those of an index over the whole collection.
        """
        self.index_postings(Postings.from_tokens(token_lists), stats=stats)

    def index_postings(self, postings: Postings, *, stats: CollectionStats | None = None) -> None:
        """(Re)build the index from counted :class:`Postings` of the table's rows (weighting only)."""
        if postings.n_docs != len(self.table):
            raise KolmValueError(f"postings cover {postings.n_docs} documents but the table has {len(self.table)}")
        n_vocab, lengths = len(postings.vocab), postings.lengths
        local_df = np.diff(postings.t_ptr)
        if stats is None:
            df, n_coll = local_df.astype(np.float64), postings.n_docs
            avgdl = float(int(lengths.sum())) / n_coll if n_coll else 0.0
        else:
            try:
                df = np.array([stats.df[t] for t in postings.vocab], dtype=np.float64)
            except KeyError as exc:
                raise KolmValueError(f"collection stats lack token {exc.args[0]!r} of this shard") from exc
            n_coll, avgdl = int(stats.n_docs), float(stats.avgdl)
            if n_vocab and df.max() > n_coll:
                t = int(np.argmax(df))
                raise KolmValueError(f"collection stats give token {postings.vocab[t]!r} document frequency "
                                     f"{df[t]:g} above their n_docs {n_coll}")
        t_w, nonocc = weigh_postings(postings, df, n_coll, avgdl, method=self.method, k1=self.k1, b=self.b,
                                     delta=self.delta, n_threads=self.n_threads)
        self._set_arrays({"t_ptr": postings.t_ptr, "t_docs": postings.p_doc, "t_w": t_w, "nonocc": nonocc, "doc_len": lengths,
                          "tf": postings.tf if stats is None else None}, postings.vocab)
        self.own_stats = stats is None

    def _set_arrays(self, arrays: Mapping[str, Any], vocab: list[str]) -> None:
        self._postings_gate = None
        self.t_ptr = arrays["t_ptr"]
        # an int32 array kept as given, a memory map too: a quick load's gate checks this very array
        self._t_docs = np.asanyarray(arrays["t_docs"]).astype(np.int32, copy=False)
        self._t_w = arrays["t_w"]
        self.nonocc = arrays["nonocc"]
        self.doc_len = arrays["doc_len"]
        self.tf = arrays.get("tf")
        bounds = arrays.get("bounds")  # the loader's (it compares them with the saved maxima), else computed here
        if bounds is None:
            bounds = index_bounds(self.t_ptr, self._t_docs, self._t_w, n_threads=self.n_threads)
        self._t_min, self._t_max = bounds["t_min"], bounds["t_max"]  # what the kernels read: kolm_search._kernels.blocks
        self._b_max, self._b_last = bounds["b_max"], bounds["b_last"]
        self._postings_gate = arrays.get("gate")  # a quick load's: the bounds fill in as it checks terms
        self.vocab = vocab
        self._vocab_index = {t: i for i, t in enumerate(vocab)}

    # -- incremental updates (the steps of kolm_search.retrievers.incremental) -------------
    def _check_updatable(self) -> None:
        """A shard refuses changes; a version-1 index (saved without ``tf``) is recounted once."""
        if self.tf is not None:
            return
        if self.own_stats is False:
            raise KolmValueError("this BM25 index was weighted with external collection statistics (a shard): "
                                 "add/delete would change every shard's statistics; rebuild the shards instead")
        self._recount()

    def _recount(self) -> None:
        """Recover the term frequencies of an index saved without them (format version 1) by
        tokenising its table once; the recount must reproduce every stored array exactly, else
        the index was not weighted from its own documents (a shard) and cannot change."""
        postings = Postings.from_tokens(self.tokenizer(t) for t in self.table.texts(self.fields))
        probe = copy.copy(self)
        probe.index_postings(postings)
        same = probe.vocab == self.vocab and all(
            np.array_equal(a, b) for a, b in ((probe.t_ptr, self.t_ptr), (probe.t_docs, self.t_docs),
                                              (probe.t_w, self.t_w), (probe.nonocc, self.nonocc),
                                              (probe.doc_len, self.doc_len)))
        if not same:
            raise KolmValueError("this BM25 index (format version 1, saved without term frequencies) does not match "
                                 "its own documents' statistics (a shard weighted with collection-wide statistics?): "
                                 "rebuild it to add or delete documents")
        self.tf = postings.tf
        self.own_stats = True

    def _segment_payload(self, table: DocumentTable, embeddings: Any) -> Postings:
        return Postings.from_tokens(self.tokenizer(t) for t in table.texts(self.fields))

    def _merge_pending(self, pending: Pending) -> None:
        """Combined postings of the live rows, re-weighted with their own statistics."""
        assert self.tf is not None  # _check_updatable: a shard takes no change
        base = Postings(vocab=self.vocab, t_ptr=self.t_ptr, p_doc=self.t_docs, tf=self.tf, lengths=self.doc_len)
        parts = [(base, pending.base_keep)] + [(s.payload, s.keep) for s in pending.segments]
        postings = combine_postings(parts, self._vocab_index)
        old = self.table
        self.table = merged_table(old, pending)
        try:
            self.index_postings(postings)
        except BaseException:
            self.table = old
            raise

    # -- querying: encode, score_texts, score_encoded, score_weighted, score_terms (BM25Scoring) ----
    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """Candidates for every query of ``batch`` (expanded queries fused by RRF)."""
        self.merge()
        selections = text_selections(batch, self.table)  # a bad filter fails in every mode
        if batch.mode == "vector" or len(self.table) == 0:
            return CandidateFrame.empty(batch.n_queries)
        docs, scores, counts = self.score_texts(batch.texts, batch.limit, selections)
        return fuse_expansions(frame_from_topk(docs, scores, counts), batch, k=self.fusion_k, n_docs=len(self.table))

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: candidates for one query, best first, with BM25 scores."""
        self.merge()
        return retrieve_single(self, context)

    def prefix_stable(self, batch: QueryBatch) -> bool:
        """True for one text per query: the top k are the first k of any deeper top (ties in
        document order); expanded texts fused by RRF are not."""
        return batch.single

    # -- stage parameters (kolm_search.compose) ---------------------------------------------
    def stage_params(self) -> dict[str, Any]:
        """``method, k1, b, delta, tokenizer, fields, fusion_k`` (scikit-learn's ``get_params``)."""
        return {"method": self.method, "k1": self.k1, "b": self.b, "delta": self.delta, "tokenizer": self.tokenizer,
                "fields": self.fields, "fusion_k": self.fusion_k}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Re-index the same documents with the changed parameters (checked as the constructor
        checks them; on error nothing changes). An index of a shard (``stats=``) refuses."""
        if not changes:
            return
        unknown = set(changes) - set(self.stage_params())
        if unknown:
            raise KolmValueError(f"BM25Retriever has no parameter(s) {sorted(unknown)}; it has {sorted(self.stage_params())}")
        if self.own_stats is False:
            raise KolmValueError("a BM25 shard weighted with external statistics cannot change its parameters")
        self.merge()
        rebuilt = BM25Retriever(self.table, **{**self.stage_params(), **changes}, n_threads=self.n_threads)
        self.__dict__.update(rebuilt.__dict__)

    def __repr__(self) -> str:
        return (f"BM25Retriever({len(self.table)} docs, {len(self.vocab)} terms, method={self.method!r}, "
                f"k1={self.k1:g}, b={self.b:g})")
