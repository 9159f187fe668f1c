"""Exact dense retrieval: float32 inner products with per-query top-k, in one kernel call per
batch (:mod:`kolm_search._kernels.dense`: tiled products folded into heaps while in cache)."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search._params import one_of, real
from kolm_search.compose.kinds import RetrieverStage
from kolm_search.contract.ports import Embedder, implements
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.selection import Selections
from kolm_search.errors import KolmTypeError, KolmValueError, SearchError
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers._batching import (
    frame_from_topk,
    fuse_expansions,
    retrieve_single,
    text_selections,
)
from kolm_search.retrievers._vectors import embed_texts, normalise_rows
from kolm_search.retrievers.ann_spec import AnnSpec
from kolm_search.retrievers.dense_files import DenseFiles
from kolm_search.retrievers.incremental import EmbeddingsUse, SegmentedIndex
from kolm_search.retrievers.segments import Pending, merged_table
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["DenseRetriever", "corpus_embeddings", "embed_texts", "exact_topk"]

Metric = Literal["cosine", "ip"]


_CORPORA: weakref.WeakKeyDictionary[Any, dict[str, npt.NDArray[np.float32]]] = weakref.WeakKeyDictionary()
_KEPT_PER_EMBEDDER = 2


def corpus_embeddings(embedder: Embedder, texts: Sequence[str], *, batch_size: int = 4096) -> npt.NDArray[np.float32]:
    """float32 (n, d) embeddings of a corpus, computed once per corpus and embedder.

    The matrix (read-only) is kept with the embedder object, under a sha256 of the texts, for
    as long as the embedder lives (the last two corpora of each embedder): ``presets.dense``,
    ``presets.hybrid`` and ``Experiment`` pipelines over one corpus and one embedder embed it
    once. Embedders that cannot be weakly referenced are not cached.
    """
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    key = f"{len(texts)}:{digest.hexdigest()}"
    try:
        memo = _CORPORA.setdefault(embedder, {})
    except TypeError:  # not weakly referenceable
        memo = None
    if memo is not None and key in memo:
        return memo[key]
    mat = embed_texts(embedder, texts, batch_size=batch_size)
    mat.flags.writeable = False
    if memo is not None:
        while len(memo) >= _KEPT_PER_EMBEDDER:
            memo.pop(next(iter(memo)))
        memo[key] = mat
    return mat


def exact_topk(queries: npt.NDArray[np.float32], docs: npt.NDArray[np.float32], k: int, *,
               selections: Selections | None = None,
               query_block: int | None = None, doc_block: int = 256, n_threads: int | None = None,
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Exact inner-product top-k of each query row.

    Parameters
    ----------
    queries : float32 (m, d)
    docs : float32 (n, d)
    k : int
    selections : Selections, optional
        The documents each query may return (:class:`~kolm_search.engine.selection.Selections`, one
        per query row; default: all).
    query_block : int, optional
        Queries per tile (default: the batch split over the threads, at most 512).
    doc_block : int, default 256
        Documents per tile; a tile of scores is ``query_block * doc_block`` float32.
    n_threads : int, optional
        Threads for this call (default: the usable cores; BLAS runs single-threaded in each).

    Returns
    -------
    docs int64 (m, k), scores float32 (m, k), counts int64 (m,)
        Rows best first (ties by document code); ``counts`` valid entries per row.
    """
    q = np.ascontiguousarray(queries, dtype=np.float32)
    d = np.ascontiguousarray(docs, dtype=np.float32)
    if q.ndim != 2 or d.ndim != 2 or (q.shape[1] != d.shape[1] and q.shape[0] and d.shape[0]):
        raise KolmValueError(f"queries (m, d) and docs (n, d) must share d, got {q.shape} and {d.shape}")
    m, n = q.shape[0], d.shape[0]
    k = min(check.top_k(k), max(n, 1))
    sel = Selections.none(m) if selections is None else selections
    if m and n:
        try:
            sel.check(m, n)
        except ValueError as exc:
            raise KolmValueError(str(exc)) from exc
    return load("dense").dense_topk(q, d, k, *sel.arrays(), query_block=query_block, doc_block=doc_block,
                                    n_threads=n_threads)


