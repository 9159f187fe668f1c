"""Numba kernels: the only package that imports numba.

Each kernel is a plain function over arrays compiled with ``njit(cache=True)``, called by a
wrapper that casts its inputs to the one dtype signature documented on the kernel (so one
specialisation is ever compiled), and has a pure-numpy twin used as the test oracle.
No global Numba configuration is touched; thread counts are set per call and restored.
Large outputs are allocated by the numpy wrapper and passed in (numpy advises transparent huge
pages; Numba's own allocations fault in 4 KiB pages, which costs as much as the work on
arrays of tens of MB).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["numba_threads"]


@contextmanager
def numba_threads(n_threads: int | None) -> Iterator[int]:
    """Set Numba's thread count for the duration of one call, then restore it."""
    import numba

    previous = numba.get_num_threads()
    ceiling: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
    wanted = previous if n_threads is None else max(1, min(int(n_threads), ceiling))
    numba.set_num_threads(wanted)
    try:
        yield wanted
    finally:
        numba.set_num_threads(previous)
