"""Shared plumbing of the built-in retrievers: single-query shell, filter selections, expansion fusion."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.contract.ports import BatchRetriever
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.filters import parse_filter
from kolm_search.engine.selection import Selection, Selections
from kolm_search.errors import PIPELINE_STAGES, FilterError, KolmError
from kolm_search.fusion import fuse_frame
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["batch_from_context", "filter_selections", "frame_from_topk", "fuse_expansions", "retrieve_single",
           "text_selections"]

_KEEP_BYTES = 64 << 20  # a table keeps its last batch's selections up to this size


def batch_from_context(context: SearchPipelineContext, n_docs: int | None = None) -> QueryBatch:
    """A batch of one from a pipeline context (expanded queries and embeddings included); its
    limit is the plan's ``target_limit``, capped at ``n_docs`` (at least 1)."""
    target = int(context.plan.target_limit)
    return QueryBatch.from_contexts([context], limit=max(1, min(target, n_docs if n_docs is not None else target)))


def retrieve_single(retriever: BatchRetriever, context: SearchPipelineContext) -> list[SearchDocument]:
    """The spec's ``retrieve(context)`` on top of ``retrieve_batch``."""
    table = retriever.table
    assert table is not None  # a built-in retriever always has its table
    frame = retriever.retrieve_batch(batch_from_context(context, len(table)))
    assert isinstance(frame, CandidateFrame)
    return table.documents(frame.doc, frame.score)


def filter_selections(table: DocumentTable, filters: list[dict[str, Any]]) -> Selections:
    """The :class:`~kolm_search.engine.selection.Selections` of a batch's filters (one per query).

    Each distinct filter (by its parsed tree) is evaluated once per call, to the rows it
    matches or, when it matches many, to a mask; memory grows with what the filters match,
    not with queries x documents. The table keeps the last call's selections (up to 64 MB):
    the children of a composite, which get the same batch, evaluate once.
    A bad filter raises :class:`~kolm_search.engine.filters.FilterError` (stage ``retriever``) naming
    the field and operator, its ``row`` the query's row in ``filters``.
    """
    if not any(filters):
        return Selections.none(len(filters))
    trees: list[Any] = []
    for i, f in enumerate(filters):
        try:
            trees.append(parse_filter(f) if f else None)
        except KolmError as exc:
            raise FilterError(PIPELINE_STAGES.RETRIEVER, str(exc), cause=exc, row=i) from exc
    key = tuple(trees)
    last = table.last_selections
    if last is not None and last[0] == key:
        return last[1]
    ids = np.full(len(filters), -1, np.int64)
    found: list[Selection] = []
    seen: dict[Any, int] = {}
    for i, tree in enumerate(trees):
        if tree is None:
            continue
        if tree not in seen:
            try:
                found.append(table.select(tree))
            except KolmError as exc:
                raise FilterError(PIPELINE_STAGES.RETRIEVER, str(exc), cause=exc, row=i) from exc
            seen[tree] = len(found) - 1
        ids[i] = seen[tree]
    out = Selections.build(ids, found)
    if out.nbytes <= _KEEP_BYTES:
        table.last_selections = (key, out)
    return out


def text_selections(batch: QueryBatch, table: DocumentTable) -> Selections:
    """Selections per *text* of the batch (each text inherits its query's filters)."""
    return filter_selections(table, batch.filters).take(batch.owner)


def frame_from_topk(docs: npt.NDArray[np.int64], scores: npt.NDArray[np.floating[Any]],
                    counts: npt.NDArray[np.int64]) -> CandidateFrame:
    """A frame (one row per text) from top-k arrays ``(docs (m, k), scores (m, k), counts (m,))``."""
    keep = np.arange(docs.shape[1])[None, :] < counts[:, None]
    ptr = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return CandidateFrame.from_ptr(ptr, docs[keep], scores[keep])


def fuse_expansions(frame: CandidateFrame, batch: QueryBatch, *, k: float, n_docs: int) -> CandidateFrame:
    """Fuse per-text lists into per-query lists by RRF (identity when each query has one text)."""
    if batch.single:
        return CandidateFrame(query=frame.query, doc=frame.doc, score=frame.score, rank=frame.rank,
                              n_queries=batch.n_queries)
    pos = np.arange(len(batch.texts)) - np.searchsorted(batch.owner, batch.owner, side="left")
    query = batch.owner[frame.query].astype(np.int32)
    list_id = pos[frame.query].astype(np.int32)
    order = np.lexsort((frame.rank, list_id, query))
    stacked = CandidateFrame(query=query[order], doc=frame.doc[order], score=frame.score[order],
                             rank=frame.rank[order], n_queries=batch.n_queries, list_id=list_id[order])
    return fuse_frame(stacked, method="rrf", k=k, limit=batch.limit, n_lists=int(pos.max()) + 1, n_docs=n_docs)
