"""Search strategies over a parameter space scored by a callable: every grid point, or
coordinate ascent (the search behind :func:`kolm_search.optimize_fusion`).

A space is named axes of values, plus optionally one weight per run. Weights are searched as
vectors normalised to sum 1 (their direction is what a fusion reads): on the grid, every
distinct direction of per-run steps :data:`WEIGHT_STEPS` (:func:`weight_grid`, which has
:func:`weight_grid_size` points: 13, 91, 529, 2,851, 14,833 ... for 2, 3, 4, 5, 6 runs, about
``5**n``); in coordinate ascent, each run's weight is one coordinate over those steps.

Coordinate ascent (:func:`coordinate_ascent`) starts from the best of equal weights and each
run alone (``1`` for it, ``0`` for the others) with the other axes at their start values, then
sweeps the coordinates in order (the named axes, then each run's weight), trying every value
of one coordinate with the others held and moving on a strict improvement, until a sweep
improves nothing or after :data:`MAX_ROUNDS` sweeps. It scores at most
``(n_runs + 1) + MAX_ROUNDS * (sum of axis sizes + n_runs * len(WEIGHT_STEPS))`` points:
linear in the number of runs, where the grid grows like ``5**n``.

The callable scores a point (a dict axis -> value, ``"weights"`` a tuple) and memoises
nothing here: the caller records each distinct point once.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["MAX_ROUNDS", "WEIGHT_STEPS", "coordinate_ascent", "coordinate_budget", "grid_points", "grid_size",
           "normalised", "weight_grid", "weight_grid_size"]

WEIGHT_STEPS = (0.0, 0.25, 0.5, 0.75, 1.0)
MAX_ROUNDS = 10

Point = dict[str, Any]


def normalised(raw: Sequence[float]) -> tuple[float, ...] | None:
    """``raw`` scaled to sum 1 and rounded to 6 decimals (None when it sums to 0)."""
    total = sum(raw)
    return None if total == 0 else tuple(round(c / total, 6) for c in raw)


def weight_grid(n_runs: int) -> list[tuple[float, ...]]:
    """Every distinct normalised vector of per-run :data:`WEIGHT_STEPS`, in product order."""
    seen: set[tuple[float, ...]] = set()
    out = []
    for combo in itertools.product(WEIGHT_STEPS, repeat=n_runs):
        norm = normalised(combo)
        if norm is not None and norm not in seen:
            seen.add(norm)
            out.append(norm)
    return out


def weight_grid_size(n_runs: int) -> int:
    """``len(weight_grid(n_runs))`` without building it: the steps are ``0..4`` quarters, and
    distinct directions are the nonzero vectors of ``{0..4}**n`` whose entries share no common
    factor (Moebius over the divisors 2 and 3): ``5**n - 3**n - 2**n + 1``."""
    return 5 ** n_runs - 3 ** n_runs - 2 ** n_runs + 1


def grid_size(axes: Mapping[str, Sequence[Any]], weights_of: int | None = None) -> int:
    """Points of the full grid over ``axes`` (times :func:`weight_grid_size` of ``weights_of`` runs)."""
    size = weight_grid_size(weights_of) if weights_of else 1
    for values in axes.values():
        size *= len(values)
    return size


def grid_points(axes: Mapping[str, Sequence[Any]]) -> list[Point]:
    """Every point of the grid, the last axis varying fastest."""
    return [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]


def coordinate_budget(axes: Mapping[str, Sequence[Any]], n_weights: int) -> int:
    """The most points :func:`coordinate_ascent` can score."""
    seeds = n_weights + 1 if n_weights else 1
    return seeds + MAX_ROUNDS * (sum(len(v) for v in axes.values()) + n_weights * len(WEIGHT_STEPS))


def coordinate_ascent(axes: Mapping[str, Sequence[Any]], score: Callable[[Point], float], *,
                      start: Mapping[str, Any], n_weights: int = 0) -> Point:
    """Coordinate ascent over ``axes`` (and one weight per run when ``n_weights``); see the
    module doc. ``start`` gives each axis's first value (default: its first entry). Returns
    the best point found (ties: the one found first)."""
    coords: list[tuple[Any, Sequence[Any]]] = list(axes.items())
    coords += [(("weights", i), WEIGHT_STEPS) for i in range(n_weights)]
    state: dict[Any, Any] = {name: start.get(name, values[0]) if name in axes else 1.0
                             for name, values in coords}

    def point(st: Mapping[Any, Any]) -> Point | None:
        p = {name: st[name] for name in axes}
        if n_weights:
            w = normalised([st[("weights", i)] for i in range(n_weights)])
            if w is None:
                return None
            p["weights"] = w
        return p

    seeds = [dict(state)]
    for i in range(n_weights):  # each run alone
        seeds.append({**state, **{("weights", j): float(j == i) for j in range(n_weights)}})
    best_state, best_score = seeds[0], -float("inf")
    for seed in seeds:
        p = point(seed)
        assert p is not None  # seeds have a nonzero weight
        s = score(p)
        if s > best_score:
            best_state, best_score = seed, s
    state = best_state
    for _ in range(MAX_ROUNDS):
        moved = False
        for name, values in coords:
            for value in values:
                if value == state[name]:
                    continue
                trial = {**state, name: value}
                p = point(trial)
                if p is None:
                    continue
                s = score(p)
                if s > best_score:
                    state, best_score, moved = trial, s, True
        if not moved:
            break
    best = point(state)
    assert best is not None
    return best
