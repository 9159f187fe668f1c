"""Interning ids to dense int codes: the one place string ids become integers.

:func:`factorize` is ``pandas.factorize`` semantics (codes in first-appearance order, or in
sorted order with ``sort=True``) with a fast path for string columns: their Arrow buffers go
to the Numba interner :func:`kolm_search._kernels.intern.intern_bytes`. Object columns of
``str`` become Arrow buffers by reading the objects in place on all threads
(:mod:`kolm_search._kernels.pyobjects`, on CPython once :func:`str_layout` has checked the
object layout), else through ``pyarrow.array``. Other dtypes (ints, categoricals, objects
that are not all str) go to ``pandas.factorize``. Missing ids are an
error naming the column.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmTypeError

__all__ = ["factorize", "object_pointers", "object_strings", "repeat_strings", "str_layout", "string_buffers",
           "take_strings"]


def _arrow_strings(values: Any) -> Any | None:
    """The column as one pyarrow (large_)string Array, or None when it is not strings."""
    import pyarrow as pa

    arr = values.array if isinstance(values, (pd.Series, pd.Index)) else values
    if isinstance(arr, pd.arrays.NumpyExtensionArray):
        arr = arr.to_numpy()
    if isinstance(arr, (pa.Array, pa.ChunkedArray)):
        pa_arr = arr
    elif isinstance(arr, pd.arrays.ArrowStringArray) or getattr(arr, "dtype", None) == "string[pyarrow]":
        pa_arr = pa.chunked_array(arr._pa_array) if hasattr(arr, "_pa_array") else pa.array(arr)
    elif (isinstance(arr, np.ndarray) and arr.dtype == object) or isinstance(arr, (list, tuple)):
        direct = object_strings(arr) if isinstance(arr, np.ndarray) else None
        if direct is not None:
            return direct
        try:
            pa_arr = pa.array(arr, type=pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
    else:
        try:
            if pd.api.types.is_string_dtype(getattr(arr, "dtype", None)) and not isinstance(getattr(arr, "dtype", None), pd.CategoricalDtype):
                pa_arr = pa.array(np.asarray(arr, dtype=object), type=pa.large_string())
            else:
                return None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
    if isinstance(pa_arr, pa.ChunkedArray):
        pa_arr = pa_arr.combine_chunks() if pa_arr.num_chunks != 1 else pa_arr.chunk(0)
    if not (pa.types.is_string(pa_arr.type) or pa.types.is_large_string(pa_arr.type)):
        return None
    return pa_arr


_KINDS = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}


@functools.cache
def str_layout() -> npt.NDArray[np.int64] | None:
    """Field offsets of CPython's compact ``str`` objects, measured on probe strings, or None.

    ``[type_off, id(str), len_off, state_off, ascii_data_off, compact_data_off]`` (see
    :mod:`kolm_search._kernels.pyobjects`). Every field is located by value on several probes
    (ASCII, Latin-1, UCS-2 and UCS-4, of different lengths) and must be found exactly once,
    and every probe's characters must read back; otherwise (another interpreter or object
    header) None, and object columns take the pyarrow path. None as well on a free-threaded
    build running without the GIL: the readers rely on the caller holding the GIL, so no
    other thread can drop an object while a kernel reads it.
    """
    import ctypes

    if sys.implementation.name != "cpython" or sys.byteorder != "little" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    if not getattr(sys, "_is_gil_enabled", lambda: True)():  # free-threaded: another thread could free an object
        return None
    ascii_off = sys.getsizeof("") - 1
    # fresh strings: a string whose UTF-8 form was asked for once carries it, and getsizeof counts it
    wide = ["".join([chr(c)] * 3) for c in (0xE9, 0x20AC, 0x1F600)]
    sizes = {sys.getsizeof(w) - 4 * kind for w, kind in zip(wide, (1, 2, 4), strict=True)}
    if len(sizes) != 1:
        return None
    compact_off = sizes.pop()
    stem = "".join(chr(c) for c in range(97, 123))  # built at run time: fresh objects
    probes = [stem[:1], stem + "-kolm", stem * 3, "\xe9" + stem[:5], "\u20ac" * 9, "\U0001f600" * 4 + stem[:2]]
    kinds = [1 if max(map(ord, p)) < 256 else 2 if max(map(ord, p)) < 65536 else 4 for p in probes]
    heads = [ctypes.string_at(id(p), ascii_off) for p in probes]  # the header every str has

    def word(h: bytes, k: int, size: int = 8) -> int:
        return int.from_bytes(h[k:k + size], "little")

    def only(found: list[int]) -> int | None:
        return found[0] if len(found) == 1 else None

    type_off = only([k for k in range(0, ascii_off - 7, 8) if all(word(h, k) == id(str) for h in heads)])
    len_off = only([k for k in range(0, ascii_off - 7, 8) if all(word(h, k) == len(p) for h, p in zip(heads, probes))])
    if type_off is None or len_off is None:
        return None

    def state_ok(st: int, p: str, kind: int) -> bool:
        return (st >> 2) & 7 == kind and (st >> 5) & 1 == 1 and (st >> 6) & 1 == int(p.isascii())

    state_off = only([k for k in range(len_off + 8, ascii_off - 3, 4)
                      if all(state_ok(word(h, k, 4), p, kd) for h, p, kd in zip(heads, probes, kinds))])
    if state_off is None:
        return None
    for p, kd in zip(probes, kinds):
        off = ascii_off if p.isascii() else compact_off
        if ctypes.string_at(id(p) + off, len(p) * kd) != p.encode(_KINDS[kd]):
            return None
    return np.array([type_off, id(str), len_off, state_off, ascii_off, compact_off], np.int64)


def object_pointers(values: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The object pointers of a contiguous object array, as a pointer-sized integer view
    (int64 on 64-bit builds; read, never followed here; valid while ``values`` holds its
    references)."""
    import ctypes

    n = len(values)
    if n == 0:
        return np.zeros(0, np.intp)
    return np.ctypeslib.as_array((ctypes.c_ssize_t * n).from_address(values.ctypes.data))


