"""Helpers shared by the benchmark scripts: timing (median of runs), peak memory, output."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """One call of ``fn`` after a garbage collection (untimed): ``(seconds, result)``."""
    import gc

    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def median_time(fn: Callable[[], Any], repeat: int = 3, warmup: int = 1) -> tuple[float, Any]:
    """Median wall time (s) of ``repeat`` calls after ``warmup`` untimed calls; last result.

    The previous result is released (and garbage collected) before each timed call, untimed:
    otherwise every call after the first runs while the last one's output is still alive, and
    on this VM memory that the process has not touched before costs up to ~2 s a GB (the
    10,000-query `fuse` measured 2.3 s with its last result released, 3.2 s with it kept).
    """
    out = None
    for _ in range(warmup):
        out = None
        out = fn()
    times = []
    for _ in range(repeat):
        out = None
        dt, out = _timed(fn)
        times.append(dt)
    return statistics.median(times), out


def median_times(fns: dict[str, Callable[[], Any]], repeat: int = 3, warmup: int = 1,
                 samples: dict[str, list[float]] | None = None) -> dict[str, float]:
    """Median wall time (s) of each of ``fns`` over ``repeat`` rounds that call every function
    once in turn (after ``warmup`` untimed rounds), each result released before the next call
    (as :func:`median_time`): a burst of background work on this shared VM (e.g. the kernel
    collapsing huge pages after a large run is freed) then slows one call of each function
    instead of every call of the one that happened to run next. ``samples``, if given, receives
    every round's times (for ratios of paired rounds)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    if samples is not None:
        samples.update(times)
    for r in range(warmup + repeat):
        for name, fn in fns.items():
            dt, result = _timed(fn)
            del result  # released here, before the next call (a name like ``_`` would keep it alive)
            if r >= warmup:
                times[name].append(dt)
    return {name: statistics.median(ts) for name, ts in times.items()}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def header(title: str) -> None:
    print(f"# {title}")
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.machine()}; argv: {' '.join(sys.argv)}")


def report(rows: list[dict[str, Any]], path: str | None = None) -> None:
    width = max(len(r["what"]) for r in rows)
    for r in rows:
        extra = "  ".join(f"{k}={v}" for k, v in r.items() if k not in ("what", "seconds"))
        print(f"{r['what']:<{width}}  {r['seconds']:9.4f} s  {extra}")
    if path:
        with open(path, "w") as fh:
            json.dump(rows, fh, indent=2)
