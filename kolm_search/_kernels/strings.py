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

``repeat_strings(offsets, data, counts int64 (n,), n_chunks) -> (offsets int64 (k+1,), data uint8)``
    Row i repeated ``counts[i]`` times (``k = counts.sum()``): a fused run's ``qid`` column
    from its few thousand query ids, without a row index per output row. Every output
    position is computed from the counts, so the chunks need no serial pass.

Numpy twins: :func:`string_run_starts_numpy`, :func:`gather_strings_numpy`,
:func:`repeat_strings_numpy`.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, prange

from kolm_search._kernels.intern import _equal
from kolm_search._kernels.words import copy_bytes
from kolm_search.errors import KolmValueError

__all__ = ["gather_strings", "gather_strings_numpy", "repeat_strings", "repeat_strings_numpy", "string_run_starts",
           "string_run_starts_numpy"]

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


@njit(cache=True, parallel=True)
def _gather_lengths(offsets, rows, out_off, sums, bad):  # pragma: no cover - compiled
    k = rows.shape[0]
    n_chunks = sums.shape[0] - 1
    n = np.uint64(offsets.shape[0] - 1)
    out_off[0] = 0
    for c in prange(n_chunks):  # each chunk's total length; a row outside [0, n) is flagged
        tot = 0
        for i in range((k * c) // n_chunks, (k * (c + 1)) // n_chunks):
            r = np.uint64(rows[i])  # a negative row wraps to a huge one: one compare checks both ends
            if r >= n:
                bad[c] = i + 1
                break
            tot += offsets[r + np.uint64(1)] - offsets[r]
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
            r = np.uint64(rows[i])
            s = offsets[r]
            ln = offsets[r + np.uint64(1)] - s
            # a word may spill past this string into bytes of this chunk written later
            copy_bytes(out, at, data, s, ln, min(7, end - at - ln))
            at += ln
            out_off[i + 1] = at


def gather_strings(offsets: I64, data: U8, rows: I64, n_chunks: int = 1) -> tuple[I64, U8]:
    """Compiled parallel gather (see the module docstring); a row outside ``[0, n)`` raises
    :class:`KolmValueError`.

    The outputs are allocated by numpy (which asks the kernel for huge pages; Numba's own
    allocations fault in 4 KiB pages, which costs more than the copy here).
    """
    out_off = np.empty(rows.shape[0] + 1, np.int64)
    sums = np.zeros(max(1, n_chunks) + 1, np.int64)
    bad = np.zeros(max(1, n_chunks), np.int64)
    _gather_lengths(offsets, rows, out_off, sums, bad)
    if bad.any():
        i = int(bad[np.flatnonzero(bad)[0]]) - 1
        raise KolmValueError(f"rows must lie in [0, {offsets.shape[0] - 1}), got {int(rows[i])} at position {i}")
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


@njit(cache=True, parallel=True)
def _repeat(offsets, data, row_ptr, byte_ptr, out_off, out, n_chunks):  # pragma: no cover - compiled
    m = out_off.shape[0] - 1
    out_off[0] = 0
    for c in prange(n_chunks):
        r0 = (m * c) // n_chunks
        r1 = (m * (c + 1)) // n_chunks
        if r0 >= r1:
            continue
        i = np.searchsorted(row_ptr, r0, side="right") - 1  # row_ptr[i] <= r0 < row_ptr[i + 1]
        k = np.searchsorted(row_ptr, r1, side="right") - 1
        end = byte_ptr[k] + (r1 - row_ptr[k]) * (offsets[k + 1] - offsets[k]) if r1 < m else out.shape[0]
        j = r0
        while j < r1:
            s = offsets[i]
            ln = offsets[i + 1] - s
            stop = min(row_ptr[i + 1], r1)
            at = byte_ptr[i] + (j - row_ptr[i]) * ln
            for jj in range(j, stop):
                # a word may spill past this string into bytes of this chunk written later
                copy_bytes(out, at, data, s, ln, min(7, end - at - ln))
                at += ln
                out_off[jj + 1] = at
            j = stop
            i += 1


def repeat_strings(offsets: I64, data: U8, counts: I64, n_chunks: int = 1) -> tuple[I64, U8]:
    """Compiled parallel repeat (see the module docstring); ``counts`` int64 (n,) >= 0."""
    n = offsets.shape[0] - 1
    if counts.shape != (n,):
        raise KolmValueError(f"counts must have one entry per string ({n}), got shape {counts.shape}")
    if n and counts.min() < 0:
        raise KolmValueError(f"counts must be >= 0, got {int(counts.min())}")
    row_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=row_ptr[1:])
    byte_ptr = np.zeros(n + 1, np.int64)
    np.cumsum((offsets[1:] - offsets[:-1]) * counts, out=byte_ptr[1:])
    out_off = np.empty(int(row_ptr[-1]) + 1, np.int64)
    out = np.empty(int(byte_ptr[-1]), np.uint8)
    _repeat(offsets, data, row_ptr, byte_ptr, out_off, out, np.int64(max(1, n_chunks)))
    return out_off, out


def repeat_strings_numpy(offsets: I64, data: U8, counts: I64) -> tuple[I64, U8]:
    """Twin of :func:`repeat_strings`."""
    return gather_strings_numpy(offsets, data, np.repeat(np.arange(offsets.shape[0] - 1, dtype=np.int64), counts))
