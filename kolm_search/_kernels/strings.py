"""Kernels over the buffers of Arrow string arrays: a repeat screen within groups, a lookup
within groups, and decimal integers.

A string array is given as its ``offsets`` (int32 or int64, (n + 1,), string i is the bytes
``data[offsets[i]:offsets[i + 1]]``) and ``data`` uint8; nothing is decoded. Strings are hashed
by 64-bit FNV-1a of their bytes (:func:`fnv1a_numpy` is the twin), mixed by splitmix64 for the
slot of an open-addressing table.

- :func:`first_repeat_in_groups` (kernel :func:`first_hash_repeat`) screens groups of
  contiguous rows (``starts`` int64 (g + 1,)) for a string whose hash came before in its group, in one pass, with one small table reused by every
  group (a slot belongs to the group that stamped it): -1 proves that no group holds a string
  twice; a row found is a candidate only (equal hashes, maybe different strings) for the
  caller's exact check.
- :func:`lookup_in_group` finds each row among its group's own few table strings (judged
  documents of a query), hashes then bytes compared;
- :func:`parse_int64` reads decimal integers (``-?[0-9]+``, within int64) plus a shift.

All release the GIL; callers split the work into chunks of groups on threads.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import i64, ro, rw, u8

__all__ = ["first_hash_repeat", "first_repeat_in_groups", "fnv1a_numpy", "hash_all", "lookup_in_group", "parse_int64",
           "table_size"]

_U64 = types.uint64
_I32 = types.int32
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def table_size(n: int) -> int:
    """A power of two at least twice ``n`` (at least 16): an open-addressing table's slots."""
    return 1 << max(4, int(2 * max(int(n), 1) - 1).bit_length())


@njit(cache=True, nogil=True)
def _hash(offsets, data, i):  # pragma: no cover - compiled
    h = np.uint64(0xCBF29CE484222325)
    for b in range(offsets[i], offsets[i + 1]):
        h = (h ^ np.uint64(data[b])) * np.uint64(0x100000001B3)
    return h


@njit(cache=True, nogil=True)
def _mix(h):  # pragma: no cover - compiled
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


_REPEAT = [i64(ro(off), ro(u8), ro(i64), rw(_U64), rw(i64), i64, i64) for off in (_I32, i64)]


@njit(_REPEAT, cache=True, nogil=True)
def first_hash_repeat(offsets, data, starts, keys, stamps, g0, g1):  # pragma: no cover - compiled
    """First row (groups ``g0:g1``) whose hash is an earlier row's of its group, else -1;
    ``keys``/``stamps`` (a power of two, at least twice the longest group; stamps -1 or below
    ``g0``) are scratch."""
    mask = np.uint64(len(keys) - 1)
    for g in range(g0, g1):
        for i in range(starts[g], starts[g + 1]):
            h = _hash(offsets, data, i)
            slot = _mix(h) & mask
            while stamps[slot] == g:
                if keys[slot] == h:
                    return i
                slot = (slot + np.uint64(1)) & mask
            stamps[slot] = g
            keys[slot] = h
    return -1


@njit(cache=True, nogil=True)
def _same(a_off, a_data, i, b_off, b_data, j):  # pragma: no cover - compiled
    n = a_off[i + 1] - a_off[i]
    if n != b_off[j + 1] - b_off[j]:
        return False
    for k in range(n):
        if a_data[a_off[i] + k] != b_data[b_off[j] + k]:
            return False
    return True


@njit([types.boolean(ro(off), ro(u8), rw(i64), i64) for off in (_I32, i64)], cache=True, nogil=True)
def parse_int64(offsets, data, out, shift):  # pragma: no cover - compiled
    """``out[i] = int(string i) + shift`` for strings matching ``-?[0-9]+`` whose magnitude and
    shifted value fit int64; False at the first that does not (``out`` then partly written)."""
    limit = np.int64(9223372036854775807)
    for i in range(len(offsets) - 1):
        a, e = offsets[i], offsets[i + 1]
        negative = a < e and data[a] == 45  # "-"
        if negative:
            a += 1
        if a >= e:
            return False
        v = np.int64(0)
        for b in range(a, e):
            d = np.int64(data[b]) - 48
            if d < 0 or d > 9 or v > (limit - d) // 10:
                return False
            v = v * 10 + d
        v = -v if negative else v
        if (shift > 0 and v > limit - shift) or (shift < 0 and v < -limit - 1 - shift):
            return False
        out[i] = v + shift
    return True


_WITHIN = [types.void(ro(off), ro(u8), ro(i64), ro(i64), ro(i64), ro(i64), ro(toff), ro(u8), ro(_U64), rw(i64), i64, i64)
           for off in (_I32, i64) for toff in (_I32, i64)]


@njit(_WITHIN, cache=True, nogil=True)
def lookup_in_group(offsets, data, starts, heads, t_ptr, t_codes, t_offsets, t_data, t_hashes, out, g0, g1):  # pragma: no cover - compiled
    """For the rows of groups ``g0:g1`` (rows ``starts[g]:starts[g + 1]`` of group ``heads[g]``),
    the table code among ``t_codes[t_ptr[h]:t_ptr[h + 1]]`` (that group's own table strings,
    hashes ``t_hashes`` by code) whose bytes equal the row's, else -1: a scan of the group's few."""
    for g in range(g0, g1):
        h = heads[g]
        for i in range(starts[g], starts[g + 1]):
            out[i] = -1
            x = _hash(offsets, data, i)
            for k in range(t_ptr[h], t_ptr[h + 1]):
                c = t_codes[k]
                if t_hashes[c] == x and _same(offsets, data, i, t_offsets, t_data, c):
                    out[i] = c
                    break


@njit([types.void(ro(toff), ro(u8), rw(_U64)) for toff in (_I32, i64)], cache=True, nogil=True)
def hash_all(offsets, data, out):  # pragma: no cover - compiled
    """``out[i]``: the hash of string i (:func:`fnv1a_numpy`)."""
    for i in range(len(offsets) - 1):
        out[i] = _hash(offsets, data, i)


def first_repeat_in_groups(offsets: npt.NDArray[np.integer], data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64],
                           n_threads: int | None = None) -> int:
    """A row whose hash an earlier row of its group has (groups ``starts`` int64 (g + 1,), CSR
    pointers over the rows), or -1: then no group holds a string twice. Groups in chunks on
    ``n_threads`` threads, each with its own scratch table."""
    n_rows = int(starts[-1]) if len(starts) else 0
    if n_rows == 0:
        return -1
    width = table_size(int(np.diff(starts).max()))
    bounds = chunk_bounds(starts, resolve_threads(n_threads) if n_rows >= 1 << 16 else 1)
    found: list[int] = []

    def chunk(g0: int, g1: int) -> None:
        found.append(int(first_hash_repeat(offsets, data, starts, np.zeros(width, np.uint64),
                                           np.full(width, -1, np.int64), g0, g1)))

    run_chunks(chunk, bounds)
    hits = [f for f in found if f >= 0]
    return min(hits) if hits else -1


def fnv1a_numpy(values: list[bytes]) -> npt.NDArray[np.uint64]:
    """Twin of the kernels' hash: 64-bit FNV-1a of each byte string."""
    out = np.empty(len(values), np.uint64)
    with np.errstate(over="ignore"):
        for i, v in enumerate(values):
            h = _FNV_OFFSET
            for b in v:
                h = (h ^ np.uint64(b)) * _FNV_PRIME
            out[i] = h
    return out
