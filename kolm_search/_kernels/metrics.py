"""Evaluation kernel: trec_eval's measures for every query in one parallel pass.

Input layout (built by :mod:`kolm_search.evaluation.metrics`): run rows and qrels rows of a
query sit together, grouped by query (``order[ptr[g]:ptr[g+1]]``, run rows first), with each
row's document interned *within its query* (``local``).

``evaluate_groups(order int64, ptr int64, local int64, n_run int64, score32 float32 (n_run,),
rel int64 (n_qrels,), offsets int64, data uint8, metric_ids int64 (m,), cutoffs int64 (m,),
relevance_level int64, max_level int64, n_chunks int64)``
``-> (values float64 (n_groups, m), status int64 (n_groups,))``

``status``: 0 evaluated, 1 skipped (no run rows or no qrels for the query), 2 duplicate
document in the run, 3 duplicate document in the qrels.

Semantics are trec_eval's (checked against pytrec_eval): run documents ranked by score as
float32, descending, ties by docno descending (byte order); relevance ``>= relevance_level``
is relevant; nDCG gains are the graded levels (negative levels give 0); a document absent
from the qrels is not judged.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kolm_search._kernels.sorting import _before, merge_sort, stable_argsort

__all__ = ["METRIC_IDS", "evaluate_groups"]

METRIC_IDS = {
    "ndcg_cut": 0, "ndcg": 1, "map": 2, "map_cut": 3, "recip_rank": 4, "P": 5,
    "recall": 6, "Rprec": 7, "success": 8, "bpref": 9,
}
NONPOOL = -1
UNJUDGED = -2


@njit(cache=True, nogil=True)
def _eval_chunk(order, ptr, local, n_run_total, score32, rel, offsets, data, metric_ids, cutoffs,
                level, max_level, g0, g1, max_group, values, status):  # pragma: no cover - compiled
    rel_of = np.full(max_group, NONPOOL, np.int64)
    seen = np.zeros(max_group, np.int64)
    counts = np.zeros(max_level + 1, np.int64)
    n_m = metric_ids.shape[0]
    max_k = 0
    for m in range(n_m):
        if cutoffs[m] > max_k:
            max_k = cutoffs[m]
    for g in range(g0, g1):
        s = ptr[g]
        e = ptr[g + 1]
        n_r = 0
        while s + n_r < e and order[s + n_r] < n_run_total:
            n_r += 1
        n_j = e - s - n_r
        if n_r == 0 or n_j == 0:
            status[g] = 1
            continue
        bad = 0
        counts[:] = 0
        for p in range(s + n_r, e):
            loc = local[p]
            if seen[loc] & 2:
                bad = 3
            seen[loc] |= 2
            r = rel[order[p] - n_run_total]
            rel_of[loc] = r if r >= 0 else UNJUDGED
            if r >= 0:
                counts[r] += 1
        for p in range(s, s + n_r):
            loc = local[p]
            if seen[loc] & 1:
                bad = 2
            seen[loc] |= 1
        if bad == 0:
            # rank the run rows: score desc (float32), ties by docno desc
            rows = order[s:s + n_r]
            sc = np.empty(n_r, np.float32)
            for t in range(n_r):
                sc[t] = score32[rows[t]]
            idx = np.arange(n_r)
            ok = True
            for t in range(1, n_r):
                if not _before(t - 1, t, sc, rows, data, offsets):
                    ok = False
                    break
            if not ok:
                # stable sort on the scores, then docno descending inside each tie run
                neg = -sc
                tmp = np.empty(n_r, np.int64)  # merge scratch, shared by every tie run below
                stable_argsort(neg, n_r, idx, tmp)
                i = 0
                while i < n_r:
                    j = i + 1
                    while j < n_r and sc[idx[j]] == sc[idx[i]]:
                        j += 1
                    if j - i > 1:
                        merge_sort(idx[i:j], j - i, tmp, sc, rows, data, offsets, True)
                    i = j
            num_rel = 0
            num_nonrel = 0
            for lv in range(max_level + 1):
                if lv >= level:
                    num_rel += counts[lv]
                else:
                    num_nonrel += counts[lv]
            # one pass over the ranking
            n_eval = n_r
            cum_rel = np.zeros(n_eval + 1, np.int64)
            cum_dcg = np.zeros(n_eval + 1, np.float64)
            cum_ap = np.zeros(n_eval + 1, np.float64)
            first_rel = 0
            bpref = 0.0
            nonrel_so_far = 0
            for i in range(n_eval):
                r = rel_of[local[s + idx[i]]]
                is_rel = r >= level
                cum_rel[i + 1] = cum_rel[i] + (1 if is_rel else 0)
                gain = r if r > 0 else 0
                cum_dcg[i + 1] = cum_dcg[i] + (gain / np.log2(i + 2.0) if gain != 0 else 0.0)
                cum_ap[i + 1] = cum_ap[i] + (cum_rel[i + 1] / (i + 1.0) if is_rel else 0.0)
                if is_rel and first_rel == 0:
                    first_rel = i + 1
                if r >= 0:
                    if r < level:
                        nonrel_so_far += 1
                    else:
                        if nonrel_so_far > 0:
                            bpref += 1.0 - min(nonrel_so_far, num_rel) / min(num_nonrel, num_rel)
                        else:
                            bpref += 1.0
            # ideal DCG prefix up to the largest cutoff needed, and in full
            n_pos = 0
            for lv in range(1, max_level + 1):
                n_pos += counts[lv]
            ideal_len = n_pos if n_pos > max_k else max_k
            ideal = np.zeros(ideal_len + 1, np.float64)
            pos = 0
            for lv in range(max_level, 0, -1):
                for _ in range(counts[lv]):
                    ideal[pos + 1] = ideal[pos] + lv / np.log2(pos + 2.0)
                    pos += 1
            for t in range(pos, ideal_len):
                ideal[t + 1] = ideal[t]
            for m in range(n_m):
                mid = metric_ids[m]
                k = cutoffs[m]
                kk = k if k < n_eval else n_eval
                v = 0.0
                if mid == 0:  # ndcg_cut
                    if ideal[min(k, ideal_len)] > 0:
                        v = cum_dcg[kk] / ideal[min(k, ideal_len)]
                elif mid == 1:  # ndcg
                    if ideal[n_pos] > 0:
                        v = cum_dcg[n_eval] / ideal[n_pos]
                elif mid == 2:  # map
                    if num_rel > 0:
                        v = cum_ap[n_eval] / num_rel
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
                        v = cum_rel[min(num_rel, n_eval)] / num_rel
                elif mid == 8:  # success@k
                    v = 1.0 if cum_rel[kk] > 0 else 0.0
                elif mid == 9:  # bpref
                    if num_rel > 0:
                        v = bpref / num_rel
                values[g, m] = v
        status[g] = bad
        for p in range(s, e):
            loc = local[p]
            rel_of[loc] = NONPOOL
            seen[loc] = 0


@njit(cache=True, parallel=True)
def _eval_parallel(order, ptr, local, n_run, score32, rel, offsets, data, metric_ids, cutoffs,
                   level, max_level, n_chunks):  # pragma: no cover
    n_groups = ptr.shape[0] - 1
    values = np.zeros((n_groups, metric_ids.shape[0]), np.float64)
    status = np.zeros(n_groups, np.int64)
    max_group = 1
    for g in range(n_groups):
        max_group = max(max_group, ptr[g + 1] - ptr[g])
    for c in prange(n_chunks):
        _eval_chunk(order, ptr, local, n_run, score32, rel, offsets, data, metric_ids, cutoffs, level,
                    max_level, (n_groups * c) // n_chunks, (n_groups * (c + 1)) // n_chunks, max_group,
                    values, status)
    return values, status


def evaluate_groups(order, ptr, local, n_run, score32, rel, offsets, data, metric_ids, cutoffs,
                    relevance_level, max_level, n_chunks=1):
    """Compiled evaluation of every query (see the module docstring)."""
    return _eval_parallel(order, ptr, local, np.int64(n_run), score32, rel, offsets, data, metric_ids, cutoffs,
                          np.int64(relevance_level), np.int64(max_level), np.int64(max(1, n_chunks)))
