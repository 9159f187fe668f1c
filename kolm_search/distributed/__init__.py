"""Scale-out on Dask (``dask.distributed``), extra ``dask``; kolm_search never imports it itself.

- :func:`search_batch`: query-parallel batch search; the built pipeline travels to every worker
  once, each partition of queries runs ``search_batch`` there; the run equals the in-process one.
  :func:`ship` sends it once for many batches.
- :func:`evaluate` and :func:`rerank_run`: the same jobs mapped over query partitions.
- :class:`ShardedBM25` and :class:`ShardedDense`: a corpus split into shards living on workers;
  each shard returns its top-k per query and an exact merge gives the global top-k (BM25 shards
  score with collection-wide statistics, so scores equal the unsharded index's).
"""

from kolm_search.distributed.query_parallel import DistributedError, evaluate, rerank_run, search_batch, ship
from kolm_search.distributed.sharded import ShardedBM25, ShardedDense, merge_topk

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
