"""Fusion: the spec's RRF on documents, and every ranx fusion method over runs and candidate
frames in batch.

- :mod:`~kolm_search.fusion.rrf`: ``rrf_score``, ``merge_with_rrf`` (one query, documents);
- :mod:`~kolm_search.fusion.frames`: ``fuse`` (run DataFrames), ``fuse_frame`` (candidate
  frames), every query at once;
- :mod:`~kolm_search.fusion.methods`: the methods (ranx 0.3.21's 25) and their formulas;
  :mod:`~kolm_search.fusion.comb` (min/max/med), :mod:`~kolm_search.fusion.voting` (Borda,
  Condorcet), :mod:`~kolm_search.fusion.probabilistic` (the supervised ones);
- :mod:`~kolm_search.fusion.normalize`: the score normalisations;
- :mod:`~kolm_search.fusion.fitted`: ``FittedFusion``, a method with its trained parameters.
"""

from kolm_search.fusion.fitted import FittedFusion
from kolm_search.fusion.frames import fuse, fuse_frame
from kolm_search.fusion.methods import FUSION_METHODS, METHODS
from kolm_search.fusion.normalize import NORMALIZATIONS, normalize
from kolm_search.fusion.rrf import check_k, check_weights, merge_with_rrf, rrf_score

__all__ = [
    "FUSION_METHODS",
    "FittedFusion",
    "METHODS",
    "NORMALIZATIONS",
    "check_k",
    "check_weights",
    "fuse",
    "fuse_frame",
    "merge_with_rrf",
    "normalize",
    "rrf_score",
]
