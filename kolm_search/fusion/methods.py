"""The fusion methods (ranx 0.3.21's 25, same names and parameters) and how each is computed.

``v`` is an entry's (normalised) score, ``i`` its zero-based rank in its list, ``w`` its run's
weight (all ones unless given), ``H`` the number of runs holding the document; sums run over
those runs. Every method whose score is such a sum goes through the fusion kernel
(:mod:`kolm_search._kernels.fusion`): its per-entry values are computed here, vectorised,
then scatter-added; min/max/med are order statistics (:mod:`~kolm_search.fusion.comb`) and
Condorcet a pairwise sort (:mod:`~kolm_search.fusion.voting`). The supervised methods read
tables trained from qrels (:mod:`~kolm_search.fusion.probabilistic`, ``fit_fusion``).
The table :data:`METHODS` gives each method's formula and parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import non_negative_int, one_of, real
from kolm_search.errors import KolmValueError
from kolm_search.fusion import comb, probabilistic, voting
from kolm_search.fusion.entries import Entries
from kolm_search.fusion.normalize import Norm, apply_norm
from kolm_search.fusion.rrf import check_k, check_weights

__all__ = ["ALIASES", "FUSION_METHODS", "METHODS", "Method", "PER_RUN_PARAMS", "canonical_method", "check_params",
           "fuse_entries", "reads_scores"]

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Values = Callable[[Entries, Mapping[str, Any]], F64]


@dataclass(frozen=True)
class Method:
    """One fusion method.

    Attributes
    ----------
    formula : str
        The fused score in a phrase.
    kind : {"sum", "comb", "condorcet"}
        Kernel sum of per-entry ``value``s, order statistic, or pairwise sort.
    value : callable, optional
        ``(entries, params) -> float64 (n,)`` per-entry values of a sum.
    scale : dict
        Keyword arguments of the kernel scaling the sums by ``H`` (``power``, ``log_offset``).
    weights : {"contrib", "presence", "votes", None}
        How run weights act: multiply each value, make up ``H`` (weighted MNZ), weigh votes,
        or not accepted.
    params, required, tunable : tuple of str
        Parameters accepted besides ``weights``, those without a default, and those
        ``optimize_fusion`` searches by default.
    defaults : dict
    supervised : bool
        Needs tables trained from qrels (``fit_fusion``).
    rank_based : bool
        Reads the lists' order rather than (only) their scores.
    """

    formula: str
    kind: str = "sum"
    value: Values | None = None
    scale: Mapping[str, Any] = field(default_factory=dict)
    weights: str | None = "contrib"
    params: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    tunable: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    supervised: bool = False
    rank_based: bool = False


def _score(e: Entries, p: Mapping[str, Any]) -> F64:
    return e.score


def _isr(e: Entries, p: Mapping[str, Any]) -> F64:
    return np.asarray(1.0 / (e.position + 1.0) ** 2, dtype=np.float64)


def _trained(name: str) -> Values:
    return lambda e, p: probabilistic.values(name, e, p)[0]


_TABLE = {"probs": "per-run tables", "log_odds": "per-run log-odds", "map_scores": "per-run MAP"}
#: the parameters holding one entry per run, in the runs' order (fusing some of the runs takes theirs)
PER_RUN_PARAMS = ("weights", *_TABLE)
METHODS: dict[str, Method] = {
    "anz": Method("sum(v) / H (CombANZ)", value=_score, scale={"power": -1.0}),
    "bayesfuse": Method("sum of log-odds of relevance at rank i, log(0.001/0.999) where absent", rank_based=True,
                        value=_trained("bayesfuse"), params=("log_odds",), required=("log_odds",), supervised=True),
    "bordafuse": Method("sum of Borda points: c - i, (c - n + 1)/2 where unranked", rank_based=True),
    "condorcet": Method("sorted by pairwise majority votes, scored c - position", kind="condorcet", weights="votes",
                        rank_based=True),
    "gmnz": Method("sum(v) * H^gamma (CombGMNZ)", value=_score, params=("gamma",), required=("gamma",),
                   tunable=("gamma",)),
    "isr": Method("sum(1/(i+1)^2) * H", value=_isr, scale={"power": 1.0}, rank_based=True),
    "log_isr": Method("sum(1/(i+1)^2) * log(H)", value=_isr, scale={"log_offset": 0.0}, rank_based=True),
    "logn_isr": Method("sum(1/(i+1)^2) * log(H + sigma)", value=_isr, params=("sigma",), defaults={"sigma": 0.01},
                       tunable=("sigma",), rank_based=True),
    "mapfuse": Method("sum of MAP_run / (i + 1)", value=_trained("mapfuse"), params=("map_scores",),
                      required=("map_scores",), supervised=True, rank_based=True),
    "max": Method("max(v) (CombMAX)", kind="comb", weights=None),
    "med": Method("median(v) (CombMED)", kind="comb", weights=None),
    "min": Method("min(v) (CombMIN)", kind="comb", weights=None),
    "mixed": Method("sum(w v) * sqrt(H)", value=_score, scale={"power": 0.5}, tunable=("weights",)),
    "mnz": Method("sum(v) * H (CombMNZ)", value=_score, scale={"power": 1.0}),
    "posfuse": Method("sum of P_run[i], the trained hit rate at rank i", value=_trained("posfuse"), params=("probs",),
                      required=("probs",), supervised=True, rank_based=True),
    "probfuse": Method("sum of P_run[k] / (k + 1), k the rank's segment of x", value=_trained("probfuse"),
                       params=("probs",), required=("probs",), tunable=("n_segments",), supervised=True,
                       rank_based=True),
    "rbc": Method("sum((1 - phi) phi^i)", value=lambda e, p: (1.0 - p["phi"]) * p["phi"] ** e.position.astype(float),
                  params=("phi",), required=("phi",), tunable=("phi",), rank_based=True),
    "rrf": Method("sum(1/(k + i + 1))", value=lambda e, p: 1.0 / (p["k"] + e.position + 1.0), params=("k",),
                  defaults={"k": 60}, tunable=("k", "weights"), rank_based=True),
    "segfuse": Method("sum of P_run[k] * (v + 1), k the rank's segment of 5, 10, 20, ...",
                      value=_trained("segfuse"), params=("probs",), required=("probs",), supervised=True,
                      rank_based=True),
    "slidefuse": Method("sum of the mean of P_run over ranks i - w .. i + w", value=_trained("slidefuse"),
                        params=("probs", "w"), required=("probs", "w"), tunable=("w",), supervised=True,
                        rank_based=True),
    "sum": Method("sum(v) (CombSUM)", value=_score),
    "w_bordafuse": Method("sum of w times Borda points", tunable=("weights",), rank_based=True),
    "w_condorcet": Method("Condorcet with votes weighted by w", kind="condorcet", weights="votes",
                          tunable=("weights",), rank_based=True),
    "wmnz": Method("sum(v) * sum of w over the runs holding it", value=_score, scale={"power": 1.0},
                   weights="presence", tunable=("weights",)),
    "wsum": Method("sum(w v)", value=_score, tunable=("weights",)),
}
ALIASES = {"combsum": "sum", "combmnz": "mnz"}
FUSION_METHODS = tuple(sorted([*METHODS, *ALIASES]))


def canonical_method(method: object) -> str:
    """The method's ranx name (aliases resolved); an unknown method is an error."""
    name = ALIASES.get(method, method) if isinstance(method, str) else method
    if name not in METHODS:
        one_of("method", method, FUSION_METHODS)
    return str(name)