def _chunk_of(row: int, n: int, n_chunks: int) -> int:
    """The chunk c with ``n*c // n_chunks <= row < n*(c+1) // n_chunks`` (the kernels' split)."""
    c = min(n_chunks - 1, (row * n_chunks) // n)
    while (n * c) // n_chunks > row:
        c -= 1
    while (n * (c + 1)) // n_chunks <= row:
        c += 1
    return c


def object_strings(values: npt.NDArray[Any]) -> Any | None:
    """An object array of ``str`` as a pyarrow ``large_string`` Array, read in place by the
    :mod:`kolm_search._kernels.pyobjects` kernels; None when it holds anything but exact
    ``str`` (None, NaN, numbers, subclasses: the caller's pyarrow path handles those), when
    the layout is unknown, or for fewer than 1,024 values (where pyarrow is as fast).
    Non-ASCII strings (at most 1 in 8) are encoded in Python.
    """
    import numba
    import pyarrow as pa

    from kolm_search._kernels.pyobjects import ascii_lengths, pack_ascii

    layout = str_layout()
    if layout is None or values.ndim != 1 or len(values) < 1024:
        return None
    values = np.ascontiguousarray(values)
    ptrs = object_pointers(values)
    chunks = 4 * numba.get_num_threads()
    lengths, chunk_bytes, n_other = ascii_lengths(ptrs, layout, chunks)
    encoded: list[tuple[int, bytes]] = []
    if n_other:
        if 8 * n_other > len(values):
            return None
        n = len(values)
        for row in np.flatnonzero(lengths < 0).tolist():
            v = values[row]
            if type(v) is not str:
                return None
            try:
                b = v.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: pyarrow reports them
                return None
            encoded.append((row, b))
            lengths[row] = -len(b) - 1
            chunk_bytes[_chunk_of(row, n, chunks)] += len(b)
    offsets, data = pack_ascii(ptrs, layout, lengths, chunk_bytes)
    for row, b in encoded:
        data[offsets[row]:offsets[row + 1]] = np.frombuffer(b, np.uint8)
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(data))


