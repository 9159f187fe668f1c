"""Measure names: ir_measures syntax and objects, trec_eval and ranx spellings, one spec each.

A name is read, in this order, as

1. ir_measures syntax ``Name(param=value, ...)@cutoff`` (measure names case-insensitive):
   ``nDCG``, ``AP``/``MAP``, ``RR``/``MRR``, ``P``/``Precision``, ``R``/``Recall``, ``Rprec``,
   ``Bpref``, ``Success``, ``Judged``, ``NumRet``, ``NumRel``, ``NumRelRet``, ``ERR``, ``RBP``, ``infAP``,
   with the parameters ir_measures gives them (``rel``, ``judged_only``, ``gains``, ``p``);
2. a trec_eval or kolm_search spelling: ``ndcg_cut_10``, ``P_5``, ``map_cut.5``, ``recip_rank``,
   ``r-precision``, ``hit_rate@10``, ``num_rel_ret``, ...; a ranx ``-lN`` suffix sets ``rel``;
3. any other measure ir_measures knows (``nDCG(dcg='exp-log2')@10``, ``SetF``, ``IPrec``,
   ...), computed through ir_measures itself (extra ``measures``).

``ir_measures`` Measure objects are read like their ``str()``, which is also their key in the
results. Names that mean something else in ranx are refused with both meanings: ``hits@k``
(ranx: the number of relevant documents in the top k; kolm_search once: ``success@k``) and
``rbp.95``/``rbp@95`` (ranx: persistence 0.95; ir_measures: cutoff 95).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from kolm_search._extras import peer_isinstance
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["MeasureSpec", "aggregate", "metric_key", "metric_list", "parse_measure"]

_CANONICAL = {n.lower(): c for n, c in [
    ("nDCG", "nDCG"), ("AP", "AP"), ("MAP", "AP"), ("RR", "RR"), ("MRR", "RR"), ("P", "P"), ("Precision", "P"),
    ("R", "R"), ("Recall", "R"), ("Rprec", "Rprec"), ("Bpref", "Bpref"), ("Success", "Success"),
    ("Judged", "Judged"), ("NumRet", "NumRet"), ("NumRel", "NumRel"), ("NumRelRet", "NumRelRet"), ("ERR", "ERR"),
    ("RBP", "RBP"), ("infAP", "infAP"), ("IPrec", "IPrec"), ("SetP", "SetP"), ("SetR", "SetR"), ("SetF", "SetF"),
    ("NumQ", "NumQ"), ("DCG", "DCG"), ("R_cap", "R_cap"), ("alpha_nDCG", "alpha_nDCG"), ("alpha_DCG", "alpha_DCG"),
    ("ERR_IA", "ERR_IA"), ("nERR_IA", "nERR_IA")]}
# ir_measures' parameters of each measure; those marked * need a value
_PARAMS = {
    "nDCG": {"cutoff", "dcg", "gains", "judged_only"}, "AP": {"cutoff", "rel", "judged_only"},
    "RR": {"cutoff", "rel", "judged_only"}, "P": {"cutoff*", "rel", "judged_only"},
    "R": {"cutoff*", "rel", "judged_only"}, "Rprec": {"rel", "judged_only"}, "Bpref": {"rel"},
    "Success": {"cutoff*", "rel", "judged_only"}, "Judged": {"cutoff"}, "NumRet": {"rel"}, "NumRel": {"rel"},
    "NumRelRet": {"rel"}, "ERR": {"cutoff*"}, "RBP": {"cutoff", "p", "rel*"}, "infAP": {"rel"},
    "IPrec": {"recall*", "rel", "judged_only"}, "SetP": {"rel", "relative", "judged_only"}, "SetR": {"rel"},
    "SetF": {"rel", "beta", "judged_only"}, "NumQ": set(), "DCG": {"cutoff", "dcg", "judged_only"},
    "R_cap": {"cutoff*", "rel"}, "alpha_nDCG": {"cutoff*", "alpha", "rel", "judged_only"},
    "alpha_DCG": {"cutoff*", "alpha", "rel", "judged_only"}, "ERR_IA": {"cutoff*", "rel", "judged_only"},
    "nERR_IA": {"cutoff*", "rel", "judged_only"},
}
_DIVERSITY = {"alpha_nDCG": "alpha_ndcg", "alpha_DCG": "alpha_dcg", "ERR_IA": "err_ia", "nERR_IA": "nerr_ia"}
_NUMBERS = {"p": (0.0, 1.0, False), "alpha": (0.0, 1.0, True), "recall": (0.0, 1.0, True), "beta": (0.0, 1e6, False)}
_LEGACY_CUT = {"ndcg_cut": "ndcg_cut", "ndcg": "ndcg_cut", "map_cut": "map_cut", "map": "map_cut", "p": "P",
               "precision": "P", "recall": "recall", "success": "success", "hit_rate": "success",
               "hitrate": "success", "mrr": "recip_rank_cut", "recip_rank": "recip_rank_cut", "judged": "judged",
               "relative_p": "relative_P"}
_LEGACY = {"ndcg": "ndcg", "map": "map", "mrr": "recip_rank", "recip_rank": "recip_rank", "r-precision": "Rprec",
           "rprec": "Rprec", "r_precision": "Rprec", "bpref": "bpref", "num_ret": "num_ret", "num_rel": "num_rel",
           "num_rel_ret": "num_rel_ret", "num_q": "num_q", "num_nonrel_judged_ret": "num_nonrel_judged_ret",
           "gm_map": "gm_map", "gm_bpref": "gm_bpref", "11pt_avg": "11pt_avg", "set_p": "set_P",
           "set_recall": "set_recall", "set_f": "set_F", "set_map": "set_map", "set_relative_p": "set_relative_P",
           "utility": "utility", "bing": "binG", "g": "G", "ndcg_rel": "ndcg_rel", "rndcg": "Rndcg"}
_LEGACY_FRACTION = {"iprec_at_recall": "iprec_at_recall", "rprec_mult": "Rprec_mult"}  # iprec_at_recall_0.10
_AGGREGATE: dict[str, Aggregate] = {"num_ret": "sum", "num_rel": "sum", "num_rel_ret": "sum", "num_q": "sum",
                                    "num_nonrel_judged_ret": "sum", "gm_map": "gmean", "gm_bpref": "gmean"}
_DEFAULT_PARAMS = {"set_F": (1.0,), "utility": (1.0, -1.0, 0.0), "rbp": (0.8,)}  # trec_eval's defaults


def _spec(key: str, kind: str, cutoff: int = 0, rel: int | None = None, judged_only: bool = False,
          gains: tuple[tuple[int, int], ...] | None = None, params: tuple[float, ...] = ()) -> MeasureSpec:
    return MeasureSpec(key, kind, cutoff, rel, judged_only, gains, params or _DEFAULT_PARAMS.get(kind, ()),
                       _AGGREGATE.get(kind, "mean"))
_HITS = ("{name!r} is refused: ranx's hits@k is the number of relevant documents in the top k, kolm_search's "
         "was the share of queries with one (now success@k, ir_measures' Success@k); for ranx's meaning use "
         "P@k times k")
_RBP_DOT = ("{name!r} is refused: in ranx rbp.95 / rbp@95 is RBP with persistence 0.95, in ir_measures RBP@95 "
            "is RBP cut at rank 95; write RBP(p=0.95,rel=1) (or RBP(p=0.8,rel=1)@95)")


Aggregate = Literal["mean", "sum", "gmean"]


@dataclass(frozen=True)
class MeasureSpec:
    """One measure, resolved.

    ``kind`` is a key of the metrics kernel's ``METRIC_IDS`` (trec_eval's family names), or
    ``""`` for a measure computed through ir_measures (``external``); ``cutoff`` 0 is the whole
    ranking; ``rel`` None is the call's ``relevance_level``; ``params`` the kernel's float
    parameters (RBP's persistence, IPrec's recall, ...; empty: the measure's default);
    ``aggregate`` how per-query values become one: ``"mean"``, ``"sum"`` (the counts, as
    trec_eval and ir_measures do) or ``"gmean"`` (trec_eval's gm_map: per-query values are
    logs, the summary is ``exp`` of their mean).
    """

    key: str
    kind: str
    cutoff: int = 0
    rel: int | None = None
    judged_only: bool = False
    gains: tuple[tuple[int, int], ...] | None = None
    params: tuple[float, ...] = ()
    aggregate: Aggregate = "mean"
    external: Any = None

    @property
    def summed(self) -> bool:
        """Aggregated by sum (the counts)."""
        return self.aggregate == "sum"

    @property
    def p(self) -> float:
        """RBP's persistence."""
        return self.params[0] if self.params else 0.8


def aggregate(table: pd.DataFrame, specs: Sequence[MeasureSpec]) -> dict[str, float]:
    """Per-query values (one column per spec key) as one value per measure, by each spec's
    ``aggregate``: no query is 0 for a sum, NaN otherwise."""
    out: dict[str, float] = {}
    for spec in specs:
        values = table[spec.key].to_numpy(np.float64)
        if spec.aggregate == "sum":
            out[spec.key] = float(values.sum())
        elif not len(values):
            out[spec.key] = float("nan")
        elif spec.aggregate == "gmean":
            out[spec.key] = float(np.exp(values.mean()))
        else:
            out[spec.key] = float(values.mean())
    return out


def metric_key(metric: Any) -> str:
    """The key of ``metric`` in results: the string as given, or an ir_measures object's ``str()``."""
    return metric if isinstance(metric, str) else str(metric)


def _is_ir_measure(obj: Any) -> bool:
    return peer_isinstance(obj, "ir_measures", "measures.Measure")


def metric_list(metrics: Any) -> list[Any]:
    """One metric (a name or an ir_measures object) or an iterable of them, as a list; a key
    given twice is refused."""
    out = [metrics] if isinstance(metrics, str) or _is_ir_measure(metrics) else list(metrics)
    if not out:
        raise KolmValueError("metrics must name at least one metric")
    keys = [metric_key(m) for m in out]
    for key in keys:
        if keys.count(key) > 1:
            raise KolmValueError(f"metric {key!r} is given twice")
    return out


def _literal(node: ast.expr, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise KolmValueError(f"metric {name!r}: parameter values must be literals") from None


def _split(text: str, name: str) -> tuple[str, dict[str, Any]] | None:
    """``"P(rel=2)@5"`` -> ``("P", {"rel": 2, "cutoff": 5})``; None if not in that syntax."""
    try:
        node: ast.expr = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # not that syntax (or NUL bytes, deep nesting)
        return None
    params: dict[str, Any] = {}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        params["cutoff"] = _literal(node.right, name)
        node = node.left
    if isinstance(node, ast.Call):
        if node.args or any(k.arg is None for k in node.keywords):
            raise KolmValueError(f"metric {name!r}: parameters must be named, as in P(rel=2)@5")
        params.update({str(k.arg): _literal(k.value, name) for k in node.keywords})
        node = node.func
    return (node.id, params) if isinstance(node, ast.Name) else None


def _check(name: str, measure: str, params: dict[str, Any]) -> None:
    allowed = {p.rstrip("*") for p in _PARAMS[measure]}
    for p in sorted(params.keys() - allowed):
        raise KolmValueError(f"metric {name!r}: {measure} has no parameter {p!r} (it takes {sorted(allowed)})")
    for p in _PARAMS[measure]:
        if p.endswith("*") and p[:-1] not in params:
            need = "a cutoff, as in " + measure + "@10" if p == "cutoff*" else f"{p[:-1]}=, as in RBP(p=0.8,rel=1)"
            raise KolmValueError(f"metric {name!r}: {measure} needs {need}")
    for p in ("cutoff", "rel"):
        v = params.get(p)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31):
            raise KolmValueError(f"metric {name!r}: {p} must be an integer >= 1 (and < 2**31), got {v!r}")
    for flag in ("judged_only", "relative"):
        if not isinstance(params.get(flag, False), bool):
            raise KolmValueError(f"metric {name!r}: {flag} must be True or False")
    for p, (low, high, closed) in _NUMBERS.items():
        v = params.get(p)
        inside = v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and (
            low <= v <= high if closed else low < v < high)
        if v is not None and not inside:
            span = f"[{low:g}, {high:g}]" if closed else f"({low:g}, {high:g})"
            raise KolmValueError(f"metric {name!r}: {p} must be a number in {span}, got {v!r}")
    if params.get("dcg", "log2") not in ("log2", "exp-log2"):
        raise KolmValueError(f"metric {name!r}: dcg must be 'log2' or 'exp-log2', got {params['dcg']!r}")
    gains = params.get("gains", {})
    if not isinstance(gains, dict) or not all(type(k) is int and type(v) is int for k, v in gains.items()):
        raise KolmValueError(f"metric {name!r}: gains must map integer grades to integer gains")


def _native(key: str, measure: str, params: dict[str, Any]) -> MeasureSpec | None:
    """The kernel's spec of a checked ir_measures measure, or None if only ir_measures has it."""
    exp = params.get("dcg", "log2") == "exp-log2"
    cutoff, rel = int(params.get("cutoff", 0)), params.get("rel")
    jo = bool(params.get("judged_only", False))
    gains = tuple(sorted(params["gains"].items())) if params.get("gains") else None
    if exp and gains:
        return None
    if measure in _DIVERSITY:
        return _spec(key, _DIVERSITY[measure], cutoff, rel, jo, None, (float(params.get("alpha", 0.5)),))
    kind = {"nDCG": ("ndcg_exp" if exp else "ndcg_cut" if cutoff else "ndcg"), "AP": "map_cut" if cutoff else "map",
            "RR": "recip_rank_cut" if cutoff else "recip_rank", "P": "P", "R": "recall", "Rprec": "Rprec",
            "Bpref": "bpref", "Success": "success", "Judged": "judged", "NumRel": "num_rel",
            "NumRet": "num_ret" if rel is None else "num_rel_ret", "NumRelRet": "num_rel_ret", "ERR": "err_cut",
            "RBP": "rbp", "infAP": "infAP", "IPrec": "iprec_at_recall", "SetR": "set_recall", "SetF": "set_F",
            "SetP": "set_relative_P" if params.get("relative") else "set_P", "NumQ": "num_q",
            "DCG": "dcg_exp" if exp else "dcg", "R_cap": "relative_P"}[measure]
    values = {"rbp": (float(params.get("p", 0.8)),), "iprec_at_recall": (float(params.get("recall", 0.0)),),
              "set_F": (float(params.get("beta", 1.0)),)}.get(kind, ())
    return _spec(key, kind, cutoff, rel, jo, gains, values)


def _external(key: str, measure: Any) -> MeasureSpec:
    summed = False
    if _is_ir_measure(measure):
        from ir_measures.measures.base import SumAgg

        summed = isinstance(measure.aggregator(), SumAgg)
    return MeasureSpec(key, "", aggregate="sum" if summed else "mean", external=measure)


def _legacy(text: str, name: str) -> MeasureSpec | None:
    key = text.lower()
    rel = None
    suffix = re.fullmatch(r"(.+)-l(\d+)", key)  # ranx: "ndcg@10-l2" is relevance level 2
    if suffix:
        key, rel = suffix.group(1), int(suffix.group(2))
        if not 1 <= rel < 2**31:
            raise KolmValueError(f"metric {name!r}: the relevance level must be an integer >= 1")
    if key in _LEGACY:
        return _spec(name, _LEGACY[key], 0, rel)
    match = re.fullmatch(r"([a-z_\-]+?)(?:@|_|\.)(\d+)", key)
    if match and match.group(1) in _LEGACY_CUT:
        k = int(match.group(2))
        if not 1 <= k < 2**31:
            raise KolmValueError(f"metric {name!r}: the cutoff must be a positive integer (below 2**31)")
        return _spec(name, _LEGACY_CUT[match.group(1)], k, rel)
    match = re.fullmatch(r"([a-z_]+?)(?:@|_|\.)(\d*\.?\d+)", key)  # iprec_at_recall_0.10, Rprec_mult_0.20
    if match and match.group(1) in _LEGACY_FRACTION:
        kind, x = _LEGACY_FRACTION[match.group(1)], float(match.group(2))
        if kind == "iprec_at_recall" and not 0.0 <= x <= 1.0:
            raise KolmValueError(f"metric {name!r}: the recall level must be in [0, 1]")
        return _spec(name, kind, 0, rel, params=(x,))
    return None


def parse_measure(metric: Any) -> MeasureSpec:
    """Resolve one metric name or ir_measures Measure object (see the module docstring).

    Raises ``KolmValueError`` naming the metric for anything unknown, a missing or unknown
    parameter, or a name that means something else in ranx; ``KolmTypeError`` for an object
    that is neither a string nor an ir_measures measure.
    """
    if _is_ir_measure(metric):
        measure = _CANONICAL.get(str(metric.NAME).lower())
        params = dict(metric.params)
        if measure == "IPrec" and "cutoff" in params:
            params["recall"] = params.pop("cutoff")
        if measure is None:
            return _external(str(metric), metric)
        _check(str(metric), measure, params)
        return _native(str(metric), measure, params) or _external(str(metric), metric)
    if not isinstance(metric, str):
        raise KolmTypeError(f"metrics must be names (str) or ir_measures measures, got {metric!r}")
    if type(metric) is not str:  # a str subclass (a (str, Enum) member...): by its value, keyed by itself
        return _parse_name(metric)
    native = _native_name(metric)
    return native if native is not None else _parse_name(metric)


@functools.lru_cache(maxsize=512)
def _native_name(metric: str) -> MeasureSpec | None:
    """:func:`_parse_name` of a measure the metrics kernel computes, resolved once per name (a
    ``MeasureSpec`` is frozen; an error is raised again at every call); None for one computed
    through ir_measures (resolved at every call: whether ir_measures is there may change)."""
    spec = _parse_name(metric)
    return spec if spec.external is None else None


def _parse_name(metric: str) -> MeasureSpec:
    """:func:`parse_measure` of a name."""
    text = metric.strip()
    if re.fullmatch(r"(?i)hits(?:(?:@|_|\.)\d+)?(?:-l\d+)?", text):
        raise KolmValueError(_HITS.format(name=metric))
    if re.fullmatch(r"rbp(?:@|\.)\d+", text):
        raise KolmValueError(_RBP_DOT.format(name=metric))
    split = _split(text, metric)
    if split is not None and split[0].lower() in _CANONICAL:
        measure = _CANONICAL[split[0].lower()]
        if measure == "IPrec" and "cutoff" in split[1]:  # IPrec@0.5: the value after @ is the recall level
            split[1]["recall"] = split[1].pop("cutoff")
        _check(metric, measure, split[1])
        return _native(metric, measure, split[1]) or _external(metric, text)
    spec = _legacy(text, metric)
    if spec is not None:
        return spec
    try:
        import ir_measures
    except ImportError:
        pass
    else:
        try:
            return _external(metric, ir_measures.parse_measure(text))
        except Exception:  # anything ir_measures cannot parse is an unknown name here
            pass
    raise KolmValueError(
        f"unknown metric {metric!r}; use ir_measures names (nDCG@10, AP, RR@10, P(rel=2)@5, R@100, Rprec, Bpref, "
        "Success@10, Judged@10, NumRet, NumRel, NumRelRet, ERR@10, RBP(p=0.8,rel=1)) or trec_eval ones (ndcg_cut_10, "
        "map, recip_rank, P_5, recall_100, success_10, bpref); other ir_measures measures need the 'measures' "
        "extra (pip install 'kolm-search[measures]')"
    )
