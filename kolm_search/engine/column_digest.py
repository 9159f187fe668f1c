"""Digests of DataFrame columns from their buffers: what keys an experiment's caches by its
queries and its qrels (:func:`kolm_search.compose.queries.queries_digest`,
:func:`kolm_search.evaluation.table_cache.qrels_digest`).

:func:`update_with_column` adds one column to a running ``hashlib`` digest: its name (its
``repr``: a column ``1`` is not a column ``"1"``) and dtype, then its values as bytes, never as
Python objects:

- a numpy integer or float column: its values (a NaN refused: missing);
- a categorical column: its codes (a missing one refused), then its categories as below
  (equal values under other categories give another digest, never the same one);
- any other column (Arrow strings, nullable numbers, an object column of strings only or of
  integers only): as the Arrow array ``pyarrow.array(column.array, from_pandas=True)`` makes of
  it, after its count (which tells where a categorical's categories end), strings by the length
  of each and then their bytes (the same for ``string`` and ``large_string``, whatever the
  chunking), numbers by their values; a missing value or another type is refused, and so are
  other Python objects (Arrow takes ``numpy.True_`` for 1 and 1 for 1.0, ids that read apart).

It returns the kind of values digested, ``"int"``, ``"float"`` or ``"str"`` (a categorical's
by its categories), for the caller to refuse a kind it does not read. A refused column returns
None: the caller digests another way (in another namespace) or not at all. The dtype is part of the digest: ``int32`` and ``int64`` qids, or an object column and a
``str`` one, are other entries (computed again), never taken for one another.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kolm_search.engine.arrow_strings import buffers

__all__ = ["update_with_column"]


def update_with_column(sha: Any, name: Any, column: pd.Series) -> str | None:
    """Add ``column`` (named ``name``) to ``sha`` (a ``hashlib`` object). Returns the kind of
    its values, ``"int"``, ``"float"`` or ``"str"``; None when it holds a missing value or
    values neither numbers nor strings (``sha`` is then partly updated: the caller drops it)."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        values = column.to_numpy()
        if dtype.kind == "f" and np.isnan(values).any():
            return None
        sha.update(f"\x1e{name!r}\x1f{dtype.str}\x1d".encode("utf-8", "surrogatepass"))
        sha.update(np.ascontiguousarray(values))
        return "float" if dtype.kind == "f" else "int"
    if isinstance(dtype, pd.CategoricalDtype):
        codes = column.array.codes
        if len(codes) and int(codes.min()) < 0:  # a missing value
            return None
        sha.update(f"\x1e{name!r}\x1fcategory[{codes.dtype.str}]\x1d".encode("utf-8", "surrogatepass"))
        sha.update(np.ascontiguousarray(codes))
        return _update_with_arrow(sha, dtype.categories.array, dtype.categories.dtype)
    sha.update(f"\x1e{name!r}\x1f{dtype}\x1d".encode("utf-8", "surrogatepass"))
    return _update_with_arrow(sha, column.array, dtype)


def _update_with_arrow(sha: Any, values: Any, dtype: Any) -> str | None:
    """Add ``values`` (an array pandas holds, of ``dtype``) as Arrow makes it: their count, then
    strings by their lengths (int64) and then their bytes, integers and floats by their values.
    Returns their kind (``"str"``, ``"int"``, ``"float"``); None for a missing value, another
    type, values Arrow does not take, or Python objects other than all strings or all integers
    (Arrow would take ``numpy.True_`` for 1 and 1 for 1.0, which read as other ids)."""
    import pyarrow as pa

    python_objects = isinstance(dtype, np.dtype) and dtype.kind == "O"
    inferred = pd.api.types.infer_dtype(np.asarray(values), skipna=False) if python_objects else None
    if inferred not in (None, "string", "integer"):
        return None
    try:
        array = pa.array(values, from_pandas=True)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):  # (OverflowError: a Python int past 64 bits)
        return None
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    if any(chunk.null_count for chunk in chunks):
        return None
    kind = array.type
    if inferred is not None and (inferred == "string") != (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return None
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        spans = []
        sha.update(f"strings[{len(array)}]\x1d".encode())  # the count: where the lengths end
        for chunk in chunks:
            offsets, data = buffers(chunk)
            sha.update(np.subtract(offsets[1:], offsets[:-1], dtype=np.int64))  # each string's length
            spans.append(data[int(offsets[0]):int(offsets[-1])])
        sha.update(b"\x1d")
        for span in spans:
            sha.update(span)
        return "str"
    if pa.types.is_integer(kind) or pa.types.is_floating(kind):
        sha.update(f"{kind}[{len(array)}]\x1d".encode())
        for chunk in chunks:
            sha.update(np.ascontiguousarray(chunk.to_numpy(zero_copy_only=False)))
        return "int" if pa.types.is_integer(kind) else "float"
    return None
