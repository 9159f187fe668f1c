"""A cached ``Experiment`` rerun (issue 27 (c)) timed on two source trees, in alternating processes.

The experiment is ``bench_compose.py``'s: five pipelines ``bm25 % 100 >> LengthPrior(w)`` over
one collection, measured with ``ndcg@10``; each process runs it once with a fresh ``cache_dir``,
then times ``rounds`` reruns over that folder, each right after ``gc.collect()`` (as
``bench_compose.py`` times its second run), and prints their median. The trees alternate, so
both see the same load; a tree is a checkout (``git worktree add /tmp/base <commit>``)::

    cd benchmarks && python bench_rerun_pair.py --base /tmp/base --corpus ../../shared/data/med --pairs 4

Prints each tree's medians (ms) and their median.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

_CHILD = r"""
import gc, shutil, sys, tempfile, time
sys.path.insert(0, {tree!r}); sys.path.insert(1, {bench!r})
import numpy as np
from bench_compose import LengthPrior
from kolm_search import BM25Retriever
from kolm_search.engine.doctable import DocumentTable
from kolm_search.evaluation import Experiment
from kolm_search.io import load_dataset
import kolm_search
assert kolm_search.__file__.startswith({tree!r}), kolm_search.__file__
ds = load_dataset({corpus!r})
table = DocumentTable.coerce(ds.corpus)
first = BM25Retriever(table) % 100
lengths = np.array([len(t.split()) for t in table.texts()], np.float64)
pipes = {{f"prior{{w}}": first >> LengthPrior(lengths, w) for w in (0.5, 0.6, 0.7, 0.8, 0.9)}}
folder = tempfile.mkdtemp(prefix="kolm-bench-rerun-")
run = lambda: Experiment(pipes, ds, ["ndcg@10"], limit=100, progress=False, cache_dir=folder,
                         drop_self_hits=False).run()
run()
times = []
for _ in range({rounds}):
    gc.collect()
    t0 = time.perf_counter()
    run()
    times.append(time.perf_counter() - t0)
shutil.rmtree(folder, ignore_errors=True)
print(float(np.median(times)) * 1e3)
"""


def one(tree: Path, corpus: str, rounds: int) -> float:
    """Median rerun (ms) of one process importing ``kolm_search`` from ``tree``."""
    code = _CHILD.format(tree=str(tree.resolve()), bench=str(Path(__file__).resolve().parent), corpus=corpus,
                         rounds=rounds)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base", type=Path, required=True, help="the other source tree (a checkout)")
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parent.parent, help="default: this tree")
    ap.add_argument("--corpus", default="cranfield")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    found: dict[str, list[float]] = {"base": [], "work": []}
    for _ in range(args.pairs):
        for name, tree in (("base", args.base), ("work", args.work)):
            found[name].append(one(tree, args.corpus, args.rounds))
    for name, values in found.items():
        print(f"{name} {args.base if name == 'base' else args.work}: {[round(v, 3) for v in values]} ms, "
              f"median {float(np.median(values)):.3f} ms")


if __name__ == "__main__":
    main()
