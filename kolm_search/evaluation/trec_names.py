"""trec_eval's ``-m`` syntax: nicknames (``official``, ``all_trec``, ``set``), measure families
with their default parameters (``P`` is ``P_5`` ... ``P_1000``) or given ones (``P.5,10``,
``ndcg_cut.10``, ``iprec_at_recall.0.5``), expanded into the single names
:func:`~kolm_search.evaluate` takes (``P_5``, ``ndcg_cut_10``, ``iprec_at_recall_0.50``), named
as trec_eval prints them. Anything else (``nDCG@10``, ``RR``, ``P(rel=2)@5``) is a measure name
of :mod:`kolm_search.evaluation.measures` and passes through as given.

``all_trec`` is trec_eval's list but for ``relstring`` (a string, not a number) and ``dcg`` /
``ideal_dcg`` (not in the trec_eval that pytrec_eval, the test oracle, bundles); ``runid`` is
the run's name line of the table output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kolm_search.errors import KolmValueError

__all__ = ["NICKNAMES", "RUNID", "expand_measures"]

RUNID = "runid"
_CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
_INT_FAMILIES: dict[str, tuple[int, ...]] = {
    "P": _CUTS, "recall": _CUTS, "map_cut": _CUTS, "ndcg_cut": _CUTS, "relative_P": _CUTS, "success": (1, 5, 10)}
_FRACTION_FAMILIES: dict[str, tuple[float, ...]] = {
    "iprec_at_recall": tuple(i / 10 for i in range(11)), "Rprec_mult": tuple(i / 5 for i in range(1, 11))}
_SINGLE = ("num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref", "recip_rank", "infAP",
           "gm_bpref", "utility", "11pt_avg", "ndcg", "ndcg_rel", "Rndcg", "binG", "G", "set_P", "set_recall",
           "set_relative_P", "set_map", "set_F", "num_nonrel_judged_ret")
NICKNAMES: dict[str, tuple[str, ...]] = {
    "official": ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref",
                 "recip_rank", "iprec_at_recall", "P"),
    "all_trec": ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "gm_map", "Rprec", "bpref",
                 "recip_rank", "iprec_at_recall", "P", "recall", "infAP", "gm_bpref", "utility", "11pt_avg", "ndcg",
                 "relative_P", "Rprec_mult", "success", "map_cut", "ndcg_cut", "ndcg_rel", "Rndcg", "binG", "G",
                 "set_P", "set_recall", "set_relative_P", "set_map", "set_F", "num_nonrel_judged_ret"),
    "set": ("runid", "num_q", "num_ret", "num_rel", "num_rel_ret", "utility", "set_P", "set_recall", "set_relative_P",
            "set_map", "set_F"),
}
"""trec_eval's nicknames (``-m official`` is its default)."""
_NOT_COMPUTED = {"relstring": "a string of relevance marks", "dcg": "not in the trec_eval pytrec_eval bundles",
                 "ideal_dcg": "not in the trec_eval pytrec_eval bundles"}


def _fraction_name(family: str, x: float) -> str:
    return f"{family}_{x:.2f}"  # trec_eval prints iprec_at_recall_0.10, Rprec_mult_0.20


def _one(name: str) -> list[str]:
    if name in NICKNAMES:
        return [n for part in NICKNAMES[name] for n in _one(part)]
    if name in _NOT_COMPUTED:
        raise KolmValueError(f"trec_eval's {name!r} is not computed ({_NOT_COMPUTED[name]})")
    if name == RUNID or name in _SINGLE:
        return [name]
    family, dot, params = name.partition(".")
    if family in _INT_FAMILIES:
        if not dot:
            return [f"{family}_{k}" for k in _INT_FAMILIES[family]]
        cuts = params.split(",")
        if not all(re.fullmatch(r"[0-9]+", c) and 0 < int(c) < 2**31 for c in cuts):
            raise KolmValueError(f"measure {name!r}: {family} takes cutoffs, positive integers, as in {family}.5,10")
        return [f"{family}_{int(c)}" for c in cuts]
    if family in _FRACTION_FAMILIES:
        if not dot:
            return [_fraction_name(family, x) for x in _FRACTION_FAMILIES[family]]
        values = params.split(",")
        if not all(re.fullmatch(r"[0-9]*\.?[0-9]+", v) for v in values):
            raise KolmValueError(f"measure {name!r}: {family} takes numbers, as in {family}.0.1,0.5")
        return [_fraction_name(family, float(v)) for v in values]
    if dot and family in _SINGLE:
        raise KolmValueError(f"measure {name!r}: trec_eval's parameters of {family} are not supported here "
                             "(its defaults are; for F with another beta use SetF(beta=...))")
    return [name]


def expand_measures(names: Iterable[str]) -> list[str]:
    """Each ``-m`` value expanded (see the module), duplicates dropped, order kept."""
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise KolmValueError(f"a measure name must be a non-empty string, got {name!r}")
        out.extend(_one(name.strip()))
    return list(dict.fromkeys(out))
