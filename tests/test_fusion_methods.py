"""Every fusion method x normalisation against ranx 0.3.21, per (query, document) score.

Random runs: partial overlap, different lengths, queries missing from some runs (an empty
list for ranx, which needs one query set), tied scores where the combination reads scores
only. ranx's tie order (numba's quicksort) and its Borda-normalised order (Python set order,
which varies with the hash seed) are not reproducible, so order-dependent combinations get
distinct scores and rank-based methods after "borda" are checked against an explicit
expansion instead. Condorcet is compared on the queries where ranx's comparator is a total
order; the supervised methods are trained on the same qrels in both.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kolm_search import fit_fusion, fuse
from kolm_search.fusion.methods import METHODS

ranx = pytest.importorskip("ranx")
from ranx import Qrels, Run  # noqa: E402
from ranx import fuse as ranx_fuse  # noqa: E402
from ranx.normalization import norm_switch  # noqa: E402

NORMS = [None, "min-max", "min-max-inverted", "max", "sum", "zmuv", "rank", "borda"]
WEIGHTED = {"wsum", "wmnz", "mixed", "w_bordafuse", "w_condorcet"}
PARAMS: dict[str, dict[str, Any]] = {"gmnz": {"gamma": 0.7}, "rbc": {"phi": 0.8}, "logn_isr": {"sigma": 0.3},
                                     "rrf": {"k": 10}}
Data = tuple[list[pd.DataFrame], list[dict[str, dict[str, float]]]]


def random_runs(seed: int, *, tied: bool, empty: bool = True, n_runs: int = 3, n_queries: int = 6) -> Data:
    """Runs as DataFrames and as ranx dicts (every query in each, empty where the run lacks it)."""
    rng = np.random.default_rng(seed)
    frames, dicts = [], []
    for r in range(n_runs):
        rows: list[tuple[str, str, float]] = []
        d: dict[str, dict[str, float]] = {}
        for q in range(n_queries):
            n = 0 if empty and q == 0 and r > 0 else int(rng.integers(0 if empty else 1, 9))
            docs = rng.choice(14, n, replace=False)
            scores = rng.integers(0, 4, n).astype(float) if tied else rng.random(n) * 3 - 1
            d[f"q{q}"] = {f"d{x}": float(s) for x, s in zip(docs, scores, strict=True)}
            rows += [(f"q{q}", f"d{x}", float(s)) for x, s in zip(docs, scores, strict=True)]
        frames.append(pd.DataFrame(rows, columns=["qid", "doc_id", "score"]).sample(frac=1, random_state=r))
        dicts.append(d)
    return frames, dicts


def as_scores(run: pd.DataFrame) -> dict[tuple[str, str], float]:
    return {(str(q), str(d)): float(s) for q, d, s in zip(run.qid, run.doc_id, run.score, strict=True)}


def ranx_scores(run: Any) -> dict[tuple[str, str], float]:
    return {(q, d): float(s) for q, docs in run.to_dict().items() for d, s in docs.items()}


def assert_same_scores(got: dict, want: dict, where: str) -> None:
    assert set(got) == set(want), f"{where}: documents differ {sorted(set(got) ^ set(want))[:5]}"
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), f"{where}: {key} {got[key]} != {value}"


def method_params(method: str, n_runs: int = 3) -> dict[str, Any]:
    params = dict(PARAMS.get(method, {}))
    if method in WEIGHTED:
        params["weights"] = [0.2, 0.5, 0.3][:n_runs]
    return params


SUM_COMB = [m for m, s in METHODS.items() if not s.supervised and s.kind != "condorcet"]


@pytest.mark.parametrize("method", SUM_COMB)
def test_unsupervised_methods_equal_ranx(method: str) -> None:
    spec = METHODS[method]
    for norm, seed in itertools.product(NORMS, range(2)):
        order_dependent = spec.rank_based or norm in ("rank", "borda")
        if order_dependent and norm == "borda":
            continue  # ranx's order there is Python's set order: see test_rank_methods_after_borda
        frames, dicts = random_runs(seed, tied=not order_dependent, empty=norm != "zmuv")  # ranx's zmuv drops
        params = method_params(method)                                                    # queries beside an empty one
        want = ranx_scores(ranx_fuse([Run.from_dict(d) for d in dicts], norm=norm, method=method, params=params))
        got = as_scores(fuse(frames, method=method, norm=norm, params=params))
        assert_same_scores(got, want, f"{method} {norm} seed {seed}")


@pytest.mark.parametrize("method", [m for m, s in METHODS.items() if s.rank_based and s.kind == "sum"
                                    and not s.supervised])
def test_rank_methods_after_borda(method: str) -> None:
    """Borda-normalised lists, built by hand (each list completed with the query's other
    candidates, first-appearance order, scored as ranx's borda_norm), fused with no norm."""
    frames, _ = random_runs(3, tied=False)
    frames = [f.sort_values("score", ascending=False, kind="stable") for f in frames]
    first = pd.concat(frames).drop_duplicates(["qid", "doc_id"])
    expanded = []
    for f in frames:
        parts = []
        for q, cands in first.groupby("qid", sort=False):
            own = f[f.qid == q]
            c, n = len(cands), len(own)
            lacking = cands[~cands.doc_id.isin(own.doc_id)]
            parts.append(own.assign(score=1 - np.arange(n) / c))
            parts.append(lacking.assign(score=0.5 - (n - 1) / (2 * c)))
        expanded.append(pd.concat(parts).assign(rank=lambda x: np.arange(len(x))))  # rank keeps this order
    params = method_params(method)
    want = as_scores(fuse(expanded, method=method, params=params))
    got = as_scores(fuse(frames, method=method, norm="borda", params=params))
    assert_same_scores(got, want, method)


def agreeing_runs(seed: int, n_queries: int = 12) -> Data:
    """Three noisy copies of one ranking per query, each missing some documents (and one run
    missing a query): majorities are then mostly a total order, but not always."""
    rng = np.random.default_rng(seed)
    frames, dicts = [], []
    base = [rng.permutation(14)[: rng.integers(1, 8)] for _ in range(n_queries)]
    for r in range(3):
        rows: list[tuple[str, str, float]] = []
        d: dict[str, dict[str, float]] = {}
        for q, docs in enumerate(base):
            keep = rng.random(len(docs)) > (1.0 if q == 0 and r == 2 else 0.15)
            scores = -np.arange(len(docs)) + rng.normal(0, 0.7, len(docs))
            d[f"q{q}"] = {f"d{x}": float(s) for x, s in zip(docs[keep], scores[keep], strict=True)}
            rows += [(f"q{q}", f"d{x}", float(s)) for x, s in zip(docs[keep], scores[keep], strict=True)]
        frames.append(pd.DataFrame(rows, columns=["qid", "doc_id", "score"]))
        dicts.append(d)
    return frames, dicts


def ranx_total_order(dicts: list[dict], q: str, weights: list[float]) -> bool:
    """Whether ranx's Condorcet comparator is a strict total order on query q's candidates
    (its sort then has one possible outcome)."""
    lists = [sorted(d[q], key=lambda x, d=d: -d[q][x]) for d in dicts]
    cands = sorted({x for lst in lists for x in lst})
    pos = [{x: i for i, x in enumerate(lst)} for lst in lists]

    def first(x: str, y: str) -> bool:
        x_votes = sum(w for p, w in zip(pos, weights, strict=True) if p.get(x, 10**6) < p.get(y, 10**6))
        return x_votes >= sum(weights) - x_votes

    wins = dict.fromkeys(cands, 0)
    for x, y in itertools.combinations(cands, 2):
        if first(x, y) == first(y, x):
            return False
        wins[x if first(x, y) else y] += 1
    return sorted(wins.values()) == list(range(len(cands)))


@pytest.mark.parametrize("method", ["condorcet", "w_condorcet"])
def test_condorcet_equals_ranx_where_ranx_is_determined(method: str) -> None:
    compared = 0
    for norm, seed in itertools.product([None, "min-max-inverted"], range(4)):
        frames, dicts = agreeing_runs(10 + seed) if seed % 2 else random_runs(10 + seed, tied=False, n_queries=12)
        params = method_params(method)
        weights = params.get("weights", [1.0, 1.0, 1.0])
        want = ranx_scores(ranx_fuse([Run.from_dict(d) for d in dicts], norm=norm, method=method, params=params))
        got = as_scores(fuse(frames, method=method, norm=norm, params=params))
        assert set(got) == set(want)
        ranx_dicts = dicts if norm is None else [{q: {x: -s for x, s in docs.items()} for q, docs in d.items()}
                                                 for d in dicts]
        for q in dicts[0]:
            if ranx_total_order(ranx_dicts, q, weights):
                compared += 1
                assert_same_scores({k: v for k, v in got.items() if k[0] == q},
                                   {k: v for k, v in want.items() if k[0] == q}, f"{method} {norm} {q}")
    assert compared >= 20


def random_qrels(dicts: list[dict], seed: int) -> tuple[pd.DataFrame, dict[str, dict[str, int]]]:
    rng = np.random.default_rng(seed)
    rows = []
    for q in dicts[0]:
        cands = sorted({x for d in dicts for x in d[q]}) or ["d0"]
        judged = rng.choice(cands, max(1, len(cands) // 2), replace=False)
        rows += [(q, str(x), int(rng.integers(0, 3))) for x in judged]
    frame = pd.DataFrame(rows, columns=["qid", "doc_id", "relevance"])
    nested: dict[str, dict[str, int]] = {}
    for q, x, g in rows:
        nested.setdefault(q, {})[x] = g
    return frame, nested


SUPERVISED = {"probfuse": {"n_segments": 3}, "segfuse": {}, "slidefuse": {"w": 2}, "posfuse": {},
              "bayesfuse": {}, "mapfuse": {}}


@pytest.mark.parametrize("method", list(SUPERVISED))
def test_supervised_methods_train_and_fuse_as_ranx(method: str) -> None:
    from ranx import fusion as rf

    for norm, seed in itertools.product([n for n in NORMS if n != "borda"], [20]):
        frames, dicts = random_runs(seed, tied=False, empty=norm != "zmuv", n_queries=10)
        qrels, nested = random_qrels(dicts, seed)
        runs = [Run.from_dict(d) for d in dicts]
        normed = runs if norm is None else [norm_switch(norm)(r) for r in runs]
        ranx_qrels = Qrels.from_dict(nested)
        extra = SUPERVISED[method]
        if method == "probfuse":
            trained: dict[str, Any] = {"probs": rf.probfuse_train(ranx_qrels, normed, extra["n_segments"])}
        else:
            key = {"bayesfuse": "log_odds", "mapfuse": "map_scores"}.get(method, "probs")
            trained = {key: getattr(rf, f"{method}_train")(ranx_qrels, normed)}
        fitted = fit_fusion(frames, qrels, method, norm=norm, **extra)
        for key, tables in trained.items():
            for mine, theirs in zip(fitted.params[key], tables, strict=True):
                np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-12, err_msg=f"{method} {norm} {key}")
        params = {**trained, **({"w": extra["w"]} if "w" in extra else {})}
        want = ranx_scores(ranx_fuse(runs, norm=norm, method=method, params=params))
        assert_same_scores(as_scores(fitted.fuse(frames)), want, f"{method} {norm}")
