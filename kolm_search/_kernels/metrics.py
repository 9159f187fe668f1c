"""Evaluation kernel: trec_eval's measures of every query in one pass over its ranking.

Input (built by :mod:`kolm_search.evaluation.metrics`, which ranks the run):

- ``r_ptr`` int64 (n_q + 1,): query q's retrieved documents, in rank order, are the rows
  ``r_ptr[q]:r_ptr[q+1]`` of ``r_doc`` int64 (n_run,), codes below ``n_run_docs`` that tell the
  documents of one query apart, and ``r_judged`` int64 (n_run,), each document's code among
  the judged documents (below ``n_judged``) or -1;
- ``j_ptr`` int64 (n_q + 1,), ``j_doc`` int64 (n_qrels,) (codes below ``n_judged``), ``j_rel``
  int64 (n_qrels,): query q's judgements, sorted by descending relevance (negative grades count as not judged, as in
  trec_eval; they still make the query one that has judgements);
- ``metric_ids``, ``cutoffs`` int64 (m,): see :data:`METRIC_IDS`; ``level``: the minimum
  relevance counted as relevant.

Output: ``values`` float64 (n_q, m) and ``status`` int64 (n_q,): 0 evaluated (or left at
zero when the query has no retrieved documents or no judgements: the caller decides whether
it counts), 2 a document retrieved twice for the query, 3 a document judged twice.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["METRIC_IDS", "evaluate_queries", "evaluate_queries_numpy"]

METRIC_IDS = {
    "ndcg_cut": 0, "ndcg": 1, "map": 2, "map_cut": 3, "recip_rank": 4, "P": 5,
    "recall": 6, "Rprec": 7, "success": 8, "bpref": 9,
}

_I32 = types.int32
_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), i64, ro(f64),
                        rw(f64, 2), rw(i64), rw(i64), rw(f64), rw(f64), rw(f64), rw(_I32), rw(_I32), rw(_I32), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _evaluate_chunk(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs, level, log2, values, status,
                    cum_rel, cum_dcg, cum_ap, ideal, rel_of, judged, retrieved, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``. ``log2[i] = log2(i + 2)`` for every rank; the rest after
    ``status`` is this chunk's scratch: cumulative arrays (longest ranking + 1), the ideal
    gains (most judgements or largest cutoff, + 1), and per-document marks (-1 on entry)."""
    for q in range(q0, q1):
        s, n_r = r_ptr[q], r_ptr[q + 1] - r_ptr[q]
        js, n_j = j_ptr[q], j_ptr[q + 1] - j_ptr[q]
        for t in range(js, js + n_j):
            d = j_doc[t]
            if judged[d] == q:
                status[q] = 3
            judged[d] = q
            rel_of[d] = max(j_rel[t], -1)
        for t in range(s, s + n_r):
            d = r_doc[t]
            if retrieved[d] == q:
                status[q] = 2
            retrieved[d] = q
        if n_r == 0 or n_j == 0 or status[q] != 0:
            continue
        num_rel = 0
        num_nonrel = 0
        n_pos = 0
        for t in range(js, js + n_j):
            r = j_rel[t]
            if r >= level:
                num_rel += 1
            elif r >= 0:
                num_nonrel += 1
            if r > 0:  # graded gains, best first
                ideal[n_pos + 1] = ideal[n_pos] + r / log2[n_pos]
                n_pos += 1
        first_rel = 0
        bpref = 0.0
        nonrel_so_far = 0
        for i in range(n_r):
            d = r_judged[s + i]
            r = rel_of[d] if d >= 0 and judged[d] == q else -1
            is_rel = r >= level
            cum_rel[i + 1] = cum_rel[i] + (1 if is_rel else 0)
            cum_dcg[i + 1] = cum_dcg[i] + (r / log2[i] if r > 0 else 0.0)
            cum_ap[i + 1] = cum_ap[i] + (cum_rel[i + 1] / (i + 1.0) if is_rel else 0.0)
            if is_rel and first_rel == 0:
                first_rel = i + 1
            if r >= 0:
                if r < level:
                    nonrel_so_far += 1
                elif nonrel_so_far > 0:
                    bpref += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel)
                else:
                    bpref += 1.0
        for m in range(metric_ids.shape[0]):
            mid = metric_ids[m]
            k = cutoffs[m]
            kk = min(k, n_r)
            v = 0.0
            if mid == 0:  # ndcg_cut
                best = ideal[min(k, n_pos)]
                if best > 0:
                    v = cum_dcg[kk] / best
            elif mid == 1:  # ndcg
                if ideal[n_pos] > 0:
                    v = cum_dcg[n_r] / ideal[n_pos]
            elif mid == 2:  # map
                if num_rel > 0:
                    v = cum_ap[n_r] / num_rel
            elif mid == 3:  # map_cut
                if num_rel > 0:
                    v = cum_ap[kk] / num_rel
            elif mid == 4:  # recip_rank
                if first_rel > 0:
                    v = 1.0 / first_rel
            elif mid == 5:  # P@k
                v = cum_rel[kk] / k
            elif mid == 6:  # recall@k
                if num_rel > 0:
                    v = cum_rel[kk] / num_rel
            elif mid == 7:  # Rprec
                if num_rel > 0:
                    v = cum_rel[min(num_rel, n_r)] / num_rel
            elif mid == 8:  # success@k
                v = 1.0 if cum_rel[kk] > 0 else 0.0
            elif mid == 9:  # bpref
                if num_rel > 0:
                    v = bpref / num_rel
            values[q, m] = v


