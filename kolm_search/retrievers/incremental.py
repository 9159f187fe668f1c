"""Incremental indexes: ``add`` and ``delete`` documents without a rebuild, with exact scores.

A change is recorded, not applied: ``add`` counts (BM25) or embeds (dense) only the new
documents into a pending *segment*, ``delete`` marks rows dead (tombstones). Pending changes
are merged lazily, as Lucene merges segments: by the first read of the retriever's
``table`` (every search reads it first), by ``merge()``, or by ``save``. A merge is one
vectorised pass, and its index equals array for array the index rebuilt from scratch over
the surviving documents in order (the kept old ones, then the added ones in order), so
scores, tie order and collection statistics are those of a rebuild:

- BM25 keeps its postings' term frequencies (``tf``): a merge drops dead postings, renumbers
  documents, appends the segments' postings in term-major order (O(nnz), no sort of the old
  postings) and re-weights from counts with the new document frequencies, ``N`` and exact
  ``avgdl`` (integer total length); no old document is tokenised again. A term whose
  document frequency falls to 0 leaves the vocabulary, so its size equals a rebuild's; the
  vocabulary order may differ from a rebuild's first-occurrence order (no score depends on it).
- Dense keeps the new documents' embeddings (normalised for cosine) and stacks the kept rows.

A retriever weighted with external :class:`~kolm_search.retrievers.postings.CollectionStats`
(a shard) refuses changes: its weights belong to the whole collection.

Every change gets a new random ``revision`` (a response cache keys on it, so a cached
pipeline never serves results from before a change). Merges are serialised by one lock; a
retriever must not be changed while another thread searches it (``SearchClient.add`` and
``delete`` are safe: they change a copy and swap it in).
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers.postings import Postings
from kolm_search.retrievers.segments import Segment, Updates

__all__ = ["Segment", "SyncedTable", "Updates", "add", "as_ids", "as_table", "check_updatable", "delete",
           "index_revision", "leaves", "locate", "locate_any", "merge", "prepare", "share_tables", "sync", "updated_copy"]

_LOCK = threading.RLock()
_MAX_DOCS = int(np.iinfo(np.int32).max)


class SyncedTable:
    """The ``table`` attribute of an updatable retriever: reading it merges pending changes."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        sync(obj)
        try:
            return obj.__dict__["table"]
        except KeyError:
            raise AttributeError(f"{type(obj).__name__} has no table yet") from None

    def __set__(self, obj: Any, value: DocumentTable) -> None:
        obj.__dict__["table"] = value


def sync(retriever: Any) -> None:
    """Merge ``retriever``'s pending changes, if any (cheap when there are none)."""
    upd = retriever.__dict__.get("_updates")
    if upd is None or not upd.dirty:
        return
    with _LOCK:
        if not upd.merging:  # merging: the merging thread itself reads the table
            merge(retriever)


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


def _parts(retriever: Any) -> list[tuple[DocumentTable, npt.NDArray[np.bool_] | None]]:
    """Every part's table and live rows: the merged table, then each pending segment."""
    upd = retriever.__dict__.get("_updates") or Updates()
    return [(retriever.__dict__["table"], upd.base_keep)] + [(s.table, s.keep) for s in upd.segments]


def locate(retriever: Any, ids: Sequence[str]) -> list[npt.NDArray[np.int64]]:
    """Rows of live documents ``ids`` in each part (see :func:`_parts`); unknown ids raise."""
    found = np.zeros(len(ids), bool)
    rows = []
    for table, keep in _parts(retriever):
        codes = table.codes(list(ids), missing="ignore") if len(ids) else np.zeros(0, np.int64)
        hit = codes >= 0
        if keep is not None:
            hit[hit] = keep[codes[hit]]
        found |= hit
        rows.append(codes[hit])
    if not found.all():
        unknown = [i for i, f in zip(ids, found, strict=True) if not f]
        raise KolmValueError(f"delete: {len(unknown)} unknown document id(s): {unknown[:10]}")
    return rows


def _check_new(retriever: Any, table: DocumentTable) -> None:
    ids = table.ids.tolist()
    taken = [ids[i] for rows in locate_any(retriever, ids) for i in rows]
    if taken:
        raise KolmValueError(f"add: document id {taken[0]!r} is already in the index "
                             f"({len(taken)} of the new ids are; delete them first to replace them)")


