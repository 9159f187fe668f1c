"""First-run cost: the README's main job and every kernel module, cold (empty Numba cache) and warm.

Rerun: ``python benchmarks/bench_compile.py`` (add ``--repeat 3`` for medians). Each figure is
a fresh child process with ``NUMBA_CACHE_DIR`` pointed at a folder of its own: empty for the
cold run, filled by it for the warm run. Kernel rows time ``kolm_search._kernels.load(name)``
alone (the package and numba already imported in that child), so they are compile or cache
load and nothing else.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import header, report

KERNELS = ("sparse", "dense", "fusion", "condorcet", "metrics", "mmr", "strings", "ranking")
PROBE = ("import time, numba, kolm_search; from kolm_search._kernels import load; t = time.perf_counter(); "
         "load({name!r}); print(time.perf_counter() - t)")


def _child(args: list[str], cache: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(args, env=dict(os.environ, NUMBA_CACHE_DIR=cache), capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1]) if args[1] == "-c" else time.perf_counter() - t0


def cold_warm(args: list[str], repeat: int) -> tuple[float, float]:
    cold, warm = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            cold.append(_child(args, cache))
            warm.append(_child(args, cache))
    return statistics.median(cold), statistics.median(warm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--dataset", default="cranfield", help="dataset of the main job (default: the packaged Cranfield)")
    args = ap.parse_args()
    header("first-run cost: cold vs warm Numba cache")
    exe = str(Path(sys.executable).with_name("kolm-search"))
    job = [exe, "eval", args.dataset, "--pipeline", "bm25", "--metrics", "ndcg@10,recall@100", "--quiet"]
    rows = []
    cold, warm = cold_warm(job, args.repeat)
    rows.append({"what": "main job (kolm-search eval bm25, whole process)", "seconds": cold, "warm": f"{warm:.2f} s",
                 "target": "<= 8 s cold"})
    for name in KERNELS:
        cold, warm = cold_warm([sys.executable, "-c", PROBE.format(name=name)], args.repeat)
        rows.append({"what": f"kernel module {name!r}: compile (cold) / cache load (warm)", "seconds": cold,
                     "warm": f"{warm:.3f} s"})
    report(rows)


if __name__ == "__main__":
    main()
