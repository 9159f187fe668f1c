"""Scale-out on Dask (``dask.distributed``), extra ``dask``; kolm_search never imports it itself.

- :func:`search_batch`: query-parallel batch search; the built pipeline travels to every worker
  once, each partition of queries runs ``search_batch`` there; the run equals the in-process one.
  :func:`ship` sends it once for many batches.
- :func:`evaluate`: the same job mapped over query partitions.
- :func:`rerank_run`: a batch re-ranking job's chunks as tasks, resumable with ``output=``
  (the same parts and manifest as the local job: a killed worker's chunk is redone, a job is
  resumed from any client).
- :class:`ShardedBM25` and :class:`ShardedDense`: a corpus split into shards living on workers;
  each shard returns its top-k per query and an exact merge gives the global top-k (BM25 shards
  score with collection-wide statistics, so scores equal the unsharded index's). Built from a
  corpus in memory (the constructors), or by the workers from the corpus files
  (``ShardedBM25.build``, ``ShardedDense.build``: :mod:`.shard_build`, each shard reading its
  part), saved as a folder whose manifest names every shard, and loaded again (``load``).
"""

from kolm_search.distributed.query_parallel import DistributedError, evaluate, search_batch, ship
from kolm_search.distributed.rerank import rerank_run
from kolm_search.distributed.shard_merge import merge_topk
from kolm_search.distributed.sharded import ShardedBM25, ShardedDense

__all__ = [
    "DistributedError",
    "ShardedBM25",
    "ShardedDense",
    "evaluate",
    "merge_topk",
    "rerank_run",
    "search_batch",
    "ship",
]
