"""Evaluation kernel: trec_eval's measures of every query in one pass over its ranking.

Input (built by :mod:`kolm_search.evaluation.metrics`, which ranks the run):

- ``r_ptr`` int64 (n_q + 1,): query q's retrieved documents, in rank order, are the rows
  ``r_ptr[q]:r_ptr[q+1]`` of ``r_doc`` int64 (n_run,), codes below ``n_run_docs`` that tell the
  documents of one query apart, and ``r_judged`` int64 (n_run,), each document's code among
  the judged documents (below ``n_judged``) or -1;
- ``j_ptr`` int64 (n_q + 1,), ``j_doc`` int64 (n_qrels,) (codes below ``n_judged``), ``j_rel``
  int64 (n_qrels,): query q's judgements, sorted by descending relevance (negative grades count as not judged, as in
  trec_eval; they still make the query one that has judgements);
- per measure, int64 (m,) each: ``metric_ids`` (members of
  :class:`~kolm_search._kernels.measure_ids.Measure`), ``cutoffs`` (0: the whole ranking),
  ``levels`` (the minimum relevance counted as relevant), ``flags`` (1: only judged documents
  are ranked, trec_eval ``-J``), and float64 (m, N_PARAMS) ``params`` (RBP's persistence,
  IPrec's recall, set_F's x, Rprec_mult's multiple, utility's coefficients). A query's ranking
  is read once per distinct (level, flag) in a row, so callers order measures by them.

Output: ``values`` float64 (n_q, m) and ``status`` int64 (n_q,), members of
:class:`~kolm_search._kernels.measure_ids.QueryStatus`: ``EVALUATED`` (or left at zero when the
query has no retrieved documents or no judgements: the caller decides whether it counts),
``RUN_DUPLICATE`` (a document retrieved twice for the query), ``QRELS_DUPLICATE`` (judged twice).

Beyond trec_eval: ``judged`` (share of the top k that is judged, any grade), ``recip_rank_cut``
(reciprocal rank within the top k), ``err_cut`` (gdeval's ERR@k: stop probability
``(2**g - 1) / 16`` for grade ``g`` in 0..4), ``rbp`` (rank-biased precision
``(1 - p) * sum p**i`` over relevant ranks i, from 0); ``infAP`` is trec_eval's (a judgement
below 0 marks a pooled but unjudged document); the rest are trec_eval's own (see
:class:`~kolm_search._kernels.measure_ids.Measure`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.measure_ids import METRIC_IDS, N_PARAMS, Measure, QueryStatus
from kolm_search._kernels.metric_parts import envelope, gain_measure, iprec_env
from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["METRIC_IDS", "Measure", "evaluate_queries"]

_INFAP_EPSILON = 0.00001  # trec_eval's INFAP_EPSILON
_MIN_GEO_MEAN = 0.00001  # trec_eval's MIN_GEO_MEAN

_I32 = types.int32
_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64),
                        ro(f64, 2), ro(f64), rw(f64, 2), rw(i64), rw(i64), rw(f64), rw(f64), rw(f64), rw(i64), rw(i64),
                        rw(_I32), rw(_I32), rw(_I32), rw(f64), rw(f64), rw(f64), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _evaluate_chunk(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs, levels, flags, params, log2,
                    values, status, cum_rel, cum_dcg, cum_ap, ideal, grade_at, cum_judged, rel_of, judged, retrieved,
                    cum_dcg_exp, ideal_exp, env, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``. ``log2[i] = log2(i + 2)`` for every rank; the rest after
    ``status`` is this chunk's scratch: cumulative arrays and grades by rank (longest ranking
    + 1), the ideal gains (most judgements + 1), per-document marks (-1 on entry), the
    cumulative and ideal gains ``2**grade - 1``, and ``env``: the rank of each relevant document
    (``env[c]``, the ``c``-th), written as the ranking is read, and turned into the interpolated
    precision at each of them when an IPrec measure asks (once per ranking: only those ranks
    matter to it, not every rank)."""
    want_exp = want_ap = want_pool = False  # accumulators only some measures read
    for m in range(metric_ids.shape[0]):
        mid = metric_ids[m]
        if mid == Measure.DCG_EXP or mid == Measure.NDCG_EXP:
            want_exp = True
        elif mid == Measure.MAP or mid == Measure.GM_MAP or mid == Measure.MAP_CUT:
            want_ap = True
        elif mid == Measure.INFAP or mid == Measure.BPREF or mid == Measure.GM_BPREF \
                or mid == Measure.NUM_NONREL_JUDGED_RET:
            want_pool = True
    for q in range(q0, q1):
        s, n_r = r_ptr[q], r_ptr[q + 1] - r_ptr[q]
        js, n_j = j_ptr[q], j_ptr[q + 1] - j_ptr[q]
        for t in range(js, js + n_j):
            d = j_doc[t]
            if judged[d] == q:
                status[q] = QueryStatus.QRELS_DUPLICATE
            judged[d] = q
            rel_of[d] = max(j_rel[t], -1)
        for t in range(s, s + n_r):
            d = r_doc[t]
            if retrieved[d] == q:
                status[q] = QueryStatus.RUN_DUPLICATE
            retrieved[d] = q
        if n_r == 0 or n_j == 0 or status[q] != QueryStatus.EVALUATED:
            continue
        n_pos = 0
        for t in range(js, js + n_j):
            r = j_rel[t]
            if r > 0:  # graded gains, best first
                ideal[n_pos + 1] = ideal[n_pos] + r / log2[n_pos]
                ideal_exp[n_pos + 1] = ideal_exp[n_pos] + (2.0 ** r - 1.0) / log2[n_pos]
                n_pos += 1
        level = -1
        flag = -1
        n_e = num_rel = num_nonrel = first_rel = nonrel_ret = 0
        bpref = inf_ap = 0.0
        enveloped = False
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
                nonrel_ret = 0
                bpref = inf_ap = 0.0
                enveloped = False
                nonrel_so_far = 0
                pool_unjudged = 0
                if flag != 1 and not want_pool:  # every document ranked, no pool counts: running sums in registers
                    n_e = n_r
                    sum_judged = sum_rel = 0
                    sum_dcg = sum_exp = sum_ap = 0.0
                    for i in range(n_r):  # (the same float operations as the general pass below)
                        d = r_judged[s + i]
                        known = d >= 0 and judged[d] == q
                        r = rel_of[d] if known else -1
                        is_rel = r >= level
                        grade_at[i] = r
                        if known:
                            sum_judged += 1
                        cum_judged[i + 1] = sum_judged
                        if is_rel:
                            sum_rel += 1
                            env[sum_rel] = i + 1.0  # the rank of each relevant one, for the envelope
                            if first_rel == 0:
                                first_rel = i + 1
                        cum_rel[i + 1] = sum_rel
                        if r > 0:
                            sum_dcg = sum_dcg + r / log2[i]
                        cum_dcg[i + 1] = sum_dcg
                        if want_exp:
                            if r > 0:
                                sum_exp = sum_exp + (2.0 ** r - 1.0) / log2[i]
                            cum_dcg_exp[i + 1] = sum_exp
                        if want_ap:
                            if is_rel:
                                sum_ap = sum_ap + sum_rel / (i + 1.0)
                            cum_ap[i + 1] = sum_ap
                for i in range(0 if flag != 1 and not want_pool else n_r):
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
                    if want_exp:
                        cum_dcg_exp[n_e + 1] = cum_dcg_exp[n_e] + ((2.0 ** r - 1.0) / log2[n_e] if r > 0 else 0.0)
                    if want_ap:
                        cum_ap[n_e + 1] = cum_ap[n_e] + (cum_rel[n_e + 1] / (n_e + 1.0) if is_rel else 0.0)
                    n_e += 1
                    if is_rel:
                        env[cum_rel[n_e]] = float(n_e)  # the rank of each relevant one, for the envelope
                        if first_rel == 0:
                            first_rel = n_e
                    if not want_pool:
                        continue
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
                            nonrel_ret += 1
                        elif nonrel_so_far > 0:
                            bpref += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel)
                        else:
                            bpref += 1.0
            mid = metric_ids[m]
            k = cutoffs[m] if cutoffs[m] > 0 else n_e
            kk = min(k, n_e)
            found = cum_rel[n_e]
            v = 0.0
            if mid == Measure.NDCG_CUT:
                best = ideal[min(k, n_pos)]
                if best > 0:
                    v = cum_dcg[kk] / best
            elif mid == Measure.NDCG:
                if ideal[n_pos] > 0:
                    v = cum_dcg[n_e] / ideal[n_pos]
            elif mid == Measure.MAP or mid == Measure.GM_MAP:
                if num_rel > 0:
                    v = cum_ap[n_e] / num_rel
                if mid == Measure.GM_MAP:
                    v = np.log(max(v, _MIN_GEO_MEAN))
            elif mid == Measure.MAP_CUT:
                if num_rel > 0:
                    v = cum_ap[kk] / num_rel
            elif mid == Measure.RECIP_RANK:
                if first_rel > 0:
                    v = 1.0 / first_rel
            elif mid == Measure.P:
                if k > 0:
                    v = cum_rel[kk] / k
            elif mid == Measure.RECALL:
                if num_rel > 0:
                    v = cum_rel[kk] / num_rel
            elif mid == Measure.RPREC:
                if num_rel > 0:
                    v = cum_rel[min(num_rel, n_e)] / num_rel
            elif mid == Measure.SUCCESS:
                v = 1.0 if cum_rel[kk] > 0 else 0.0
            elif mid == Measure.BPREF or mid == Measure.GM_BPREF:
                if num_rel > 0:
                    v = bpref / num_rel
                if mid == Measure.GM_BPREF:
                    v = np.log(max(v, _MIN_GEO_MEAN))
            elif mid == Measure.JUDGED:
                if kk > 0:
                    v = cum_judged[kk] / kk
            elif mid == Measure.NUM_RET:
                v = n_e
            elif mid == Measure.NUM_REL_RET:
                v = found
            elif mid == Measure.NUM_REL:
                v = num_rel
            elif mid == Measure.RECIP_RANK_CUT:
                if 0 < first_rel <= kk:
                    v = 1.0 / first_rel
            elif mid == Measure.ERR_CUT:
                decay = 1.0
                for i in range(kk):
                    stop = (2.0 ** max(grade_at[i], 0) - 1.0) / 16.0
                    v += stop * decay / (i + 1)
                    decay *= 1.0 - stop
            elif mid == Measure.INFAP:
                if num_rel > 0:
                    v = inf_ap / num_rel
            elif mid == Measure.RBP:
                p = params[m, 0]
                weight = 1.0 - p
                for i in range(kk):
                    if grade_at[i] >= level:
                        v += weight
                    weight *= p
            elif mid == Measure.IPREC or mid == Measure.ELEVEN_PT_AVG:
                if not enveloped:  # the curve's levels read one envelope of the ranking
                    envelope(found, env)
                    enveloped = True
                if mid == Measure.IPREC:
                    v = iprec_env(params[m, 0], num_rel, n_e, found, env)
                else:
                    for point in range(11):
                        v += iprec_env(point / 10.0, num_rel, n_e, found, env)
                    v /= 11.0
            elif mid == Measure.SET_P:
                if n_e > 0:
                    v = found / n_e
            elif mid == Measure.SET_RECALL:
                if num_rel > 0:
                    v = found / num_rel
            elif mid == Measure.SET_F:
                if n_e > 0 and num_rel > 0 and found > 0:
                    x = params[m, 0]
                    precision, recall = found / n_e, found / num_rel
                    v = (x + 1.0) * precision * recall / (x * precision + recall)
            elif mid == Measure.SET_MAP:
                if n_e > 0 and num_rel > 0:
                    v = (found / n_e) * (found / num_rel)
            elif mid == Measure.SET_RELATIVE_P:
                if n_e > 0 and num_rel > 0:
                    v = found / min(n_e, num_rel)
            elif mid == Measure.RELATIVE_P:
                if num_rel > 0 and k > 0:
                    v = cum_rel[kk] / min(k, num_rel)
            elif mid == Measure.RPREC_MULT:
                c = int(params[m, 0] * num_rel + 0.9)
                if c > 0:
                    v = cum_rel[min(c, n_e)] / c
            elif mid == Measure.UTILITY:
                v = params[m, 0] * found + params[m, 1] * (n_e - found) + params[m, 2] * (num_rel - found)
            elif mid == Measure.NUM_NONREL_JUDGED_RET:
                v = nonrel_ret
            elif mid == Measure.BING:
                if found > 0 and num_rel > 0:
                    for i in range(1, n_e + 1):
                        if cum_rel[i] > cum_rel[i - 1]:
                            v += 1.0 / np.log2(2.0 + i - cum_rel[i])
                    v /= num_rel
            elif mid == Measure.G or mid == Measure.NDCG_REL or mid == Measure.RNDCG:
                v = gain_measure(mid, j_rel, js, n_pos, grade_at, n_e, log2, ideal, cum_dcg, num_rel)
            elif mid == Measure.NUM_Q:
                v = 1.0
            elif mid == Measure.DCG:
                v = cum_dcg[kk]
            elif mid == Measure.DCG_EXP:
                v = cum_dcg_exp[kk]
            elif mid == Measure.NDCG_EXP:  # no cutoff: the ideal of every positive judgement
                best = ideal_exp[min(cutoffs[m], n_pos) if cutoffs[m] > 0 else n_pos]
                if best > 0:
                    v = cum_dcg_exp[kk] / best
            values[q, m] = v


