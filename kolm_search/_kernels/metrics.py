"""Evaluation kernel: trec_eval's measures of every query in one pass over its ranking.

Input (built by :mod:`kolm_search.evaluation.metrics`, which ranks the run):

- ``r_ptr`` int64 (n_q + 1,): query q's retrieved documents, in rank order, are the rows
  ``r_ptr[q]:r_ptr[q+1]`` of ``r_doc`` int64 (n_run,), codes below ``n_run_docs`` that tell the
  documents of one query apart, and ``r_judged`` int64 (n_run,), each document's code among
  the judged documents (below ``n_judged``) or -1;
- ``j_ptr`` int64 (n_q + 1,), ``j_doc`` int64 (n_qrels,) (codes below ``n_judged``), ``j_rel``
  int64 (n_qrels,): query q's judgements, sorted by descending relevance (negative grades count as not judged, as in
  trec_eval; they still make the query one that has judgements);
- per measure, int64 (m,) each: ``metric_ids`` (see :data:`METRIC_IDS`), ``cutoffs`` (0: the
  whole ranking), ``levels`` (the minimum relevance counted as relevant), ``flags`` (1: only
  judged documents are ranked, trec_eval ``-J``), and float64 (m,) ``params`` (RBP's
  persistence p). A query's ranking is read once per distinct (level, flag) in a row, so
  callers order measures by them.

Output: ``values`` float64 (n_q, m) and ``status`` int64 (n_q,): 0 evaluated (or left at
zero when the query has no retrieved documents or no judgements: the caller decides whether
it counts), 2 a document retrieved twice for the query, 3 a document judged twice.

Beyond trec_eval: ``judged`` (share of the top k that is judged, any grade), ``recip_rank_cut``
(reciprocal rank within the top k), ``err_cut`` (gdeval's ERR@k: stop probability
``(2**g - 1) / 16`` for grade ``g`` in 0..4), ``rbp`` (rank-biased precision
``(1 - p) * sum p**i`` over relevant ranks i, from 0), and the counts ``num_ret``,
``num_rel_ret``, ``num_rel``; ``infAP`` is trec_eval's (a judgement below 0 marks a pooled but
unjudged document).
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
    "recall": 6, "Rprec": 7, "success": 8, "bpref": 9, "judged": 10, "num_ret": 11,
    "num_rel_ret": 12, "num_rel": 13, "recip_rank_cut": 14, "err_cut": 15, "rbp": 16, "infAP": 17,
}
_INFAP_EPSILON = 0.00001  # trec_eval's INFAP_EPSILON

_I32 = types.int32
_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64),
                        ro(f64), ro(f64), rw(f64, 2), rw(i64), rw(i64), rw(f64), rw(f64), rw(f64), rw(i64), rw(i64),
                        rw(_I32), rw(_I32), rw(_I32), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _evaluate_chunk(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs, levels, flags, params, log2,
                    values, status, cum_rel, cum_dcg, cum_ap, ideal, grade_at, cum_judged, rel_of, judged, retrieved,
                    q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``. ``log2[i] = log2(i + 2)`` for every rank; the rest after
    ``status`` is this chunk's scratch: cumulative arrays and grades by rank (longest ranking
    + 1), the ideal gains (most judgements + 1), and per-document marks (-1 on entry)."""
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
        n_pos = 0
        for t in range(js, js + n_j):
            r = j_rel[t]
            if r > 0:  # graded gains, best first
                ideal[n_pos + 1] = ideal[n_pos] + r / log2[n_pos]
                n_pos += 1
        level = -1
        flag = -1
        n_e = num_rel = num_nonrel = first_rel = 0
        bpref = inf_ap = 0.0
        for m in range(metric_ids.shape[0]):
            if levels[m] != level or flags[m] != flag:  # rank the query's documents for this level and flag
                level, flag = levels[m], flags[m]
                num_rel = 0
                num_nonrel = 0
                for t in range(js, js + n_j):
                    if j_rel[t] >= level:
                        num_rel += 1
                    elif j_rel[t] >= 0:
                        num_nonrel += 1
                n_e = 0
                first_rel = 0
                bpref = inf_ap = 0.0
                nonrel_so_far = 0
                pool_unjudged = 0
                for i in range(n_r):
                    d = r_judged[s + i]
                    known = d >= 0 and judged[d] == q
                    r = rel_of[d] if known else -1
                    if flag == 1 and r < 0:
                        continue
                    is_rel = r >= level
                    grade_at[n_e] = r
                    cum_judged[n_e + 1] = cum_judged[n_e] + (1 if known else 0)
                    cum_rel[n_e + 1] = cum_rel[n_e] + (1 if is_rel else 0)
                    cum_dcg[n_e + 1] = cum_dcg[n_e] + (r / log2[n_e] if r > 0 else 0.0)
                    cum_ap[n_e + 1] = cum_ap[n_e] + (cum_rel[n_e + 1] / (n_e + 1.0) if is_rel else 0.0)
                    n_e += 1
                    if is_rel and first_rel == 0:
                        first_rel = n_e
                    if known and r < 0:
                        pool_unjudged += 1
                    elif is_rel:  # trec_eval's infAP term at rank n_e - 1 (from 0)
                        if n_e == 1:
                            inf_ap += 1.0
                        else:
                            fj = n_e - 1.0
                            above = cum_rel[n_e] - 1
                            inf_ap += 1.0 / n_e + (fj / n_e) * ((above + nonrel_so_far + pool_unjudged) / fj) * (
                                (above + _INFAP_EPSILON) / (above + nonrel_so_far + 2 * _INFAP_EPSILON))
                    if r >= 0:
                        if r < level:
                            nonrel_so_far += 1
                        elif nonrel_so_far > 0:
                            bpref += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel)
                        else:
                            bpref += 1.0
            mid = metric_ids[m]
            k = cutoffs[m] if cutoffs[m] > 0 else n_e
            kk = min(k, n_e)
            v = 0.0
            if mid == 0:  # ndcg_cut
                best = ideal[min(k, n_pos)]
                if best > 0:
                    v = cum_dcg[kk] / best
            elif mid == 1:  # ndcg
                if ideal[n_pos] > 0:
                    v = cum_dcg[n_e] / ideal[n_pos]
            elif mid == 2:  # map
                if num_rel > 0:
                    v = cum_ap[n_e] / num_rel
            elif mid == 3:  # map_cut
                if num_rel > 0:
                    v = cum_ap[kk] / num_rel
            elif mid == 4:  # recip_rank
                if first_rel > 0:
                    v = 1.0 / first_rel
            elif mid == 5:  # P@k
                if k > 0:
                    v = cum_rel[kk] / k
            elif mid == 6:  # recall@k
                if num_rel > 0:
                    v = cum_rel[kk] / num_rel
            elif mid == 7:  # Rprec
                if num_rel > 0:
                    v = cum_rel[min(num_rel, n_e)] / num_rel
            elif mid == 8:  # success@k
                v = 1.0 if cum_rel[kk] > 0 else 0.0
            elif mid == 9:  # bpref
                if num_rel > 0:
                    v = bpref / num_rel
            elif mid == 10:  # judged@k
                if kk > 0:
                    v = cum_judged[kk] / kk
            elif mid == 11:  # num_ret
                v = n_e
            elif mid == 12:  # num_rel_ret
                v = cum_rel[n_e]
            elif mid == 13:  # num_rel
                v = num_rel
            elif mid == 14:  # recip_rank_cut
                if 0 < first_rel <= kk:
                    v = 1.0 / first_rel
            elif mid == 15:  # err_cut
                decay = 1.0
                for i in range(kk):
                    stop = (2.0 ** max(grade_at[i], 0) - 1.0) / 16.0
                    v += stop * decay / (i + 1)
                    decay *= 1.0 - stop
            elif mid == 17:  # infAP
                if num_rel > 0:
                    v = inf_ap / num_rel
            elif mid == 16:  # rbp
                p = params[m]
                weight = 1.0 - p
                for i in range(kk):
                    if grade_at[i] >= level:
                        v += weight
                    weight *= p
            values[q, m] = v


