"""What one more pipeline adds to ``exp.run()``: an ``Experiment`` of the first 1 and of all 5
columnar rerankers of ``bench_compose.py`` (``bm25 % 100 >> LengthPrior(w)``) built and run in
alternation, each round timed in pieces (the experiment's construction, ``run_pipelines()``,
then ``compare`` of its runs: what ``exp.run()`` does without a cache); medians over rounds.

"per extra" is (five - one) / 4: the marginal cost of a pipeline, which issue 27's bound (b)
(five within 1.3x of one) allows to be 0.075x the single experiment's total.

    cd benchmarks && PYTHONPATH=.. python bench_experiment_marginal.py --corpus cranfield --rounds 40
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np
from bench_compose import LengthPrior, synthetic

from kolm_search import BM25Retriever
from kolm_search.engine.doctable import DocumentTable
from kolm_search.evaluation import Experiment
from kolm_search.evaluation.compare import compare
from kolm_search.io import load_dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", default="cranfield",
                    help="cranfield, synthetic (100,000 documents), or a BEIR folder (e.g. ../../shared/data/npl)")
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    ds = synthetic(100_000, 1000) if args.corpus == "synthetic" else load_dataset(args.corpus)
    table = DocumentTable.coerce(ds.corpus)
    first = BM25Retriever(table) % 100
    lengths = np.array([len(t.split()) for t in table.texts()], np.float64)
    pipes = {f"prior{w}": first >> LengthPrior(lengths, w) for w in (0.5, 0.6, 0.7, 0.8, 0.9)}
    times: dict[int, list[tuple[float, ...]]] = {1: [], 5: []}
    for i in range(args.rounds + 3):  # three rounds of warm-up
        for n in (1, 5):
            gc.collect()
            t0 = time.perf_counter()
            exp = Experiment(dict(list(pipes.items())[:n]), ds, ["ndcg@10"], limit=100, progress=False,
                             drop_self_hits=False)
            t1 = time.perf_counter()
            exp.run_pipelines()
            t2 = time.perf_counter()
            compare(exp.runs, ds.qrels, exp.metrics, drop_self_hits=False)
            t3 = time.perf_counter()
            if i >= 3:
                times[n].append((t1 - t0, t2 - t1, t3 - t2, t3 - t0))
    one, five = (np.median(np.array(times[n]), axis=0) * 1e3 for n in (1, 5))
    print(f"# {args.corpus}, {args.rounds} rounds; ms (medians)")
    for j, what in enumerate(("construction", "run_pipelines()", "compare (the table)", "total")):
        print(f"{what:22s} one {one[j]:8.2f}  five {five[j]:8.2f}  per extra {(five[j] - one[j]) / 4:6.2f}")
    print(f"five / one {five[3] / one[3]:.3f} (bound 1.3x: per extra at most {0.075 * one[3]:.2f} ms)")


if __name__ == "__main__":
    main()