def _real(name: str, value: Any, lo: float | None = None, hi: float | None = None) -> float:
    x: float = real(f"params[{name!r}]", value, low=lo, high=hi)
    return x


def _tables(name: str, value: Any, n_lists: int, scalar: bool = False) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") or len(value) != n_lists:
        raise KolmValueError(f"params[{name!r}] must hold one {'number' if scalar else 'table'} per run "
                             f"({n_lists}), in the runs' order, got {value!r:.80}")
    if scalar:
        return [_real(name, v) for v in value]
    out = []
    for t in value:
        try:  # numbers only: no text, None, bool or nested object is read as one
            arr = np.asarray(t)
        except ValueError:  # ragged
            arr = np.asarray(None)
        bools = isinstance(t, (list, tuple)) and any(isinstance(v, (bool, np.bool_)) for v in t)
        if arr.ndim != 1 or arr.dtype.kind not in "iuf" or bools or not np.all(np.isfinite(arr)):
            raise KolmValueError(f"params[{name!r}] must hold 1-D tables of finite numbers, got {t!r:.80}")
        out.append(arr.astype(np.float64))
    return out


def check_params(method: str, params: Mapping[str, Any], n_lists: int, *, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """``params`` of ``method`` checked, with defaults filled in and ``weights`` as float64
    (n_lists,) (all ones when not given); ``extra`` names parameters accepted but unchecked."""
    spec = METHODS[method]
    allowed = set(spec.params) | set(extra) | ({"weights"} if spec.weights else set())
    unknown = sorted(set(params) - allowed, key=str)  # names of any type (1, None) among them
    if unknown:
        raise KolmValueError(f"method {method!r} takes no parameter {unknown} (it takes {sorted(allowed)})")
    out: dict[str, Any] = {**spec.defaults, **params}
    missing = [p for p in spec.required if p not in out]
    if missing:
        hint = " (train them with fit_fusion)" if spec.supervised else ""
        raise KolmValueError(f"method {method!r} needs params {missing}{hint}")
    if spec.weights:
        out["weights"] = check_weights(out.get("weights"), n_lists)
    for name in spec.params:
        if name == "k":
            out[name] = check_k(out[name])
        elif name == "gamma":
            out[name] = _real(name, out[name])
        elif name in ("phi", "sigma"):
            out[name] = _real(name, out[name], 0.0, 1.0)
        elif name == "w":
            out[name] = non_negative_int("params['w']", out[name])
        else:
            out[name] = _tables(name, out[name], n_lists, scalar=name == "map_scores")
    return out


def _sum(e: Entries, values: F64, spec: Method, p: Mapping[str, Any], limit: int | None,
         n_threads: int | None, absent: float = 0.0) -> tuple[I64, I64, F64]:
    from kolm_search._kernels import load

    w = p["weights"]
    scale = dict(spec.scale)
    if spec.weights == "presence":
        scale["presence"] = w
    else:
        values = values * w[e.lists]
    if "gamma" in p:
        scale["power"] = p["gamma"]
    if "sigma" in p:
        scale["log_offset"] = p["sigma"]
    if absent:  # a run lacking the document counts ``absent``: shift every entry, add it back once
        values = values - absent * w[e.lists]
    if not np.all(np.isfinite(values)):
        raise KolmValueError("fusion needs finite scores: a non-finite score or normalised score was met")
    out_ptr, docs, scores = load("fusion").fuse_groups(e.ptr, e.lists, e.docs, values, e.n_docs, limit=limit,
                                                      n_threads=n_threads, **scale)
    if absent:
        scores = scores + absent * float(w.sum())
    return out_ptr, docs, scores


def reads_scores(method: str, norm: Norm) -> bool:
    """True when fusing with ``method`` (canonical name) after ``norm`` reads the lists' scores
    (not only their order): they must then be given, and finite."""
    spec = METHODS[method]
    return spec.kind == "comb" or spec.value is _score or method == "segfuse" or norm not in (None, "rank", "borda")


def fuse_entries(entries: Entries, method: str, norm: Norm, params: Mapping[str, Any], limit: int | None = None,
                 n_threads: int | None = None) -> tuple[I64, I64, F64]:
    """Fuse every query of ``entries`` with ``method`` (canonical name) after ``norm``;
    ``params`` as :func:`check_params` returns them. Returns ``out_ptr, docs, scores`` as
    :func:`kolm_search._kernels.fusion.fuse_groups` does (ties by first appearance)."""
    spec = METHODS[method]
    if reads_scores(method, norm) and not np.all(np.isfinite(entries.score)):
        bad = entries.score[~np.isfinite(entries.score)][0]
        raise KolmValueError(f"method {method!r} with norm {norm!r} reads the scores, which must be finite; got {bad}")
    e = apply_norm(entries, norm)
    if spec.kind == "comb":
        return comb.comb_stat(e, method, limit)
    if spec.kind == "condorcet":
        return voting.condorcet(e, params["weights"], limit, n_threads)
    if method in ("bordafuse", "w_bordafuse"):
        e, points = voting.borda_points(e)
        return _sum(e, points, spec, params, limit, n_threads)
    assert spec.value is not None
    absent = probabilistic.MIN_LOG_ODDS if method == "bayesfuse" else 0.0
    return _sum(e, spec.value(e, params), spec, params, limit, n_threads, absent)
