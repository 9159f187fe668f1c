"""Batch re-ranking on a Dask cluster: the local job's chunks as tasks, the same parts and manifest.

The job's plan (:class:`~kolm_search.jobs.rerank_plan.RerankJob`: the run, corpus and query texts)
and the reranker are shipped to every worker once; each chunk of ``batch_size`` queries is a
task that computes it with the local job's code. With ``output`` each task writes its part
into the job folder (atomically; the folder must be on storage every worker sees), so:

- a worker killed while computing a chunk only loses that chunk: Dask runs the task again
  elsewhere, and a part written twice is written with the same bytes;
- a job stopped for any reason is resumed from any client (or locally with
  :func:`kolm_search.jobs.rerank.rerank_run` and the same ``batch_size``): finished parts are kept;
- the folder equals the local job's, part for part.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd

from kolm_search._extras import require
from kolm_search._params import boolean, positive_int
from kolm_search._progress import progress_bar, progress_scope
from kolm_search.contract.port_calls import fingerprint_of
from kolm_search.errors import DistributedError
from kolm_search.jobs.rerank_plan import RerankJob, empty_run

__all__ = ["rerank_run"]


def _chunk(job: RerankJob, reranker: Any, i: int, folder: dict[str, Any] | None) -> pd.DataFrame | int:
    """On a worker: chunk ``i`` re-ranked, returned, or written as part ``i`` (its row count returned)."""
    from kolm_search._bridge import run_sync
    from kolm_search.io.parts import PartsFolder

    with progress_scope(False):
        frame = run_sync(job.compute(i, reranker))
    if folder is None:
        return frame
    PartsFolder(**folder).write(i, frame)
    return len(frame)


def _collect(futures: list[Any], chunks: list[int]) -> list[Any]:
    """The tasks' results in order; the first failure cancels the rest and names its chunk."""
    out = []
    for fut, i in zip(futures, chunks, strict=True):
        try:
            out.append(fut.result())
        except Exception as exc:
            for other in futures:
                other.cancel()
            raise DistributedError(f"rerank chunk {i} failed on the cluster: {type(exc).__name__}: {exc}") from exc
    return out


def rerank_run(run: Any, corpus: Any, reranker: Any, top_k: int = 100, batch_size: int | None = None, *,
               dask_client: Any, queries: Any = None, output: str | Path | None = None, restart: bool = False,
               fingerprint: str | None = None, score_cache: Any = None, npartitions: int | None = None,
               progress: bool = False) -> pd.DataFrame:
    """:func:`kolm_search.jobs.rerank.rerank_run` with its chunks computed on a Dask cluster.

    Parameters
    ----------
    run, corpus, reranker, top_k, queries, output, restart, fingerprint, score_cache
        As :func:`kolm_search.jobs.rerank.rerank_run`; the reranker must pickle (and a score cache
        be on storage the workers share). The result equals the local job's with the same
        ``batch_size``.
    batch_size : int, optional
        Queries per chunk (one task, one part). Default: the queries split into
        ``npartitions`` chunks. Resuming a job needs the ``batch_size`` it started with (the
        folder records it, and refuses another naming it).
    dask_client : distributed.Client
    npartitions : int, optional
        Chunks when ``batch_size`` is not given (default: twice the number of workers).
    progress : bool, default False
        A progress bar of finished chunks on stderr.

    Raises
    ------
    DistributedError
        Naming the chunk that failed (after Dask's own retries); with ``output`` the parts
        finished are kept, for the next run to resume.
    """
    distributed = require("distributed", "dask")
    from kolm_search.distributed.query_parallel import _default_parts, _shipped

    boolean("progress", progress)
    top_k = positive_int("top_k", top_k)
    job = RerankJob.build(run, corpus, queries, top_k, 1)
    if batch_size is None:
        batch_size = max(1, -(-len(job.qids) // _default_parts(dask_client, npartitions)))
    job = dataclasses.replace(job, batch_size=positive_int("batch_size", batch_size))
    if score_cache is not None:
        from kolm_search.adapters.scoring import with_score_cache

        reranker = with_score_cache(reranker, score_cache, fingerprint)
    folder: Any = None
    spec: dict[str, Any] | None = None
    if output is not None:
        from kolm_search.io.parts import PartsFolder

        spec = {"path": str(output), "kind": "rerank_run", "n_parts": job.n_chunks,
                "fingerprint": job.fingerprint(fingerprint_of(reranker, fingerprint))}
        folder = PartsFolder(restart=restart, **spec)
    with folder.lock() if folder is not None else contextlib.nullcontext():
        done = set(folder.done()) if folder is not None else set()
        todo = [i for i in range(job.n_chunks) if i not in done]
        futures = []
        if todo:
            job_f, reranker_f = _shipped(job, dask_client), _shipped(reranker, dask_client)
            futures = [dask_client.submit(_chunk, job_f, reranker_f, i, spec, pure=False) for i in todo]
        with progress_scope(progress), progress_bar(job.n_chunks, "rerank", "chunk", initial=len(done)) as bar:
            for _ in distributed.as_completed(futures):
                bar.update(1)
        out = _collect(futures, todo)
        if folder is not None:
            result = folder.read() if job.n_chunks else empty_run()
        else:
            result = pd.concat(out, ignore_index=True) if out else empty_run()
    return job.finish(result)

