"""How :class:`~kolm_search.retrievers.composite.CompositeRetriever` gathers its children's
documents under its failure strategy: ``"fail-fast"`` (:func:`gather_fail_fast`: the first
failure cancels the others and is raised) or ``"best-effort"`` (:func:`gather_best_effort`: a
failure is logged and skipped; only all failing is an error). Each error is a
``SearchError`` of the composite stage naming the child by its index and name."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from kolm_search._logging import log
from kolm_search.contract.ports import Logger
from kolm_search.errors import PIPELINE_STAGES, SearchError
from kolm_search.types import SearchDocument

__all__ = ["gather_best_effort", "gather_fail_fast", "retriever_name"]

_STAGE = PIPELINE_STAGES.COMPOSITE_RETRIEVER
Tasks = list[asyncio.Future[list[SearchDocument]]]


def retriever_name(retriever: Any) -> str:
    """A readable name for logs: its ``name`` attribute, else its class name."""
    name = getattr(retriever, "name", None)
    return name if isinstance(name, str) else type(retriever).__name__


async def gather_fail_fast(tasks: Tasks, retrievers: Sequence[Any]) -> list[list[SearchDocument]]:
    """Every task's documents, in the tasks' order. The first failure cancels the tasks still
    pending (waiting for the cancellations to land) and raises a ``SearchError`` naming the
    child ``retrievers[i]`` that failed, with its exception as the cause."""
    pending: set[asyncio.Future[list[SearchDocument]]] = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for task in tasks:
                if task in done and task.exception() is not None:
                    exc = task.exception()
                    assert exc is not None
                    index = tasks.index(task)
                    raise SearchError(_STAGE, f"retrievers[{index}] ({retriever_name(retrievers[index])}) failed: {exc}",
                                      cause=exc)
    finally:
        for task in pending:
            task.cancel()
        if pending:  # let the cancellations land before returning or raising
            await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:  # a second failure in the same round is not reported: mark it seen
            if task.done() and not task.cancelled():
                task.exception()
    return [task.result() for task in tasks]


async def gather_best_effort(tasks: Tasks, retrievers: Sequence[Any],
                             logger: Logger | None) -> tuple[list[list[SearchDocument]], list[int]]:
    """The documents of the tasks that succeeded and their positions among the tasks. A
    failure is logged to ``logger`` as a warning naming the child and skipped; a cancellation
    is raised; all failing is a ``SearchError`` whose cause is the first error."""
    results = await asyncio.gather(*tasks, return_exceptions=True)
    lists: list[list[SearchDocument]] = []
    kept: list[int] = []
    errors: list[BaseException] = []
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            if isinstance(result, asyncio.CancelledError):
                raise result
            errors.append(result)
            log(logger, "warning", f"retrievers[{index}] ({retriever_name(retrievers[index])}) failed; skipped",
                SearchError.wrap(_STAGE, result))
            continue
        lists.append(result)
        kept.append(index)
    if not lists:
        raise SearchError(_STAGE, f"all {len(retrievers)} retrievers failed; first error: {errors[0]}",
                          cause=errors[0])
    return lists, kept
