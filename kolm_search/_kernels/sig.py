"""Numba array types for kernel signatures: C-contiguous, inputs read-only (so memory-mapped
and non-writeable arrays are accepted without a copy), outputs writeable."""

from __future__ import annotations

from numba import types

__all__ = ["f32", "f64", "i64", "ro", "rw", "u8"]

i64, f64, f32, u8 = types.int64, types.float64, types.float32, types.uint8


def ro(dtype: types.Type, ndim: int = 1) -> types.Array:
    """A read-only C-contiguous array type."""
    return types.Array(dtype, ndim, "C", readonly=True)


def rw(dtype: types.Type, ndim: int = 1) -> types.Array:
    """A writeable C-contiguous array type."""
    return types.Array(dtype, ndim, "C")
