"""Scoring a BM25 index: texts or token ids in, each query's top-k documents out, one kernel
call per batch.

:class:`BM25Scoring` is the query half of :class:`~kolm_search.retrievers.bm25.BM25Retriever`
(its base class; the retriever builds, updates and saves the arrays, this reads them). The arrays
it reads are declared below: the term dictionary (``vocab``), the postings under pointers
``t_ptr`` (``t_docs`` int32 document rows, ``t_w`` float32 weights, ``nonocc`` each term's
non-occurrence constant) and their pruning bounds (:mod:`kolm_search.retrievers.bounds`). After
a quick load they are guarded by a :class:`~kolm_search.retrievers.postings_gate.PostingsGate`:
a search checks its own terms first and reads the arrays behind the guard; any other reader of
the public attributes checks every term. Each call chooses the pruned kernel
(:mod:`kolm_search._kernels.pruned`) or the exhaustive one (:mod:`kolm_search._kernels.sparse`)
per query as ``pruning`` says; the results are the same bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search._params import one_of
from kolm_search.engine.selection import Selections
from kolm_search.engine.text import Tokenizer
from kolm_search.errors import KolmValueError
from kolm_search.retrievers import _validate as check
from kolm_search.retrievers.bitmaps import TermBitmaps
from kolm_search.retrievers.bm25_weights import reduce_offsets
from kolm_search.retrievers.bounds import PRUNINGS, Pruning, prune_queries
from kolm_search.retrievers.incremental import SegmentedIndex
from kolm_search.retrievers.postings_gate import PostingsGate
from kolm_search.retrievers.weighted import check_bound, check_weighted, encode_weighted

__all__ = ["BM25Scoring"]


def _finite(name: str, values: npt.NDArray[np.float32]) -> None:
    """Refuse NaN or infinite ``values`` (float32, as the kernels read them), naming the first."""
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise KolmValueError(f"{name}[{i}] is {values[i].item()!r} as float32; {name} must be finite")


class BM25Scoring(SegmentedIndex):
    """Top-k scoring of a BM25 index's arrays (see the module); the base of ``BM25Retriever``."""

    vocab: list[str]  # set by the retriever (build, merge, load)
    _vocab_index: dict[str, int]
    tokenizer: Tokenizer
    pruning: Pruning
    n_threads: int | None
    t_ptr: npt.NDArray[np.int64]
    nonocc: npt.NDArray[np.float32]
    _bounds: tuple[Any, Any, npt.NDArray[np.float64]] | None = None  # (t_w, nonocc, term_bounds) of score_weighted
    _bitmaps: TermBitmaps | None = None  # frequent terms' document bitmaps for the pruned kernel (built on demand)
    _postings_gate: PostingsGate | None = None  # a quick load's check of the postings, term by term on first read
    _t_docs: npt.NDArray[np.int32]  # the postings and their pruning bounds (kolm_search._kernels.blocks),
    _t_w: npt.NDArray[np.float32]  # set by the retriever; the search path reads them after _check_terms,
    _t_min: npt.NDArray[np.float32]  # any other reader through the properties below
    _t_max: npt.NDArray[np.float32]
    _b_max: npt.NDArray[np.float32]
    _b_last: npt.NDArray[np.int32]

    def _checked_all(self) -> None:
        """After a quick load, check every term not yet checked (what reads the whole arrays)."""
        if self._postings_gate is not None:
            self._postings_gate.all()

    @property
    def t_docs(self) -> npt.NDArray[np.int32]:
        """Document row of each posting, int32 (nnz,), term by term (pointers ``t_ptr``)."""
        self._checked_all()
        return self._t_docs

    @property
    def t_w(self) -> npt.NDArray[np.float32]:
        """BM25 weight of each posting, float32 (nnz,)."""
        self._checked_all()
        return self._t_w

    @property
    def t_min(self) -> npt.NDArray[np.float32]:
        """Each term's smallest weight, float32 (V,) (+inf without postings)."""
        self._checked_all()
        return self._t_min

    @property
    def t_max(self) -> npt.NDArray[np.float32]:
        """Each term's largest weight, float32 (V,) (0 without postings)."""
        self._checked_all()
        return self._t_max

    @property
    def b_max(self) -> npt.NDArray[np.float32]:
        """Each block of 64 postings' largest weight, float32 (n_blocks,)."""
        self._checked_all()
        return self._b_max

    @property
    def b_last(self) -> npt.NDArray[np.int32]:
        """Each block of 64 postings' last document row, int32 (n_blocks,)."""
        self._checked_all()
        return self._b_last

    def encode(self, texts: Iterable[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Token ids of each text as CSR ``(ptr, ids)``; unknown tokens dropped, repeats kept.

        The ids hold until the next :meth:`add`/:meth:`delete` is merged (it renumbers terms)."""
        self.merge()  # ids of the merged vocabulary
        ids: list[int] = []
        ptr = [0]
        index = self._vocab_index
        for text in texts:
            ids.extend(index[t] for t in self.tokenizer(text) if t in index)
            ptr.append(len(ids))
        return np.asarray(ptr, np.int64), np.asarray(ids, np.int64)

    def score_texts(self, texts: Sequence[str], k: int, selections: Selections | None = None, *,
                    offsets: npt.ArrayLike | None = None, pruning: Pruning | None = None,
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-``k`` documents of each text: ``(docs (m, k), scores (m, k), counts (m,))``, each
        limited to its selection (:class:`~kolm_search.engine.selection.Selections`, default all).

        ``offsets`` overrides the per-query BM25L/BM25+ constant (a sharded index passes the
        collection-wide one, see :meth:`CollectionStats.query_offsets`). ``pruning`` overrides
        the retriever's (``"none"``: the exhaustive kernel; the results are the same).
        """
        q_ptr, q_ids = self.encode(texts)
        return self.score_encoded(q_ptr, q_ids, k, selections, offsets=offsets, pruning=pruning)

    def score_encoded(self, q_ptr: npt.NDArray[np.int64], q_ids: npt.NDArray[np.int64], k: int,
                      selections: Selections | None = None,
                      *, offsets: npt.ArrayLike | None = None, weights: npt.NDArray[np.float32] | None = None,
                      pruning: Pruning | None = None,
                      ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """:meth:`score_texts` on token ids from :meth:`encode` (CSR ``q_ptr``, ``q_ids``);
        ``weights`` float32 (nnz,) per token (default 1, checked by :meth:`score_weighted`)."""
        mode = self.pruning if pruning is None else one_of("pruning", pruning, PRUNINGS)
        self.merge()
        q_ptr, q_ids = np.asarray(q_ptr), np.asarray(q_ids)
        if (q_ptr.ndim != 1 or len(q_ptr) < 1 or q_ptr.dtype.kind not in "iu" or q_ids.ndim != 1
                or (q_ids.size and q_ids.dtype.kind not in "iu")):
            raise KolmValueError(f"q_ptr and q_ids must be 1-D integer arrays, got {q_ptr.dtype}{q_ptr.shape} and "
                                 f"{q_ids.dtype}{q_ids.shape}")
        q_ptr, q_ids = q_ptr.astype(np.int64, copy=False), q_ids.astype(np.int64, copy=False)
        if q_ptr[0] != 0 or q_ptr[-1] != len(q_ids) or np.any(np.diff(q_ptr) < 0):  # a kernel reads q_ids[q_ptr[q]:]
            raise KolmValueError(f"q_ptr must start at 0, never decrease and end at len(q_ids) = {len(q_ids)}")
        m = len(q_ptr) - 1
        if len(q_ids) and not 0 <= int(np.min(q_ids)) <= int(np.max(q_ids)) < len(self.vocab):  # stale ids: no kernel read
            raise KolmValueError(f"token ids must lie in [0, {len(self.vocab)}) (encode again after add/delete)")
        weights = np.ones(len(q_ids), np.float32) if weights is None else np.asarray(weights, np.float32)
        if weights.shape != q_ids.shape:
            raise KolmValueError(f"weights has shape {weights.shape}, expected one weight per token id {q_ids.shape}")
        _finite("weights", weights)
        if offsets is None:
            offsets = reduce_offsets(self.nonocc[q_ids] * weights, q_ptr)
        try:
            offsets = np.ascontiguousarray(offsets, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise KolmValueError(f"offsets must be numbers, one per query ({m}): {exc}") from exc
        if offsets.shape != (m,):  # a kernel reads offsets[q] for every query q
            raise KolmValueError(f"offsets must have shape ({m},), one per query, got {offsets.shape}")
        _finite("offsets", offsets)
        n_docs = len(self.table)
        sel = Selections.none(m) if selections is None else selections
        try:
            sel.check(m, n_docs)
        except ValueError as exc:
            raise KolmValueError(str(exc)) from exc
        k = min(check.top_k(k), max(n_docs, 1))
        self._check_terms(q_ids)  # the kernels below read these terms' postings and bounds only
        if mode == "auto":
            prune = prune_queries(q_ptr, q_ids, weights, self.t_ptr, offsets, sel.ids, sel.ptr, sel.mask_of, k)
            if prune.any():
                cache = self._term_bitmaps(n_docs)
                bitmaps = cache.for_terms(q_ids[np.repeat(prune, np.diff(q_ptr))]) if cache.enabled else None
                return load("pruned").pruned_topk(q_ptr, q_ids, weights, self.t_ptr, self._t_docs, self._t_w,
                                                  self._t_max, self._b_max, self._b_last, offsets, *sel.arrays(),
                                                  n_docs, k, n_threads=self.n_threads, prune=prune,
                                                  t_min=self._t_min, bitmaps=bitmaps)
        return load("sparse").sparse_topk(q_ptr, q_ids, weights, self.t_ptr, self._t_docs, self._t_w, offsets,
                                          *sel.arrays(), n_docs, k, n_threads=self.n_threads, t_min=self._t_min)

    def score_weighted(self, q_ptr: npt.ArrayLike, q_ids: npt.ArrayLike, q_weights: npt.ArrayLike, k: int,
                       selections: Selections | None = None, *, pruning: Pruning | None = None,
                       ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """Top-``k`` of weighted queries in CSR form (term ids, float32 weights): a document
        scores ``sum w * bm25(term, doc)`` (:mod:`~kolm_search.retrievers.weighted`); a query
        whose scores could overflow float32 raises ``KolmValueError`` naming it, its term and the bound."""
        self.merge()  # ids and bounds of the merged index
        ptr, ids, w = check_weighted(q_ptr, q_ids, q_weights, len(self.vocab), self.vocab)
        self._check_terms(ids)
        check_bound(ptr, ids, w, self._term_bounds(), self.vocab)
        return self.score_encoded(ptr, ids, k, selections, weights=w, pruning=pruning)

    def _check_terms(self, ids: npt.NDArray[np.int64]) -> None:
        """After a quick load, check the postings of terms ``ids`` not yet checked (their bounds
        with them: :mod:`~kolm_search.retrievers.postings_gate`); nothing to do otherwise."""
        if self._postings_gate is not None:
            self._postings_gate.terms(ids)

    def _term_bitmaps(self, n_docs: int) -> TermBitmaps:
        """The bitmaps of the current postings (:mod:`~kolm_search.retrievers.bitmaps`), new
        when the postings were replaced (a merge). They are built for the terms of a search,
        which :meth:`_check_terms` checked."""
        cached = self._bitmaps
        if cached is None or not cached.matches(self.t_ptr, self._t_docs, n_docs):
            cached = self._bitmaps = TermBitmaps(self.t_ptr, self._t_docs, n_docs, n_threads=self.n_threads)
        return cached

    def _term_bounds(self) -> npt.NDArray[np.float64]:
        """The largest score a unit weight of each term can add, float64 (V,): its largest
        weight (``t_max``; weights are >= 0) plus its non-occurrence constant's absolute value,
        as :func:`~kolm_search.retrievers.weighted.term_bounds` computes from the postings.
        Computed once per set of arrays (a rebuild or merge replaces them); after a quick load,
        valid for the terms checked (:meth:`_check_terms`) and computed again until all are."""
        cached = self._bounds
        if cached is None or cached[0] is not self._t_max or cached[1] is not self.nonocc:
            # whether every term was checked, asked before t_max is read: bounds read while a gate
            # finishes (another thread) hold zeros of terms unchecked then, and must not be kept
            done = self._postings_gate is None or self._postings_gate.done
            bounds = self._t_max.astype(np.float64) + np.abs(np.asarray(self.nonocc, np.float64))
            if not done:
                return bounds
            cached = self._bounds = (self._t_max, self.nonocc, bounds)
        return cached[2]

    def score_terms(self, queries: Sequence[Mapping[str, float]], k: int, selections: Selections | None = None, *,
                    pruning: Pruning | None = None,
                    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """:meth:`score_weighted` of queries given as analysed term -> weight (unknown terms dropped)."""
        self.merge()
        return self.score_weighted(*encode_weighted(self._vocab_index, queries), k, selections, pruning=pruning)
