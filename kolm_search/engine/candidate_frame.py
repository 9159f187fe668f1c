"""The candidate frame: ranked candidates of a *batch* of queries, as a struct of arrays.

Schema
------
=========  ===============  ==============================================================
field      dtype            meaning
=========  ===============  ==============================================================
query      int32 (n,)       row of the query in its batch, ``0 <= query < n_queries``
doc        int64 (n,)       document code (row of the :class:`DocumentTable`)
score      float32/float64  retrieval or fused score, higher is better
rank       int32 (n,)       zero-based rank inside (query, list)
list_id    int32 (n,)       optional: which retriever / expanded query produced the entry
features   float64 (n, f)   optional: one row of ``f`` feature values per entry (the ``**``
                            operator of :mod:`kolm_search.compose`, the input of learning to rank)
=========  ===============  ==============================================================

Entries are sorted by (query, list_id, rank). Retrievers break score ties by document code
(ascending); fusion breaks them by first appearance. A frame is built once by a retriever
and turned into ``SearchDocument``s or a run DataFrame (``qid, doc_id, rank, score``) only
at the edge. Its arrays are not changed after it is built: it is checked once, when built,
and what it derives from them (:attr:`CandidateFrame.ranked_counts`) is made once per frame.
It holds them as read-only views (so does a :class:`QueryBatch` its ``owner`` and
``embeddings``): a frame is given to every stage after the one that made it (one first
stage's to each of an experiment's rerankers), and a stage writing into one is refused
(``ValueError: assignment destination is read-only``, a ``SearchError`` naming the stage in a
composed pipeline) instead of changing what the others are given. A stage makes new arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.engine.read_only import read_only_view
from kolm_search.errors import FrameValidationError

if TYPE_CHECKING:
    from kolm_search.engine.doctable import DocumentTable
    from kolm_search.types import SearchPipelineContext

__all__ = ["CandidateFrame", "QueryBatch"]


@dataclass(frozen=True, eq=False)
class CandidateFrame:
    """Struct of arrays for the candidates of ``n_queries`` queries (see the module doc)."""

    query: npt.NDArray[np.int32]
    doc: npt.NDArray[np.int64]
    score: npt.NDArray[np.floating[Any]]
    rank: npt.NDArray[np.int32]
    n_queries: int
    list_id: npt.NDArray[np.int32] | None = None
    features: npt.NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        self.validate()
        for name in ("query", "doc", "score", "rank", "list_id", "features"):  # shared by every stage given it
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, read_only_view(values))

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_ptr(cls, ptr: npt.ArrayLike, doc: npt.ArrayLike, score: npt.ArrayLike,
                 list_id: npt.ArrayLike | None = None) -> CandidateFrame:
        """From CSR-style offsets: query q's entries are ``[ptr[q], ptr[q+1])``, best first."""
        p = np.asarray(ptr, dtype=np.int64)
        counts = np.diff(p)
        n_q = len(p) - 1
        query = np.repeat(np.arange(n_q, dtype=np.int32), counts)
        rank = (np.arange(p[-1], dtype=np.int64) - np.repeat(p[:-1], counts)).astype(np.int32)
        return cls(query=query, doc=np.asarray(doc, dtype=np.int64), score=np.asarray(score),
                   rank=rank, n_queries=n_q,
                   list_id=None if list_id is None else np.asarray(list_id, dtype=np.int32))

    @classmethod
    def empty(cls, n_queries: int) -> CandidateFrame:
        return cls.from_ptr(np.zeros(n_queries + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))

    @classmethod
    def concat(cls, frames: Sequence[CandidateFrame]) -> CandidateFrame:
        """Stack frames of the same batch as lists ``0..len(frames)-1`` (``list_id``), sorted."""
        if not frames:
            raise FrameValidationError("concat needs at least one frame")
        n_q = frames[0].n_queries
        if any(f.n_queries != n_q for f in frames):
            raise FrameValidationError(f"frames to concat cover different batches: {[f.n_queries for f in frames]}")
        query = np.concatenate([f.query for f in frames])
        lid = np.concatenate([np.full(len(f), i, np.int32) for i, f in enumerate(frames)])
        rank = np.concatenate([f.rank for f in frames])
        order = np.lexsort((rank, lid, query))
        score = np.concatenate([f.score.astype(np.float64) for f in frames])
        return cls(query=query[order], doc=np.concatenate([f.doc for f in frames])[order], score=score[order],
                   rank=rank[order], n_queries=n_q, list_id=lid[order])

    # -- checks and views --------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`FrameValidationError` unless the frame follows the schema."""
        n = self.doc.shape[0]
        for name in ("query", "score", "rank"):
            arr = getattr(self, name)
            if arr.ndim != 1 or arr.shape[0] != n:
                raise FrameValidationError(f"frame column {name!r} has shape {arr.shape}, expected ({n},)")
        if self.list_id is not None and self.list_id.shape != (n,):
            raise FrameValidationError(f"frame column 'list_id' has shape {self.list_id.shape}, expected ({n},)")
        if self.features is not None and (self.features.ndim != 2 or self.features.shape[0] != n):
            raise FrameValidationError(f"frame column 'features' has shape {self.features.shape}, expected ({n}, f)")
        codes = (("query", self.query), ("doc", self.doc), ("rank", self.rank), ("list_id", self.list_id))
        for name, arr in codes:  # codes are integers: a float column would be truncated, not refused
            if arr is not None and arr.dtype.kind not in "iu":
                raise FrameValidationError(f"frame column {name!r} has dtype {arr.dtype}; it holds integer codes")
        for name, arr in (("score", self.score), ("features", self.features)):
            if arr is not None and arr.dtype.kind not in "fiu":
                raise FrameValidationError(f"frame column {name!r} has dtype {arr.dtype}; it holds real numbers")
        if isinstance(self.n_queries, bool) or not isinstance(self.n_queries, (int, np.integer)) or self.n_queries < 0:
            raise FrameValidationError(f"frame n_queries is {self.n_queries!r}; it must be an int >= 0")
        if n == 0:
            return
        if self.query.min() < 0 or self.query.max() >= self.n_queries:
            raise FrameValidationError(f"frame 'query' values must lie in [0, {self.n_queries})")
        if self.rank.min() < 0:
            raise FrameValidationError("frame 'rank' values must be >= 0")
        if self.doc.min() < 0:
            raise FrameValidationError("frame 'doc' codes must be >= 0")
        if np.any(np.diff(self.query) < 0):
            raise FrameValidationError("frame entries must be sorted by query")

    def __len__(self) -> int:
        return int(self.doc.shape[0])

    @cached_property
    def ranked_counts(self) -> npt.NDArray[np.int64] | None:
        """Each query's number of entries, int64 (n_queries,), when the frame is one list in
        rank order (no ``list_id``; each query's ranks ``0, 1, ...``, as a retriever or an
        operator of :mod:`kolm_search.compose` returns it); None otherwise, and for a batch of
        more than ``2 * len(frame) + 1`` queries (no array per query of one mostly empty). Made
        once per frame, by one kernel pass (:func:`kolm_search._kernels.row_sort.ranked_counts`)."""
        from kolm_search._kernels import load

        if self.list_id is not None:
            return None
        counts = load("row_sort").ranked_counts(self.query, self.rank, self.n_queries)
        if counts is not None:
            counts.setflags(write=False)
        return counts

    def reordered(self, doc: npt.ArrayLike, score: npt.ArrayLike) -> CandidateFrame:
        """This frame's queries and ranks (the same arrays) with each query's entries in a new
        order: ``doc`` int64 (n,) and ``score`` float64 (n,) in that order (what a reranker
        returns, one list: ``list_id`` and ``features`` are not kept). Integer codes and real
        scores are cast to those dtypes; others are refused by the frame's checks."""
        doc, score = np.asarray(doc), np.asarray(score)
        if doc.dtype.kind == "i" or (doc.dtype.kind == "u" and doc.dtype.itemsize < 8):
            doc = doc.astype(np.int64, copy=False)
        if score.dtype.kind in "fiu":
            score = score.astype(np.float64, copy=False)
        return CandidateFrame(query=self.query, doc=doc, score=score, rank=self.rank, n_queries=self.n_queries)

    @property
    def ptr(self) -> npt.NDArray[np.int64]:
        """Offsets (n_queries + 1,): query q's entries are ``[ptr[q], ptr[q+1])``."""
        return np.searchsorted(self.query, np.arange(self.n_queries + 1), side="left").astype(np.int64)

    def select(self, rows: npt.ArrayLike) -> CandidateFrame:
        """A new frame of the given batch rows (renumbered ``0..len(rows)-1``)."""
        rows = np.asarray(rows, dtype=np.int64)
        ptr = self.ptr
        idx = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in rows]) if len(rows) else np.zeros(0, np.int64)
        counts = ptr[rows + 1] - ptr[rows]
        new_q = np.repeat(np.arange(len(rows), dtype=np.int32), counts)
        return CandidateFrame(query=new_q, doc=self.doc[idx], score=self.score[idx], rank=self.rank[idx],
                              n_queries=len(rows), list_id=None if self.list_id is None else self.list_id[idx])

    def page(self, offset: int, limit: int) -> CandidateFrame:
        """Keep ranks ``[offset, offset + limit)`` of every query (single-list frames)."""
        keep = (self.rank >= offset) & (self.rank < offset + limit)
        return CandidateFrame(query=self.query[keep], doc=self.doc[keep], score=self.score[keep],
                              rank=self.rank[keep], n_queries=self.n_queries,
                              list_id=None if self.list_id is None else self.list_id[keep])

    def to_run(self, doc_ids: npt.ArrayLike, qids: npt.ArrayLike) -> pd.DataFrame:
        """The run DataFrame ``qid, doc_id, rank, score`` (:mod:`kolm_search.engine.runs`; ids looked up by code)."""
        doc_ids = np.asarray(doc_ids, dtype=object)
        qids = np.asarray(qids, dtype=object)
        return pd.DataFrame({
            "qid": qids[self.query] if len(self) else np.zeros(0, dtype=object),
            "doc_id": doc_ids[self.doc] if len(self) else np.zeros(0, dtype=object),
            "rank": self.rank.astype(np.int64),
            "score": self.score.astype(np.float64),
        })

    def __repr__(self) -> str:
        lists = "" if self.list_id is None else f", {len(np.unique(self.list_id))} lists"
        return f"CandidateFrame({len(self)} candidates, {self.n_queries} queries{lists})"


