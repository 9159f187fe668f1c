"""Query-parallel jobs on a Dask cluster: batch search and evaluation (re-ranking: :mod:`.rerank`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from kolm_search._extras import require
from kolm_search._params import boolean, positive_int
from kolm_search.errors import DistributedError, KolmValueError

__all__ = ["DistributedError", "evaluate", "search_batch", "ship"]


def _partitions(frame: pd.DataFrame, n: int, by: str | None = None) -> list[pd.DataFrame]:
    """Split into ``n`` contiguous parts (whole groups of ``by`` kept together)."""
    n = max(1, min(n, len(frame))) if len(frame) else 1
    if by is None:
        bounds = np.linspace(0, len(frame), n + 1).astype(int)
        return [frame.iloc[a:b] for a, b in itertools.pairwise(bounds)]
    keys = list(dict.fromkeys(frame[by]))
    groups = np.array_split(np.arange(len(keys)), n)
    parts = []
    for g in groups:
        wanted = {keys[i] for i in g}
        parts.append(frame[frame[by].isin(wanted)])
    return [p for p in parts if len(p)] or [frame.iloc[:0]]


def _gather(dask_client: Any, futures: Sequence[Any], what: str) -> list[Any]:
    out = []
    for i, fut in enumerate(futures):
        try:
            out.append(fut.result())
        except Exception as exc:
            for other in futures[i + 1:]:
                other.cancel()
            raise DistributedError(f"{what} {i} failed on the cluster: {type(exc).__name__}: {exc}") from exc
    return out


def ship(obj: Any, dask_client: Any) -> Any:
    """Send a built pipeline (or corpus, or reranker) to every worker once; returns its Future.

    Pass the Future wherever a job takes the object (``search_batch(shipped, ...)``) to run
    many batches without shipping the pipeline again each time.
    """
    require("distributed", "dask")
    return dask_client.scatter(obj, broadcast=True, hash=False)


def _shipped(obj: Any, dask_client: Any) -> Any:
    from distributed import Future

    return obj if isinstance(obj, Future) else ship(obj, dask_client)


def _default_parts(dask_client: Any, npartitions: int | None) -> int:
    if npartitions is not None:
        parts: int = positive_int("npartitions", npartitions)
        return parts
    workers = len(dask_client.scheduler_info().get("workers", {})) or 1
    return 2 * workers


def _search_part(client: Any, part: pd.DataFrame, kwargs: dict[str, Any]) -> pd.DataFrame:
    return client.search_batch(part, **kwargs).run


def _progress(futures: Sequence[Any], enabled: bool) -> None:
    if enabled:
        from distributed import progress

        progress(list(futures), notebook=False)


def search_batch(client: Any, queries: Any, *, dask_client: Any, npartitions: int | None = None,
                 progress: bool = False, **search_kwargs: Any) -> pd.DataFrame:
    """``client.search_batch(queries, **search_kwargs).run``, computed on a Dask cluster.

    Parameters
    ----------
    client : SearchClient, SearchPipeline, or the Future returned by :func:`ship`
        Shipped to every worker (``scatter(broadcast=True)``) unless already shipped; it must
        pickle (the built-in pipelines are plain arrays and configuration).
    queries : list of str, DataFrame ``qid, query``, or dask DataFrame with those columns
    dask_client : distributed.Client
    npartitions : int, optional
        Default: twice the number of workers (a dask DataFrame keeps its own partitions, each
        searched where it is computed, never collected on the client first).
    progress : bool
        Show Dask's own progress bar.

    Returns
    -------
    DataFrame ``qid, doc_id, rank, score`` equal to the in-process run (same order).

    Raises
    ------
    DistributedError
        Naming the partition that failed (after Dask's own retries).
    """
    require("distributed", "dask")
    if hasattr(queries, "to_delayed") and hasattr(queries, "npartitions"):  # a dask DataFrame
        shipped = _shipped(client, dask_client)
        part_futures = dask_client.compute(queries.to_delayed())
        futures = [dask_client.submit(_search_part, shipped, p, dict(search_kwargs), pure=False) for p in part_futures]
        _progress(futures, progress)
        return pd.concat(_gather(dask_client, futures, "query partition"), ignore_index=True)
    if isinstance(queries, pd.DataFrame):
        frame = queries
    elif isinstance(queries, Sequence) and not isinstance(queries, (str, bytes)):
        if not all(isinstance(q, str) for q in queries):
            raise KolmValueError("distributed search_batch takes strings or a DataFrame with qid and query")
        frame = pd.DataFrame({"qid": np.arange(len(queries)), "query": list(queries)})
    else:
        raise KolmValueError(f"queries must be a list of str or a DataFrame, got {type(queries).__name__}")
    parts = _partitions(frame, _default_parts(dask_client, npartitions))
    shipped = _shipped(client, dask_client)
    futures = [dask_client.submit(_search_part, shipped, part, dict(search_kwargs), pure=False) for part in parts]
    _progress(futures, progress)
    runs = _gather(dask_client, futures, "query partition")
    out = pd.concat(runs, ignore_index=True)
    if not isinstance(queries, pd.DataFrame):
        out["qid"] = out["qid"].astype(np.int64)
    return out


def _eval_part(run: pd.DataFrame, qrels: pd.DataFrame, metrics: list[str], kwargs: dict[str, Any]) -> pd.DataFrame:
    from kolm_search.evaluation import evaluate as local_evaluate

    table = local_evaluate(run, qrels, metrics, per_query=True, **kwargs)
    return table


@overload
def evaluate(run: pd.DataFrame, qrels: pd.DataFrame, metrics: Sequence[Any] | Any, *, dask_client: Any,
             npartitions: int | None = ..., per_query: Literal[False] = ..., **kwargs: Any) -> dict[str, float]: ...
@overload
def evaluate(run: pd.DataFrame, qrels: pd.DataFrame, metrics: Sequence[Any] | Any, *, dask_client: Any,
             npartitions: int | None = ..., per_query: Literal[True], **kwargs: Any) -> pd.DataFrame: ...
@overload
def evaluate(run: pd.DataFrame, qrels: pd.DataFrame, metrics: Sequence[Any] | Any, *, dask_client: Any,
             npartitions: int | None = ..., per_query: bool = ...,
             **kwargs: Any) -> dict[str, float] | pd.DataFrame: ...  # a bool known only at run time
def evaluate(run: pd.DataFrame, qrels: pd.DataFrame, metrics: Sequence[Any] | Any, *, dask_client: Any,
             npartitions: int | None = None, per_query: bool = False, **kwargs: Any) -> dict[str, float] | pd.DataFrame:
    """:func:`kolm_search.evaluate` over query partitions; exact (per-query scores, then means).

    The same two call forms and return types: the ``dict`` of means, or with ``per_query=True``
    the ``DataFrame`` of each query's values (``bool`` only).
    """
    from kolm_search.engine.runs import as_qrels, as_run
    from kolm_search.evaluation.measures import aggregate, metric_list, parse_measure

    require("distributed", "dask")
    per_query = boolean("per_query", per_query)
    metrics = metric_list(metrics)
    specs = [parse_measure(m) for m in metrics]  # names and ir_measures objects, checked before shipping
    keys = [s.key for s in specs]
    run, qrels = as_run(run), as_qrels(qrels)
    run = run.assign(qid=run["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    parts = _partitions(run, _default_parts(dask_client, npartitions), by="qid")
    futures = []
    for part in parts:
        keep = set(part["qid"])
        futures.append(dask_client.submit(_eval_part, part, qrels[qrels["qid"].isin(keep)], keys, dict(kwargs), pure=False))
    tables = [t for t in _gather(dask_client, futures, "evaluation partition") if len(t)]
    table = pd.concat(tables, ignore_index=True).sort_values("qid", kind="stable").reset_index(drop=True) if tables else \
        pd.DataFrame(columns=["qid", *keys])
    if per_query:
        return table
    return aggregate(table, specs)  # the counts add up over queries, gm_map is a geometric mean