def _equal_value(a: Any, b: Any) -> bool:
    """``a == b`` for plain parameter values (text, numbers, lists, tuples, dicts, None), else False."""
    plain = (str, int, float, list, tuple, dict, type(None))
    return isinstance(a, plain) and isinstance(b, plain) and type(a) is type(b) and bool(a == b)


@saved_kind("dense")
class DenseRetriever(DenseFiles, SegmentedIndex, RetrieverStage):
    """Dense retriever: exact (brute-force) by default, or approximate on a faiss index.

    Parameters
    ----------
    documents : list of SearchDocument, DataFrame, or DocumentTable
    embedder : Embedder, optional
        Embeds the documents (when ``embeddings`` is not given) and, when the pipeline gives
        no query embeddings, the queries.
    embeddings : float32 (n_docs, d), optional
        Precomputed document embeddings, row-aligned with the documents.
    metric : {"cosine", "ip"}, default "cosine"
    fields : sequence of str, default ("title", "content")
        Fields embedded (joined with a space).
    fusion_k : float, default 60
        RRF constant for expanded queries.
    embed_queries : bool, default False
        Always embed the query texts with ``embedder``, ignoring the query embeddings the
        pipeline passes (those of the pipeline's embedder): for a second dense retriever
        whose model differs from the pipeline's (e.g. an :class:`~kolm_search.adapters.LSAEmbedder`
        beside MiniLM in one composite). Not saved by :meth:`save`.
    index : str, default "exact"
        ``"exact"`` (the exact kernel), ``"hnsw"``, ``"ivf"``, ``"ivfpq"`` or a faiss factory
        string (extra ``ann``): an approximate index trained on a sample of the embeddings and
        kept beside them (:mod:`kolm_search.retrievers.ann`; what each costs and promises:
        :mod:`kolm_search.retrievers.ann_spec` and the README).
    **index_params : int
        The approximate index's parameters (``ef_search``, ``nprobe``, ``nlist``, ``m``,
        ``pq_m``, ``rerank``, ``train_size``, ...; :mod:`kolm_search.retrievers.ann_spec`).

    Notes
    -----
    In ``"fulltext"`` mode the retriever returns nothing (a hybrid composite degrades to
    its sparse side).
    """

    name = "dense"

    def __init__(self, documents: Any, embedder: Embedder | None = None, *,
                 embeddings: npt.ArrayLike | None = None, metric: Metric = "cosine",
                 fields: Sequence[str] = ("title", "content"), fusion_k: float = 60,
                 batch_size: int = 4096, n_threads: int | None = None, embed_queries: bool = False,
                 index: str = "exact", **index_params: int) -> None:
        self._configure(embedder, metric=metric, fields=fields, fusion_k=fusion_k, n_threads=n_threads,
                        embed_queries=embed_queries)
        self._start_index(DocumentTable.coerce(documents))
        if embeddings is None:
            if embedder is None:
                raise KolmValueError("DenseRetriever needs an embedder or precomputed embeddings")
            embeddings = corpus_embeddings(embedder, self.table.texts(self.fields), batch_size=batch_size)
        mat = np.asarray(embeddings, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[0] != len(self.table):
            raise KolmValueError(f"embeddings must have shape ({len(self.table)}, d), got {mat.shape}")
        if not np.all(np.isfinite(mat)):
            raise KolmValueError("document embeddings contain NaN or infinite values")
        self.embeddings = normalise_rows(mat) if metric == "cosine" else np.ascontiguousarray(mat)
        self._vector_digest: tuple[Any, str] | None = None  # (the matrix, its digest): stage_identity
        if index == "exact" and index_params:
            raise KolmValueError(f"DenseRetriever(index='exact') takes no index parameters, got {sorted(index_params)}")
        self.ann_spec = None if index == "exact" else AnnSpec.of(index, index_params)
        self.ann = self._built_ann(self.embeddings)

    def _built_ann(self, embeddings: npt.NDArray[np.float32]) -> Any:
        """A faiss index over ``embeddings`` (None: exact, or no documents yet)."""
        if self.ann_spec is None or len(embeddings) == 0:
            return None
        from kolm_search.retrievers.ann import AnnIndex

        return AnnIndex.build(self.ann_spec, embeddings, n_threads=self.n_threads)

    @property
    def index(self) -> str:
        """``"exact"``, or the approximate index's kind or factory string."""
        return "exact" if self.ann_spec is None else self.ann_spec.index

    def _configure(self, embedder: Embedder | None, *, metric: Metric, fields: Sequence[str], fusion_k: float,
                   n_threads: int | None, embed_queries: bool) -> None:
        """Check and set the parameters (of :meth:`__init__` and of a loaded index)."""
        one_of("metric", metric, ("cosine", "ip"))
        fusion_k = real("fusion_k", fusion_k, low=0)
        if embedder is not None and not implements(embedder, Embedder):
            raise KolmTypeError(f"embedder must have an 'embed' method, got {type(embedder).__name__}")
        if embed_queries and embedder is None:
            raise KolmValueError("DenseRetriever(embed_queries=True) needs an embedder")
        self.embedder = embedder
        self.embed_queries = bool(embed_queries)
        self.metric: Metric = metric
        self.fields = tuple(fields)
        self.fusion_k = fusion_k
        self.n_threads = n_threads

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def search_vectors(self, vectors: npt.ArrayLike, k: int, selections: Selections | None = None,
                       ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-``k`` of each query vector: ``(docs (m, k), scores (m, k), counts (m,))``, each
        query limited to its selection (:class:`~kolm_search.engine.selection.Selections`, default all)."""
        self.merge()
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise SearchError("retriever", f"query embeddings have shape {q.shape}; the index has dimension {self.dim}")
        if self.metric == "cosine":
            q = normalise_rows(q)
        if self.ann is None:
            return exact_topk(q, self.embeddings, k, selections=selections, n_threads=self.n_threads)
        k = check.top_k(k)
        sel = Selections.none(len(q)) if selections is None else selections
        try:
            sel.check(len(q), len(self.table))
        except ValueError as exc:
            raise KolmValueError(str(exc)) from exc
        return self.ann.search(np.ascontiguousarray(q), k, sel, self.embeddings, n_threads=self.n_threads)

    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """Candidates for every query of ``batch`` (expanded queries fused by RRF)."""
        self.merge()
        selections = text_selections(batch, self.table)  # a bad filter fails in every mode
        if batch.mode == "fulltext" or len(self.table) == 0:
            return CandidateFrame.empty(batch.n_queries)
        vectors = None if self.embed_queries else batch.embeddings
        if vectors is None:
            if self.embedder is None:
                raise SearchError("retriever", "DenseRetriever got no query embeddings and has no embedder")
            vectors = embed_texts(self.embedder, batch.texts)
        docs, scores, counts = self.search_vectors(vectors, batch.limit, selections)
        return fuse_expansions(frame_from_topk(docs, scores, counts), batch, k=self.fusion_k, n_docs=len(self.table))

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: candidates for one query, best first, with similarity scores."""
        self.merge()
        return retrieve_single(self, context)

    def prefix_stable(self, batch: QueryBatch) -> bool:
        """True for exact search of one text per query (ties in document order); an ANN index
        (whose search widens with k) or expanded texts fused by RRF are not. An index asked for
        counts before it is built (an empty retriever's is built when deferred documents merge,
        in ``transform``, after this is asked)."""
        return batch.single and self.ann_spec is None

    # -- incremental updates (the steps of kolm_search.retrievers.incremental) -------------
    def _embeddings_use(self) -> EmbeddingsUse:
        return "own model" if self.embed_queries else "given"

    def _segment_payload(self, table: DocumentTable, embeddings: Any) -> npt.NDArray[np.float32]:
        """float32 (n, dim) embeddings of new documents (given, or from the embedder), checked as
        the constructor checks them and normalised for the cosine metric."""
        dim: int | None = self.dim
        if self.embeddings.shape == (0, 0):  # an empty corpus has no dimension yet: the first add sets it
            segments = [] if self._pending is None else self._pending.segments
            dim = segments[0].payload.shape[1] if segments else None
        if embeddings is None:
            if self.embedder is None:
                raise KolmValueError("add: this DenseRetriever has no embedder; pass embeddings=")
            mat = embed_texts(self.embedder, table.texts(self.fields))
        else:
            try:
                mat = np.asarray(embeddings, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise KolmValueError(f"add: embeddings are not a float matrix: {exc}") from exc
        if mat.ndim != 2 or mat.shape[0] != len(table) or (dim is not None and mat.shape[1] != dim):
            raise KolmValueError(f"add: embeddings must have shape ({len(table)}, {'d' if dim is None else dim}), "
                                 f"got {mat.shape}")
        if not np.all(np.isfinite(mat)):
            raise KolmValueError("add: embeddings contain NaN or infinite values")
        return normalise_rows(mat) if self.metric == "cosine" else np.ascontiguousarray(mat)

    def _merge_pending(self, pending: Pending) -> None:
        """The live rows of every part, stacked."""
        base = self.embeddings if pending.base_keep is None else self.embeddings[pending.base_keep]
        rows = [base] * (base.shape[1] > 0 or not pending.segments) + [s.payload[s.keep] for s in pending.segments]
        table = merged_table(self.table, pending)
        embeddings = np.ascontiguousarray(np.concatenate(rows) if len(rows) > 1 else rows[0], np.float32)
        ann = self.ann
        if self.ann_spec is not None:
            added = rows[1:] if base.shape[1] > 0 or not pending.segments else rows
            new = np.concatenate(added) if added else np.zeros((0, embeddings.shape[1]), np.float32)
            ann = self._built_ann(embeddings) if ann is None else ann.merged(pending.base_keep, new, embeddings,
                                                                                 n_threads=self.n_threads)
        self.embeddings, self.table, self.ann = embeddings, table, ann

    # -- stage parameters (kolm_search.compose) ---------------------------------------------
    def stage_params(self) -> dict[str, Any]:
        """``embedder, metric, fields, fusion_k, embed_queries, index, index_params`` (scikit-learn's
        ``get_params``; the index type and its parameters are part of what an output depends on)."""
        spec = self.ann_spec
        return {"embedder": self.embedder, "metric": self.metric, "fields": self.fields, "fusion_k": self.fusion_k,
                "embed_queries": self.embed_queries, "index": self.index,
                "index_params": {} if spec is None or spec.params is None else dict(spec.params)}

    def stage_identity(self) -> str:
        """The documents' digest and revision and a sha256 of the document vectors (made once per
        matrix; a merge binds a new one): two indexes of one table whose vectors differ (given as
        ``embeddings=``, loaded from files another model wrote) have different fingerprints."""
        index = super().stage_identity()  # (first: it merges deferred changes)
        found = self._vector_digest
        if found is None or found[0] is not self.embeddings:
            vectors = np.ascontiguousarray(self.embeddings)
            digest = hashlib.sha256(f"{vectors.shape}|{vectors.dtype.str}".encode())
            digest.update(vectors.reshape(-1).data.cast("B"))
            found = self._vector_digest = (self.embeddings, digest.hexdigest()[:32])
        return f"{index}|vectors:{found[1]}"

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set ``fusion_k`` or ``embed_queries``; the others change the vectors (build a new index)."""
        own = self.stage_params()
        fixed = {name for name in set(changes) - {"fusion_k", "embed_queries"}  # the values it has: a no-op
                 if name not in own or not (changes[name] is own[name] or _equal_value(changes[name], own[name]))}
        if fixed:
            raise KolmValueError(f"DenseRetriever: {sorted(fixed)} change the document vectors; build a new index "
                                 "(only fusion_k and embed_queries can be set)")
        merged = {**self.stage_params(), **changes}
        self._configure(self.embedder, metric=self.metric, fields=self.fields, fusion_k=merged["fusion_k"],
                        n_threads=self.n_threads, embed_queries=merged["embed_queries"])

    def __repr__(self) -> str:
        index = "" if self.ann_spec is None else f", index={self.ann_spec.index!r}"
        return f"DenseRetriever({len(self.table)} docs, dim={self.dim}, metric={self.metric!r}{index})"
