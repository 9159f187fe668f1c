"""Waiting for Dask tasks with a deadline; a failure named, the other tasks cancelled."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kolm_search._params import seconds
from kolm_search.errors import DistributedError, KolmError

__all__ = ["Deadline", "cluster_workers", "results"]


class Deadline:
    """A point in time ``timeout`` seconds from now (checked: a positive number)."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout = float(seconds("timeout", timeout, none=False))
        self.what = what
        self.at = time.monotonic() + self.timeout

    def left(self) -> float:
        """Seconds left (at least a millisecond: an expired deadline is noticed by the wait)."""
        return max(self.at - time.monotonic(), 1e-3)


def cluster_workers(dask_client: Any, deadline: Deadline) -> list[str]:
    """The addresses of the cluster's workers. A cluster with none at this moment (its workers
    restarting after one was killed, or still starting) is waited for until ``deadline``.

    Raises
    ------
    DistributedError
        No worker came within ``deadline`` (naming what waited).
    """
    workers = list(dask_client.scheduler_info()["workers"])
    if workers:
        return workers
    try:
        dask_client.wait_for_workers(1, timeout=deadline.left())
    except TimeoutError as exc:  # distributed's WorkerStartTimeoutError is one
        raise DistributedError(f"{deadline.what}: the Dask cluster has no workers "
                               f"(none came within {deadline.timeout:g} s)") from exc
    workers = list(dask_client.scheduler_info()["workers"])
    if not workers:
        raise DistributedError(f"{deadline.what}: the Dask cluster has no workers")
    return workers


def results(futures: Sequence[Any], names: Sequence[str], deadline: Deadline) -> list[Any]:
    """The results of ``futures`` in order, each waited for until ``deadline``.

    The first failure (in the order the tasks end) cancels the others and raises: the task's
    own :class:`~kolm_search.errors.KolmError` as it is (a ``FrameValidationError`` names the
    file and line of bad input, exactly as a single-machine build does), anything else (a
    worker killed more often than Dask's ``allowed-failures``, a bug) as
    :class:`DistributedError` naming the task.

    Raises
    ------
    DistributedError
        A task failed, or ``deadline`` passed first (naming the tasks not done).
    """
    from distributed import as_completed

    if not futures:
        return []
    index = {f.key: i for i, f in enumerate(futures)}
    out: list[Any] = [None] * len(futures)
    done: set[int] = set()
    try:
        for fut in as_completed(list(futures), loop=futures[0].client.loop, timeout=deadline.left()):
            i = index[fut.key]
            if fut.status == "cancelled":
                raise DistributedError(f"{names[i]} was cancelled on the cluster: an input was lost with a worker "
                                       "(data sent from the client cannot be computed again), or a client cancelled it")
            if fut.status != "finished":
                raise _named(fut.exception(timeout=deadline.left()), names[i])
            out[i] = fut.result(timeout=deadline.left())
            done.add(i)
    except BaseException as exc:
        for f in futures:
            f.cancel()
        if isinstance(exc, KolmError):
            raise
        if isinstance(exc, TimeoutError):
            late = [names[i] for i in range(len(futures)) if i not in done]
            raise DistributedError(f"{deadline.what} did not finish within {deadline.timeout:g} s "
                                   f"(not done: {', '.join(late[:5])}{' ...' if len(late) > 5 else ''})") from exc
        raise
    return out


def _named(exc: BaseException | None, name: str) -> KolmError:
    if isinstance(exc, KolmError):
        return exc
    return DistributedError(f"{name} failed on the cluster: {type(exc).__name__}: {exc}")
