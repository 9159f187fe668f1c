"""Pending changes of an incremental index (:mod:`.incremental`): segments, dead rows, and how
they combine with the merged index.

:func:`combine_postings` joins counted postings of several parts, each with a mask of live
documents, into one term-major :class:`Postings` in O(nnz): every kept posting is scattered
to its final position (its term's start, plus the postings of that term in earlier parts,
plus its rank within its part), so the old postings are never sorted again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.postings import Postings

__all__ = ["Pending", "Segment", "combine_postings", "merged_table"]

_MAX_DOCS = int(np.iinfo(np.int32).max)


@dataclass
class Segment:
    """Added documents not merged yet: their table, counted postings (BM25) or float32
    embeddings (n, d) (dense), and which of them are still live (bool (n,))."""

    table: DocumentTable
    payload: Any
    keep: npt.NDArray[np.bool_]


@dataclass
class Pending:
    """An index's changes not merged yet: which rows of its merged table are still live (bool
    (n_docs,), None: all) and the segments added since, in order."""

    base_keep: npt.NDArray[np.bool_] | None = None
    segments: list[Segment] = field(default_factory=list)

    def copy(self) -> Pending:
        """A copy whose live-row masks are its own (tables and payloads are never written, so shared)."""
        return Pending(None if self.base_keep is None else self.base_keep.copy(),
                       [Segment(s.table, s.payload, s.keep.copy()) for s in self.segments])

    def parts(self, base: DocumentTable) -> list[tuple[DocumentTable, npt.NDArray[np.bool_] | None]]:
        """Every part's table and live rows: ``base`` (the merged table), then each segment's."""
        return [(base, self.base_keep)] + [(s.table, s.keep) for s in self.segments]


def _exclusive_cumsum(counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def combine_postings(parts: Sequence[tuple[Postings, npt.NDArray[np.bool_] | None]],
                     index: Mapping[str, int] | None = None) -> Postings:
    """One index's postings from ``parts`` (postings, live documents bool (n_docs,) or None).

    Documents are renumbered: the live documents of the first part, then of the second, and
    so on. The first part's vocabulary keeps its term ids (``index`` maps its terms to ids,
    built when not given); new terms follow in order of appearance; terms left without a
    posting are dropped.
    """
    vocab = list(parts[0][0].vocab)
    if index is None:
        index = {t: i for i, t in enumerate(vocab)}
    new_terms: dict[str, int] = {}
    maps: list[npt.NDArray[np.int64] | None] = [None]
    for p, _ in parts[1:]:
        ids = [index[t] if t in index else new_terms.setdefault(t, len(vocab) + len(new_terms)) for t in p.vocab]
        maps.append(np.asarray(ids, np.int64))
    vocab += list(new_terms)
    n_vocab = len(vocab)
    counts = np.zeros(n_vocab, np.int64)
    kept: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]] = []
    lengths: list[npt.NDArray[np.int64]] = []
    offset = 0
    for (p, keep), term_map in zip(parts, maps, strict=True):
        local, docs, tf = p.p_term, p.p_doc.astype(np.int64), p.tf
        n_live = p.n_docs
        if keep is not None:
            live = keep[docs]
            local, docs, tf = local[live], docs[live], tf[live]
            docs = (np.cumsum(keep) - 1)[docs]
            n_live = int(keep.sum())
            lengths.append(np.asarray(p.lengths)[keep])
        else:
            lengths.append(np.asarray(p.lengths))
        rank = np.arange(len(local), dtype=np.int64) - _exclusive_cumsum(np.bincount(local, minlength=len(p.vocab)))[local]
        terms = local if term_map is None else term_map[local]
        counts += np.bincount(terms, minlength=n_vocab)
        kept.append((terms, docs + offset, tf, rank))
        offset += n_live
    if offset > _MAX_DOCS:
        raise KolmValueError(f"{offset} documents exceed one index's int32 limit; shard the corpus")
    t_ptr = _exclusive_cumsum(counts)
    before = t_ptr[:-1].copy()
    p_doc = np.empty(int(t_ptr[-1]), np.int32)
    out_tf = np.empty(int(t_ptr[-1]), np.int32)
    for terms, docs, tf, rank in kept:
        pos = before[terms] + rank
        p_doc[pos] = docs
        out_tf[pos] = tf
        before += np.bincount(terms, minlength=n_vocab)
    used = counts > 0
    if not used.all():
        vocab = [t for t, u in zip(vocab, used.tolist(), strict=True) if u]
        t_ptr = _exclusive_cumsum(counts[used])
    return Postings(vocab=vocab, t_ptr=t_ptr, p_doc=p_doc, tf=out_tf,
                    lengths=np.concatenate(lengths).astype(np.int64, copy=False))


def merged_table(base: DocumentTable, pending: Pending) -> DocumentTable:
    """The live rows of ``base`` then of each segment, in order: the table a rebuild would hold."""
    tables = [base if pending.base_keep is None else base.take(pending.base_keep)]
    tables += [s.table if s.keep.all() else s.table.take(s.keep) for s in pending.segments]
    return tables[0] if len(tables) == 1 else DocumentTable.concat(tables)
