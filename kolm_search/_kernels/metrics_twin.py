"""Numpy twin of :mod:`kolm_search._kernels.metrics` (the test oracle): each measure of one
ranking written from its definition, one query at a time, without the kernel's shared passes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kolm_search._kernels.measure_ids import WHOLE_RANKING, Measure
from kolm_search._kernels.metrics import inputs, per_measure

__all__ = ["evaluate_queries_numpy"]

_INFAP_EPSILON = 0.00001
_MIN_GEO_MEAN = 0.00001


def _iprec(recall: float, rel: npt.NDArray[np.bool_], num_rel: int) -> float:
    """Interpolated precision: the best precision at any rank at or after the one where
    ``round(recall * num_rel)`` (at least 1) relevant documents have been seen."""
    found = int(rel.sum())
    need = int(recall * num_rel + 0.9)  # trec_eval 9.0 (pytrec_eval); newer ones round
    if len(rel) == 0 and need == 0:
        return float("nan")  # trec_eval's 0 / 0
    if found == 0 or need > found:
        return 0.0
    at = int(np.flatnonzero(rel)[max(need, 1) - 1])  # rank (from 0) of the need-th relevant document
    precision = np.cumsum(rel) / np.arange(1, len(rel) + 1)
    return float(precision[at:].max())


def _gain_measures(mid: Measure, gains: npt.NDArray[np.float64], ideal_gains: npt.NDArray[np.float64],
                   num_rel: int) -> float:
    """G, ndcg_rel and Rndcg from trec_eval's descriptions (gains: the grades, 0 below)."""
    n, n_pos = len(gains), len(ideal_gains)
    dcg = np.concatenate([[0.0], np.cumsum(gains / np.log2(np.arange(n) + 2.0))])
    idcg = np.concatenate([[0.0], np.cumsum(ideal_gains / np.log2(np.arange(n_pos) + 2.0))])
    if mid == Measure.G:
        cost = np.cumsum(np.concatenate([ideal_gains, np.ones(max(n - n_pos, 0))])[:n])
        results = np.cumsum(gains)
        hit = gains != 0
        total = float((gains[hit] / np.log2(2.0 + cost[hit] - results[hit])).sum())
        return total / ideal_gains.sum() if ideal_gains.sum() > 0 else 0.0
    if n_pos == 0:
        return 0.0
    if mid == Measure.NDCG_REL:  # nDCG at every relevant document; those not retrieved at the end of the ranking
        at = np.flatnonzero(gains > 0) + 1
        total = sum(dcg[i] / idcg[min(i, n_pos)] for i in at.tolist()) + (n_pos - len(at)) * dcg[-1] / idcg[-1]
        return float(total / n_pos) if total > 0 else 0.0
    if num_rel == 0:
        return 0.0
    ends = [int((ideal_gains >= g).sum()) for g in np.unique(ideal_gains)[::-1]]  # R levels of the judgements
    points = [dcg[min(p, n)] / idcg[p] for p in ends] + ([dcg[-1] / idcg[-1]] if n > n_pos + 1 else [])  # trec_eval's
    return float(np.mean(points))


