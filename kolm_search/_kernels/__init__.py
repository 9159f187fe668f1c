"""Numba kernels: the only package that imports numba.

Each module holds kernels written as plain functions over arrays, compiled with
``njit(signature, cache=True, nogil=True)`` for one dtype signature (inputs typed read-only, so
memory-mapped arrays go in without a copy), a documented wrapper that validates and casts its
inputs, and a pure-numpy twin used as the test oracle.

Nothing here imports numba at package import: callers fetch a kernel module with :func:`load`
when they first need it. Its kernels are then compiled once per install and cached on disk
(Numba's cache, beside the package); while a compile is under way a one-line notice goes to
stderr. Kernels release the GIL and are run over chunks of their work on a thread pool sized
per call (:func:`run_chunks`); no global Numba setting is touched.
"""

from __future__ import annotations

import importlib
import itertools
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["chunk_bounds", "load", "resolve_threads", "run_chunks", "run_pieces", "usable_cores"]

_LOCK = threading.Lock()
_LOADED: dict[str, ModuleType] = {}  # kernel modules whose import has finished
_NOTICE = "kolm_search: compiling kernels (first run only) ..."
_noticed = False


def _notice() -> None:
    global _noticed
    if not _noticed:
        _noticed = True
        from tqdm.auto import tqdm

        tqdm.write(_NOTICE, file=sys.stderr)  # above any progress bar on the screen


def load(name: str) -> ModuleType:
    """The kernel module ``kolm_search._kernels.<name>``, imported (compiled or loaded) on first use.

    Kernels are compiled at import against their one signature; Numba then stores them in its
    on-disk cache and later imports load them from there. A notice is printed to stderr once
    per process when an actual compile starts (loading from the cache prints nothing).
    """
    module = _LOADED.get(name)  # not sys.modules: it holds a module from the start of its import,
    if module is not None:      # so another thread would get it partially initialised
        return module
    full = f"{__name__}.{name}"
    with _LOCK:
        module = _LOADED.get(name)
        if module is not None:
            return module
        from numba.core import event

        class _Listener(event.Listener):
            def on_start(self, ev: Any) -> None:
                _notice()

            def on_end(self, ev: Any) -> None:
                pass

        with event.install_listener("numba:compile", _Listener()):
            module = _LOADED[name] = importlib.import_module(full)
        return module


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one), at least 1:
    the default of every thread count (kernels) and process count (index builds)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def resolve_threads(n_threads: int | None) -> int:
    """Threads for one call: ``n_threads`` if given (at least 1), else the usable cores."""
    return max(1, int(n_threads)) if n_threads is not None else usable_cores()


def chunk_bounds(ptr: npt.NDArray[np.int64], n_chunks: int) -> npt.NDArray[np.int64]:
    """Group boundaries ``(c + 1,)`` splitting groups ``ptr`` (CSR offsets) into at most
    ``n_chunks`` contiguous chunks of about equal entries."""
    n_groups = len(ptr) - 1
    n_chunks = max(1, min(int(n_chunks), n_groups))
    targets = np.linspace(0, ptr[-1], n_chunks + 1)
    bounds = np.searchsorted(ptr, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, n_groups
    return np.unique(bounds)


def run_chunks(kernel: Callable[..., Any], bounds: npt.NDArray[np.int64], *args: Any) -> None:
    """Call ``kernel(*args, start, stop)`` for each chunk ``[bounds[i], bounds[i+1])``, on one
    thread per chunk (the kernels release the GIL and write disjoint parts of their outputs;
    ``kernel`` may be a Python function that allocates a chunk's scratch and calls one)."""
    spans = [(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a]
    if len(spans) <= 1:
        for a, b in spans:
            kernel(*args, a, b)
        return
    with ThreadPoolExecutor(max_workers=len(spans), thread_name_prefix="kolm-kernel") as pool:
        for future in [pool.submit(kernel, *args, a, b) for a, b in spans]:
            future.result()


def run_pieces(kernel: Callable[..., Any], bounds: npt.NDArray[np.int64], n_threads: int,
               scratch: Callable[[], tuple[Any, ...]]) -> None:
    """Call ``kernel(*scratch_of_its_thread, start, stop)`` for each piece ``[bounds[i],
    bounds[i+1])`` on ``n_threads`` threads, each taking the next piece when it finishes one (so
    pieces of uneven cost even out) with scratch arrays it allocates once (``scratch()``)."""
    spans = iter([(int(a), int(b)) for a, b in itertools.pairwise(bounds) if b > a])
    lock = threading.Lock()

    def work() -> None:
        mine: tuple[Any, ...] | None = None
        while True:
            with lock:
                span = next(spans, None)
            if span is None:
                return
            if mine is None:
                mine = scratch()
            kernel(*mine, *span)

    if n_threads <= 1:
        work()
        return
    with ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="kolm-kernel") as pool:
        for future in [pool.submit(work) for _ in range(n_threads)]:
            future.result()
