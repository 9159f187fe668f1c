"""Merging pending segments into a retriever's index (the machinery of :mod:`.incremental`).

:func:`combine_postings` joins counted postings of several parts, each with a mask of live
documents, into one term-major :class:`Postings` in O(nnz): every kept posting is scattered
to its final position (its term's start, plus the postings of that term in earlier parts,
plus its rank within its part), so the old postings are never sorted again.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError
from kolm_search.retrievers._vectors import embed_texts, normalise_rows
from kolm_search.retrievers.postings import Postings

__all__ = ["Segment", "Updates", "combine_postings", "merge_bm25", "merge_dense", "new_embeddings", "recount"]

_MAX_DOCS = int(np.iinfo(np.int32).max)


@dataclass
class Segment:
    """Added documents not merged yet: their table, counted postings (BM25) or float32
    embeddings (n, d) (dense), and which of them are still live (bool (n,))."""

    table: DocumentTable
    payload: Any
    keep: npt.NDArray[np.bool_]


@dataclass
class Updates:
    """A retriever's pending changes: live rows of its merged table (None: all) and segments."""

    base_keep: npt.NDArray[np.bool_] | None = None
    segments: list[Segment] = field(default_factory=list)
    merging: bool = False

    @property
    def dirty(self) -> bool:
        return self.base_keep is not None or bool(self.segments)


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


def _merged_table(retriever: Any, upd: Updates) -> DocumentTable:
    base: DocumentTable = retriever.__dict__["table"]
    tables = [base if upd.base_keep is None else base.take(upd.base_keep)]
    tables += [s.table if s.keep.all() else s.table.take(s.keep) for s in upd.segments]
    return tables[0] if len(tables) == 1 else DocumentTable.concat(tables)


def merge_bm25(retriever: Any, upd: Updates) -> None:
    """Merge ``upd`` into a BM25 retriever: combined postings, re-weighted with their own stats."""
    base = Postings(vocab=retriever.vocab, t_ptr=retriever.t_ptr, p_doc=retriever.t_docs, tf=retriever.tf,
                    lengths=retriever.doc_len)
    parts = [(base, upd.base_keep)] + [(s.payload, s.keep) for s in upd.segments]
    postings = combine_postings(parts, retriever._vocab_index)
    old = retriever.__dict__["table"]
    retriever.__dict__["table"] = _merged_table(retriever, upd)
    try:
        retriever.index_postings(postings)
    except BaseException:
        retriever.__dict__["table"] = old
        raise


def merge_dense(retriever: Any, upd: Updates) -> None:
    """Merge ``upd`` into a dense retriever: the live rows of every part, stacked."""
    base = retriever.embeddings if upd.base_keep is None else retriever.embeddings[upd.base_keep]
    rows = [base] * (base.shape[1] > 0 or not upd.segments) + [s.payload[s.keep] for s in upd.segments]
    table = _merged_table(retriever, upd)
    retriever.embeddings = np.ascontiguousarray(np.concatenate(rows) if len(rows) > 1 else rows[0], np.float32)
    retriever.__dict__["table"] = table


def new_embeddings(retriever: Any, table: DocumentTable, embeddings: Any) -> npt.NDArray[np.float32]:
    """float32 (n, dim) embeddings of new documents (given, or from the retriever's embedder),
    checked as the constructor checks them and normalised for the cosine metric."""
    dim: int | None = retriever.dim
    if retriever.embeddings.shape == (0, 0):  # an empty corpus has no dimension yet: the first add sets it
        upd = retriever.__dict__.get("_updates")
        dim = upd.segments[0].payload.shape[1] if upd is not None and upd.segments else None
    if embeddings is None:
        if retriever.embedder is None:
            raise KolmValueError("add: this DenseRetriever has no embedder; pass embeddings=")
        mat = embed_texts(retriever.embedder, table.texts(retriever.fields))
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
    return normalise_rows(mat) if retriever.metric == "cosine" else np.ascontiguousarray(mat)


def recount(retriever: Any) -> None:
    """Recover the term frequencies of a BM25 index saved without them (format version 1)
    by tokenising its table once; the recount must reproduce every stored array exactly,
    else the index was not weighted from its own documents (a shard) and cannot change."""
    table = retriever.__dict__["table"]
    postings = Postings.from_tokens(retriever.tokenizer(t) for t in table.texts(retriever.fields))
    probe = copy.copy(retriever)
    probe.__dict__.pop("_updates", None)
    probe.index_postings(postings)
    same = probe.vocab == retriever.vocab and all(
        np.array_equal(getattr(probe, name), getattr(retriever, name))
        for name in ("t_ptr", "t_docs", "t_w", "nonocc", "doc_len"))
    if not same:
        raise KolmValueError("this BM25 index (format version 1, saved without term frequencies) does not match "
                             "its own documents' statistics (a shard weighted with collection-wide statistics?): "
                             "rebuild it to add or delete documents")
    retriever.tf = postings.tf
    retriever.own_stats = True