def _measure(mid: Measure, k: int, level: int, par: npt.NDArray[np.float64], grades: npt.NDArray[np.int64],
             known: npt.NDArray[np.bool_], judged: npt.NDArray[np.int64]) -> float:
    """One measure of one ranking (``grades`` by rank, -1 for unjudged; ``known``: judged at
    all) against the query's judgements ``judged``."""
    p = float(par[0])
    rel = grades >= level
    n = len(grades)
    k = 0 if mid in WHOLE_RANKING else k
    kk = min(k, n) if k > 0 else n
    num_rel, num_nonrel = int((judged >= level).sum()), int(((judged >= 0) & (judged < level)).sum())
    gains = np.where(grades > 0, grades, 0) / np.log2(np.arange(n) + 2.0)
    positive = np.sort(judged[judged > 0])[::-1]
    ideal = np.concatenate([[0.0], np.cumsum(positive / np.log2(np.arange(len(positive)) + 2.0))])
    precision_at = np.cumsum(rel) / np.arange(1, n + 1)
    first = int(np.argmax(rel)) + 1 if rel.any() else 0
    found = int(rel.sum())
    if mid == Measure.NDCG_CUT:
        best = ideal[min(k, len(positive))]
        return float(gains[:kk].sum() / best) if best > 0 else 0.0
    if mid == Measure.DCG:
        return float(gains[:kk].sum())
    if mid in (Measure.DCG_EXP, Measure.NDCG_EXP):
        exp_gains = (2.0 ** np.maximum(grades[:kk], 0) - 1.0) / np.log2(np.arange(kk) + 2.0)
        if mid == Measure.DCG_EXP:
            return float(exp_gains.sum())
        cut = len(positive) if k == 0 else min(k, len(positive))
        best = float(((2.0 ** positive[:cut] - 1.0) / np.log2(np.arange(cut) + 2.0)).sum())
        return float(exp_gains.sum()) / best if best > 0 else 0.0
    if mid == Measure.NDCG:
        return float(gains.sum() / ideal[-1]) if ideal[-1] > 0 else 0.0
    if mid in (Measure.MAP, Measure.MAP_CUT, Measure.GM_MAP):
        ap = float(precision_at[:kk][rel[:kk]].sum() / num_rel) if num_rel else 0.0
        return float(np.log(max(ap, _MIN_GEO_MEAN))) if mid == Measure.GM_MAP else ap
    if mid in (Measure.RECIP_RANK, Measure.RECIP_RANK_CUT):
        return 1.0 / first if first and first <= kk else 0.0
    if mid in (Measure.P, Measure.RECALL, Measure.SUCCESS, Measure.NUM_REL_RET, Measure.RELATIVE_P):
        hits = int(rel[:kk].sum())
        cut = k if k > 0 else n
        return {Measure.P: hits / max(cut, 1), Measure.RECALL: hits / num_rel if num_rel else 0.0,
                Measure.SUCCESS: float(hits > 0), Measure.NUM_REL_RET: float(hits),
                Measure.RELATIVE_P: hits / min(cut, num_rel) if num_rel and cut else 0.0}[mid]
    if mid == Measure.RPREC:
        return float(rel[:num_rel].sum() / num_rel) if num_rel else 0.0
    if mid in (Measure.BPREF, Measure.GM_BPREF):
        nonrel = (grades >= 0) & ~rel
        before: list[int] = (np.cumsum(nonrel) - nonrel)[rel].tolist()
        denom = min(num_nonrel, num_rel)
        value = sum(1.0 - min(b, num_rel) / denom if b > 0 else 1.0 for b in before) / num_rel if num_rel else 0.0
        return float(np.log(max(value, _MIN_GEO_MEAN))) if mid == Measure.GM_BPREF else value
    if mid == Measure.JUDGED:
        return float(known[:kk].mean()) if kk else 0.0
    if mid in (Measure.NUM_RET, Measure.NUM_REL, Measure.NUM_Q):
        return float({Measure.NUM_RET: n, Measure.NUM_REL: num_rel, Measure.NUM_Q: 1}[mid])
    if mid == Measure.INFAP:
        total = 0.0
        for j in np.flatnonzero(rel).tolist():
            above, below = int(rel[:j].sum()), int(((grades[:j] >= 0) & ~rel[:j]).sum())  # relevant, not, above j
            unjudged = int((known[:j] & (grades[:j] < 0)).sum())
            total += 1.0 if j == 0 else 1.0 / (j + 1) + (j / (j + 1)) * ((above + below + unjudged) / j) * (
                (above + _INFAP_EPSILON) / (above + below + 2 * _INFAP_EPSILON))
        return float(total / num_rel) if num_rel else 0.0
    if mid == Measure.IPREC:
        return _iprec(p, rel, num_rel)
    if mid == Measure.ELEVEN_PT_AVG:
        return float(np.mean([_iprec(r / 10.0, rel, num_rel) for r in range(11)]))
    set_p, set_r = (found / n if n else 0.0), (found / num_rel if num_rel else 0.0)
    if mid == Measure.SET_P:
        return set_p
    if mid == Measure.SET_RECALL:
        return set_r
    if mid == Measure.SET_F:
        return (p + 1.0) * set_p * set_r / (p * set_p + set_r) if found and num_rel else 0.0
    if mid == Measure.SET_MAP:
        return set_p * set_r
    if mid == Measure.SET_RELATIVE_P:
        return found / min(n, num_rel) if n and num_rel else 0.0
    if mid == Measure.RPREC_MULT:
        cut = int(p * num_rel + 0.9)
        return float(rel[:cut].sum() / cut) if cut > 0 else 0.0
    if mid == Measure.UTILITY:
        return float(par[0] * found + par[1] * (n - found) + par[2] * (num_rel - found))
    if mid == Measure.NUM_NONREL_JUDGED_RET:
        return float(((grades >= 0) & ~rel).sum())
    if mid == Measure.BING:
        nonrel_before = np.arange(n)[rel] - np.arange(found)  # non-relevant documents above each relevant one
        return float((1.0 / np.log2(2.0 + nonrel_before)).sum() / num_rel) if found else 0.0
    if mid in (Measure.G, Measure.NDCG_REL, Measure.RNDCG):
        return _gain_measures(mid, np.maximum(grades, 0).astype(np.float64), positive.astype(np.float64), num_rel)
    stop = (2.0 ** np.maximum(grades[:kk], 0) - 1.0) / 16.0
    if mid == Measure.ERR_CUT:
        decay = np.concatenate([[1.0], np.cumprod(1.0 - stop)[:-1]])
        return float((stop * decay / np.arange(1, kk + 1)).sum())
    assert mid == Measure.RBP, mid
    return float(((1.0 - p) * p ** np.arange(kk))[rel[:kk]].sum())


def evaluate_queries_numpy(r_ptr: npt.ArrayLike, r_judged: npt.ArrayLike, j_ptr: npt.ArrayLike, j_doc: npt.ArrayLike,
                           j_rel: npt.ArrayLike, metric_ids: npt.ArrayLike, cutoffs: npt.ArrayLike,
                           levels: npt.ArrayLike, flags: npt.ArrayLike | None = None,
                           params: npt.ArrayLike | None = None) -> npt.NDArray[np.float64]:
    """The values of :func:`~kolm_search._kernels.metrics.evaluate_queries` (inputs without
    duplicates), from the measures' definitions."""
    rp, rd, jp, jd, jr, mids, cuts = inputs(r_ptr, r_judged, j_ptr, j_doc, j_rel, metric_ids, cutoffs)
    lv, fl, pr = per_measure(len(mids), levels, flags, params)
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
            out[q, m] = _measure(Measure(int(mids[m])), int(cuts[m]), int(lv[m]), pr[m], grades[keep], known[keep],
                                 jr[jp[q]:jp[q + 1]])
    return out