def _inputs(*arrays: npt.ArrayLike) -> list[npt.NDArray[np.int64]]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def evaluate_queries(r_ptr: npt.ArrayLike, r_doc: npt.ArrayLike, n_run_docs: int, r_judged: npt.ArrayLike,
                     j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike, j_rel: npt.ArrayLike, n_judged: int,
                     metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike, level: int, *,
                     n_threads: int | None = None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Every query's measures ``values`` float64 (n_q, m) and ``status`` int64 (n_q,) (see the
    module docstring). Pointers and codes are checked here: a bad layout raises ``ValueError``
    before the kernel reads anything."""
    rp, rd, rj, jp, jd, jr, mids, cuts = _inputs(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    n_q = rp.shape[0] - 1
    for ptr, rows in ((rp, len(rd)), (jp, len(jd))):
        if ptr.shape[0] != n_q + 1 or ptr[0] != 0 or ptr[-1] != rows or np.any(np.diff(ptr) < 0):
            raise ValueError(f"pointers do not describe {rows} rows of {n_q} queries")
    for codes, low, bound, what in ((rd, 0, n_run_docs, "run"), (rj, -1, n_judged, "judged"), (jd, 0, n_judged, "qrels")):
        if len(codes) and (codes.min() < low or codes.max() >= bound):
            raise ValueError(f"{what} document codes outside [{low}, {bound})")
    if rj.shape != rd.shape or jr.shape != jd.shape or n_q >= 2**31 or (len(jr) and (jr.min() < -2**31 or jr.max() >= 2**31)):
        raise ValueError("one judged code per retrieved row and one int32 grade per judgement are needed")
    values = np.zeros((n_q, mids.shape[0]), np.float64)
    status = np.zeros(n_q, np.int64)
    r_len, j_len = np.diff(rp), np.diff(jp)
    width = int(max(r_len.max(initial=0), j_len.max(initial=0), cuts.max(initial=0))) + 1
    log2 = np.log2(np.arange(width, dtype=np.float64) + 2.0)
    n_run_docs, n_judged = max(int(n_run_docs), 1), max(int(n_judged), 1)

    def chunk(q0: int, q1: int) -> None:
        _evaluate_chunk(rp, rd, rj, jp, jd, jr, mids, cuts, int(level), log2, values, status,
                        np.zeros(width, np.int64), np.zeros(width), np.zeros(width), np.zeros(width),
                        np.zeros(n_judged, np.int32), np.full(n_judged, -1, np.int32),
                        np.full(n_run_docs, -1, np.int32), q0, q1)

    threads = resolve_threads(n_threads) if rd.shape[0] >= 50_000 else 1
    run_chunks(chunk, chunk_bounds(rp, threads))
    return values, status


def evaluate_queries_numpy(r_ptr: npt.ArrayLike, r_judged: npt.ArrayLike, j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike,
                           j_rel: npt.ArrayLike, metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike,
                           level: int) -> npt.NDArray[np.float64]:
    """Numpy twin of :func:`evaluate_queries`' values (the test oracle), from the measures'
    definitions (inputs without duplicates)."""
    rp, rd, jp, jd, jr, mids, cuts = _inputs(r_ptr, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    out = np.zeros((len(rp) - 1, len(mids)))
    for q in range(len(rp) - 1):
        grades = dict(zip(jd[jp[q]:jp[q + 1]].tolist(), jr[jp[q]:jp[q + 1]].tolist(), strict=True))
        ranked = np.array([max(grades.get(d, -1), -1) for d in rd[rp[q]:rp[q + 1]].tolist()], np.int64)
        judged = jr[jp[q]:jp[q + 1]]
        if not len(ranked) or not len(judged):
            continue
        rel = ranked >= level
        num_rel, num_nonrel = int((judged >= level).sum()), int(((judged >= 0) & (judged < level)).sum())
        discount = np.log2(np.arange(len(ranked)) + 2.0)
        gains = np.where(ranked > 0, ranked, 0) / discount
        positive = np.sort(judged[judged > 0])[::-1]
        ideal = np.concatenate([[0.0], np.cumsum(positive / np.log2(np.arange(len(positive)) + 2.0))])
        precision_at = np.cumsum(rel) / np.arange(1, len(ranked) + 1)
        nonrel_before: npt.NDArray[np.int64] = np.cumsum((ranked >= 0) & ~rel) - ((ranked >= 0) & ~rel)
        for m, (mid, k) in enumerate(zip(mids, cuts, strict=True)):
            top = slice(0, min(int(k), len(ranked)))
            v = 0.0
            if mid == 0 and ideal[min(k, len(positive))] > 0:
                v = gains[top].sum() / ideal[min(k, len(positive))]
            elif mid == 1 and ideal[-1] > 0:
                v = gains.sum() / ideal[-1]
            elif mid in (2, 3) and num_rel:
                v = precision_at[top if mid == 3 else slice(None)][rel[top if mid == 3 else slice(None)]].sum() / num_rel
            elif mid == 4 and rel.any():
                v = 1.0 / (int(np.argmax(rel)) + 1)
            elif mid == 5:
                v = rel[top].sum() / k
            elif mid == 6 and num_rel:
                v = rel[top].sum() / num_rel
            elif mid == 7 and num_rel:
                v = rel[:num_rel].sum() / num_rel
            elif mid == 8:
                v = float(rel[top].any())
            elif mid == 9 and num_rel:
                before = nonrel_before[rel].tolist()
                denom = min(num_nonrel, num_rel)
                v = sum(1.0 - min(b, num_rel) / denom if b > 0 else 1.0 for b in before) / num_rel
            out[q, m] = v
    return out
