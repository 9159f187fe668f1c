"""Approximate dense search on faiss: the index a :class:`~kolm_search.retrievers.dense.DenseRetriever`
holds beside its embeddings when built with ``index="hnsw" | "ivf" | "ivfpq" | <factory string>``.

Slots: faiss numbers its vectors in the order they were added (slot 0, 1, ...). The index keeps a
``live`` mask over slots; the retriever's row of a live slot is its rank among the live ones
(a merge keeps the old documents in order and appends the new ones, so added vectors take
new slots and the ranks stay the rows). Deleted documents stay in faiss as dead slots that an
``IDSelectorBitmap`` excludes from every search and that are mapped to no row; once dead slots
outnumber the live ones a merge rebuilds the index (retrained) from the live embeddings.

Search, per batch (:meth:`AnnIndex.search`): the queries of each distinct selection go to
faiss in one call (unfiltered queries, or queries sharing one filter: the whole batch in one
call). A filter kept as a mask (more than ``ROWS_SHARE`` of the documents) becomes a faiss
``IDSelectorBitmap`` over the slots, passed in the call's ``SearchParameters``, with ``nprobe``
and ``ef_search`` divided by the share of documents it lets through (as many allowed
candidates are visited as without a filter, so recall holds while cost grows); a filter kept
as rows (few documents) is searched exactly over those rows instead (an ANN index visits too
few of a rare filter's documents). An index type faiss cannot filter in the call (e.g. a
``PCA..,IVF..`` chain) is over-fetched and masked, fetching four times more until ``k``
allowed documents or the whole index are found. faiss returns ``rerank * k`` candidates;
when those are more than ``k`` or the index stores lossy codes (PQ, SQ), they are re-scored
exactly from the embeddings: scores are always exact inner products (up to float rounding),
best first, ties by row.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load
from kolm_search.engine.selection import Selections
from kolm_search.errors import KolmValueError
from kolm_search.retrievers.ann_spec import AnnSpec, faiss_module

__all__ = ["AnnIndex", "faiss_threads", "set_search_parameters"]

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
_DEAD_SHARE = 0.5  # dead slots beyond this share of all: rebuild on merge
_ADD_CHUNK = 1 << 16
_RESCORE_BLOCK = 128
_OMP = threading.Lock()


@contextlib.contextmanager
def faiss_threads(n_threads: int | None) -> Iterator[None]:
    """faiss's OpenMP threads for a call: ``n_threads`` if given (faiss's own default, the
    usable cores, otherwise); the previous count is restored after."""
    if n_threads is None:
        yield
        return
    faiss = faiss_module()
    with _OMP:
        old = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(max(1, int(n_threads)))
        try:
            yield
        finally:
            faiss.omp_set_num_threads(old)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1] if text else type(exc).__name__


def set_search_parameters(index: Any, params: dict[str, int]) -> None:
    """Set ``nprobe`` / ``ef_search`` on a faiss index (its defaults for calls without parameters)."""
    faiss = faiss_module()
    space = faiss.ParameterSpace()
    for name, faiss_name in (("nprobe", "nprobe"), ("ef_search", "efSearch")):
        if name in params:
            try:
                space.set_index_parameter(index, faiss_name, params[name])
            except RuntimeError as exc:
                raise KolmValueError(f"index: parameter {name!r} does not apply to this faiss index: "
                                     f"{_first_line(exc)}") from exc


class AnnIndex:
    """A faiss index over the rows of a dense retriever, with its live slots.

    Parameters
    ----------
    spec : AnnSpec
        Resolved (:meth:`AnnSpec.resolved`).
    index : faiss.Index
        Inner-product index holding ``len(live)`` vectors; never changed once here (a merge
        with new vectors works on a clone: copies of the retriever keep theirs).
    live : bool (n_slots,)
        Slots holding a live document.
    """

    def __init__(self, spec: AnnSpec, index: Any, live: npt.NDArray[np.bool_]) -> None:
        faiss = faiss_module()
        self.spec, self.index = spec, index
        self.top = faiss.downcast_index(index)
        self.live = np.asarray(live, bool)
        self.live.flags.writeable = False
        self.slot_of_row: I64 = np.flatnonzero(self.live).astype(np.int64)
        self.row_of_slot: I64 = np.full(len(self.live), -1, np.int64)
        self.row_of_slot[self.slot_of_row] = np.arange(len(self.slot_of_row))
        self._live_selector = None if self.live.all() else self._selector(self.live)
        # faiss's scores are exact inner products (no lossy codes): no re-scoring unless over-fetched
        self._exact_codes = isinstance(self.top, (faiss.IndexFlat, faiss.IndexIVFFlat, faiss.IndexHNSWFlat))

    @property
    def n_live(self) -> int:
        return len(self.slot_of_row)

    @classmethod
    def build(cls, spec: AnnSpec, vectors: F32, *, seed: int = 0, n_threads: int | None = None) -> AnnIndex:
        """Train ``spec``'s index on a sample of ``vectors`` float32 (n, d) (``train_size`` rows,
        drawn with ``seed``) and add every row."""
        faiss = faiss_module()
        n, d = vectors.shape
        spec = spec.resolved(n, d)
        assert spec.params is not None
        try:
            index = faiss.index_factory(d, spec.factory, faiss.METRIC_INNER_PRODUCT)
        except RuntimeError as exc:
            raise KolmValueError(f"index={spec.index!r}: faiss cannot make {spec.factory!r}: {_first_line(exc)}") from exc
        top = faiss.downcast_index(index)
        if "ef_construction" in spec.params and isinstance(top, faiss.IndexHNSW):
            top.hnsw.efConstruction = spec.params["ef_construction"]
        if isinstance(top, faiss.IndexIVFPQ):
            top.do_polysemous_training = False  # only for Hamming filtering, which is not used: ~4x the training
        set_search_parameters(index, dict(spec.params))
        with faiss_threads(n_threads):
            try:
                if not index.is_trained:
                    size = spec.params["train_size"]
                    rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False)) if size < n else None
                    index.train(np.ascontiguousarray(vectors if rows is None else vectors[rows], np.float32))
                for start in range(0, n, _ADD_CHUNK):
                    index.add(np.ascontiguousarray(vectors[start:start + _ADD_CHUNK], np.float32))
            except RuntimeError as exc:
                raise KolmValueError(f"index={spec.index!r}: faiss cannot build {spec.factory!r} over {n} "
                                     f"vectors of dimension {d}: {_first_line(exc)}") from exc
        return cls(spec, index, np.ones(n, bool))

    # -- changes -----------------------------------------------------------------------------
    def merged(self, base_keep: npt.NDArray[np.bool_] | None, added: F32, vectors: F32, *,
               n_threads: int | None = None) -> AnnIndex | None:
        """The index after a merge: rows ``~base_keep`` deleted, ``added`` (a, d) appended;
        ``vectors`` (the retriever's merged embeddings) rebuild it when dead slots would
        outnumber live ones. None when no document is left."""
        live = self.live.copy()
        if base_keep is not None:
            live[self.slot_of_row[~base_keep]] = False
        n_live = int(live.sum()) + len(added)
        if n_live == 0:
            return None
        if len(live) + len(added) - n_live > _DEAD_SHARE * (len(live) + len(added)):
            return AnnIndex.build(AnnSpec(self.spec.index, dict(self.spec.given)), vectors, n_threads=n_threads)
        index = self.index
        if len(added):
            index = faiss_module().clone_index(self.index)
            with faiss_threads(n_threads):
                for start in range(0, len(added), _ADD_CHUNK):
                    index.add(np.ascontiguousarray(added[start:start + _ADD_CHUNK], np.float32))
        return AnnIndex(self.spec, index, np.concatenate([live, np.ones(len(added), bool)]))

    # -- search ------------------------------------------------------------------------------
    def _selector(self, slots: npt.NDArray[np.bool_]) -> Any:
        return faiss_module().IDSelectorBitmap(np.packbits(slots, bitorder="little"))

    def _parameters(self, fetch: int, selector: Any, share: float = 1.0) -> Any:
        """faiss ``SearchParameters`` of this index's type for a call (None: it takes none);
        ``share`` of the slots the selector lets through scales ``nprobe`` and ``ef_search`` up
        (as many allowed candidates are visited as without a filter)."""
        faiss = faiss_module()
        params = self.spec.params or {}
        if isinstance(self.top, faiss.IndexIVF):
            nprobe = int(params.get("nprobe", self.top.nprobe))
            return faiss.SearchParametersIVF(sel=selector, nprobe=min(self.top.nlist, math.ceil(nprobe / share)))
        if isinstance(self.top, faiss.IndexHNSW):
            ef = int(params.get("ef_search", self.top.hnsw.efSearch))
            return faiss.SearchParametersHNSW(sel=selector, efSearch=max(math.ceil(ef / share), fetch))
        if isinstance(self.top, faiss.IndexFlat):
            return faiss.SearchParameters(sel=selector)
        return None

    def search(self, queries: F32, k: int, selections: Selections, vectors: F32, *,
               n_threads: int | None = None) -> tuple[I64, F32, I64]:
        """Top-``k`` rows of each query (float32 (m, d), as the index's metric wants them):
        ``docs int64 (m, k), scores float32 (m, k), counts int64 (m,)``, rows best first (ties by
        row), each query limited to its selection over the live rows; ``vectors`` (n_live, d)
        the retriever's embeddings, for exact scores."""
        m = len(queries)
        k = min(k, max(self.n_live, 1))
        docs = np.full((m, k), -1, np.int64)
        scores = np.zeros((m, k), np.float32)
        counts = np.zeros(m, np.int64)
        if m == 0 or self.n_live == 0:
            return docs, scores, counts
        ids = selections.ids
        with faiss_threads(n_threads):
            for s in np.unique(ids).tolist():
                qi = slice(None) if ids.min() == ids.max() else np.flatnonzero(ids == s)
                q = np.ascontiguousarray(queries[qi], np.float32)
                if s >= 0 and selections.mask_of[s] < 0:  # few documents: exact over them
                    rows = selections.rows[selections.ptr[s]:selections.ptr[s + 1]]
                    got = self._exact_rows(q, vectors, rows, k)
                else:
                    allowed = None if s < 0 else selections.masks[selections.mask_of[s]].view(bool)
                    got = self._faiss(q, k, allowed, vectors)
                docs[qi], scores[qi], counts[qi] = got
        return docs, scores, counts

    def _faiss(self, q: F32, k: int, allowed: npt.NDArray[np.bool_] | None, vectors: F32) -> tuple[I64, F32, I64]:
        """faiss's candidates (``rerank * k``, over live slots ``allowed`` rows), their best ``k``."""
        n_slots = len(self.live)
        fetch = min(n_slots, k * int((self.spec.params or {}).get("rerank", 1)))
        selector = self._live_selector
        share = self.n_live / n_slots
        if allowed is not None:
            slots = np.zeros(n_slots, bool)
            slots[self.slot_of_row[allowed]] = True
            selector = self._selector(slots)
            share = max(int(np.count_nonzero(allowed)), 1) / n_slots
        params = self._parameters(fetch, selector, share)
        if params is not None or selector is None:
            scores, found = self.index.search(q, fetch, params=params)
            rows = self._rows(found, None)
        else:
            while True:  # no selector in the call: over-fetch, then mask
                scores, found = self.index.search(q, fetch)
                rows = self._rows(found, allowed)
                if fetch >= n_slots or bool(((rows >= 0).sum(axis=1) >= k).all()):
                    break
                fetch = min(n_slots, fetch * 4)
        if not self._exact_codes or fetch > k:
            scores = self._rescored(q, rows, vectors)
        return self._best(rows, scores, k)

    def _rows(self, slots: I64, allowed: npt.NDArray[np.bool_] | None) -> I64:
        """faiss's slots as live rows (-1: none, dead, or outside ``allowed``)."""
        rows = np.where(slots >= 0, self.row_of_slot[np.clip(slots, 0, None)], -1)
        if allowed is not None:
            rows = np.where((rows >= 0) & allowed[np.clip(rows, 0, None)], rows, -1)
        return rows

    @staticmethod
    def _rescored(q: F32, rows: I64, vectors: F32) -> F32:
        """The exact inner products of candidate ``rows`` (m, f)."""
        m, f = rows.shape
        exact = np.empty((m, f), np.float32)
        for b in range(0, m, _RESCORE_BLOCK):
            r = np.clip(rows[b:b + _RESCORE_BLOCK], 0, None)
            exact[b:b + _RESCORE_BLOCK] = np.matmul(vectors[r], q[b:b + _RESCORE_BLOCK, :, None])[..., 0]
        return exact

    @staticmethod
    def _best(rows: I64, scores: F32, k: int) -> tuple[I64, F32, I64]:
        """The best ``k`` of candidate ``rows`` (m, f) by ``scores``, ties by row."""
        m = len(rows)
        exact = np.where(rows >= 0, scores, -np.inf)
        order = np.lexsort((np.where(rows >= 0, rows, np.iinfo(np.int64).max), -exact), axis=-1)[:, :k]
        top_rows = np.take_along_axis(rows, order, axis=1)
        top = np.take_along_axis(exact, order, axis=1)
        docs = np.full((m, k), -1, np.int64)
        scores = np.zeros((m, k), np.float32)
        w = top_rows.shape[1]
        valid = top_rows >= 0
        docs[:, :w] = np.where(valid, top_rows, -1)
        scores[:, :w] = np.where(valid, top, 0)
        return docs, scores, valid.sum(axis=1).astype(np.int64)

    @staticmethod
    def _exact_rows(q: F32, vectors: F32, rows: I64, k: int) -> tuple[I64, F32, I64]:
        """Exact top-``k`` over ``rows`` only (the dense kernel on their embeddings)."""
        m = len(q)
        docs = np.full((m, k), -1, np.int64)
        scores = np.zeros((m, k), np.float32)
        if len(rows) == 0:
            return docs, scores, np.zeros(m, np.int64)
        sub = np.ascontiguousarray(vectors[rows], np.float32)
        kk = min(k, len(rows))
        d, s, c = load("dense").dense_topk(q, sub, kk, *Selections.none(m).arrays())
        docs[:, :kk] = np.where(d >= 0, rows[np.clip(d, 0, None)], -1)
        scores[:, :kk] = s
        return docs, scores, c

    # -- pickles (a process pool, Dask): faiss objects travel serialised -----------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "index": faiss_module().serialize_index(self.index), "live": np.asarray(self.live)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"], faiss_module().deserialize_index(state["index"]), state["live"])  # type: ignore[misc]