def string_buffers(values: Any) -> tuple[Any, npt.NDArray[np.int64], npt.NDArray[np.uint8]] | None:
    """``(arrow_array, offsets int64 (n+1,), data uint8)`` of a string column, or None.

    Raises ``FrameValidationError`` when a value is missing.
    """
    pa_arr = _arrow_strings(values)
    if pa_arr is None:
        return None
    if pa_arr.null_count:
        row = int(np.flatnonzero(pa_arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise FrameValidationError(f"missing id at row {row}")
    _, offsets_buf, data_buf = pa_arr.buffers()
    off_dtype = np.int64 if str(pa_arr.type) == "large_string" else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=off_dtype)[pa_arr.offset: pa_arr.offset + len(pa_arr) + 1].astype(np.int64, copy=False)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return pa_arr, offsets, data


def take_strings(pa_arr: Any, rows: npt.NDArray[np.int64], n_chunks: int = 1) -> pd.api.extensions.ExtensionArray:
    """Rows of an Arrow string array as a pandas ``str`` array (no Python objects made).

    The bytes are gathered by :func:`kolm_search._kernels.strings.gather_strings` over
    ``n_chunks`` chunks (parallel when Numba has several threads).
    """
    from kolm_search._kernels.strings import gather_strings

    offsets, data = _string_source(pa_arr, "take_strings")
    return _str_array(*gather_strings(offsets, data, np.ascontiguousarray(rows, dtype=np.int64), n_chunks))


def repeat_strings(pa_arr: Any, counts: npt.NDArray[np.int64], n_chunks: int = 1) -> pd.api.extensions.ExtensionArray:
    """Each string of an Arrow string array repeated ``counts[i]`` times, as a pandas ``str``
    array (:func:`kolm_search._kernels.strings.repeat_strings`, parallel over ``n_chunks``)."""
    from kolm_search._kernels.strings import repeat_strings as _repeat

    offsets, data = _string_source(pa_arr, "repeat_strings")
    return _str_array(*_repeat(offsets, data, np.ascontiguousarray(counts, dtype=np.int64), n_chunks))


def _string_source(pa_arr: Any, what: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    buffers = string_buffers(pa_arr)
    if buffers is None:
        raise KolmTypeError(f"{what} needs an Arrow string array, got {type(pa_arr).__name__}")
    return buffers[1], buffers[2]


def _str_array(offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8]) -> pd.api.extensions.ExtensionArray:
    import pyarrow as pa

    arr = pa.LargeStringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data))
    return pd.array(arr, dtype="str")


def factorize(values: Any, *, sort: bool = False, name: str = "ids") -> tuple[npt.NDArray[np.int64], pd.Index]:
    """Dense int64 codes and the unique values (a ``pandas.Index``).

    Parameters
    ----------
    values : Series, Index, ndarray or list
    sort : bool
        Codes in sorted order of the uniques instead of first appearance.
    name : str
        Used in the error for missing values.

    Raises
    ------
    FrameValidationError
        When a value is missing (None/NaN).
    """
    try:
        buffers = string_buffers(values)
    except FrameValidationError as exc:
        raise FrameValidationError(f"{name}: {exc}") from exc
    if buffers is None:
        codes, uniques = pd.factorize(values, sort=sort, use_na_sentinel=True)
        codes = np.asarray(codes, dtype=np.int64)
        if (codes < 0).any():
            raise FrameValidationError(f"{name} has a missing value at row {int(np.flatnonzero(codes < 0)[0])}")
        return codes, pd.Index(uniques)
    from kolm_search._kernels.intern import intern_bytes

    pa_arr, offsets, data = buffers
    codes, first = intern_bytes(offsets, data)
    uniques = pd.Index(take_strings(pa_arr, first))
    if sort and len(uniques):
        order = np.argsort(uniques.to_numpy(dtype=object), kind="stable")
        remap = np.empty(len(order), np.int64)
        remap[order] = np.arange(len(order))
        return remap[codes], uniques[order]
    return codes, uniques
