"""Arrow string arrays read off their buffers by :mod:`kolm_search._kernels.strings`: a screen
for a string repeated within groups of rows, a lookup among each group's own table strings, and
decimal integers.

Nothing is decoded to Python strings and no per-row array of hashes is kept. A string array's
buffers are its offsets (int32, or int64 for ``large_string``) and its bytes; arrays with nulls,
or of other types, are refused with ``TypeError`` (callers check them first).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["buffers", "lookup_within_groups", "may_repeat_within_groups", "parse_integers",
           "positions_if_distinct", "string_ranks"]


def buffers(strings: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint8]]:
    """``(offsets, data)`` of a ``pyarrow`` string or large_string array without nulls, as
    read-only views: string i is ``data[offsets[i]:offsets[i + 1]]``."""
    import pyarrow as pa

    if not isinstance(strings, pa.Array) or not (pa.types.is_string(strings.type) or pa.types.is_large_string(strings.type)):
        raise TypeError(f"an Arrow string array is needed, got {type(strings).__name__}")
    if strings.null_count:
        raise TypeError("an Arrow string array without nulls is needed")
    wide = pa.types.is_large_string(strings.type)
    n = len(strings)
    offsets_buffer, data_buffer = strings.buffers()[1], strings.buffers()[2]
    if offsets_buffer is None:
        offsets = np.zeros(n + 1, np.int64 if wide else np.int32)
    else:
        offsets = np.frombuffer(offsets_buffer, np.int64 if wide else np.int32)[strings.offset:strings.offset + n + 1]
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None and data_buffer.size else np.zeros(1, np.uint8)
    return offsets, data


def may_repeat_within_groups(strings: Any, starts: npt.NDArray[np.int64], n_threads: int | None = None) -> bool:
    """False when no group of contiguous rows (``starts`` int64 (g + 1,), CSR pointers from 0 to
    ``len(strings)``) holds one string twice; True when one may (two of its strings hash alike:
    the caller checks exactly). One pass over the bytes, a small hash table per thread."""
    from kolm_search._kernels import load

    offsets, data = buffers(strings)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    if len(starts) == 0 or starts[0] != 0 or starts[-1] != len(strings) or np.any(np.diff(starts) < 0):
        raise ValueError(f"starts must be pointers from 0 to {len(strings)}")
    return bool(load("strings").first_repeat_in_groups(offsets, data, starts, n_threads) >= 0)


def positions_if_distinct(values: Any, groups: npt.NDArray[np.int64],
                          n_threads: int | None = None) -> tuple[npt.NDArray[np.int64], int] | None:
    """Each row's position within its group and the longest group, when ``values`` (a pandas
    column of Arrow strings without missing values) lists every group's rows together and no
    group holds a string twice: then positions tell a group's strings apart as codes would.
    None otherwise (another column type, a group in two places, or a possible repeat)."""
    import pandas as pd
    import pyarrow as pa

    if not isinstance(getattr(values, "dtype", None), pd.StringDtype) or values.dtype.storage != "pyarrow":
        return None
    n = len(groups)
    if n == 0 or len(values) != n:
        return None
    starts = np.concatenate([[0], np.flatnonzero(groups[1:] != groups[:-1]) + 1]).astype(np.int64)
    if len(np.unique(groups[starts])) != len(starts):
        return None
    try:
        strings = pa.array(values.array)
        bounds = np.append(starts, n)
        if may_repeat_within_groups(strings, bounds, n_threads):
            return None
    except TypeError:  # missing values: the caller's general path names them
        return None
    lengths = np.diff(bounds)
    return np.arange(n, dtype=np.int64) - np.repeat(starts, lengths), int(lengths.max())


def lookup_within_groups(values: Any, groups: npt.NDArray[np.int64], table: Any, table_groups: npt.NDArray[np.int64],
                         table_codes: npt.NDArray[np.int64], most: int = 64,
                         n_threads: int | None = None) -> npt.NDArray[np.int64] | None:
    """int64 (n,): for each of ``values`` (a pandas column of Arrow strings) the code of its
    string among the entries of its own group (``table_codes`` int64, codes into ``table``, a
    pandas Index of distinct strings, with ``table_groups`` the group of each entry), -1 where
    its group has no such entry. None (the caller looks up globally) when ``values`` or ``table``
    is not Arrow strings, a group's rows are not together, or a group has over ``most`` entries."""
    import pandas as pd
    import pyarrow as pa

    from kolm_search._kernels import chunk_bounds, load, resolve_threads, run_chunks

    if not all(isinstance(getattr(v, "dtype", None), pd.StringDtype) and v.dtype.storage == "pyarrow"
               for v in (values, table)):
        return None
    n = len(groups)
    if n == 0 or len(values) != n:
        return None
    starts = np.concatenate([[0], np.flatnonzero(groups[1:] != groups[:-1]) + 1]).astype(np.int64)
    heads = np.ascontiguousarray(groups[starts], dtype=np.int64)
    if len(np.unique(heads)) != len(heads) or heads.min() < 0:
        return None
    n_groups = int(max(heads.max(), table_groups.max(initial=-1))) + 1
    counts = np.bincount(table_groups, minlength=n_groups)
    if counts.max(initial=0) > most:
        return None
    t_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    t_codes = np.ascontiguousarray(np.asarray(table_codes, np.int64)[np.argsort(table_groups, kind="stable")])
    try:
        offsets, data = buffers(pa.array(values.array))
        t_offsets, t_data = buffers(pa.array(table.array))
    except TypeError:
        return None
    kernels = load("strings")
    t_hashes = np.empty(len(t_offsets) - 1, np.uint64)
    kernels.hash_all(t_offsets, t_data, t_hashes)
    out = np.empty(n, np.int64)
    bounds = np.append(starts, n)
    run_chunks(kernels.lookup_in_group, chunk_bounds(bounds, resolve_threads(n_threads) if n >= 1 << 16 else 1),
               offsets, data, bounds, heads, t_ptr, t_codes, t_offsets, t_data, t_hashes, out)
    return out


def parse_integers(strings: Any, shift: int = 0) -> npt.NDArray[np.int64] | None:
    """int64 (n,): each string read as a decimal integer (``-?[0-9]+``, magnitude within int64)
    plus ``shift``, or None when a string is not one or the shifted value does not fit int64."""
    from kolm_search._kernels import load

    offsets, data = buffers(strings)
    out = np.empty(len(strings), np.int64)
    return out if load("strings").parse_int64(offsets, data, out, int(shift)) else None


def string_ranks(values: Any) -> npt.NDArray[np.int64]:
    """Dense ranks int64 ``(n,)`` of ``values`` as strings (``str(v)``) in code point order, the
    order Python compares ``str`` in (and UTF-8 bytes sort in): 0 for the smallest, equal strings
    equal ranks. Arrow's sort for a string array (or what converts to one); Python's sort
    otherwise (categoricals, ids of other types, lone surrogates)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        arr = values if isinstance(values, pa.Array) else pa.array(values, from_pandas=True)
        if (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) and not arr.null_count:
            return np.asarray(pc.rank(arr, sort_keys="ascending", tiebreaker="dense"), np.int64) - 1
    except (pa.ArrowException, TypeError, ValueError, UnicodeError):
        pass
    names = pd.Index([str(v) for v in values], dtype=object)
    codes, _ = pd.factorize(names, sort=True)
    return np.asarray(codes, np.int64)
