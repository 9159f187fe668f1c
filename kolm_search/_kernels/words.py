"""Byte-string primitives that move 8 bytes at a time (for the string kernels).

Arrow keeps a string column as one ``uint8`` buffer; ids are short (5-20 bytes), so a loop
over bytes spends most of its time on loop control. These helpers read and write unaligned
little-endian 64-bit words instead (one ``load i64, align 1``: a plain ``mov`` on x86-64 and
AArch64, both little-endian) and fall back to bytes only where a word would run past the
buffer.

``load_u64(buf uint8 (m,), i int64) -> uint64``   bytes ``buf[i:i+8]``; needs ``i + 8 <= m``
``store_u64(buf uint8 (m,), i int64, w uint64)``  writes ``buf[i:i+8]``; needs ``i + 8 <= m``
``bytes_equal(a, sa, b, sb, n) -> bool``           ``a[sa:sa+n] == b[sb:sb+n]``
``copy_bytes(dst, d, src, s, n, slack)``           ``dst[d:d+n] = src[s:s+n]``; may also write
                                                   up to ``slack`` bytes past ``d+n`` (0..7)
``hash_bytes(data, s, e) -> uint64``               a 64-bit hash of ``data[s:e]``
``prefetch(buf, i)``                               hint the CPU to fetch ``buf[i]``'s cache line
                                                   (LLVM ``llvm.prefetch``; never faults, so
                                                   ``i`` may be any value: a bad index is a no-op)

``PREFETCH_AHEAD`` (16) is how many rows ahead the kernels ask. A prefetch pays where a
loop's random accesses depend on loaded values (``mark[docs[i]]`` over
an array larger than L2): issued a few entries ahead, the misses overlap instead of waiting
one after another behind each entry's dependent work.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "PREFETCH_AHEAD",
    "bytes_equal",
    "copy_bytes",
    "emit_prefetch",
    "hash_bytes",
    "load_u64",
    "prefetch",
    "store_u64",
]

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xFF51AFD7ED558CCD)
_M3 = np.uint64(0xC4CEB9FE1A85EC53)


def _load_u64(typingctx: Any, buf: Any, i: Any) -> Any:  # pragma: no cover - compiled
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

    return types.uint64(buf, i), codegen


def _store_u64(typingctx: Any, buf: Any, i: Any, w: Any) -> Any:  # pragma: no cover - compiled
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        builder.store(args[2], builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(buf, i, w), codegen


def emit_prefetch(builder: Any, ptr: Any) -> None:  # pragma: no cover - compiled
    """Emit ``llvm.prefetch`` of the cache line at ``ptr`` (any LLVM pointer): a read, kept
    in every cache level, data cache. Shared by :func:`prefetch` and
    :func:`kolm_search._kernels.pyobjects.prefetch_at`."""
    i8p = ir.IntType(8).as_pointer()
    i32 = ir.IntType(32)
    fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
    fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], fnty)
    builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


def _prefetch(typingctx: Any, buf: Any, i: Any) -> Any:  # pragma: no cover - compiled
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        emit_prefetch(builder, builder.gep(ary.data, [args[1]]))
        return context.get_dummy_value()

    return types.void(buf, i), codegen


PREFETCH_AHEAD = 16  # rows between a prefetch and the read it serves (8-128 measured: 16 is best or level)

load_u64: Any = intrinsic(_load_u64)
store_u64: Any = intrinsic(_store_u64)
prefetch: Any = intrinsic(_prefetch)


@njit(cache=True, inline="always")
def bytes_equal(a, sa, b, sb, n):  # pragma: no cover - compiled
    t = 0
    while t + 8 <= n:
        if load_u64(a, sa + t) != load_u64(b, sb + t):
            return False
        t += 8
    r = n - t
    if r == 0:
        return True
    if n >= 8:  # the last 8 bytes, overlapping what was compared
        return load_u64(a, sa + n - 8) == load_u64(b, sb + n - 8)
    if sa + 8 <= a.shape[0] and sb + 8 <= b.shape[0]:
        mask = (np.uint64(1) << np.uint64(8 * r)) - np.uint64(1)
        return (load_u64(a, sa) & mask) == (load_u64(b, sb) & mask)
    for j in range(r):
        if a[sa + j] != b[sb + j]:
            return False
    return True


@njit(cache=True, inline="always")
def copy_bytes(dst, d, src, s, n, slack):  # pragma: no cover - compiled
    if n <= 8:  # ids are short: one word when the spill is allowed, else bytes
        if n + slack >= 8 and s + 8 <= src.shape[0] and d + 8 <= dst.shape[0]:
            store_u64(dst, d, load_u64(src, s))
        else:
            for j in range(n):
                dst[d + j] = src[s + j]
        return
    t = 0
    while t + 8 <= n:
        store_u64(dst, d + t, load_u64(src, s + t))
        t += 8
    if t < n:  # the last 8 bytes, overlapping what was copied
        store_u64(dst, d + n - 8, load_u64(src, s + n - 8))


@njit(cache=True, inline="always")
def hash_bytes(data, s, e):  # pragma: no cover - compiled
    n = e - s
    h = _M1 ^ np.uint64(n)
    t = s
    while t + 8 <= e:
        h = (h ^ load_u64(data, t)) * _M2
        h ^= h >> np.uint64(29)
        t += 8
    r = e - t
    if r > 0:
        if t + 8 <= data.shape[0]:
            w = load_u64(data, t) & ((np.uint64(1) << np.uint64(8 * r)) - np.uint64(1))
        else:
            w = np.uint64(0)
            for j in range(r):
                w |= np.uint64(data[t + j]) << np.uint64(8 * j)
        h = (h ^ w) * _M2
    h ^= h >> np.uint64(33)  # murmur3's fmix64: every input bit reaches the low (slot) bits
    h *= _M2
    h ^= h >> np.uint64(33)
    h *= _M3
    h ^= h >> np.uint64(33)
    return h
