"""Fusion: the spec's RRF on documents, and fusion of runs and candidate frames in batch.

- :mod:`~kolm_search.fusion.rrf`: ``rrf_score``, ``merge_with_rrf`` (one query, documents);
- :mod:`~kolm_search.fusion.frames`: ``fuse`` (run DataFrames), ``fuse_frame`` (candidate frames),
  every query in one kernel call;
- :mod:`~kolm_search.fusion.normalize`: score normalisations for score fusion.
"""

from kolm_search.fusion.frames import FUSION_METHODS, fuse, fuse_frame
from kolm_search.fusion.normalize import NORMALIZATIONS, normalize
from kolm_search.fusion.rrf import check_k, check_weights, merge_with_rrf, rrf_score

__all__ = [
    "FUSION_METHODS",
    "NORMALIZATIONS",
    "check_k",
    "check_weights",
    "fuse",
    "fuse_frame",
    "merge_with_rrf",
    "normalize",
    "rrf_score",
]
