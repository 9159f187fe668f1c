"""TREC run files: ``read_run`` / ``write_run`` against pandas' pyarrow CSV engine on the same file,
and ``kolm-search eval RUN --qrels QRELS`` end to end (reading included) against pytrec_eval's
dict path (the files read into dicts in Python, ``RelevanceEvaluator``, the summary by
``compute_aggregated_measure``), side by side in one process.

Rerun: ``python bench_trec_files.py --rows 10000000 --repeat 3`` (read/write) and
``python bench_trec_files.py --eval --queries 5000 --depth 1000 --repeat 3`` (eval). Both check
agreement before reporting: the frames read equal pandas' columns, and the eval's summary equals
pytrec_eval's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _common import header, median_times, report

FIELDS = ["qid", "q0", "doc_id", "rank", "score", "tag"]
MEASURES = ["map", "P.10", "recall.100", "ndcg_cut.10", "recip_rank", "num_rel_ret"]


def make_run(n_queries: int, depth: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    docs = np.sort(rng.integers(0, 2_000_000, size=(n_queries, depth)), axis=1) + np.arange(depth)[None, :]
    score = -np.sort(-rng.random((n_queries, depth)), axis=1)
    return pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_queries)], depth),
                         "doc_id": pd.array([f"doc{d}" for d in docs.ravel()], dtype="str"),
                         "rank": np.tile(np.arange(depth), n_queries), "score": score.ravel()})


def make_qrels(run: pd.DataFrame, n_queries: int, depth: int, n_rel: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, depth, (n_queries, n_rel)) + (np.arange(n_queries) * depth)[:, None]
    docs = run["doc_id"].to_numpy()[picks.ravel()]
    docs = np.where(rng.random(docs.size) < 0.7, docs, [f"other{i}" for i in range(docs.size)])
    qrels = pd.DataFrame({"qid": np.repeat([f"q{i}" for i in range(n_queries)], n_rel), "doc_id": docs,
                          "relevance": rng.integers(0, 4, docs.size)})
    return qrels.drop_duplicates(["qid", "doc_id"])


def files(args: argparse.Namespace) -> None:
    from kolm_search.io import read_run, write_run

    n_q = max(1, args.rows // 1000)
    header(f"read_run / write_run of {n_q * 1000:,} rows vs pandas' pyarrow CSV engine")
    run = make_run(n_q, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = Path(tmp) / "ours.trec", Path(tmp) / "pandas.trec"
        frame = run.assign(q0="Q0", rank=run["rank"] + 1, tag="kolm")[FIELDS]
        import pyarrow as pa
        import pyarrow.csv as pcsv

        write_options = pcsv.WriteOptions(include_header=False, delimiter=" ", quoting_style="none")
        times = median_times({
            "write_run": lambda: write_run(run, ours, tag="kolm", progress=False),
            "pyarrow write_csv (pandas table in)": lambda: pcsv.write_csv(pa.Table.from_pandas(frame, preserve_index=False),
                                                                          theirs, write_options),
        }, args.repeat, warmup=1)
        # once, after the paired rounds: its ten times longer write would leave the page cache
        # flushing into whichever call came next
        times.update(median_times({"pandas to_csv (C engine)": lambda: frame.to_csv(theirs, sep=" ", header=False,
                                                                                    index=False)}, 1, warmup=0))
        size = ours.stat().st_size
        read = median_times({
            "read_run": lambda: read_run(ours, progress=False),
            "read_run(check_duplicates=False)": lambda: read_run(ours, progress=False, check_duplicates=False),
            "pandas read_csv(engine='pyarrow')": lambda: pd.read_csv(ours, sep=" ", header=None, names=FIELDS,
                                                                     engine="pyarrow"),
        }, args.repeat, warmup=1)
        back, ref = read_run(ours, progress=False), pd.read_csv(ours, sep=" ", header=None, names=FIELDS, engine="pyarrow")
        agrees = (back["doc_id"].astype(str).equals(ref["doc_id"].astype(str))
                  and np.array_equal(back["score"].to_numpy(), ref["score"].to_numpy())
                  and np.array_equal(back["score"].to_numpy(), run["score"].to_numpy()))
    rows = [{"what": k, "seconds": v, "vs_write_run": f"{v / times['write_run']:.2f}x"} for k, v in times.items()]
    rows += [{"what": k, "seconds": v, "vs_read_run": f"{v / read['read_run']:.2f}x", "agrees": agrees,
              "file_mb": f"{size / 2**20:.0f}"} for k, v in read.items()]
    report(rows)


def _pytrec(run_path: Path, qrels_path: Path) -> dict[str, float]:
    import pytrec_eval

    r: dict[str, dict[str, float]] = {}
    with run_path.open() as fh:
        for line in fh:
            q, _, d, _, s, _ = line.split()
            r.setdefault(q, {})[d] = float(s)
    j: dict[str, dict[str, int]] = {}
    with qrels_path.open() as fh:
        for line in fh:
            q, _, d, v = line.split()
            j.setdefault(q, {})[d] = int(v)
    res = pytrec_eval.RelevanceEvaluator(j, set(MEASURES)).evaluate(r)
    names = sorted(next(iter(res.values())))
    return {m: pytrec_eval.compute_aggregated_measure(m, [v[m] for v in res.values()]) for m in names}


def _ours(run_path: Path, qrels_path: Path) -> dict[str, float]:
    from kolm_search.cli import main

    out = io.StringIO()
    argv = ["eval", str(run_path), "--qrels", str(qrels_path), "--format", "json", "--quiet"]
    for m in MEASURES:
        argv += ["-m", m]
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())["runs"][0]["summary"]


def evaluation(args: argparse.Namespace) -> None:
    from kolm_search.io import write_qrels, write_run

    header(f"kolm-search eval RUN --qrels QRELS, {args.queries} queries x {args.depth} docs, measures {MEASURES}")
    run = make_run(args.queries, args.depth)
    qrels = make_qrels(run, args.queries, args.depth, args.rel)
    with tempfile.TemporaryDirectory() as tmp:
        run_path, qrels_path = Path(tmp) / "run.trec", Path(tmp) / "qrels.txt"
        write_run(run, run_path, progress=False)
        write_qrels(qrels, qrels_path)
        times = median_times({"kolm-search eval (in process)": lambda: _ours(run_path, qrels_path),
                              "pytrec_eval dict path": lambda: _pytrec(run_path, qrels_path)}, args.repeat, warmup=1)
        ours, theirs = _ours(run_path, qrels_path), _pytrec(run_path, qrels_path)
    agrees = all(abs(ours[k] - theirs[k]) <= 1e-9 * max(1.0, abs(theirs[k])) for k in theirs)
    base = times["kolm-search eval (in process)"]
    report([{"what": k, "seconds": v, "ratio_to_kolm": f"{v / base:.1f}x", "agrees": agrees} for k, v in times.items()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--eval", action="store_true", help="time kolm-search eval vs pytrec_eval instead")
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--queries", type=int, default=5_000)
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--rel", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    evaluation(args) if args.eval else files(args)


if __name__ == "__main__":
    main()
