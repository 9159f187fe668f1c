"""Dense top-k: exact inner-product search, tiled products fused with per-query heaps.

Each thread owns a range of query tiles; for each tile of documents it computes
``Q_t @ D_t.T`` with single-threaded BLAS into a small buffer and folds the scores into the
tile's heaps while they are still in cache. Memory stays bounded by the tile sizes whatever the
batch, no score matrix is written out, and BLAS and kernel threads never compete for cores
(the wrapper limits BLAS to one thread for the call).

Ordering: higher score first, equal scores by lower document code.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import resolve_threads, run_chunks
from kolm_search._kernels.heap import heap_push, sort_heap, topk_rows_numpy
from kolm_search._kernels.selection import selection_matrix_numpy
from kolm_search._kernels.sig import f32, i64, ro, rw, u8

__all__ = ["dense_topk", "dense_topk_numpy"]

_SIGNATURE = types.void(ro(f32, 2), ro(f32, 2), ro(i64), ro(i64), ro(i64), ro(i64), ro(u8, 2), rw(f32, 2),
                        rw(i64, 2), rw(i64), i64, i64, rw(f32), i64, i64)


@njit(cache=True, inline="always")
def _offer_row(row, bd, d0, m, sel_ptr, sel_rows, sel_mask, masks, hs, hd, size, k):  # pragma: no cover - compiled
    """Offer ``row[:bd]`` (documents ``d0..d0+bd``) to one query's heap; returns its new size.

    Scanned 16 scores at a time: a branch-free test against the worst kept score skips whole
    runs, since after the first few thousand documents almost no score enters a top-k.
    """
    thr = hs[0] if size == k else -np.inf
    j = 0
    while j < bd:
        end = min(j + 16, bd)
        hit = False
        for t in range(j, end):
            hit |= row[t] >= thr
        if hit:
            for t in range(j, end):
                s = row[t]
                if size == k and s < hs[0]:
                    continue
                d = d0 + t
                if m >= 0:  # the selection test, written out (a call per candidate costs more)
                    mm = sel_mask[m]
                    if mm >= 0:
                        if masks[mm, d] == 0:
                            continue
                    else:
                        lo, hi = sel_ptr[m], sel_ptr[m + 1]
                        while lo < hi:
                            mid = (lo + hi) >> 1
                            if sel_rows[mid] < d:
                                lo = mid + 1
                            else:
                                hi = mid
                        if lo >= sel_ptr[m + 1] or sel_rows[lo] != d:
                            continue
                size = heap_push(hs, hd, size, k, s, d)
            thr = hs[0] if size == k else -np.inf
        j = end
    return size


@njit(_SIGNATURE, cache=True, nogil=True)
def _dense_tiles(queries, docs, sel_ids, sel_ptr, sel_rows, sel_mask, masks, heap_s, heap_d, sizes, tile_q, tile_d,
                 buf, t0, t1):  # pragma: no cover - compiled
    """Query tiles ``t0 <= t < t1`` against every document tile, heaps sorted at the end;
    ``buf`` (tile_q * tile_d,) holds one tile of scores."""
    m = queries.shape[0]
    n = docs.shape[0]
    k = heap_s.shape[1]
    for tq in range(t0, t1):
        q0 = tq * tile_q
        q1 = min(m, q0 + tile_q)
        qt = queries[q0:q1]
        for d0 in range(0, n, tile_d):
            d1 = min(n, d0 + tile_d)
            s = buf[: (q1 - q0) * (d1 - d0)].reshape((q1 - q0, d1 - d0))
            np.dot(qt, docs[d0:d1].T, s)
            for r in range(q1 - q0):
                q = q0 + r
                sizes[q] = _offer_row(s[r], d1 - d0, d0, sel_ids[q], sel_ptr, sel_rows, sel_mask, masks, heap_s[q],
                                      heap_d[q], sizes[q], k)
        for q in range(q0, q1):
            sort_heap(heap_s[q], heap_d[q], sizes[q])


_BLAS: list[Any] = []


def _single_threaded_blas() -> Any:
    """Limit BLAS to one thread for a call (each kernel thread runs its own products)."""
    if not _BLAS:
        import scipy.linalg.cython_blas  # noqa: F401  (the BLAS that Numba's np.dot calls)
        from threadpoolctl import ThreadpoolController

        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def dense_topk(queries: npt.NDArray[np.float32], docs: npt.NDArray[np.float32], k: int,
               sel_ids: npt.NDArray[np.int64], sel_ptr: npt.NDArray[np.int64], sel_rows: npt.NDArray[np.int64],
               sel_mask: npt.NDArray[np.int64], masks: npt.NDArray[np.uint8], *, query_block: int | None = None,
               doc_block: int = 256, n_threads: int | None = None,
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Exact top-``k`` of every query row: ``docs int64 (m, k), scores float32 (m, k),
    counts int64 (m,)``.

    ``queries`` float32 (m, d) and ``docs`` float32 (n, d) C-contiguous with one ``d``;
    ``sel_ids, sel_ptr, sel_rows, sel_mask, masks`` each query's filter, the arrays of
    :class:`kolm_search.engine.selection.Selections` (checked by the caller);
    ``query_block`` queries per tile (default: the batch split over the threads, at most 512),
    ``doc_block`` documents per tile.
    """
    m, n = queries.shape[0], docs.shape[0]
    heap_s = np.zeros((m, k), np.float32)
    heap_d = np.full((m, k), -1, np.int64)
    sizes = np.zeros(m, np.int64)
    if m == 0 or n == 0:
        return heap_d, heap_s, sizes
    threads = resolve_threads(n_threads)
    tile_q = max(1, int(query_block) if query_block else min(512, -(-m // threads)))
    n_tiles = -(-m // tile_q)
    bounds = np.unique(np.linspace(0, n_tiles, min(threads, n_tiles) + 1).astype(np.int64))
    tile_d = max(1, int(doc_block))

    def chunk(t0: int, t1: int) -> None:
        _dense_tiles(queries, docs, sel_ids, sel_ptr, sel_rows, sel_mask, masks, heap_s, heap_d, sizes, tile_q, tile_d,
                     np.empty(tile_q * tile_d, np.float32), t0, t1)

    with _single_threaded_blas():
        run_chunks(chunk, bounds)
    return heap_d, heap_s, sizes


def dense_topk_numpy(scores: npt.NDArray[np.float32], sel_ids: npt.NDArray[np.int64], sel_ptr: npt.NDArray[np.int64],
                     sel_rows: npt.NDArray[np.int64], sel_mask: npt.NDArray[np.int64], masks: npt.NDArray[np.uint8],
                     k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Numpy twin: a full score matrix (m, n) in, the same top-k rows out."""
    valid = selection_matrix_numpy(sel_ids, sel_ptr, sel_rows, sel_mask, masks, scores.shape[1])
    return topk_rows_numpy(scores, valid, k)
