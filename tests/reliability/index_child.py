"""Child process of the index fuzz test: load and search many saved indexes, one JSON line each.

Reads a JSON list of cases on stdin (``{"kind": "bm25"|"dense", "dir", "queries", "vectors", "k",
"verify"}``) and prints, flushed, one line per case:

- ``{"status": "ok", "result": [...]}``: the index loaded, its search results passed the oracle
  (a numpy twin over the loaded arrays: BM25's dense score matrix, dense brute force in float64)
  and are valid (document rows in range, finite scores, best first); ``result`` holds them;
- ``{"status": "kolm", "type", "error"}``: loading raised a ``KolmError`` (or, loaded with
  ``verify="quick"``, which checks each term's postings, the documents and the term
  frequencies when first used, using them did: the searches, the results' documents and ids,
  and ``tf``, which checks every posting first);
- ``{"status": "bad", "type", "error"}``: anything else (another exception, a ``KolmError`` at
  search time, results that disagree with the oracle).

A crash or hang shows as a missing line: the parent knows which case did it.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import numpy as np

from kolm_search import BM25Retriever
from kolm_search._kernels import load as kernels
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.selection import Selections
from kolm_search.errors import KolmError
from kolm_search.retrievers.dense import DenseRetriever


class OracleError(AssertionError):
    pass


def _valid_rows(docs: np.ndarray, scores: np.ndarray, counts: np.ndarray, n_docs: int) -> list[list[Any]]:
    rows = []
    for q in range(len(counts)):
        d, s = docs[q, : counts[q]], scores[q, : counts[q]]
        if not (np.all((d >= 0) & (d < n_docs)) and len(set(d.tolist())) == len(d) and np.all(np.isfinite(s))):
            raise OracleError(f"query {q}: invalid rows {d.tolist()} / scores {s.tolist()}")
        if np.any(np.diff(s) > 0):
            raise OracleError(f"query {q}: scores not best first {s.tolist()}")
        rows.append([d.tolist(), s.tolist()])
    return rows


def _batch(ret: Any, texts: list[str], k: int, vectors: np.ndarray | None, mode: str) -> None:
    """The batch path too (expanded queries fused, a filter mask, codes mapped to ids)."""
    batch = QueryBatch(texts=texts, owner=np.zeros(len(texts), np.int64), n_queries=1, limit=k,
                       filters=[{"source": "s1"}], embeddings=vectors, mode=mode)
    frame = ret.retrieve_batch(batch)
    if len(frame) and (frame.doc.min() < 0 or frame.doc.max() >= len(ret.table)):
        raise OracleError(f"batch returned document codes {frame.doc.tolist()}")
    _ = ret.table.ids[frame.doc]


def _first_reads(ret: Any, docs: np.ndarray, counts: np.ndarray) -> None:
    """What a quick load leaves to first use: the results' documents and every id."""
    rows = np.unique(np.concatenate([docs[q, : counts[q]] for q in range(len(counts))] + [np.zeros(0, np.int64)]))
    ret.table.documents(rows)
    ret.table.codes(["d1", "nowhere"], missing="ignore")


def check_bm25(path: str, queries: list[str], k: int, verify: str = "auto") -> list[list[Any]]:
    ret = BM25Retriever.load(path, verify=verify)
    n_docs = len(ret.table)
    q_ptr, q_ids = ret.encode(queries)
    offsets = np.array([np.float32(sum(np.float32(ret.nonocc[t]) for t in q_ids[q_ptr[q]:q_ptr[q + 1]]))
                        for q in range(len(queries))], np.float32)
    try:  # quickly loaded, the searches check their terms' postings first (the rest at ret.tf)
        docs, scores, counts = ret.score_texts(queries, k, offsets=offsets)
        _valid_rows(*ret.score_texts(queries, k), n_docs)  # the retriever's own offsets
        if verify == "quick":
            _first_reads(ret, docs, counts)
        _batch(ret, queries, k, None, "fulltext")
        if verify == "quick":
            ret.tf  # noqa: B018 - every posting, then the deferred check of the term frequencies
    except KolmError as exc:
        if verify == "quick":
            raise
        raise OracleError(f"search failed after a successful load: {type(exc).__name__}: {exc}") from exc
    m = len(queries)
    want = kernels("sparse").sparse_topk_numpy(q_ptr, q_ids, np.ones(len(q_ids), np.float32), np.asarray(ret.t_ptr),
                                               np.asarray(ret.t_docs), np.asarray(ret.t_w), offsets,
                                               *Selections.none(m).arrays(), n_docs, max(1, min(k, n_docs)))
    pruned = kernels("pruned").pruned_topk(q_ptr, q_ids, np.ones(len(q_ids), np.float32), np.asarray(ret.t_ptr),
                                           np.asarray(ret.t_docs), np.asarray(ret.t_w), np.asarray(ret.t_max),
                                           np.asarray(ret.b_max), np.asarray(ret.b_last), offsets,
                                           *Selections.none(m).arrays(), n_docs, max(1, min(k, n_docs)), bail=np.inf,
                                           lookup=0.0)
    for got in ((docs, scores, counts), pruned):  # the pruned kernel on the loaded maxima too
        for got_a, want_a in zip(got, want, strict=True):
            if not np.array_equal(got_a, want_a):
                raise OracleError(f"kernel and numpy twin disagree: {got_a.tolist()} vs {want_a.tolist()}")
    return _valid_rows(docs, scores, counts, n_docs)


def check_dense(path: str, vectors: list[list[float]], k: int, verify: str = "auto") -> list[list[Any]]:
    ret = DenseRetriever.load(path, verify=verify)
    q = np.asarray(vectors, np.float32)
    try:
        docs, scores, counts = ret.search_vectors(q, k)
        if verify == "quick":
            _first_reads(ret, docs, counts)
        _batch(ret, ["a"] * len(q), k, q, "vector")
    except KolmError as exc:
        if verify == "quick":
            raise
        raise OracleError(f"search failed after a successful load: {type(exc).__name__}: {exc}") from exc
    rows = _valid_rows(docs, scores, counts, len(ret.table))
    qq = q.astype(np.float64)
    if ret.metric == "cosine":
        qq /= np.linalg.norm(qq, axis=1, keepdims=True)
    true = qq @ np.asarray(ret.embeddings, np.float64).T  # brute force in float64
    kk = max(1, min(k, len(ret.table)))
    for i in range(len(q)):
        best = np.sort(true[i])[::-1][:kk]
        tol = 1e-4 * (1 + np.abs(best))
        if counts[i] != len(best) or not np.all(np.abs(scores[i, : counts[i]] - best) <= tol) \
                or not np.all(np.abs(true[i, docs[i, : counts[i]]] - scores[i, : counts[i]]) <= tol):
            raise OracleError(f"query {i}: {docs[i].tolist()} {scores[i].tolist()} vs brute force {best.tolist()}")
    return rows


def main() -> None:
    cases = json.loads(sys.stdin.read())
    for case in cases:
        try:
            if case["kind"] == "bm25":
                result = check_bm25(case["dir"], case["queries"], case["k"], case.get("verify", "auto"))
            else:
                result = check_dense(case["dir"], case["vectors"], case["k"], case.get("verify", "auto"))
            rec: dict[str, Any] = {"status": "ok", "result": result}
        except OracleError as exc:
            rec = {"status": "bad", "type": "OracleError", "error": str(exc)}
        except KolmError as exc:
            rec = {"status": "kolm", "type": type(exc).__name__, "error": str(exc)}
        except Exception as exc:
            rec = {"status": "bad", "type": type(exc).__name__, "error": traceback.format_exc()}
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
