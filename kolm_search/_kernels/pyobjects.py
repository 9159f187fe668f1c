"""Python ``str`` objects read in place: CPython's compact string layout (PEP 393) in kernels.

An object column of ids is an array of pointers to ``str`` objects. pyarrow converts such a
column one element at a time under the GIL (~45 ns each); these kernels read each object's
length and characters directly, on all threads. They read pointers out of the object array
(which keeps its references for the call; the caller holds the GIL, so no object can go
away), and follow a pointer past the object header only when the object's type is exactly
``str``; anything else is reported back, and the caller falls back to Python.

``layout`` int64 (6,), measured once per process by :func:`kolm_search.interning.str_layout`
from probe strings and checked byte for byte (None on an interpreter whose layout differs):
``[type_off, str_type, len_off, state_off, ascii_data_off, compact_data_off]``. The state
word holds ``kind`` (bits 2-4: bytes per character, 1, 2 or 4), ``compact`` (bit 5) and
``ascii`` (bit 6); an ASCII string's bytes are its UTF-8.

``peek_i64(addr)``, ``peek_u32(addr)``, ``peek_u8(addr)`` (compiled code only)
    The 8, 4 or 1 bytes at an absolute address as int64 (an unaligned LLVM load).
``prefetch_at(addr)`` (compiled code only)
    Ask for the cache line at an absolute address (``llvm.prefetch``; never faults). Every
    pass below asks for the object 16 rows ahead: objects made in another order than the
    column's (a sorted or shuffled frame) sit at random addresses, and a miss per object
    then queues behind the previous one's work (3 M shuffled objects: copy pass 0.12 ->
    0.04 s, lengths 0.083 -> 0.055 s, run heads 0.123 -> 0.09 s; objects in column order
    ~10 % faster).
``ascii_lengths(ptrs int64 (n,), layout, n_chunks) -> (lengths int64 (n,), chunk_bytes, n_other)``
    Byte length of every compact ASCII ``str``; -1 for any other object (``n_other`` of them).
``pack_ascii(ptrs, layout, lengths, chunk_bytes) -> (offsets int64 (n+1,), data uint8)``
    Arrow buffers holding every row with ``lengths >= 0`` (room left for the others).
``object_run_starts(ptrs, layout, n_chunks) -> (starts int64 (r,), ok bool)``
    Rows whose string differs from the row before (row 0 first); the same object is equal
    without a read. ``ok`` is False when a compared row is not a compact ``str`` (then
    ``starts`` is meaningless and the caller compares in Python).

Twins: a Python comparison (``values[1:] != values[:-1]``) and ``pyarrow.array`` serve as
the oracles in the tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from kolm_search._kernels.words import PREFETCH_AHEAD, emit_prefetch, store_u64

__all__ = ["ascii_lengths", "object_run_starts", "pack_ascii", "peek_i64", "peek_u32", "peek_u8", "prefetch_at"]

I64 = npt.NDArray[np.int64]

_TYPE, _STR, _LEN, _STATE, _ASCII, _COMPACT = range(6)


def _peek(width: int) -> Any:
    def typer(typingctx: Any, addr: Any) -> Any:  # pragma: no cover - compiled
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ptr = builder.inttoptr(args[0], ir.IntType(width).as_pointer())
            value = builder.load(ptr, align=1)
            return builder.zext(value, ir.IntType(64)) if width < 64 else value

        return types.int64(types.int64), codegen

    return typer


def _prefetch_at(typingctx: Any, addr: Any) -> Any:  # pragma: no cover - compiled
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        emit_prefetch(builder, builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return context.get_dummy_value()

    return types.void(types.int64), codegen


prefetch_at: Any = intrinsic(_prefetch_at)  # read, keep in all cache levels, data cache
peek_i64: Any = intrinsic(_peek(64))
peek_u32: Any = intrinsic(_peek(32))
peek_u8: Any = intrinsic(_peek(8))


@njit(cache=True, inline="always")
def _state(p, layout):  # pragma: no cover - compiled
    """The state word of object ``p`` when it is exactly a compact ``str``, else -1."""
    if peek_i64(p + layout[_TYPE]) != layout[_STR]:
        return -1
    st = peek_u32(p + layout[_STATE])
    return st if (st >> 5) & 1 else -1


@njit(cache=True, parallel=True)
def _ascii_lengths(ptrs, layout, lengths, chunk_bytes, others):  # pragma: no cover - compiled
    n = ptrs.shape[0]
    n_chunks = others.shape[0]
    for c in prange(n_chunks):
        bad = 0
        tot = 0
        hi = (n * (c + 1)) // n_chunks
        for i in range((n * c) // n_chunks, hi):
            if i + PREFETCH_AHEAD < hi:
                prefetch_at(ptrs[i + PREFETCH_AHEAD])
            p = ptrs[i]
            st = _state(p, layout)
            if st >= 0 and (st >> 6) & 1:
                ln = peek_i64(p + layout[_LEN])
                lengths[i] = ln
                tot += ln
            else:
                lengths[i] = -1
                bad += 1
        others[c] = bad
        chunk_bytes[c] = tot


def ascii_lengths(ptrs: I64, layout: I64, n_chunks: int = 1) -> tuple[I64, I64, int]:
    """Compiled lengths pass: ``(lengths int64 (n,), chunk_bytes int64 (n_chunks,), n_other)``;
    ``chunk_bytes[c]`` sums the ASCII rows of chunk c (rows ``[n*c // n_chunks, n*(c+1) // n_chunks)``)."""
    nc = max(1, n_chunks)
    lengths = np.empty(ptrs.shape[0], np.int64)
    chunk_bytes = np.zeros(nc, np.int64)
    others = np.zeros(nc, np.int64)
    _ascii_lengths(ptrs, layout, lengths, chunk_bytes, others)
    return lengths, chunk_bytes, int(others.sum())


@njit(cache=True, parallel=True)
def _pack_ascii(ptrs, layout, lengths, starts, offsets, data):  # pragma: no cover - compiled
    n = ptrs.shape[0]
    n_chunks = starts.shape[0] - 1
    offsets[n] = starts[n_chunks]
    for c in prange(n_chunks):
        at = starts[c]
        hi = (n * (c + 1)) // n_chunks
        for i in range((n * c) // n_chunks, hi):
            if i + PREFETCH_AHEAD < hi:
                prefetch_at(ptrs[i + PREFETCH_AHEAD] + layout[_ASCII])
            offsets[i] = at
            ln = lengths[i]
            if ln < 0:  # a row the caller fills: -ln - 1 bytes
                at += -ln - 1
                continue
            src = ptrs[i] + layout[_ASCII]
            t = 0
            while t + 8 <= ln:  # whole words inside the string (never past its last byte)
                store_u64(data, at + t, peek_i64(src + t))
                t += 8
            while t < ln:
                data[at + t] = peek_u8(src + t)
                t += 1
            at += ln


def pack_ascii(ptrs: I64, layout: I64, lengths: I64, chunk_bytes: I64) -> tuple[I64, npt.NDArray[np.uint8]]:
    """Compiled copy pass: Arrow ``(offsets int64 (n+1,), data uint8)``. Rows with
    ``lengths[i] >= 0`` are copied from their objects; a row with ``lengths[i] < 0`` gets
    ``-lengths[i] - 1`` bytes that the caller fills. ``chunk_bytes`` as from
    :func:`ascii_lengths` (plus the caller's rows), one entry per chunk."""
    starts = np.zeros(chunk_bytes.shape[0] + 1, np.int64)
    np.cumsum(chunk_bytes, out=starts[1:])
    offsets = np.empty(ptrs.shape[0] + 1, np.int64)
    data = np.empty(int(starts[-1]), np.uint8)
    _pack_ascii(ptrs, layout, lengths, starts, offsets, data)
    return offsets, data


@njit(cache=True, inline="always")
def _same(p, q, layout):  # pragma: no cover - compiled
    """1 when compact strs p and q are equal, 0 when not, -1 when either is not one."""
    sp = _state(p, layout)
    sq = _state(q, layout)
    if sp < 0 or sq < 0:
        return -1
    if (sp & 0x5C) != (sq & 0x5C):  # kind and ascii: equal strings have the same (canonical)
        return 0
    ln = peek_i64(p + layout[_LEN])
    if ln != peek_i64(q + layout[_LEN]):
        return 0
    off = layout[_ASCII] if (sp >> 6) & 1 else layout[_COMPACT]
    nb = ln * ((sp >> 2) & 7)
    a = p + off
    b = q + off
    t = 0
    while t + 8 <= nb:
        if peek_i64(a + t) != peek_i64(b + t):
            return 0
        t += 8
    while t < nb:
        if peek_u8(a + t) != peek_u8(b + t):
            return 0
        t += 1
    return 1


@njit(cache=True, parallel=True)
def _object_changes(ptrs, layout, flags, n_chunks):  # pragma: no cover - compiled
    n = ptrs.shape[0]
    bad = np.zeros(n_chunks, np.int64)
    for c in prange(n_chunks):
        hi = (n * (c + 1)) // n_chunks
        for i in range((n * c) // n_chunks, hi):
            if i + PREFETCH_AHEAD < hi:
                prefetch_at(ptrs[i + PREFETCH_AHEAD])
            if i == 0:
                flags[i] = 1
            elif ptrs[i] == ptrs[i - 1]:
                flags[i] = 0
            else:
                s = _same(ptrs[i - 1], ptrs[i], layout)
                if s < 0:
                    bad[c] = 1
                    break
                flags[i] = 1 - s
    return not bad.any()


def object_run_starts(ptrs: I64, layout: I64, n_chunks: int = 1) -> tuple[I64, bool]:
    """Compiled run heads of an object column (see the module docstring): one pass reads each
    object once and marks the rows that differ from the row before."""
    flags = np.empty(ptrs.shape[0], np.uint8)
    ok = bool(_object_changes(ptrs, layout, flags, np.int64(max(1, n_chunks))))
    return (np.flatnonzero(flags).astype(np.int64) if ok else np.zeros(0, np.int64)), ok
