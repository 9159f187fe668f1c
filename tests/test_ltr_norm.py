"""normalise_per_query (LTRReranker's query_norm) against pandas' groupby transforms as the oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kolm_search.errors import KolmValueError
from kolm_search.retrievers.ltr_norm import QUERY_NORMS, normalise_per_query


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 7, size=200)  # rows of one query are not adjacent
    x = np.round(rng.normal(size=(200, 3)), 1)  # rounded: ties within a query
    x[group == 3, 1] = 2.5  # a column constant within one query
    x[:, 2] = group * 1.5  # a column constant within every query (a query's length)
    return x, group


def _oracle(x: np.ndarray, group: np.ndarray, how: str) -> np.ndarray:
    frame = pd.DataFrame(x).assign(g=group).groupby("g")
    if how == "none":
        return x
    if how == "minmax":
        lo, hi = frame.transform("min").to_numpy(), frame.transform("max").to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(hi > lo, (x - lo) / (hi - lo), 0.0)
    if how == "zscore":
        mean, std = frame.transform("mean").to_numpy(), frame.transform(lambda c: c.std(ddof=0)).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(std > 1e-12, (x - mean) / std, 0.0)
    if how == "rank":
        return frame.rank(method="min", ascending=False).to_numpy() - 1
    return np.hstack([_oracle(x, group, "minmax"), _oracle(x, group, "rank")])


@pytest.mark.parametrize("how", QUERY_NORMS)
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_the_groupby_oracle(how: str, seed: int) -> None:
    x, group = _data(seed)
    np.testing.assert_allclose(normalise_per_query(x, group, how), _oracle(x, group, how), atol=1e-9)


def test_each_query_is_normalised_on_its_own() -> None:
    x, group = _data(2)
    whole = normalise_per_query(x, group, "minmax+rank")
    mine = group == 4
    np.testing.assert_allclose(whole[mine], normalise_per_query(x[mine], group[mine], "minmax+rank"))
    # scaling one query's scores changes nothing under minmax or rank (the point of normalising)
    scaled = x.copy()
    scaled[mine] = 10 * scaled[mine] + 3
    np.testing.assert_allclose(normalise_per_query(scaled, group, "minmax+rank"), whole, atol=1e-9)


def test_bad_input() -> None:
    x, group = _data(0)
    with pytest.raises(KolmValueError, match="query_norm must be one of"):
        normalise_per_query(x, group, "l2")
    with pytest.raises(KolmValueError, match="do not match"):
        normalise_per_query(x, group[:-1], "minmax")
    assert normalise_per_query(np.zeros((0, 2)), np.zeros(0, np.int64), "rank").shape == (0, 2)
