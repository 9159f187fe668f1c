"""Checking a saved index's large arrays block by block, read from their files.

A quick load of dense embeddings (``verify="quick"``, see :mod:`._saved`) checks what the
search kernels rely on without touching the pages of the memory-mapped arrays: each block is
read from the array's file (:func:`read_rows`) into memory that is freed after it, so the
resident memory after a load holds none of the embeddings, whatever their size. What reads a
quickly loaded index's whole postings (:meth:`.postings_gate.PostingsGate.all`; searches check
their own terms first) passes the mapped memory itself, which it reads next anyway: a file's
name may, long after the load, no longer hold what the searches read. The blocks are checked on
``n_threads`` threads (file reads and the kernel release the GIL).

:func:`check_postings` checks the postings of a BM25 index (``t_docs``, ``t_w`` under checked
pointers ``t_ptr``: rows in range and ascending within each term, finite non-negative
weights) with :func:`kolm_search._kernels.postings_check.first_bad_posting` and returns, from
the same pass, the bounds that pruning reads (each term's smallest and largest weight, each
block of 64 postings' largest weight and last document: :mod:`kolm_search._kernels.blocks`); :func:`check_rows` applies a vectorised check to consecutive row blocks
of any array (dense embeddings).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kolm_search._kernels import load, resolve_threads
from kolm_search.errors import KolmValueError

__all__ = ["BLOCK_BYTES", "check_postings", "check_rows", "posting_error", "read_rows"]

BLOCK_BYTES = 32 << 20  # bytes of one array read at a time (a term's postings are never split)


def read_rows(arr: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``arr[lo:hi]`` (rows of a C-contiguous array) in memory: read from the array's file when
    ``arr`` is memory-mapped (its mapped pages are left untouched), else a view."""
    if not isinstance(arr, np.memmap) or arr.filename is None:
        return arr[lo:hi]
    row = int(np.prod(arr.shape[1:], dtype=np.int64))
    out = np.empty((hi - lo, *arr.shape[1:]), arr.dtype)
    if out.nbytes == 0:
        return out
    with open(arr.filename, "rb") as fp:
        fp.seek(int(arr.offset) + lo * row * arr.dtype.itemsize)
        got = fp.readinto(out.data.cast("B"))
    if got != out.nbytes:
        raise KolmValueError(f"{arr.filename}: shorter than its header says (changed while being read)")
    return out


def _term_blocks(t_ptr: npt.NDArray[np.int64], per_block: int) -> list[tuple[int, int]]:
    """Term ranges whose postings hold about ``per_block`` entries (one term never split)."""
    n_terms = len(t_ptr) - 1
    out, t0 = [], 0
    while t0 < n_terms:
        t1 = int(np.searchsorted(t_ptr, t_ptr[t0] + per_block, side="right")) - 1
        t1 = min(max(t1, t0 + 1), n_terms)
        out.append((t0, t1))
        t0 = t1
    return out


def _threads(n_blocks: int, n_threads: int | None) -> int:
    return max(1, min(resolve_threads(n_threads), n_blocks))


def check_postings(paths: dict[str, Path], t_ptr: npt.NDArray[np.int64], t_docs: np.ndarray, t_w: np.ndarray,
                   n_docs: int, n_threads: int | None = None) -> dict[str, np.ndarray]:
    """Check the postings block by block; their bounds.

    Parameters
    ----------
    paths : dict
        ``"t_docs"`` and ``"t_w"`` -> their files (for messages).
    t_ptr : int64 (V + 1,)
        Checked pointers (from 0, never decreasing, ending at ``len(t_docs)``).
    t_docs : int32 (nnz,), t_w : float32 (nnz,)
        Memory-mapped (read block by block from their files) or in memory.

    Returns
    -------
    dict
        ``t_min, t_max`` float32 (V,), ``b_max`` float32 and ``b_last`` int32 (n_blocks,): what
        :func:`kolm_search.retrievers.bounds.index_bounds` computes from resident postings.

    Raises
    ------
    KolmValueError
        The first bad posting of the first bad block: its file and position.
    """
    kernels = load("postings_check"), load("blocks")
    kernel = kernels[0].first_bad_posting
    b_ptr = kernels[1].block_pointers(t_ptr)
    n_terms, n_blocks = len(t_ptr) - 1, int(b_ptr[-1])
    t_min, t_max = np.full(n_terms, np.inf, np.float32), np.zeros(n_terms, np.float32)
    b_max, b_last = np.zeros(n_blocks, np.float32), np.zeros(n_blocks, np.int32)
    blocks = _term_blocks(t_ptr, max(1, BLOCK_BYTES // 4))

    def check(block: tuple[int, int]) -> tuple[int, int]:
        t0, t1 = block
        lo, hi = int(t_ptr[t0]), int(t_ptr[t1])
        docs = np.ascontiguousarray(read_rows(t_docs, lo, hi), dtype=np.int32)
        weights = np.ascontiguousarray(read_rows(t_w, lo, hi), dtype=np.float32)
        return kernel(t_ptr, b_ptr, docs, weights, t0, t1, n_docs, t_min, t_max, b_max, b_last)

    with ThreadPoolExecutor(_threads(len(blocks), n_threads)) as pool:
        for kind, pos in pool.map(check, blocks):  # in block order: the first bad block's first posting
            if kind:
                raise posting_error(kind, pos, paths, t_docs, t_w, n_docs)
    return {"t_min": t_min, "t_max": t_max, "b_max": b_max, "b_last": b_last}


def posting_error(kind: int, pos: int, paths: dict[str, Path], t_docs: np.ndarray, t_w: np.ndarray,
                  n_docs: int) -> KolmValueError:
    """The error of bad posting ``pos`` of ``kind``
    (:func:`kolm_search._kernels.postings_check.first_bad_posting`), naming its file."""
    if kind == 1:
        return KolmValueError(f"{paths['t_docs']}: document row {int(t_docs[pos])} at position {pos} "
                              f"lies outside [0, {n_docs})")
    if kind == 2:
        return KolmValueError(f"{paths['t_docs']}: document rows not ascending within a term at position {pos}")
    return KolmValueError(f"{paths['t_w']}: value at position {pos} is {t_w[pos].item()!r}; "
                          "values must be finite and >= 0")


def check_rows(arr: np.ndarray, check: Callable[[np.ndarray, int], None], n_threads: int | None = None) -> None:
    """``check(block, first_row)`` of consecutive row blocks of ``arr`` (read as :func:`read_rows`
    reads them); the first failing block's error is raised."""
    n = arr.shape[0]
    row_bytes = max(1, int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize)
    step = max(1, BLOCK_BYTES // row_bytes)
    starts = list(range(0, n, step))

    def run(lo: int) -> None:
        check(read_rows(arr, lo, min(lo + step, n)), lo)

    with ThreadPoolExecutor(_threads(len(starts), n_threads)) as pool:
        for _ in pool.map(run, starts):
            pass
