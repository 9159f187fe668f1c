"""Diversity kernel: alpha-DCG, alpha-nDCG, ERR-IA and nERR-IA of every query over subtopic
qrels, as ndeval (the TREC Web track's evaluator, which ir_measures calls through pyndeval)
computes them.

With ``alpha`` the redundancy intolerance, a document at rank ``i`` (from 0) gains
``sum over its relevant subtopics s of (1 - alpha) ** c_s``, ``c_s`` the documents relevant to
``s`` above it (a judgement counts as relevant when its grade reaches the level; binary, as
ndeval's). alpha-DCG@k sums gain / log2(i + 2), ERR-IA@k sums gain / (i + 1); both are divided
by the same sums of an "ideal ideal" ranking that covers every one of the query's ``S`` subtopics
(those with a relevant document) at every rank, ``S (1 - alpha) ** i`` (ndeval leaves k = 1
undivided). alpha-nDCG@k and nERR-IA@k divide by the sums of the greedy ideal ranking of the
query's judged documents instead (each rank takes the document of largest gain, ties to the
largest document id), and are 0 where the run's alpha-DCG is.

Input, per query q: ranked rows ``r_ptr[q]:r_ptr[q+1]`` of ``r_pair`` int64 (the row's judged
document of q, or -1); judged documents ``p_ptr[q]:p_ptr[q+1]`` (ids into ``s_ptr``, CSR of the
query-local subtopic numbers ``s_sub`` they are relevant to, below ``n_sub[q]``) and
``name_rank`` int64 (order of their ids); per measure ``kinds`` (members of
:class:`~kolm_search._kernels.measure_ids.Diversity`) and ``cutoffs`` (>= 1). Output ``values``
float64 (n_q, m).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit, types

from kolm_search._kernels import chunk_bounds, resolve_threads, run_chunks
from kolm_search._kernels.measure_ids import Diversity
from kolm_search._kernels.sig import f64, i64, ro, rw

__all__ = ["Diversity", "diversity_numpy", "diversity_queries"]

_SIGNATURE = types.void(ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), ro(i64), f64,
                        rw(f64, 2), rw(f64), rw(i64), rw(f64), rw(f64), rw(f64), rw(f64), i64, i64)


@njit(_SIGNATURE, cache=True, nogil=True)
def _diversity_chunk(r_ptr, r_pair, p_ptr, s_ptr, s_sub, n_sub, name_rank, kinds, cutoffs, alpha, values, gain,
                     used, run_dcg, run_err, ideal_dcg, ideal_err, q0, q1):  # pragma: no cover - compiled
    """Queries ``q0 <= q < q1``; the arrays after ``values`` are scratch: subtopic gains (most
    subtopics), marks of judged documents (-1 on entry) and four cumulative sums (deepest cutoff + 1)."""
    depth = run_dcg.shape[0] - 1
    keep = 1.0 - alpha
    for q in range(q0, q1):
        n_s = n_sub[q]
        if r_ptr[q + 1] == r_ptr[q] or n_s == 0:
            continue
        for s in range(n_s):
            gain[s] = 1.0
        n_r = r_ptr[q + 1] - r_ptr[q]
        for i in range(depth):
            score = 0.0
            if i < n_r:
                pair = r_pair[r_ptr[q] + i]
                if pair >= 0:
                    for t in range(s_ptr[pair], s_ptr[pair + 1]):
                        score += gain[s_sub[t]]
                        gain[s_sub[t]] *= keep
            run_dcg[i + 1] = run_dcg[i] + score / np.log2(i + 2.0)
            run_err[i + 1] = run_err[i] + score / (i + 1.0)
        for s in range(n_s):
            gain[s] = 1.0
        for i in range(depth):  # greedy ideal ranking of the judged documents
            best, where = 0.0, -1
            for pair in range(p_ptr[q], p_ptr[q + 1]):
                if used[pair] == q:
                    continue
                score = 0.0
                for t in range(s_ptr[pair], s_ptr[pair + 1]):
                    score += gain[s_sub[t]]
                if where == -1 or score > best or (score == best and name_rank[pair] > name_rank[where]):
                    best, where = score, pair
            if where >= 0:
                used[where] = q
                for t in range(s_ptr[where], s_ptr[where + 1]):
                    gain[s_sub[t]] *= keep
            else:
                best = 0.0
            ideal_dcg[i + 1] = ideal_dcg[i] + best / np.log2(i + 2.0)
            ideal_err[i + 1] = ideal_err[i] + best / (i + 1.0)
        for m in range(kinds.shape[0]):
            k = cutoffs[m]
            kind = kinds[m]
            v = 0.0
            if kind == Diversity.ALPHA_DCG or kind == Diversity.ERR_IA:
                total = 0.0
                for i in range(k):  # the ideal ideal: every subtopic at every rank
                    total += n_s * keep ** i / (np.log2(i + 2.0) if kind == Diversity.ALPHA_DCG else i + 1.0)
                got = run_dcg[k] if kind == Diversity.ALPHA_DCG else run_err[k]
                v = got if k == 1 else got / total
            elif run_dcg[k] != 0.0:
                v = run_dcg[k] / ideal_dcg[k] if kind == Diversity.ALPHA_NDCG else run_err[k] / ideal_err[k]
            values[q, m] = v


def _checked(*arrays: npt.ArrayLike) -> list[npt.NDArray[np.int64]]:
    return [np.ascontiguousarray(a, dtype=np.int64) for a in arrays]


def diversity_queries(r_ptr: npt.ArrayLike, r_pair: npt.ArrayLike, p_ptr: npt.ArrayLike, s_ptr: npt.ArrayLike,
                      s_sub: npt.ArrayLike, n_sub: npt.ArrayLike, name_rank: npt.ArrayLike, kinds: npt.ArrayLike,
                      cutoffs: npt.ArrayLike, alpha: float, *, n_threads: int | None = None) -> npt.NDArray[np.float64]:
    """Every query's measures, float64 (n_q, m) (see the module). The layout is checked here: a
    bad one raises ``ValueError`` before the kernel reads anything."""
    rp, rq, pp, sp, ss, ns, nr, kd, ct = _checked(r_ptr, r_pair, p_ptr, s_ptr, s_sub, n_sub, name_rank, kinds, cutoffs)
    n_q, n_pairs = len(rp) - 1, len(sp) - 1
    for ptr, rows, what in ((rp, len(rq), "run"), (pp, n_pairs, "judged"), (sp, len(ss), "subtopic")):
        if ptr.ndim != 1 or len(ptr) < 1 or ptr[0] != 0 or ptr[-1] != rows or np.any(np.diff(ptr) < 0):
            raise ValueError(f"{what} pointers do not describe {rows} rows")
    if len(pp) != n_q + 1 or len(ns) != n_q or len(nr) != n_pairs or len(kd) != len(ct):
        raise ValueError("one judged range and subtopic count per query, one name rank per judged document")
    if len(rq) and (rq.min() < -1 or rq.max() >= n_pairs):
        raise ValueError("run rows name judged documents outside [-1, n_pairs)")
    owner = np.repeat(np.arange(n_q), np.diff(pp))
    if len(ss) and (ss.min() < 0 or np.any(ss >= ns[np.repeat(owner, np.diff(sp))])):
        raise ValueError("subtopic numbers outside their query's [0, n_sub)")
    if len(kd) and (kd.min() < 0 or kd.max() > max(Diversity) or ct.min() < 1):
        raise ValueError("kinds outside Diversity or cutoffs below 1")
    if not 0.0 <= float(alpha) <= 1.0:
        raise ValueError("alpha must be in [0, 1]")
    values = np.zeros((n_q, len(kd)))
    depth = int(ct.max(initial=1))
    width = int(ns.max(initial=0)) + 1

    def chunk(q0: int, q1: int) -> None:
        _diversity_chunk(rp, rq, pp, sp, ss, ns, nr, kd, ct, float(alpha), values, np.zeros(width),
                         np.full(max(n_pairs, 1), -1, np.int64), np.zeros(depth + 1), np.zeros(depth + 1),
                         np.zeros(depth + 1), np.zeros(depth + 1), q0, q1)

    threads = resolve_threads(n_threads) if len(rq) >= 50_000 else 1
    run_chunks(chunk, chunk_bounds(rp, threads))
    return values


def diversity_numpy(r_ptr: npt.ArrayLike, r_pair: npt.ArrayLike, p_ptr: npt.ArrayLike, s_ptr: npt.ArrayLike,
                    s_sub: npt.ArrayLike, n_sub: npt.ArrayLike, name_rank: npt.ArrayLike, kinds: npt.ArrayLike,
                    cutoffs: npt.ArrayLike, alpha: float) -> npt.NDArray[np.float64]:
    """Numpy twin of :func:`diversity_queries` (the test oracle): each query's subtopic matrix
    (documents x subtopics) and the definitions, one query at a time."""
    rp, rq, pp, sp, ss, ns, nr, kd, ct = _checked(r_ptr, r_pair, p_ptr, s_ptr, s_sub, n_sub, name_rank, kinds, cutoffs)
    out = np.zeros((len(rp) - 1, len(kd)))
    keep = 1.0 - alpha
    for q in range(len(rp) - 1):
        n_s, pairs = int(ns[q]), np.arange(pp[q], pp[q + 1])
        if rp[q + 1] == rp[q] or n_s == 0:
            continue
        rel = np.zeros((len(pairs), n_s))
        for row, pair in enumerate(pairs.tolist()):
            rel[row, ss[sp[pair]:sp[pair + 1]]] = 1.0
        ranked = rq[rp[q]:rp[q + 1]]
        matrix = np.array([rel[p - pp[q]] if p >= 0 else np.zeros(n_s) for p in ranked.tolist()]).reshape(-1, n_s)
        seen = np.cumsum(matrix, axis=0) - matrix  # relevant documents above, per subtopic
        gains = (matrix * keep ** seen).sum(axis=1)
        left, chosen, seen_ideal, ideal = list(range(len(pairs))), [], np.zeros(n_s), []
        while left:
            scores = [(rel[i] * keep ** seen_ideal).sum() for i in left]
            top = max(scores)
            pick = max((i for i, s in zip(left, scores, strict=True) if s == top), key=lambda i: nr[pairs[i]])
            ideal.append(top)
            seen_ideal += rel[pick]
            left.remove(pick)
            chosen.append(pick)
        for m in range(len(kd)):
            k = int(ct[m])
            g = np.zeros(k)
            g[:min(k, len(gains))] = gains[:k]
            ig = np.zeros(k)
            ig[:min(k, len(ideal))] = ideal[:k]
            dcg_discount, err_discount = 1.0 / np.log2(np.arange(k) + 2.0), 1.0 / np.arange(1, k + 1)
            everything = n_s * keep ** np.arange(k)
            kind = Diversity(int(kd[m]))
            if kind in (Diversity.ALPHA_DCG, Diversity.ERR_IA):
                disc = dcg_discount if kind == Diversity.ALPHA_DCG else err_discount
                out[q, m] = (g * disc).sum() if k == 1 else (g * disc).sum() / (everything * disc).sum()
            elif (g * dcg_discount).sum() != 0.0:
                disc = dcg_discount if kind == Diversity.ALPHA_NDCG else err_discount
                out[q, m] = (g * disc).sum() / (ig * disc).sum()
    return out