def locate_any(retriever: Any, ids: list[str]) -> list[list[int]]:
    """Positions in ``ids`` of the ids live in each part (no error for unknown ones)."""
    out = []
    for table, keep in _parts(retriever):
        codes = table.codes(ids, missing="ignore") if ids else np.zeros(0, np.int64)
        hit = codes >= 0
        if keep is not None:
            hit[hit] = keep[codes[hit]]
        out.append(np.flatnonzero(hit).tolist())
    return out


# -- per kind --------------------------------------------------------------------------
def _kind(retriever: Any) -> str:
    """``"bm25"`` or ``"dense"``: the class attribute ``updates`` of the retrievers that take changes."""
    kind = getattr(type(retriever), "updates", None)
    if kind in ("bm25", "dense"):
        return str(kind)
    raise KolmTypeError(f"{type(retriever).__name__} does not support add/delete")


def check_updatable(retriever: Any) -> None:
    """Raise unless ``retriever`` can take changes (a BM25 shard cannot; a version-1 BM25
    index is recounted once here, see :func:`kolm_search.retrievers.segments.recount`)."""
    if _kind(retriever) != "bm25" or retriever.__dict__.get("tf") is not None:
        return
    if retriever.__dict__.get("own_stats") is False:
        raise KolmValueError("this BM25 index was weighted with external collection statistics (a shard): "
                             "add/delete would change every shard's statistics; rebuild the shards instead")
    from kolm_search.retrievers.segments import recount

    recount(retriever)


def prepare(retriever: Any, table: DocumentTable, embeddings: Any = None) -> Segment:
    """Count (BM25) or embed (dense) the new documents ``table`` into a segment (slow part,
    done outside the lock); ``embeddings`` float (n, d) skips the embedder."""
    check_updatable(retriever)
    if _kind(retriever) == "bm25":
        payload: Any = Postings.from_tokens(retriever.tokenizer(t) for t in table.texts(retriever.fields))
    else:
        from kolm_search.retrievers.segments import new_embeddings

        payload = new_embeddings(retriever, table, embeddings)
    return Segment(table, payload, np.ones(len(table), bool))


def _updates(retriever: Any) -> Updates:
    upd: Updates | None = retriever.__dict__.get("_updates")
    if upd is None:
        upd = retriever.__dict__["_updates"] = Updates()
    return upd


def _commit_add(retriever: Any, segment: Segment) -> None:
    _updates(retriever).segments.append(segment)
    retriever.revision = uuid.uuid4().hex


def _commit_delete(retriever: Any, rows: list[npt.NDArray[np.int64]]) -> None:
    upd = _updates(retriever)
    if len(rows[0]):
        if upd.base_keep is None:
            upd.base_keep = np.ones(len(retriever.__dict__["table"]), bool)
        upd.base_keep[rows[0]] = False
    for seg, r in zip(upd.segments, rows[1:], strict=True):
        seg.keep[r] = False
    retriever.revision = uuid.uuid4().hex


def add(retrievers: Sequence[Any], documents: Any, embeddings: Any = None) -> None:
    """Add ``documents`` to every retriever of ``retrievers``, all or none.

    ``embeddings`` go to the dense retrievers, except those with ``embed_queries=True`` (their
    own model) when another dense retriever takes them. Raises ``KolmValueError`` naming an id
    already in an index (or twice in ``documents``).
    """
    table = as_table(documents)
    if len(table) == 0:
        return
    if len(table) > _MAX_DOCS:
        raise KolmValueError(f"add: {len(table)} documents exceed one index's int32 limit")
    dense = [r for r in retrievers if _kind(r) == "dense"]
    if embeddings is not None and not dense:
        raise KolmTypeError("add: embeddings given but no dense retriever takes them")
    # the embeddings are the pipeline embedder's: a dense retriever with its own model
    # (embed_queries=True, e.g. hybrid_plus's LSA child) embeds the new documents itself
    takers = [r for r in dense if not getattr(r, "embed_queries", False)] or dense
    segments = [prepare(r, table, embeddings if any(r is t for t in takers) else None) for r in retrievers]
    with _LOCK:
        for r in retrievers:
            _check_new(r, table)
        for r, seg in zip(retrievers, segments, strict=True):
            _commit_add(r, seg)


