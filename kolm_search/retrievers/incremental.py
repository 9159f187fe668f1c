"""Incremental indexes: ``add`` and ``delete`` documents without a rebuild, with exact scores.

:class:`SegmentedIndex` is the part of an index (BM25, dense) that takes changes, held as its
own state: pending *segments* of added documents (only they are counted or embedded), dead rows
(tombstones) and a ``revision``. A change is *staged* (the slow part, no state changed), then
*committed* under the index's lock (ids checked, segment appended or rows marked dead, a new
revision: a response cache keys on it), then *merged* in one vectorised pass whose index equals
array for array the one rebuilt over the surviving documents in order (the kept old ones, then
the added ones): BM25 keeps its postings' term frequencies, drops dead postings, appends the
segments' in term-major order (O(nnz), no sort) and re-weights from counts with the new
statistics; a term left without documents leaves the vocabulary. Dense stacks the live rows.

``add``/``delete`` merge before they return unless ``defer=True``: deferred changes wait, as
Lucene's segments do, for :meth:`~SegmentedIndex.merge`, the next search or ``save`` (each
merges first). Reading an attribute never merges: while changes wait, ``table`` and the arrays
describe the index before them. :func:`add` and :func:`delete` change several indexes all or
none (a composite's children): each stages first, then all commit under their locks. A shard
(weighted with external :class:`~kolm_search.retrievers.postings.CollectionStats`) refuses.

Threads: each index has its own lock, held by commits and merges; a merge puts its arrays in
place before it clears the pending state, so a search that finds nothing pending reads a whole
index. A retriever must not be changed while another thread searches it (``SearchClient.add``
and ``delete`` change ``copy.copy`` of it and swap it in).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers.segments import Pending, Segment

__all__ = ["EmbeddingsUse", "SegmentedIndex", "add", "as_ids", "as_table", "delete", "share_tables"]

_MAX_DOCS = int(np.iinfo(np.int32).max)

#: What an index does with the ``embeddings`` given to an ``add``: ``"none"`` (BM25), ``"given"``
#: (dense: it takes them), ``"own model"`` (a dense index with its own model: it embeds the new
#: documents itself, unless no other index takes the embeddings).
EmbeddingsUse = Literal["none", "given", "own model"]


class SegmentedIndex:
    """Mixin of an index that takes ``add``/``delete``: its pending changes, lock and revision.

    An index kind calls :meth:`_start_index` when it is made, and supplies
    :meth:`_segment_payload` (count or embed new documents) and :meth:`_merge_pending` (apply
    pending changes to its own arrays and ``table``, all or nothing); it may override
    :meth:`_check_updatable` and :meth:`_embeddings_use`. It implements
    :class:`~kolm_search.contract.ports.Updatable`.
    """

    table: DocumentTable
    _pending: Pending | None
    _revision: str
    _lock: threading.RLock

    def _start_index(self, table: DocumentTable) -> None:
        """Begin as an unchanged index over ``table``."""
        self.table = table
        self._pending = None
        self._revision = ""
        self._lock = threading.RLock()

    # -- what an index kind supplies ------------------------------------------------------
    def _check_updatable(self) -> None:
        """Raise unless this index can take changes (default: it always can)."""

    def _embeddings_use(self) -> EmbeddingsUse:
        return "none"

    def _segment_payload(self, table: DocumentTable, embeddings: Any) -> Any:
        """The counted postings or embeddings of the new documents ``table`` (no state change)."""
        raise NotImplementedError

    def _merge_pending(self, pending: Pending) -> None:
        """Apply ``pending`` to this index's arrays and ``table`` (on error: left as before)."""
        raise NotImplementedError

    # -- Updatable -------------------------------------------------------------------------
    @property
    def revision(self) -> str:
        """A new random string at every committed ``add``/``delete`` (``""``: never changed)."""
        return self._revision

    def add(self, documents: Any, embeddings: npt.ArrayLike | None = None, *, defer: bool = False) -> None:
        """Add documents (list, DataFrame or DocumentTable) without a rebuild.

        Only the new documents are tokenised (BM25) or embedded (dense: by its embedder, or
        ``embeddings`` (n, d) as the constructor takes them); scores then equal a rebuild's
        over the same documents (the old ones first). An id already indexed (or given twice)
        raises ``KolmValueError``, and so does a BM25 shard weighted with external statistics;
        nothing changes then. ``defer=True``: merged by :meth:`merge`, the next search or save.
        """
        add([self], documents, embeddings, defer=defer)

    def delete(self, ids: Sequence[str], *, defer: bool = False) -> None:
        """Delete documents by id (all or none: unknown ids raise ``KolmValueError``);
        ``defer=True``: merged by :meth:`merge`, the next search or save."""
        delete([self], ids, defer=defer)

    def merge(self) -> None:
        """Apply deferred changes now (cheap when there are none; every search calls it first)."""
        if self._pending is None:
            return
        with self._lock:
            pending = self._pending
            if pending is not None:
                self._merge_pending(pending)
                self._pending = None  # last: a search that sees None finds every array in place

    def indexes(self) -> list[SegmentedIndex]:
        """The indexes a change of this one applies to: itself (:class:`~kolm_search.contract.ports.HoldsIndexes`)."""
        return [self]

    # -- the steps of a change (see the module docstring) ------------------------------------
    def _stage_add(self, table: DocumentTable, embeddings: Any) -> Segment:
        self._check_updatable()
        return Segment(table, self._segment_payload(table, embeddings), np.ones(len(table), bool))

    def _live(self, ids: Sequence[str]) -> list[npt.NDArray[np.int64]]:
        """For each part (the merged table, then each pending segment): the row of each of
        ``ids`` live there, -1 where it is not."""
        pending = self._pending or Pending()
        out = []
        for table, keep in pending.parts(self.table):
            codes = table.codes(list(ids), missing="ignore") if len(ids) else np.zeros(0, np.int64)
            if keep is not None:
                codes[codes >= 0] = np.where(keep[codes[codes >= 0]], codes[codes >= 0], -1)
            out.append(codes)
        return out

    def _check_new(self, table: DocumentTable) -> None:
        """Raise unless every id of ``table`` is new to this index (or deleted from it)."""
        ids = table.ids.tolist()
        taken = [ids[i] for codes in self._live(ids) for i in np.flatnonzero(codes >= 0)]
        if taken:
            raise KolmValueError(f"add: document id {taken[0]!r} is already in the index "
                                 f"({len(taken)} of the new ids are; delete them first to replace them)")

    def _commit_add(self, segment: Segment) -> None:
        old = self._pending or Pending()
        self._pending = Pending(old.base_keep, [*old.segments, segment])  # whole, in one assignment
        self._revision = uuid.uuid4().hex

    def _rows(self, ids: Sequence[str]) -> list[npt.NDArray[np.int64]]:
        """Rows of the live documents ``ids`` in each part; unknown ids raise ``KolmValueError``."""
        parts = self._live(ids)
        found = np.logical_or.reduce([codes >= 0 for codes in parts])
        if not found.all():
            unknown = [i for i, f in zip(ids, found, strict=True) if not f]
            raise KolmValueError(f"delete: {len(unknown)} unknown document id(s): {unknown[:10]}")
        return [codes[codes >= 0] for codes in parts]

    def _commit_delete(self, rows: list[npt.NDArray[np.int64]]) -> None:
        pending = (self._pending or Pending()).copy()  # new masks: the pending state changes in one assignment
        if len(rows[0]):
            if pending.base_keep is None:
                pending.base_keep = np.ones(len(self.table), bool)
            pending.base_keep[rows[0]] = False
        for seg, r in zip(pending.segments, rows[1:], strict=True):
            seg.keep[r] = False
        self._pending = pending
        self._revision = uuid.uuid4().hex

    def _share(self, table: DocumentTable) -> None:
        """Hold ``table`` (the same ids in the same order as this index's) instead of its own."""
        with self._lock:
            self.table = table

    # -- copies and pickles: the lock is this object's; the pending state is never written in place --
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __copy__(self) -> SegmentedIndex:
        """A copy sharing the arrays and the pending state (a commit or merge replaces them, never
        writes them): changing one leaves the other as it was."""
        out = type(self).__new__(type(self))
        out.__setstate__(self.__getstate__())
        return out


