"""A resumable re-ranking job in a process of its own, for the kill tests
(``python -m tests.reliability.rerank_child OUTPUT LOG DELAY``).

Its reranker orders each query's documents by a checksum of (query, document) and writes one
line per model call (a chunk of queries) to ``LOG`` before it answers, so the test counts the
calls a killed job made, finished or not.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from dataclasses import replace
from typing import Any

import pandas as pd

N_QUERIES, DEPTH, TOP_K, BATCH = 40, 6, 4, 3


def inputs() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(run, corpus, queries): 40 queries x 6 documents of a 60-document corpus."""
    corpus = pd.DataFrame({"id": [f"d{i}" for i in range(60)], "content": [f"text {i} " * (1 + i % 4) for i in range(60)]})
    rows = [(f"q{q:02d}", f"d{(q * 7 + j * 11) % 60}", float(DEPTH - j)) for q in range(N_QUERIES) for j in range(DEPTH)]
    run = pd.DataFrame(rows, columns=["qid", "doc_id", "score"])
    queries = pd.DataFrame({"qid": [f"q{q:02d}" for q in range(N_QUERIES)], "query": [f"query {q}" for q in range(N_QUERIES)]})
    return run, corpus, queries


class CountingReranker:
    """Deterministic scores; one line in ``log`` per ``rerank_batch`` call, then ``delay`` seconds."""

    def __init__(self, log: str, delay: float) -> None:
        self.log, self.delay = log, delay

    def fingerprint(self) -> str:
        return "CountingReranker/1"

    def rerank_batch(self, items: Any) -> list[list[Any]]:
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(" ".join(ctx.request.query.split()[-1] for _, ctx in items) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        time.sleep(self.delay)
        out = []
        for docs, ctx in items:
            scored = [replace(d, score=zlib.crc32(f"{ctx.request.query}|{d.id}".encode()) / 2**32) for d in docs]
            out.append(sorted(scored, key=lambda d: -d.score))
        return out

    def rerank(self, docs: Any, context: Any) -> list[Any]:
        return self.rerank_batch([(docs, context)])[0]


def job(output: str, log: str, delay: float) -> pd.DataFrame:
    from kolm_search.jobs.rerank import rerank_run

    run, corpus, queries = inputs()
    return rerank_run(run, corpus, CountingReranker(log, delay), top_k=TOP_K, batch_size=BATCH, queries=queries,
                      output=output, progress=False)


if __name__ == "__main__":
    job(sys.argv[1], sys.argv[2], float(sys.argv[3]))