def delete(retrievers: Sequence[Any], ids: Any) -> None:
    """Delete documents ``ids`` from every retriever of ``retrievers``, all or none.

    Raises ``KolmValueError`` listing ids that are not (or no longer) in an index.
    """
    id_list = as_ids(ids)
    if not id_list:
        return
    for r in retrievers:
        check_updatable(r)
    with _LOCK:
        rows = [locate(r, id_list) for r in retrievers]
        for r, rw in zip(retrievers, rows, strict=True):
            _commit_delete(r, rw)


def merge(retriever: Any) -> None:
    """Apply ``retriever``'s pending changes now (one pass; see the module docstring)."""
    from kolm_search.retrievers.segments import merge_bm25, merge_dense

    with _LOCK:
        upd = retriever.__dict__.get("_updates")
        if upd is None or not upd.dirty or upd.merging:
            return
        upd.merging = True
        try:
            (merge_bm25 if _kind(retriever) == "bm25" else merge_dense)(retriever, upd)
            retriever.__dict__.pop("_updates", None)  # last: readers wait until every array is in place
        finally:
            upd.merging = False


# -- composites and clients --------------------------------------------------------------
def _through(retriever: Any) -> str | None:
    """The attribute holding the index a wrapper searches (class attribute ``updates_through``,
    e.g. ``FeedbackRetriever``'s ``"bm25"``): changes go to that index."""
    via = getattr(type(retriever), "updates_through", None)
    return via if isinstance(via, str) else None


def leaves(retriever: Any) -> list[Any]:
    """The retrievers a change applies to: ``retriever``, or a composite's children (nested),
    or the index a wrapper searches."""
    children = getattr(retriever, "retrievers", None)
    if isinstance(children, list):
        return [leaf for c in children for leaf in leaves(c)]
    via = _through(retriever)
    if via is not None:
        return leaves(getattr(retriever, via))
    _kind(retriever)  # raises for a retriever without add/delete
    return [retriever]


def index_revision(retriever: Any) -> str:
    """The revisions of ``retriever`` (and its children) joined: ``""`` for an unchanged index."""
    children = getattr(retriever, "retrievers", None)
    if isinstance(children, list):
        revs = [index_revision(c) for c in children]
        return ",".join(revs) if any(revs) else ""
    via = _through(retriever)
    if via is not None:
        return index_revision(getattr(retriever, via))
    rev = getattr(retriever, "revision", "")
    return rev if isinstance(rev, str) else ""


def _clone(retriever: Any) -> Any:
    out = copy.copy(retriever)
    children = getattr(retriever, "retrievers", None)
    if isinstance(children, list):
        out.retrievers = [_clone(c) for c in children]
    via = _through(retriever)
    if via is not None:
        setattr(out, via, _clone(getattr(retriever, via)))
    upd = retriever.__dict__.get("_updates")
    if upd is not None:
        out.__dict__["_updates"] = Updates(None if upd.base_keep is None else upd.base_keep.copy(),
                                           [Segment(s.table, s.payload, s.keep.copy()) for s in upd.segments])
    return out


def share_tables(retriever: Any) -> None:
    """Merge a composite's children and let children with equal tables share one object."""
    kids = leaves(retriever)
    for r in kids:
        merge(r)
    first = kids[0].__dict__["table"]
    for r in kids[1:]:
        t = r.__dict__["table"]
        if t is not first and len(t) == len(first) and (t.ids == first.ids).all():
            r.__dict__["table"] = first


def updated_copy(retriever: Any, op: str, arg: Any, embeddings: Any = None) -> Any:
    """A merged copy of ``retriever`` with ``add(arg)`` or ``delete(arg)`` applied; the
    original (perhaps being searched) is untouched. Arrays are shared until the merge
    replaces them, never written in place."""
    out = _clone(retriever)
    targets = leaves(out)
    if op == "add":
        add(targets, arg, embeddings)
    else:
        delete(targets, arg)
    share_tables(out)
    return out