# -- inputs ----------------------------------------------------------------------------
def as_table(documents: Any) -> DocumentTable:
    """New documents as a table (:meth:`DocumentTable.coerce`), errors prefixed ``add:``."""
    try:
        return DocumentTable.coerce(documents)
    except (KolmValueError, KolmTypeError) as exc:
        raise type(exc)(f"add: {exc}") from exc


def as_ids(ids: Any) -> list[str]:
    """Document ids to delete: a sequence of distinct strings."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise KolmTypeError(f"delete: ids must be a list of document ids, got {type(ids).__name__}")
    out = list(ids)
    bad = [i for i in out if not isinstance(i, str)]
    if bad:
        raise KolmTypeError(f"delete: document ids must be strings, got {bad[0]!r}")
    if len(set(out)) != len(out):
        seen: set[str] = set()
        dup = next(i for i in out if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise KolmValueError(f"delete: document id {dup!r} is given twice")
    return out


# -- several indexes, all or none ---------------------------------------------------------
def _distinct(indexes: Sequence[SegmentedIndex]) -> list[SegmentedIndex]:
    """``indexes`` without repeats (a composite may hold one index twice, e.g. beside its feedback)."""
    return list({id(ix): ix for ix in indexes}.values())


@contextlib.contextmanager
def _locked(indexes: Sequence[SegmentedIndex]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for ix in sorted(indexes, key=id):  # one order: two calls never wait on each other
            stack.enter_context(ix._lock)
        yield


def add(indexes: Sequence[SegmentedIndex], documents: Any, embeddings: Any = None, *, defer: bool = False) -> None:
    """Add ``documents`` to every index of ``indexes``, all or none.

    ``embeddings`` go to the dense indexes, except those with their own model
    (``DenseRetriever(embed_queries=True)``) when another dense index takes them. Raises
    ``KolmValueError`` naming an id already in an index (or twice in ``documents``).
    """
    indexes = _distinct(indexes)
    table = as_table(documents)
    if len(table) == 0:
        return
    if len(table) > _MAX_DOCS:
        raise KolmValueError(f"add: {len(table)} documents exceed one index's int32 limit")
    uses = [ix._embeddings_use() for ix in indexes]
    if embeddings is not None and all(u == "none" for u in uses):
        raise KolmTypeError("add: embeddings given but no dense retriever takes them")
    taker = "given" if "given" in uses else "own model"  # the embeddings are the pipeline embedder's
    segments = [ix._stage_add(table, embeddings if u == taker else None) for ix, u in zip(indexes, uses, strict=True)]
    with _locked(indexes):
        for ix in indexes:  # every check before the first commit
            ix._check_new(table)
        for ix, segment in zip(indexes, segments, strict=True):
            ix._commit_add(segment)
    if not defer:
        for ix in indexes:
            ix.merge()


def delete(indexes: Sequence[SegmentedIndex], ids: Any, *, defer: bool = False) -> None:
    """Delete documents ``ids`` from every index of ``indexes``, all or none.

    Raises ``KolmValueError`` listing ids that are not (or no longer) in an index.
    """
    indexes = _distinct(indexes)
    id_list = as_ids(ids)
    if not id_list:
        return
    for ix in indexes:
        ix._check_updatable()
    with _locked(indexes):
        rows = [ix._rows(id_list) for ix in indexes]
        for ix, r in zip(indexes, rows, strict=True):
            ix._commit_delete(r)
    if not defer:
        for ix in indexes:
            ix.merge()


def share_tables(indexes: Sequence[SegmentedIndex]) -> None:
    """Let indexes whose tables hold the same ids in the same order share one table object
    (a composite's children after a change: the batch path then sees one table at once)."""
    if not indexes:
        return
    first = indexes[0].table
    for ix in indexes[1:]:
        t = ix.table
        if t is not first and len(t) == len(first) and (t.ids == first.ids).all():
            ix._share(first)
