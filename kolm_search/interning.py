"""Interning ids to dense int codes: the one place string ids become integers.

:func:`factorize` is ``pandas.factorize`` semantics (codes in first-appearance order, or in
sorted order with ``sort=True``) with a fast path for string columns: their Arrow buffers go
to the Numba interner :func:`kolm_search._kernels.intern.intern_bytes`. Other dtypes (ints,
categoricals, objects that are not all str) go to ``pandas.factorize``. Missing ids are an
error naming the column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search.errors import FrameValidationError, KolmTypeError

__all__ = ["factorize", "repeat_strings", "string_buffers", "take_strings"]


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