def _inputs(*arrays: npt.ArrayLike) -> list[npt.NDArray[np.int64]]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def _per_measure(n_m: int, levels: npt.ArrayLike, flags: npt.ArrayLike | None, params: npt.ArrayLike | None,
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """``levels`` (a scalar for all), ``flags`` (default 0) and ``params`` (default 0.8) as (m,) arrays."""
    lv = np.ascontiguousarray(np.broadcast_to(np.asarray(levels, np.int64), (n_m,)))
    fl = np.ascontiguousarray(np.broadcast_to(np.asarray(0 if flags is None else flags, np.int64), (n_m,)))
    pr = np.ascontiguousarray(np.broadcast_to(np.asarray(0.8 if params is None else params, np.float64), (n_m,)))
    return lv, fl, pr


def evaluate_queries(r_ptr: npt.ArrayLike, r_doc: npt.ArrayLike, n_run_docs: int, r_judged: npt.ArrayLike,
                     j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike, j_rel: npt.ArrayLike, n_judged: int,
                     metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike, levels: npt.ArrayLike,
                     flags: npt.ArrayLike | None = None, params: npt.ArrayLike | None = None, *,
                     n_threads: int | None = None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Every query's measures ``values`` float64 (n_q, m) and ``status`` int64 (n_q,) (see the
    module docstring; ``levels`` may be one int for every measure). Pointers and codes are
    checked here: a bad layout raises ``ValueError`` before the kernel reads anything."""
    rp, rd, rj, jp, jd, jr, mids, cuts = _inputs(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    lv, fl, pr = _per_measure(len(mids), levels, flags, params)
    n_q = rp.shape[0] - 1
    for ptr, rows in ((rp, len(rd)), (jp, len(jd))):
        if ptr.shape[0] != n_q + 1 or ptr[0] != 0 or ptr[-1] != rows or np.any(np.diff(ptr) < 0):
            raise ValueError(f"pointers do not describe {rows} rows of {n_q} queries")
    for codes, low, bound, what in ((rd, 0, n_run_docs, "run"), (rj, -1, n_judged, "judged"), (jd, 0, n_judged, "qrels")):
        if len(codes) and (codes.min() < low or codes.max() >= bound):
            raise ValueError(f"{what} document codes outside [{low}, {bound})")
    if rj.shape != rd.shape or jr.shape != jd.shape or n_q >= 2**31 or (len(jr) and (jr.min() < -2**31 or jr.max() >= 2**31)):
        raise ValueError("one judged code per retrieved row and one int32 grade per judgement are needed")
    if len(mids) and (mids.min() < 0 or mids.max() >= len(METRIC_IDS) or cuts.min() < 0):
        raise ValueError("metric ids outside METRIC_IDS or negative cutoffs")
    values = np.zeros((n_q, mids.shape[0]), np.float64)
    status = np.zeros(n_q, np.int64)
    r_len, j_len = np.diff(rp), np.diff(jp)
    width = int(max(r_len.max(initial=0), j_len.max(initial=0))) + 1  # cutoffs are clipped to it
    log2 = np.log2(np.arange(width, dtype=np.float64) + 2.0)
    n_run_docs, n_judged = max(int(n_run_docs), 1), max(int(n_judged), 1)

    def chunk(q0: int, q1: int) -> None:
        _evaluate_chunk(rp, rd, rj, jp, jd, jr, mids, cuts, lv, fl, pr, log2, values, status,
                        np.zeros(width, np.int64), np.zeros(width), np.zeros(width), np.zeros(width),
                        np.zeros(width, np.int64), np.zeros(width, np.int64), np.zeros(n_judged, np.int32),
                        np.full(n_judged, -1, np.int32), np.full(n_run_docs, -1, np.int32), q0, q1)

    threads = resolve_threads(n_threads) if rd.shape[0] >= 50_000 else 1
    run_chunks(chunk, chunk_bounds(rp, threads))
    return values, status


_WHOLE = (1, 2, 4, 7, 9, 11, 12, 13, 17)  # measures of the whole ranking: their cutoff is not read


def _measure_numpy(mid: int, k: int, level: int, p: float, grades: npt.NDArray[np.int64], known: npt.NDArray[np.bool_],
                   judged: npt.NDArray[np.int64]) -> float:
    """One measure of one ranking (``grades`` by rank, -1 for unjudged; ``known``: judged at
    all) against the query's judgements ``judged``, from its definition."""
    rel = grades >= level
    n = len(grades)
    k = 0 if mid in _WHOLE else k
    kk = min(k, n) if k > 0 else n
    num_rel, num_nonrel = int((judged >= level).sum()), int(((judged >= 0) & (judged < level)).sum())
    gains = np.where(grades > 0, grades, 0) / np.log2(np.arange(n) + 2.0)
    positive = np.sort(judged[judged > 0])[::-1]
    ideal = np.concatenate([[0.0], np.cumsum(positive / np.log2(np.arange(len(positive)) + 2.0))])
    precision_at = np.cumsum(rel) / np.arange(1, n + 1)
    first = int(np.argmax(rel)) + 1 if rel.any() else 0
    if mid == 0:
        best = ideal[min(k, len(positive))]
        return float(gains[:kk].sum() / best) if best > 0 else 0.0
    if mid == 1:
        return float(gains.sum() / ideal[-1]) if ideal[-1] > 0 else 0.0
    if mid in (2, 3):
        return float(precision_at[:kk][rel[:kk]].sum() / num_rel) if num_rel else 0.0
    if mid in (4, 14):
        return 1.0 / first if first and first <= kk else 0.0
    if mid in (5, 6, 8, 12):
        hits = int(rel[:kk].sum())
        return {5: hits / max(k if k > 0 else n, 1), 6: hits / num_rel if num_rel else 0.0,
                8: float(hits > 0), 12: float(hits)}[mid]
    if mid == 7:
        return float(rel[:num_rel].sum() / num_rel) if num_rel else 0.0
    if mid == 9:
        nonrel = (grades >= 0) & ~rel
        before: list[int] = (np.cumsum(nonrel) - nonrel)[rel].tolist()
        denom = min(num_nonrel, num_rel)
        return sum(1.0 - min(b, num_rel) / denom if b > 0 else 1.0 for b in before) / num_rel if num_rel else 0.0
    if mid == 10:
        return float(known[:kk].mean()) if kk else 0.0
    if mid in (11, 13):
        return float(n if mid == 11 else num_rel)
    if mid == 17:
        total = 0.0
        for j in np.flatnonzero(rel).tolist():
            above, below = int(rel[:j].sum()), int(((grades[:j] >= 0) & ~rel[:j]).sum())  # relevant, not, above j
            unjudged = int((known[:j] & (grades[:j] < 0)).sum())
            total += 1.0 if j == 0 else 1.0 / (j + 1) + (j / (j + 1)) * ((above + below + unjudged) / j) * (
                (above + _INFAP_EPSILON) / (above + below + 2 * _INFAP_EPSILON))
        return float(total / num_rel) if num_rel else 0.0
    stop = (2.0 ** np.maximum(grades[:kk], 0) - 1.0) / 16.0
    if mid == 15:
        decay = np.concatenate([[1.0], np.cumprod(1.0 - stop)[:-1]])
        return float((stop * decay / np.arange(1, kk + 1)).sum())
    return float(((1.0 - p) * p ** np.arange(kk))[rel[:kk]].sum())  # 16: rbp


def evaluate_queries_numpy(r_ptr: npt.ArrayLike, r_judged: npt.ArrayLike, j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike,
                           j_rel: npt.ArrayLike, metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike,
                           levels: npt.ArrayLike, flags: npt.ArrayLike | None = None,
                           params: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """Numpy twin of :func:`evaluate_queries`' values (the test oracle), from the measures'
    definitions (inputs without duplicates)."""
    rp, rd, jp, jd, jr, mids, cuts = _inputs(r_ptr, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    lv, fl, pr = _per_measure(len(mids), levels, flags, params)
    out = np.zeros((len(rp) - 1, len(mids)))
    for q in range(len(rp) - 1):
        grade_of = dict(zip(jd[jp[q]:jp[q + 1]].tolist(), jr[jp[q]:jp[q + 1]].tolist(), strict=True))
        docs = rd[rp[q]:rp[q + 1]].tolist()
        grades = np.array([max(grade_of.get(d, -1), -1) for d in docs], np.int64)
        known = np.array([d in grade_of for d in docs], bool)
        if not len(grades) or jp[q + 1] == jp[q]:
            continue
        for m in range(len(mids)):
            keep = grades >= 0 if fl[m] else np.ones(len(grades), bool)
            out[q, m] = _measure_numpy(int(mids[m]), int(cuts[m]), int(lv[m]), float(pr[m]), grades[keep], known[keep],
                                       jr[jp[q]:jp[q + 1]])
    return out
