"""The evaluation kernel's measure ids, shared by the kernel, its numpy twin and the wrapper that
resolves measure names (:mod:`kolm_search.evaluation.measures`). No numba here: naming a measure
never compiles anything.

Each measure reads a cutoff ``k`` (0: the whole ranking) unless it is in :data:`WHOLE_RANKING`,
a relevance level (unless in :data:`ANY_LEVEL`), and up to :data:`N_PARAMS` float parameters
(column 0 unless said otherwise).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ANY_LEVEL", "DIVERSITY_IDS", "Diversity", "EXPONENTIAL", "MAX_EXP_GRADE", "METRIC_IDS", "Measure", "N_PARAMS",
    "QueryStatus", "WHOLE_RANKING",
]

N_PARAMS = 3  # float parameters per measure (utility's three coefficients are the most)


class QueryStatus(IntEnum):
    """What the evaluation kernel says of each query (its ``status`` output, int64 (n_q,))."""

    EVALUATED = 0  # measured (or left at zero: no retrieved documents or no judgements)
    RUN_DUPLICATE = 2  # a document retrieved twice for the query: nothing measured
    QRELS_DUPLICATE = 3  # a document judged twice for the query: nothing measured


class Measure(IntEnum):
    """One measure of one query's ranking (trec_eval's name in brackets where it has one)."""

    NDCG_CUT = 0  # nDCG of the top k, linear gains (ndcg_cut)
    NDCG = 1  # nDCG of the whole ranking (ndcg)
    MAP = 2  # average precision (map)
    MAP_CUT = 3  # average precision over the top k, divided by the number relevant (map_cut)
    RECIP_RANK = 4  # reciprocal rank of the first relevant document (recip_rank)
    P = 5  # precision of the top k (P)
    RECALL = 6  # recall of the top k (recall)
    RPREC = 7  # precision at R, the number relevant (Rprec)
    SUCCESS = 8  # 1 when a relevant document is in the top k (success)
    BPREF = 9  # binary preference (bpref)
    JUDGED = 10  # share of the top k that is judged
    NUM_RET = 11  # documents retrieved (num_ret)
    NUM_REL_RET = 12  # relevant documents retrieved (num_rel_ret)
    NUM_REL = 13  # relevant documents judged (num_rel)
    RECIP_RANK_CUT = 14  # reciprocal rank within the top k
    ERR_CUT = 15  # gdeval's expected reciprocal rank of the top k
    RBP = 16  # rank-biased precision, persistence in param 0
    INFAP = 17  # inferred AP (infAP)
    IPREC = 18  # interpolated precision at recall param 0 (iprec_at_recall)
    ELEVEN_PT_AVG = 19  # mean interpolated precision at recall 0, 0.1, ..., 1 (11pt_avg)
    SET_P = 20  # precision of the whole retrieved set (set_P)
    SET_RECALL = 21  # recall of the whole retrieved set (set_recall)
    SET_F = 22  # (x + 1) P R / (x P + R) of set precision P and recall R, x in param 0 (set_F)
    SET_MAP = 23  # set precision times set recall (set_map)
    SET_RELATIVE_P = 24  # relevant retrieved over min(retrieved, relevant) (set_relative_P)
    RELATIVE_P = 25  # relevant in the top k over min(k, relevant); BEIR's R_cap@k (relative_P)
    RPREC_MULT = 26  # precision at int(param 0 * R + 0.9) (Rprec_mult)
    UTILITY = 27  # p0 * rel_ret + p1 * nonrel_ret + p2 * rel_not_ret (utility)
    GM_MAP = 28  # log(max(AP, 1e-5)); averaged as a geometric mean (gm_map)
    GM_BPREF = 29  # log(max(bpref, 1e-5)); averaged as a geometric mean (gm_bpref)
    NUM_NONREL_JUDGED_RET = 30  # judged non-relevant documents retrieved (num_nonrel_judged_ret)
    BING = 31  # binary G (binG)
    G = 32  # normalised gain (G)
    NDCG_REL = 33  # nDCG averaged over the relevant documents (ndcg_rel)
    RNDCG = 34  # nDCG averaged over the R levels of the judgements (Rndcg)
    NUM_Q = 35  # 1 for every evaluated query (num_q)
    DCG = 36  # discounted cumulative gain of the top k, linear gains (the grades) over log2(rank + 1)
    DCG_EXP = 37  # DCG with exponential gains 2**grade - 1 (ir_measures' dcg='exp-log2')
    NDCG_EXP = 38  # nDCG with exponential gains (nDCG(dcg='exp-log2')@k)


METRIC_IDS: dict[str, Measure] = {
    "ndcg_cut": Measure.NDCG_CUT, "ndcg": Measure.NDCG, "map": Measure.MAP, "map_cut": Measure.MAP_CUT,
    "recip_rank": Measure.RECIP_RANK, "P": Measure.P, "recall": Measure.RECALL, "Rprec": Measure.RPREC,
    "success": Measure.SUCCESS, "bpref": Measure.BPREF, "judged": Measure.JUDGED, "num_ret": Measure.NUM_RET,
    "num_rel_ret": Measure.NUM_REL_RET, "num_rel": Measure.NUM_REL, "recip_rank_cut": Measure.RECIP_RANK_CUT,
    "err_cut": Measure.ERR_CUT, "rbp": Measure.RBP, "infAP": Measure.INFAP, "iprec_at_recall": Measure.IPREC,
    "11pt_avg": Measure.ELEVEN_PT_AVG, "set_P": Measure.SET_P, "set_recall": Measure.SET_RECALL,
    "set_F": Measure.SET_F, "set_map": Measure.SET_MAP, "set_relative_P": Measure.SET_RELATIVE_P,
    "relative_P": Measure.RELATIVE_P, "Rprec_mult": Measure.RPREC_MULT, "utility": Measure.UTILITY,
    "gm_map": Measure.GM_MAP, "gm_bpref": Measure.GM_BPREF, "num_nonrel_judged_ret": Measure.NUM_NONREL_JUDGED_RET,
    "binG": Measure.BING, "G": Measure.G, "ndcg_rel": Measure.NDCG_REL, "Rndcg": Measure.RNDCG,
    "num_q": Measure.NUM_Q, "dcg": Measure.DCG, "dcg_exp": Measure.DCG_EXP, "ndcg_exp": Measure.NDCG_EXP,
}
"""The kernel's measures by their family name (trec_eval's where it has one)."""

WHOLE_RANKING = frozenset({
    Measure.NDCG, Measure.MAP, Measure.RECIP_RANK, Measure.RPREC, Measure.BPREF, Measure.NUM_RET,
    Measure.NUM_REL_RET, Measure.NUM_REL, Measure.INFAP, Measure.IPREC, Measure.ELEVEN_PT_AVG, Measure.SET_P,
    Measure.SET_RECALL, Measure.SET_F, Measure.SET_MAP, Measure.SET_RELATIVE_P, Measure.RPREC_MULT,
    Measure.UTILITY, Measure.GM_MAP, Measure.GM_BPREF, Measure.NUM_NONREL_JUDGED_RET, Measure.BING, Measure.G,
    Measure.NDCG_REL, Measure.RNDCG, Measure.NUM_Q})
"""Measures of the whole ranking: their cutoff is not read."""

ANY_LEVEL = frozenset({Measure.NDCG, Measure.NDCG_CUT, Measure.JUDGED, Measure.NUM_RET, Measure.ERR_CUT,
                       Measure.G, Measure.NDCG_REL, Measure.NUM_Q, Measure.DCG, Measure.DCG_EXP, Measure.NDCG_EXP})
EXPONENTIAL = frozenset({Measure.DCG_EXP, Measure.NDCG_EXP})
"""Measures with gains ``2**grade - 1``: grades above :data:`MAX_EXP_GRADE` are refused (the gain would overflow)."""
MAX_EXP_GRADE = 64
"""Measures that read graded gains, not the relevance level."""


class Diversity(IntEnum):
    """Measures over subtopic qrels (the diversity kernel), as ndeval (TREC Web track) computes
    them with redundancy intolerance alpha: a document's gain at a rank is the sum, over the
    subtopics it is relevant to, of ``(1 - alpha) ** (documents relevant to that subtopic above
    it)``."""

    ALPHA_DCG = 0  # alpha-DCG@k over the "ideal ideal" (every subtopic at every rank), ndeval's
    ALPHA_NDCG = 1  # alpha-DCG@k over that of the greedy ideal ranking of the judged documents
    ERR_IA = 2  # intent-aware ERR@k, the gains over rank, over the ideal ideal (ndeval's ERR-IA)
    NERR_IA = 3  # that over the greedy ideal ranking's (nERR-IA)


DIVERSITY_IDS: dict[str, Diversity] = {"alpha_dcg": Diversity.ALPHA_DCG, "alpha_ndcg": Diversity.ALPHA_NDCG,
                                       "err_ia": Diversity.ERR_IA, "nerr_ia": Diversity.NERR_IA}
"""The diversity kernel's measures by their kind name in
:class:`~kolm_search.evaluation.measures.MeasureSpec`."""
