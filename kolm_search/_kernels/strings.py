"""String-column kernels over Arrow buffers: run starts and parallel gathers.

A string column is ``offsets int64 (n+1,)`` and ``data uint8 (m,)`` (Arrow's layout: row i is
``data[offsets[i]:offsets[i+1]]``).

``string_run_starts(offsets, data, n_chunks) -> starts int64 (r,)``
    Rows whose string differs from the row before (row 0 always, when n > 0): the heads of
    runs of equal strings. A run's query ids are such runs, so a 6-million-row qid column
    reduces to a few thousand heads before any hashing.

``gather_strings(offsets, data, rows int64 (k,), n_chunks) -> (offsets int64 (k+1,), data uint8)``
    The strings of ``rows``, in that order, as new Arrow buffers (what ``pyarrow.compute.take``
    does, but on all threads).

Numpy twins: :func:`string_run_starts_numpy`, :func:`gather_strings_numpy`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from kolm_search._kernels.intern import _equal
from kolm_search._kernels.words import copy_bytes

__all__ = ["gather_strings", "gather_strings_numpy", "string_run_starts", "string_run_starts_numpy"]

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


@njit(cache=True, parallel=True)
def _run_starts(offsets, data, n_chunks):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    counts = np.zeros(n_chunks + 1, np.int64)
    for c in prange(n_chunks):
        cnt = 0
        for i in range((n * c) // n_chunks, (n * (c + 1)) // n_chunks):
            if i == 0 or not _equal(data, offsets, i - 1, i):
                cnt += 1
        counts[c + 1] = cnt
    for c in range(n_chunks):
        counts[c + 1] += counts[c]
    starts = np.empty(counts[n_chunks], np.int64)
    for c in prange(n_chunks):
        at = counts[c]
        for i in range((n * c) // n_chunks, (n * (c + 1)) // n_chunks):
            if i == 0 or not _equal(data, offsets, i - 1, i):
                starts[at] = i
                at += 1
    return starts


def string_run_starts(offsets: I64, data: U8, n_chunks: int = 1) -> I64:
    """Compiled run heads (see the module docstring)."""
    return _run_starts(offsets, data, np.int64(max(1, n_chunks)))


def string_run_starts_numpy(offsets: I64, data: U8) -> I64:
    """Twin of :func:`string_run_starts` on decoded byte strings."""
    n = offsets.shape[0] - 1
    values = [bytes(data[offsets[i]:offsets[i + 1]]) for i in range(n)]
    return np.array([i for i in range(n) if i == 0 or values[i] != values[i - 1]], dtype=np.int64)


@njit(cache=True)
def _gather_lengths(offsets, rows, out_off, sums):  # pragma: no cover - compiled
    k = rows.shape[0]
    n_chunks = sums.shape[0] - 1
    out_off[0] = 0
    for c in range(n_chunks):  # each chunk's total length (serial: one read per row)
        tot = 0
        for i in range((k * c) // n_chunks, (k * (c + 1)) // n_chunks):
            r = rows[i]
            tot += offsets[r + 1] - offsets[r]
        sums[c + 1] = tot
    for c in range(n_chunks):
        sums[c + 1] += sums[c]


@njit(cache=True, parallel=True)
def _gather_bytes(offsets, data, rows, out_off, sums, out):  # pragma: no cover - compiled
    k = rows.shape[0]
    n_chunks = sums.shape[0] - 1
    for c in prange(n_chunks):  # offsets inside each chunk, and the bytes
        at = sums[c]
        end = sums[c + 1]
        for i in range((k * c) // n_chunks, (k * (c + 1)) // n_chunks):
            r = rows[i]
            s = offsets[r]
            ln = offsets[r + 1] - s
            # a word may spill past this string into bytes of this chunk written later
            copy_bytes(out, at, data, s, ln, min(7, end - at - ln))
            at += ln
            out_off[i + 1] = at


def gather_strings(offsets: I64, data: U8, rows: I64, n_chunks: int = 1) -> tuple[I64, U8]:
    """Compiled parallel gather (see the module docstring); ``rows`` must lie in ``[0, n)``.

    The outputs are allocated by numpy (which asks the kernel for huge pages; Numba's own
    allocations fault in 4 KiB pages, which costs more than the copy here).
    """
    out_off = np.empty(rows.shape[0] + 1, np.int64)
    sums = np.zeros(max(1, n_chunks) + 1, np.int64)
    _gather_lengths(offsets, rows, out_off, sums)
    out = np.empty(int(sums[-1]), np.uint8)
    _gather_bytes(offsets, data, rows, out_off, sums, out)
    return out_off, out


def gather_strings_numpy(offsets: I64, data: U8, rows: I64) -> tuple[I64, U8]:
    """Twin of :func:`gather_strings`."""
    lengths = (offsets[1:] - offsets[:-1])[rows]
    out_off = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=out_off[1:])
    parts = [data[offsets[r]:offsets[r + 1]] for r in rows]
    return out_off, (np.concatenate(parts).astype(np.uint8) if parts else np.zeros(0, np.uint8))
