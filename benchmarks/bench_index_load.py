"""What the checks of an all-or-nothing save and a trusting-nothing load cost, beside bm25s.

Rerun: ``python benchmarks/bench_index_load.py --docs 200000 --repeat 3`` (and ``--docs 400000``
for growth). Synthetic Zipf corpus (as bench_bm25), the same tokens for both libraries. Timed,
median of ``--repeat`` rounds, each in one process:

- ``save``: kolm's :meth:`BM25Retriever.save` (generation-named files, each fsync'd, sha256
  while writing, one rename of the manifest) against bm25s's ``save`` (arrays and JSON, no
  atomic switch) into a fresh folder;
- ``load``: kolm's :meth:`BM25Retriever.load` (memory-mapped) against bm25s's
  ``BM25.load(mmap=True)``; and the parts of kolm's load: the sha256 of every file the manifest
  names, the recomputation of the weights from the saved counts (bit for bit), and the
  document table (parquet to a :class:`DocumentTable`, which bm25s does not have).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _common import header, median_times, report
from bench_bm25 import synthetic


def _hash_files(root: Path) -> None:
    for p in sorted(root.iterdir()):
        if p.is_file() and p.name != ".kolm-save.lock":
            digest = hashlib.sha256()
            with p.open("rb") as fp:
                while block := fp.read(1 << 24):
                    digest.update(block)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to save (default: a temporary folder)")
    args = ap.parse_args()
    import bm25s

    from kolm_search import BM25Retriever, Tokenizer
    from kolm_search.retrievers._saved import load_table
    from kolm_search.retrievers.bm25_weights import first_unlike

    header(f"index save and load: {args.docs} docs")
    docs, _ = synthetic(args.docs, 1)
    frame = pd.DataFrame({"id": [str(i) for i in range(len(docs))], "content": docs})
    tok = Tokenizer(stopwords=None, stemmer=None)
    ret = BM25Retriever(frame, tokenizer=tok)
    peer = bm25s.BM25(method="lucene", k1=1.5, b=0.75)
    peer.index([tok(t) for t in docs], show_progress=False)
    work = Path(args.dir or tempfile.mkdtemp(prefix="kolm-load-"))
    kolm_dir, peer_dir = work / "kolm", work / "bm25s"
    count = [0]

    def kolm_save() -> None:
        count[0] += 1
        ret.save(kolm_dir / str(count[0]))

    def peer_save() -> None:
        count[0] += 1
        peer.save(str(peer_dir / str(count[0])))

    saves = median_times({"kolm save": kolm_save, "bm25s save": peer_save}, args.repeat, warmup=0)
    ret.save(kolm_dir / "idx")
    peer.save(str(peer_dir / "idx"))
    loaded = BM25Retriever.load(kolm_dir / "idx")
    table_path = next((kolm_dir / "idx").glob("documents.*.parquet"))
    loads = median_times({
        "kolm load": lambda: BM25Retriever.load(kolm_dir / "idx"),
        "bm25s load": lambda: bm25s.BM25.load(str(peer_dir / "idx"), mmap=True),
        "  sha256 of every file": lambda: _hash_files(kolm_dir / "idx"),
        "  weights recomputed from tf": lambda: first_unlike(
            loaded.t_ptr, loaded.t_docs, loaded.tf, loaded.doc_len, loaded.t_w, loaded.nonocc, method="lucene",
            k1=1.5, b=0.75, delta=0.5),
        "  document table": lambda: load_table(table_path, len(docs)),
    }, args.repeat)
    size = sum(p.stat().st_size for p in (kolm_dir / "idx").iterdir()) / 1e6
    nnz = int(np.asarray(loaded.t_docs).shape[0])
    rows = [{"what": "kolm save", "seconds": saves["kolm save"],
             "vs_bm25s": f"{saves['kolm save'] / saves['bm25s save']:.2f}x bm25s's time"},
            {"what": "bm25s save", "seconds": saves["bm25s save"]},
            {"what": "kolm load", "seconds": loads["kolm load"], "MB": round(size), "postings": nnz,
             "vs_bm25s": f"{loads['kolm load'] / loads['bm25s load']:.2f}x bm25s's time"},
            {"what": "bm25s load", "seconds": loads["bm25s load"]}]
    rows += [{"what": name, "seconds": t, "share": f"{t / loads['kolm load']:.0%} of kolm load"}
             for name, t in loads.items() if name.startswith("  ")]
    report(rows)
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