def inputs(*arrays: npt.ArrayLike) -> list[npt.NDArray[np.int64]]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def per_measure(n_m: int, levels: npt.ArrayLike, flags: npt.ArrayLike | None, params: npt.ArrayLike | None,
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """``levels`` (a scalar for all) and ``flags`` (default 0) as (m,) arrays, ``params`` as
    (m, N_PARAMS): None is 0.8 in column 0 (RBP's persistence), a (m,) array fills column 0."""
    lv = np.ascontiguousarray(np.broadcast_to(np.asarray(levels, np.int64), (n_m,)))
    fl = np.ascontiguousarray(np.broadcast_to(np.asarray(0 if flags is None else flags, np.int64), (n_m,)))
    given = np.asarray(0.8 if params is None else params, np.float64)
    pr = np.zeros((n_m, N_PARAMS))
    if given.ndim == 2:
        pr[:, :given.shape[1]] = given
    else:
        pr[:, 0] = np.broadcast_to(given, (n_m,))
    return lv, fl, pr


#: retrieved rows from which a call splits its queries over threads. On this project's 2 shared
#: cores (``benchmarks/bench_eval_threads.py``: two threads / one, ndcg@10 and eleven recall levels)
#: two threads lost at 250k rows (1.32x), were even around 500k-1M (0.90-1.12x) and won from 1.5M
#: (0.77-0.82x): a pool's start and a second chunk's scratch outweigh a half pass until then
PARALLEL_ROWS = 1 << 20


def evaluate_queries(r_ptr: npt.ArrayLike, r_doc: npt.ArrayLike, n_run_docs: int, r_judged: npt.ArrayLike,
                     j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike, j_rel: npt.ArrayLike, n_judged: int,
                     metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike, levels: npt.ArrayLike,
                     flags: npt.ArrayLike | None = None, params: npt.ArrayLike | None = None, *,
                     n_threads: int | None = None) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """Every query's measures ``values`` float64 (n_q, m) and ``status`` int64 (n_q,) (see the
    module docstring; ``levels`` may be one int for every measure). Pointers and codes are
    checked here: a bad layout raises ``ValueError`` before the kernel reads anything."""
    rp, rd, rj, jp, jd, jr, mids, cuts = inputs(r_ptr, r_doc, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    lv, fl, pr = per_measure(len(mids), levels, flags, params)
    n_q = rp.shape[0] - 1
    for ptr, rows in ((rp, len(rd)), (jp, len(jd))):
        if ptr.shape[0] != n_q + 1 or ptr[0] != 0 or ptr[-1] != rows or np.any(np.diff(ptr) < 0):
            raise ValueError(f"pointers do not describe {rows} rows of {n_q} queries")
    for codes, low, bound, what in ((rd, 0, n_run_docs, "run"), (rj, -1, n_judged, "judged"), (jd, 0, n_judged, "qrels")):
        if len(codes) and (codes.min() < low or codes.max() >= bound):
            raise ValueError(f"{what} document codes outside [{low}, {bound})")
    if rj.shape != rd.shape or jr.shape != jd.shape or n_q >= 2**31 or (len(jr) and (jr.min() < -2**31 or jr.max() >= 2**31)):
        raise ValueError("one judged code per retrieved row and one int32 grade per judgement are needed")
    if len(mids) and (mids.min() < 0 or mids.max() > max(Measure) or cuts.min() < 0):
        raise ValueError("metric ids outside Measure or negative cutoffs")
    if pr.shape != (len(mids), N_PARAMS) or not np.isfinite(pr).all():
        raise ValueError(f"params must be finite, (m, {N_PARAMS})")
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
                        np.full(n_judged, -1, np.int32), np.full(n_run_docs, -1, np.int32), np.zeros(width),
                        np.zeros(width), np.zeros(width), q0, q1)

    threads = resolve_threads(n_threads) if rd.shape[0] >= PARALLEL_ROWS else 1
    run_chunks(chunk, chunk_bounds(rp, threads))
    return values, status
