"""Where the query's terms occur in each candidate: learning-to-rank features (on the right of
``**``) from the analysed tokens of a BM25 index, ``(hybrid % 100) ** TermCoverage(bm25)``.

Each stage reads the terms as ``bm25`` analyses them (its tokenizer: stopwords dropped,
stemmed) and the documents' token sequences in that analysis (positions count the tokens
kept, so ``"wing in a slipstream"`` has ``wing`` and ``slipstream`` adjacent). The sequences
are built once per index (and rebuilt when it changes); each batch's candidates are then
scored in one kernel call (:mod:`kolm_search._kernels.proximity`).

- :class:`TermCoverage`: the share of the query's distinct terms that the document holds,
  each weighted by its BM25 idf (``weighted=True``) or by 1;
- :class:`TermPairs`: matches of the query's adjacent term pairs, as the sequential
  dependence model of Metzler & Croft (SIGIR 2005) counts them: ``window=1, ordered=True`` is
  their ordered window ``#1`` (the two terms side by side, in query order), ``window=7,
  ordered=False`` their unordered ``#uw8`` (both within 8 consecutive tokens). Scored as the
  count summed over pairs, or (``weighting="bm25"``) as BM25 of each pair taken as a term
  (its document frequency over the whole collection, the index's ``k1`` and ``b``);
- :class:`TermProximity`: one of Tao & Zhai's proximity measures (SIGIR 2007) over the
  distinct query terms the document holds: ``"min_distance"`` scores
  ``log(0.3 + exp(-d))`` for the smallest distance ``d`` between two different terms
  (``log(0.3)`` with fewer than two); ``"min_window"`` the number of those terms over the
  length of the shortest span holding all of them (0 with fewer than two);
  ``"first_match"`` ``1 - p / length`` for the offset ``p`` of the first query term (0 with none).
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers._ltr_stage import CandidateFeature, primary_texts, same_table
from kolm_search.retrievers.bm25 import BM25Retriever

__all__ = ["PROXIMITY_MEASURES", "TermCoverage", "TermPairs", "TermProximity", "forward_index"]

#: The measures of :class:`TermProximity`.
PROXIMITY_MEASURES = ("first_match", "min_distance", "min_window")
_ALPHA = 0.3  # Tao & Zhai's constant of log(alpha + exp(-d))
_CHUNK = 8192  # documents analysed at a time when a forward index is built

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
_FORWARD: weakref.WeakKeyDictionary[BM25Retriever, tuple[Any, Any, I64, npt.NDArray[np.int32]]] = \
    weakref.WeakKeyDictionary()


def forward_index(bm25: BM25Retriever) -> tuple[I64, npt.NDArray[np.int32]]:
    """Every document's analysed tokens in text order as term ids of ``bm25``, CSR
    ``(doc_ptr int64 (n_docs + 1,), tokens int32 (n_tokens,))``; built once per index state,
    :data:`_CHUNK` documents at a time (a corpus's tokens are never Python ints all at once)."""
    bm25.merge()
    found = _FORWARD.get(bm25)
    if found is None or found[0] is not bm25.t_ptr or found[1] is not bm25.table:
        texts = bm25.table.texts(bm25.fields)
        lengths, parts = [np.zeros(1, np.int64)], []
        for start in range(0, len(texts), _CHUNK):
            ptr, ids = bm25.encode(texts[start:start + _CHUNK])
            lengths.append(np.diff(ptr))
            parts.append(ids.astype(np.int32))
        doc_ptr = np.cumsum(np.concatenate(lengths)).astype(np.int64)
        tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
        found = _FORWARD[bm25] = (bm25.t_ptr, bm25.table, doc_ptr, tokens)
    return found[2], found[3]


def _idf(bm25: BM25Retriever) -> F64:
    """BM25's (Lucene's) idf of every term of the index."""
    df = np.diff(bm25.t_ptr).astype(np.float64)
    n = float(len(bm25.table))
    return np.log1p((n - df + 0.5) / (df + 0.5))


def _encoded(bm25: BM25Retriever, batch: QueryBatch) -> tuple[I64, I64]:
    """Each batch query's primary text as term ids of ``bm25``, in order, repeats kept (CSR)."""
    return bm25.encode(primary_texts(batch))


def _distinct(ptr: I64, ids: I64, n_terms: int) -> tuple[I64, I64]:
    """Each query's distinct terms, ascending (CSR ``(q_ptr, terms)``)."""
    owner = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    keys = np.unique(owner * n_terms + ids)
    q_ptr = np.zeros(len(ptr), np.int64)
    np.cumsum(np.bincount(keys // n_terms, minlength=len(ptr) - 1), out=q_ptr[1:])
    return q_ptr, keys % n_terms


def _pairs(ptr: I64, ids: I64, n_terms: int, ordered: bool) -> tuple[I64, I64, I64]:
    """Each query's distinct adjacent term pairs (two different terms; unordered pairs once
    whichever their order): CSR ``(p_ptr, a, b)``."""
    owner = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    a, b = ids[:-1], ids[1:]
    keep = (owner[1:] == owner[:-1]) & (a != b)
    a, b, q = a[keep], b[keep], owner[1:][keep]
    if not ordered:
        a, b = np.minimum(a, b), np.maximum(a, b)
    keys = np.unique(np.stack([q, a, b], axis=1), axis=0) if len(q) else np.zeros((0, 3), np.int64)
    p_ptr = np.zeros(len(ptr), np.int64)
    np.cumsum(np.bincount(keys[:, 0], minlength=len(ptr) - 1), out=p_ptr[1:])
    return p_ptr, np.ascontiguousarray(keys[:, 1]), np.ascontiguousarray(keys[:, 2])


class _TermFeature(CandidateFeature):
    """A feature of where ``bm25``'s analysed query terms occur in each candidate."""

    bm25: BM25Retriever

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(values["bm25"], BM25Retriever):
            raise KolmTypeError(f"{type(self).__name__}.bm25 must be a BM25Retriever, "
                                f"got {type(values['bm25']).__name__}")
        return values

    def _stats(self, batch: QueryBatch, candidates: CandidateFrame, weights: F64 | None) -> tuple[F64, F64]:
        """:func:`~kolm_search._kernels.proximity.match_stats` of the candidates (each term weighing
        ``weights[term]``, or 1) and each query's total weight of its distinct terms (n_queries,)."""
        bm = self.bm25
        doc_ptr, tokens = forward_index(bm)
        same_table(self, batch, bm.table)
        q_ptr, terms = _distinct(*_encoded(bm, batch), len(bm.vocab))
        w = np.ones(len(terms)) if weights is None else weights[terms]
        stats: F64 = load("proximity").match_stats(doc_ptr, tokens, candidates.query, candidates.doc, q_ptr, terms, w,
                                                   n_threads=bm.n_threads)
        owner = np.repeat(np.arange(batch.n_queries), np.diff(q_ptr))
        return stats, np.bincount(owner, weights=w, minlength=batch.n_queries).astype(np.float64)


class TermCoverage(_TermFeature):
    """The share of the query's distinct terms each candidate holds (see the module doc).

    Parameters
    ----------
    bm25 : BM25Retriever
        The analysis (tokenizer, vocabulary) and the idf.
    weighted : bool, default True
        Each term weighs its idf (a rare term found counts more); False: each weighs 1.
    """

    params = ("bm25", "weighted")
    weighted: bool

    def __init__(self, bm25: BM25Retriever, *, weighted: bool = True) -> None:
        self._init(bm25=bm25, weighted=weighted)

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(values["weighted"], bool):
            raise KolmTypeError(f"TermCoverage.weighted must be a bool, got {values['weighted']!r}")
        return super().checked(values)

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> F64:
        stats, total = self._stats(batch, candidates, _idf(self.bm25) if self.weighted else None)
        whole = total[candidates.query]
        return np.where(whole > 0, stats[:, 1] / np.where(whole > 0, whole, 1.0), 0.0)


class TermPairs(_TermFeature):
    """Matches of the query's adjacent term pairs in each candidate (see the module doc).

    Parameters
    ----------
    bm25 : BM25Retriever
    window : int, default 1
        The largest distance, in tokens, between the two terms of a match.
    ordered : bool, default True
        The second term must follow the first (as in the query); False: either order.
    weighting : {"count", "bm25"}, default "count"
        The matches summed over the pairs, or BM25 of each pair as a term (``k1``, ``b`` and
        the document lengths of ``bm25``'s analysis; idf from the documents of the whole
        collection with a match).
    """

    params = ("bm25", "window", "ordered", "weighting")
    window: int
    ordered: bool
    weighting: str

    def __init__(self, bm25: BM25Retriever, *, window: int = 1, ordered: bool = True, weighting: str = "count") -> None:
        self._init(bm25=bm25, window=window, ordered=ordered, weighting=weighting)

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        w = values["window"]
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise KolmValueError(f"TermPairs.window must be an int >= 1, got {w!r}")
        if not isinstance(values["ordered"], bool):
            raise KolmTypeError(f"TermPairs.ordered must be a bool, got {values['ordered']!r}")
        if values["weighting"] not in ("bm25", "count"):
            raise KolmValueError(f"TermPairs.weighting must be 'count' or 'bm25', got {values['weighting']!r}")
        return super().checked(values)

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> F64:
        bm = self.bm25
        doc_ptr, tokens = forward_index(bm)
        same_table(self, batch, bm.table)
        kernels = load("proximity")
        p_ptr, a, b = _pairs(*_encoded(bm, batch), len(bm.vocab), self.ordered)
        out_ptr, counts = kernels.pair_counts(doc_ptr, tokens, candidates.query, candidates.doc, p_ptr, a, b,
                                              window=self.window, ordered=self.ordered, n_threads=bm.n_threads)
        c = counts.astype(np.float64)
        if self.weighting == "bm25" and len(c):
            df = kernels.pair_document_frequency(bm.t_ptr, bm.t_docs, doc_ptr, tokens, a, b, window=self.window,
                                                 ordered=self.ordered, n_threads=bm.n_threads).astype(np.float64)
            n = float(len(bm.table))
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
            lengths = np.diff(doc_ptr).astype(np.float64)
            norm = bm.k1 * (1.0 - bm.b + bm.b * lengths / max(float(lengths.mean()), 1.0))
            per = np.diff(out_ptr)
            pair = np.repeat(p_ptr[candidates.query], per) + (np.arange(len(c)) - np.repeat(out_ptr[:-1], per))
            c = idf[pair] * c * (bm.k1 + 1.0) / (c + np.repeat(norm[candidates.doc], per))
        total = np.zeros(len(candidates), np.float64)
        np.add.at(total, np.repeat(np.arange(len(candidates)), np.diff(out_ptr)), c)
        return total


class TermProximity(_TermFeature):
    """A proximity measure of the query terms in each candidate (see the module doc).

    Parameters
    ----------
    bm25 : BM25Retriever
    measure : {"min_distance", "min_window", "first_match"}, default "min_distance"
    """

    params = ("bm25", "measure")
    measure: str

    def __init__(self, bm25: BM25Retriever, *, measure: str = "min_distance") -> None:
        self._init(bm25=bm25, measure=measure)

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        if values["measure"] not in PROXIMITY_MEASURES:
            raise KolmValueError(f"TermProximity.measure must be one of {PROXIMITY_MEASURES}, "
                                 f"got {values['measure']!r}")
        return super().checked(values)

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> F64:
        stats, _ = self._stats(batch, candidates, None)
        matched, dist, span, first = stats[:, 0], stats[:, 2], stats[:, 3], stats[:, 4]
        if self.measure == "min_distance":
            return np.log(_ALPHA + np.exp(-np.where(dist >= 0, dist, np.inf)))
        if self.measure == "min_window":
            return np.where(span > 0, matched / np.where(span > 0, span, 1.0), 0.0)
        doc_ptr, _ = forward_index(self.bm25)
        length = np.diff(doc_ptr)[candidates.doc].astype(np.float64)
        return np.where(first >= 0, 1.0 - first / np.maximum(length, 1.0), 0.0)
