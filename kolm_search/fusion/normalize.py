"""Score normalisations applied to each (query, list) block before fusion (ranx's seven).

With ``s`` a block's scores, ``n`` its length, ``i`` an entry's zero-based rank and
``eps = 1e-9`` guarding every denominator (as ranx 0.3.21):

==================================  =====================================================
``"min-max"`` (``"min_max"``)       ``(s - min) / max(max - min, eps)``
``"min-max-inverted"``              ``(max - s) / max(max - min, eps)``, then the block is
(``"min_max_inverted"``)            re-ranked by it (lowest original score first)
``"max"``                           ``s / max(max, eps)``
``"sum"``                           ``(s - min) / max(sum(s) - n * min, eps)``
``"zmuv"`` (``"z-score"``)          ``(s - mean) / max(std, eps)``, population deviation
``"rank"``                          ``1 - i / n``
``"borda"``                         ``1 - i / c`` with ``c`` the query's candidates (documents
                                    of any list); the block gains every candidate it lacks,
                                    each scoring ``0.5 - (n - 1) / (2 c)``
``None``                            the scores as they are
==================================  =====================================================

A constant block (one entry, or equal scores) maps to 0 under min-max, as in ranx.
Rank-based methods read each block's order after the normalisation: unchanged
except for ``"min-max-inverted"`` (reversed) and ``"borda"`` (added candidates last).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kolm_search._params import one_of
from kolm_search.errors import KolmValueError
from kolm_search.fusion.entries import Entries
from kolm_search.fusion.voting import complete_lists

__all__ = ["NORMALIZATIONS", "Norm", "apply_norm", "canonical_norm", "normalize"]

Norm = str | None  # a name of NORMALIZATIONS, an alias, or None
NORMALIZATIONS = ("borda", "max", "min-max", "min-max-inverted", "rank", "sum", "zmuv")
_ALIASES = {"min_max": "min-max", "min_max_inverted": "min-max-inverted", "z-score": "zmuv"}
EPS = 1e-9
F64 = npt.NDArray[np.float64]


def canonical_norm(norm: object) -> str | None:
    """The normalisation's canonical name (aliases resolved); an unknown name is an error."""
    if norm is None:
        return None
    name = _ALIASES.get(norm, norm) if isinstance(norm, str) else norm
    if name not in NORMALIZATIONS:
        one_of("norm", norm, [None, *sorted([*NORMALIZATIONS, *_ALIASES])])
    return str(name)


def normalize(score: F64, block: npt.NDArray[np.int64], norm: Norm) -> F64:
    """Normalised scores float64 (n,) of entries in blocks ``block`` int64 (n,) (equal numbers
    contiguous, each block in rank order). ``"borda"`` needs the candidates: see :func:`apply_norm`."""
    name = canonical_norm(norm)
    if name is None or score.size == 0:
        return score
    if name == "borda":
        raise KolmValueError("the borda normalisation needs the other lists: use apply_norm on Entries")
    starts = np.flatnonzero(np.diff(block, prepend=block[0] - 1))
    sizes = np.diff(np.append(starts, score.size))
    seg = np.repeat(np.arange(starts.size), sizes)
    n = sizes[seg].astype(np.float64)
    if name == "rank":
        return 1.0 - (np.arange(score.size) - starts[seg]) / n
    lo = np.minimum.reduceat(score, starts)[seg]
    hi = np.maximum.reduceat(score, starts)[seg]
    if name == "min-max":
        return (score - lo) / np.maximum(hi - lo, EPS)
    if name == "min-max-inverted":
        return (hi - score) / np.maximum(hi - lo, EPS)
    if name == "max":
        return score / np.maximum(hi, EPS)
    if name == "sum":
        return (score - lo) / np.maximum(np.add.reduceat(score, starts)[seg] - lo * n, EPS)
    mean = (np.add.reduceat(score, starts) / sizes)[seg]
    std = np.sqrt((np.add.reduceat((score - mean) ** 2, starts) / sizes)[seg])
    return (score - mean) / np.maximum(std, EPS)


def apply_norm(entries: Entries, norm: Norm) -> Entries:
    """``entries`` with normalised scores, blocks re-ranked (min-max-inverted) or completed
    with the query's other candidates (borda), as the module docstring says."""
    name = canonical_norm(norm)
    if name is None:
        return entries
    if name == "borda":
        full, present, n_ranked, n_cand = complete_lists(entries)
        c = n_cand.astype(np.float64)
        score = np.where(present, 1.0 - full.position / c, 0.5 - (n_ranked - 1.0) / (2.0 * c))
        return full.with_score(score)
    out = entries.with_score(normalize(entries.score, entries.block, name))
    return out.reordered(-out.score) if name == "min-max-inverted" else out
