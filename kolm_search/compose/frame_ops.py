"""The operators of stage algebra over candidate frames, every query of a batch at once.

Each function takes single-list :class:`~kolm_search.engine.candidate_frame.CandidateFrame`\\ s of one batch
(entries sorted by query, then rank) and returns one, ranks renumbered ``0..`` per query. A
document is matched across frames by ``(query, document code)``: both frames' codes refer to
one :class:`~kolm_search.engine.doctable.DocumentTable`. The meanings (PyTerrier's, with the
differences the README's table lists):

- :func:`cutoff` (``a % k``): the entries of rank below ``k``;
- :func:`scale` (``w * a``): scores times ``w``; re-ranked by score only when ``w < 0``;
- :func:`linear` (``a + b``): the union of documents, scores summed (a missing side adds 0),
  by descending sum, ties by first appearance (``a``'s order, then ``b``'s); one call of the
  fusion kernel (ranx's CombSUM);
- :func:`union` (``a | b``): the documents of either, by document code, score 0;
- :func:`intersection` (``a & b``): ``a``'s entries whose document ``b`` has, ``a``'s order and scores;
- :func:`concatenate` (``a ^ b``): ``a``'s entries, then ``b``'s documents not in ``a`` in
  ``b``'s order, their scores shifted below ``a``'s lowest by ``EPSILON`` (kept as they are
  where ``a`` has none);
- :func:`feature_union` (``a ** b ** c``): ``a``'s entries with ``features`` (float64
  ``(n, fa + fb + fc)``): ``a``'s features (its score when it has none) then ``b``'s, then
  ``c``'s, for the same document, 0 where one lacks it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.engine.candidate_frame import CandidateFrame
from kolm_search.errors import FrameValidationError
from kolm_search.fusion import fuse_frame

__all__ = ["EPSILON", "concatenate", "cutoff", "feature_union", "intersection", "linear", "rescored", "scale",
           "union"]

#: The gap between ``a``'s lowest score and ``b``'s first appended document in ``a ^ b`` (PyTerrier's).
EPSILON = 1e-4

I64 = npt.NDArray[np.int64]


def _ranked(frame: CandidateFrame) -> CandidateFrame:
    """``frame`` with entries in (query, rank) order and ranks ``0..`` per query."""
    return _ranked_with(frame, frame.score)[0]


def _build(n_queries: int, query: npt.NDArray[Any], doc: npt.NDArray[Any], score: npt.NDArray[Any],
           features: npt.NDArray[np.float64] | None = None) -> CandidateFrame:
    """A frame of entries already in their final order (grouped by query): ranks renumbered."""
    query = np.asarray(query, np.int32)
    counts = np.bincount(query, minlength=n_queries).astype(np.int64)
    starts = np.cumsum(counts) - counts  # (n_queries,): also for a batch of no queries
    rank = (np.arange(len(query), dtype=np.int64) - np.repeat(starts, counts)).astype(np.int32)
    return CandidateFrame(query=query, doc=np.asarray(doc, np.int64), score=np.asarray(score, np.float64), rank=rank,
                          n_queries=n_queries, features=features)


def _same_batch(a: CandidateFrame, b: CandidateFrame, op: str) -> None:
    if a.n_queries != b.n_queries:
        raise FrameValidationError(f"{op}: the two sides cover different batches ({a.n_queries} and {b.n_queries} queries)")


def _keys(frame: CandidateFrame, n_docs: int) -> I64:
    return frame.query.astype(np.int64) * n_docs + frame.doc


def _n_docs(*frames: CandidateFrame) -> int:
    return max([int(f.doc.max()) + 1 for f in frames if len(f)] or [1])


def _lookup(keys: I64, table: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """For each of ``keys``: its position in ``table`` (unique keys) and whether it is there."""
    order = np.argsort(table, kind="stable")
    pos = np.searchsorted(table[order], keys)
    pos = np.minimum(pos, max(len(table) - 1, 0))
    found = (table[order][pos] == keys) if len(table) else np.zeros(len(keys), bool)
    return order[pos] if len(table) else np.zeros(len(keys), np.int64), found


def _ranked_width(frame: CandidateFrame) -> int:
    """The longest query's entries when ``frame`` is one list already in (query, rank) order,
    queries ascending, ranks ``0..`` per query (what :func:`_build` makes: a retriever's or an
    operator's output), else -1: from the frame's :attr:`~CandidateFrame.ranked_counts` (made
    once per frame), or for a batch mostly of empty queries by one pass without counts."""
    from kolm_search._kernels import load

    if frame.list_id is not None:
        return -1
    counts = frame.ranked_counts
    if counts is not None:
        return int(counts.max(initial=0))
    if frame.n_queries <= 2 * len(frame) + 1:
        return -1
    return int(load("row_sort").ranked_width(frame.query, frame.rank, frame.n_queries))


def _is_ranked(frame: CandidateFrame) -> bool:
    """True when :func:`_ranked_width` finds ``frame`` ranked."""
    return _ranked_width(frame) >= 0


def _typed(frame: CandidateFrame, keep: npt.NDArray[np.bool_] | None = None) -> CandidateFrame:
    """A ranked ``frame`` (or its entries ``keep``, a prefix of every query's) in :func:`_build`'s
    dtypes, without sorting or renumbering; the frame itself when nothing changes."""
    if keep is None and frame.query.dtype == np.int32 and frame.doc.dtype == np.int64 \
            and frame.score.dtype == np.float64 and frame.rank.dtype == np.int32:
        return frame

    def pick(a: npt.NDArray[Any], dtype: Any) -> npt.NDArray[Any]:
        return np.asarray(a if keep is None else a[keep], dtype)

    return CandidateFrame(query=pick(frame.query, np.int32), doc=pick(frame.doc, np.int64),
                          score=pick(frame.score, np.float64), rank=pick(frame.rank, np.int32),
                          n_queries=frame.n_queries,
                          features=None if frame.features is None else pick(frame.features, np.float64))


def cutoff(frame: CandidateFrame, k: int) -> CandidateFrame:
    """The entries of rank below ``k`` (``a % k``)."""
    width = _ranked_width(frame)
    if width >= 0:  # already in order: keep a prefix of each query's entries, no sort
        return _typed(frame, None if width <= k else frame.rank < k)
    frame = _ranked(frame)
    keep = frame.rank < k
    return _build(frame.n_queries, frame.query[keep], frame.doc[keep], frame.score[keep],
                  None if frame.features is None else frame.features[keep])


def _score_order(frame: CandidateFrame, score: npt.NDArray[np.float64]) -> I64:
    """The entries of a ranked ``frame`` by query, then descending ``score``, ties by rank: a
    stable sort of each query's row of a (queries x longest list) matrix when it is not much
    larger than the frame (:func:`_stable_rows`), else one ``lexsort``."""
    counts = np.bincount(frame.query, minlength=frame.n_queries)
    width = int(counts.max()) if len(frame) else 0
    if width == 0 or frame.n_queries * width > 2 * len(frame):
        return np.lexsort((frame.rank, -score, frame.query))
    dense = frame.n_queries * width == len(frame)  # every query has ``width`` entries: the matrix is the frame
    if dense:
        neg = -score.reshape(frame.n_queries, width)
    else:
        neg = np.full((frame.n_queries, width), np.inf)
        neg[frame.query, frame.rank] = -score  # scores are finite (the runner checks): +inf pads sort last
    cols = _stable_rows(neg)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if dense:
        return (starts[:, None] + cols).ravel()
    return (starts[:, None] + cols)[cols < counts[:, None]]


def _stable_rows(neg: npt.NDArray[np.float64]) -> I64:
    """``np.argsort(neg, axis=1, kind="stable")`` (int64), for a matrix without NaN by the row
    sort kernel (:func:`kolm_search._kernels.row_sort.stable_rows`: numpy's vectorised sort of
    packed integer keys, each row then finished by an insertion sort on (value, column), several
    times faster than a stable argsort of rows with many ties, as BM25's equal scores give).
    Rows wider than 2**24 keep too few bits of each value to part most of them: numpy sorts
    them, as it sorts a matrix holding NaN (last)."""
    from kolm_search._kernels import load

    width = neg.shape[1]
    cols = load("row_sort").stable_rows(neg) if (width - 1).bit_length() <= 24 else None
    return np.argsort(neg, axis=1, kind="stable") if cols is None else cols


def rescored(frame: CandidateFrame, score: npt.ArrayLike) -> CandidateFrame:
    """``frame`` with new scores (one per entry), re-ranked by descending score, ties by the
    old rank: what a columnar reranker returns (``score`` finite). Each query keeps its entries'
    positions and ranks (``0..``), so the new frame shares the ranked frame's queries and ranks."""
    from kolm_search._kernels import load

    score = np.asarray(score, np.float64)
    if score.shape != (len(frame),):
        raise FrameValidationError(f"rescored: {score.shape} scores for a frame of {len(frame)} candidates "
                                   "(one score per candidate)")
    counts = frame.ranked_counts if frame.features is None else None
    if counts is not None:  # the row sort kernel's (the frame's counts: every reranker of one frame shares them)
        fast = load("row_sort").rescore_rows(frame.query, frame.rank, frame.doc, score, frame.n_queries, counts)
        if fast is not None:
            return frame.reordered(*fast)
    if not _is_ranked(frame):
        frame, score = _ranked_with(frame, score)
    order = _score_order(frame, score)
    return CandidateFrame(query=np.asarray(frame.query, np.int32), doc=np.asarray(frame.doc[order], np.int64),
                          score=score[order], rank=np.asarray(frame.rank, np.int32), n_queries=frame.n_queries,
                          features=None if frame.features is None else frame.features[order])


def _ranked_with(frame: CandidateFrame, score: npt.NDArray[Any]) -> tuple[CandidateFrame, npt.NDArray[Any]]:
    """:func:`_ranked` of ``frame``, and ``score`` (one per entry) in the same order (one sort)."""
    order = np.lexsort((frame.rank, frame.query))
    return _build(frame.n_queries, frame.query[order], frame.doc[order], frame.score[order],
                  None if frame.features is None else frame.features[order]), score[order]


def scale(frame: CandidateFrame, weight: float) -> CandidateFrame:
    """Scores times ``weight`` (``w * a``); re-ranked by descending score (ties by rank) when ``weight < 0``."""
    frame = frame if _is_ranked(frame) else _ranked(frame)
    score = frame.score.astype(np.float64) * weight
    if weight < 0:
        return rescored(frame, score)
    return _build(frame.n_queries, frame.query, frame.doc, score, frame.features)


def linear(a: CandidateFrame, b: CandidateFrame) -> CandidateFrame:
    """Scores summed over the union of documents (``a + b``), one fusion-kernel call."""
    _same_batch(a, b, "+")
    stacked = CandidateFrame.concat([_ranked(a), _ranked(b)])
    fused = fuse_frame(stacked, method="sum", norm=None, n_lists=2, n_docs=_n_docs(a, b))
    return _build(fused.n_queries, fused.query, fused.doc, fused.score)


def union(a: CandidateFrame, b: CandidateFrame) -> CandidateFrame:
    """The documents of either side (``a | b``), ordered by document code, score 0."""
    _same_batch(a, b, "|")
    n_docs = _n_docs(a, b)
    keys = np.unique(np.concatenate([_keys(a, n_docs), _keys(b, n_docs)]))
    return _build(a.n_queries, keys // n_docs, keys % n_docs, np.zeros(len(keys)))


def intersection(a: CandidateFrame, b: CandidateFrame) -> CandidateFrame:
    """``a``'s entries whose document ``b`` also has (``a & b``), in ``a``'s order with ``a``'s scores."""
    _same_batch(a, b, "&")
    a = _ranked(a)
    n_docs = _n_docs(a, b)
    keep = np.isin(_keys(a, n_docs), _keys(b, n_docs))
    return _build(a.n_queries, a.query[keep], a.doc[keep], a.score[keep],
                  None if a.features is None else a.features[keep])


def concatenate(a: CandidateFrame, b: CandidateFrame) -> CandidateFrame:
    """``a``'s entries, then ``b``'s documents that ``a`` lacks (``a ^ b``; see the module doc)."""
    _same_batch(a, b, "^")
    a, b = _ranked(a), _ranked(b)
    n_docs = _n_docs(a, b)
    extra = ~np.isin(_keys(b, n_docs), _keys(a, n_docs))
    eq, ed, es = b.query[extra], b.doc[extra], b.score[extra].astype(np.float64)
    n_q = a.n_queries
    a_min = np.full(n_q, np.nan)
    if len(a):
        np.fmin.at(a_min, a.query, a.score.astype(np.float64))
    e_max = np.full(n_q, -np.inf)
    if len(es):
        np.maximum.at(e_max, eq, es)
    shifted = np.where(np.isnan(a_min[eq]), es, es - e_max[eq] + a_min[eq] - EPSILON)
    query = np.concatenate([a.query, eq])
    # stable: within a query, a's entries (in rank order) first, then b's extras (in b's rank order)
    order = np.argsort(query, kind="stable")
    return _build(n_q, query[order], np.concatenate([a.doc, ed])[order],
                  np.concatenate([a.score.astype(np.float64), shifted])[order])


def _feature_block(frame: CandidateFrame) -> npt.NDArray[np.float64]:
    return frame.score.astype(np.float64)[:, None] if frame.features is None else frame.features


def feature_union(a: CandidateFrame, *others: CandidateFrame) -> CandidateFrame:
    """``a``'s entries with each of ``others``' scores (or features) appended as features, in
    order, 0 where one lacks the document (``a ** b ** c``)."""
    a = _ranked(a)
    blocks = [_feature_block(a)]
    for b in others:
        _same_batch(a, b, "**")
        b = _ranked(b)
        n_docs = _n_docs(a, b)
        pos, found = _lookup(_keys(a, n_docs), _keys(b, n_docs))
        right = _feature_block(b)
        rows = np.zeros((len(a), right.shape[1]), np.float64)
        if len(b):
            rows[found] = right[pos[found]]
        blocks.append(rows)
    return _build(a.n_queries, a.query, a.doc, a.score, np.hstack(blocks))
