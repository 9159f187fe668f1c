"""Score normalisation for score fusion, per (query, list) block of entries.

``"min-max"`` maps a block to [0, 1] (a block whose scores are all equal maps to 1);
``"z-score"`` to zero mean and unit population deviation (a constant block maps to 0);
``None`` keeps the raw scores.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from kolm_search.errors import KolmValueError

__all__ = ["NORMALIZATIONS", "Norm", "normalize"]

Norm = Literal["min-max", "z-score"] | None
NORMALIZATIONS = ("min-max", "z-score")


def normalize(score: npt.NDArray[np.float64], block: npt.NDArray[np.int64], norm: Norm) -> npt.NDArray[np.float64]:
    """Normalised ``score`` float64 (n,); ``block`` int64 (n,) numbers the entries' blocks,
    equal numbers contiguous."""
    if norm is None:
        return score
    if norm not in NORMALIZATIONS:
        raise KolmValueError(f"norm must be 'min-max', 'z-score' or None, got {norm!r}")
    if score.size == 0:
        return score
    starts = np.concatenate([[0], np.flatnonzero(np.diff(block)) + 1])
    seg = np.repeat(np.arange(starts.size), np.diff(np.append(starts, score.size)))
    if norm == "min-max":
        lo = np.minimum.reduceat(score, starts)[seg]
        span = np.maximum.reduceat(score, starts)[seg] - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(span > 0, (score - lo) / np.where(span > 0, span, 1.0), 1.0)
    counts = np.bincount(seg).astype(np.float64)
    mean = (np.bincount(seg, weights=score) / counts)[seg]
    std = np.sqrt((np.bincount(seg, weights=(score - mean) ** 2) / counts)[seg])
    return np.where(std > 0, (score - mean) / np.where(std > 0, std, 1.0), 0.0)