@dataclass
class QueryBatch:
    """What a batch retriever receives: every (expanded) query text of a batch.

    Attributes
    ----------
    texts : list of str, (m,)
        All query texts (each batch query's expanded queries, primary first).
    owner : int64 (m,)
        Batch row of each text (non-decreasing).
    n_queries : int
        Batch size.
    limit : int
        Candidates wanted per batch query (the largest ``target_limit``).
    filters : list of dict, (n_queries,)
        Each query's request filters.
    embeddings : float32 (m, d), optional
        One embedding per text (vector/hybrid mode).
    mode : str
        The batch's search mode.
    metadata : list of dict, (n_queries,), optional
        Per batch query, a dict a retriever may annotate (e.g. the expanded query of
        pseudo-relevance feedback); the pipeline passes each query's ``plan.metadata``, so the
        annotations show in ``SearchResponse.plan`` and ``BatchResult.plans``.
    table : DocumentTable, optional
        The table the candidates' document codes refer to, when a composed stage
        (:mod:`kolm_search.compose`) runs: a re-ranking stage reads its documents there.
    """

    texts: list[str]
    owner: npt.NDArray[np.int64]
    n_queries: int
    limit: int
    filters: list[dict[str, Any]]
    embeddings: npt.NDArray[np.float32] | None = None
    mode: str = "hybrid"
    metadata: list[dict[str, Any]] | None = None
    table: DocumentTable | None = None

    def __post_init__(self) -> None:
        self.owner = np.asarray(self.owner, dtype=np.int64)
        if self.owner.shape != (len(self.texts),):
            raise FrameValidationError(f"owner must have one entry per text ({len(self.texts)}), got {self.owner.shape}")
        steps = np.diff(self.owner)
        if len(self.owner) and (np.any(steps < 0) or self.owner[0] < 0 or self.owner[-1] >= self.n_queries):
            raise FrameValidationError("owner must be non-decreasing batch rows")
        # one text each: as many texts as queries, no query twice (then owner is 0, 1, ..., n - 1)
        self._single = len(self.texts) == self.n_queries and not np.any(steps == 0)
        if len(self.filters) != self.n_queries:
            raise FrameValidationError(f"filters must have one dict per query ({self.n_queries}), got {len(self.filters)}")
        if self.embeddings is not None and self.embeddings.shape[0] != len(self.texts):
            raise FrameValidationError(f"embeddings must have one row per text, got {self.embeddings.shape}")
        self.owner = read_only_view(self.owner)  # shared by every stage of a pipeline or an experiment
        if self.embeddings is not None:
            self.embeddings = read_only_view(self.embeddings)
        if self.metadata is not None and len(self.metadata) != self.n_queries:
            raise FrameValidationError(f"metadata must have one dict per query ({self.n_queries}), got {len(self.metadata)}")

    @classmethod
    def from_contexts(cls, contexts: Sequence[SearchPipelineContext], *, limit: int) -> QueryBatch:
        """The batch of pipeline contexts (the one builder: the stage runner and a retriever's
        single ``retrieve`` both use it): every planned text (``expanded_queries``, else the
        normalised query) with its owner, each query's filters and plan metadata, the first
        context's mode, and the embeddings when there is one per text (else ``None``: a dense
        retriever then embeds the texts itself)."""
        texts: list[str] = []
        owner: list[int] = []
        rows: list[npt.NDArray[np.float32]] = []
        for j, c in enumerate(contexts):
            queries = list(c.plan.expanded_queries) or [c.plan.normalized_query]
            texts.extend(queries)
            owner.extend([j] * len(queries))
            if c.expanded_embeddings is not None:
                rows.append(np.asarray(c.expanded_embeddings, dtype=np.float32))
            elif c.embeddings is not None:
                rows.append(np.asarray(c.embeddings, dtype=np.float32)[None, :])
        emb = np.concatenate(rows) if rows and sum(len(e) for e in rows) == len(texts) else None
        return cls(texts=texts, owner=np.asarray(owner, np.int64), n_queries=len(contexts), limit=limit,
                   filters=[dict(c.request.filters or {}) for c in contexts], embeddings=emb,
                   mode=contexts[0].plan.mode, metadata=[c.plan.metadata for c in contexts])

    @property
    def single(self) -> bool:
        """True when every batch query has exactly one text (``owner`` is ``0, 1, ..., n - 1``)."""
        return self._single
