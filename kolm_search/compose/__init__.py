"""Stage algebra: retrievers and rerankers composed with operators into pipelines
(``bm25 % 100 >> MMRReranker(...)``, ``bm25 + 2 * dense``, ``Fuse(bm25, dense)``), run once per
batch over candidate frames. ``Fuse``, fusion as a stage, is a retriever
(:mod:`kolm_search.retrievers.fuse_stage`): this package sits below the retrievers, which are stages.

- :mod:`~kolm_search.compose.stage`: :class:`Stage` and the operator nodes;
- :mod:`~kolm_search.compose.kinds`: retrieving and re-ranking stages over the ports, :func:`as_stage`;
- :mod:`~kolm_search.compose.frame_ops`: the operators over candidate frames;
- :mod:`~kolm_search.compose.runner`: how operands are run, shared and cached;
- :mod:`~kolm_search.compose.cache`: :class:`StageCache`, stage outputs on disk as parquet.
- :mod:`~kolm_search.compose.run_cache`: ``RunCache``, an experiment's finished runs on disk (Arrow IPC);
  :class:`~kolm_search.compose.cache.CacheFolder` is what the two caches share.
"""

from kolm_search.compose.cache import StageCache
from kolm_search.compose.kinds import RerankerStage, RetrieverStage, as_stage
from kolm_search.compose.runner import RunState, ServedByRunner, run_stage, sharing
from kolm_search.compose.stage import Stage

__all__ = ["RerankerStage", "RetrieverStage", "RunState", "ServedByRunner", "Stage", "StageCache", "as_stage",
           "run_stage", "sharing"]
