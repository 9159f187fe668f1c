"""``CompositeRetriever``: fan out to child retrievers concurrently, fuse with RRF."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from kolm_search._aio import log, resolve
from kolm_search.errors import PIPELINE_STAGES, FilterError, KolmTypeError, KolmValueError, SearchError
from kolm_search.frame import CandidateFrame, QueryBatch
from kolm_search.fusion import check_k, check_weights, fuse_frame, merge_with_rrf
from kolm_search.ports import Logger, Retriever
from kolm_search.retrievers import incremental
from kolm_search.types import SearchDocument, SearchPipelineContext, as_documents

__all__ = ["CompositeRetriever"]

Strategy = Literal["fail-fast", "best-effort"]
_STAGE = PIPELINE_STAGES.COMPOSITE_RETRIEVER


def retriever_name(retriever: Any) -> str:
    """A readable name for logs: its ``name`` attribute, else its class name."""
    name = getattr(retriever, "name", None)
    return name if isinstance(name, str) else type(retriever).__name__


class CompositeRetriever:
    """Runs child retrievers concurrently and fuses their lists with (weighted) RRF.

    Parameters
    ----------
    retrievers : list of Retriever
        Child retrievers (at least one).
    k : float, default 60
        RRF smoothing constant.
    strategy : {"fail-fast", "best-effort"}
        ``"fail-fast"``: the first failure raises ``SearchError(stage="composite-retriever")``
        and cancels the others. ``"best-effort"``: failures are logged (index and name) and
        skipped; only when every child fails does it raise.
    logger : Logger, optional
        Receives best-effort failures as warnings.
    weights : list of float, optional
        One weight per child (weighted RRF, beyond the spec).

    The fused list is cut at ``context.plan.target_limit``; each document carries its
    fused score.
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        k: float = 60,
        strategy: Strategy = "fail-fast",
        logger: Logger | None = None,
        *,
        weights: Sequence[float] | None = None,
    ) -> None:
        retrievers = list(retrievers)
        if not retrievers:
            raise KolmValueError("CompositeRetriever needs at least one retriever")
        for i, r in enumerate(retrievers):
            if not callable(getattr(r, "retrieve", None)):
                raise KolmTypeError(f"retrievers[{i}] ({type(r).__name__}) has no 'retrieve' method")
        if strategy not in ("fail-fast", "best-effort"):
            raise KolmValueError(f"strategy must be 'fail-fast' or 'best-effort', got {strategy!r}")
        self.retrievers = retrievers
        self.k = check_k(k)
        self.strategy: Strategy = strategy
        self.logger = logger
        self.weights = None if weights is None else list(check_weights(weights, len(retrievers)))

    async def _run_child(self, index: int, context: SearchPipelineContext) -> list[SearchDocument]:
        retriever = self.retrievers[index]
        docs = await resolve(retriever.retrieve(context))
        return as_documents(docs, what=f"retrievers[{index}] ({retriever_name(retriever)})")

    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """Fan out, fuse, and return at most ``context.plan.target_limit`` documents."""
        tasks: list[asyncio.Future[list[SearchDocument]]] = [
            asyncio.ensure_future(self._run_child(i, context)) for i in range(len(self.retrievers))
        ]
        if self.strategy == "fail-fast":
            lists = await self._fail_fast(tasks)
            weights = self.weights
        else:
            lists, weights = await self._best_effort(tasks)
        return merge_with_rrf(lists, {}, int(context.plan.target_limit), self.k, weights=weights)

    async def _fail_fast(self, tasks: list[asyncio.Future[list[SearchDocument]]]) -> list[list[SearchDocument]]:
        pending: set[asyncio.Future[list[SearchDocument]]] = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for task in tasks:
                    if task in done and task.exception() is not None:
                        exc = task.exception()
                        assert exc is not None
                        index = tasks.index(task)
                        raise SearchError(
                            _STAGE,
                            f"retrievers[{index}] ({retriever_name(self.retrievers[index])}) failed: {exc}",
                            cause=exc,
                        )
        finally:
            for task in pending:
                task.cancel()
            if pending:  # let the cancellations land before returning or raising
                await asyncio.gather(*pending, return_exceptions=True)
            for task in tasks:  # a second failure in the same round is not reported: mark it seen
                if task.done() and not task.cancelled():
                    task.exception()
        return [task.result() for task in tasks]

    async def _best_effort(
        self, tasks: list[asyncio.Future[list[SearchDocument]]]
    ) -> tuple[list[list[SearchDocument]], list[float] | None]:
        results = await asyncio.gather(*tasks, return_exceptions=True)
        lists: list[list[SearchDocument]] = []
        weights: list[float] = []
        errors: list[BaseException] = []
        for index, result in enumerate(results):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                errors.append(result)
                log(
                    self.logger,
                    "warning",
                    f"retrievers[{index}] ({retriever_name(self.retrievers[index])}) failed; skipped",
                    SearchError.wrap(_STAGE, result),
                )
                continue
            lists.append(result)
            weights.append(1.0 if self.weights is None else self.weights[index])
        if not lists:
            raise SearchError(
                _STAGE, f"all {len(self.retrievers)} retrievers failed; first error: {errors[0]}", cause=errors[0]
            )
        return lists, (None if self.weights is None else weights)

    # -- incremental updates (every child: BM25Retriever, DenseRetriever or a composite) ---
    def add(self, documents: Any, embeddings: Any = None) -> None:
        """Add documents to every child, all or none (``embeddings`` go to dense children);
        a child without add/delete raises ``KolmTypeError`` before any change."""
        incremental.add(incremental.leaves(self), documents, embeddings)

    def delete(self, ids: Sequence[str]) -> None:
        """Delete documents by id from every child, all or none."""
        incremental.delete(incremental.leaves(self), ids)

    def merge(self) -> None:
        """Merge every child's pending changes; children with equal tables then share one."""
        incremental.share_tables(self)

    # -- columnar fast path --------------------------------------------------------------
    @property
    def table(self) -> Any:
        """The document table that every child shares (same ids in the same order), or None
        when a child has no ``retrieve_batch``/table or the tables differ: the batch path is
        then off and ``retrieve`` is used per query."""
        tables = [getattr(r, "table", None) for r in self.retrievers]
        if not all(callable(getattr(r, "retrieve_batch", None)) for r in self.retrievers) or tables[0] is None:
            return None
        first = tables[0]
        same = all(t is first or (t is not None and len(t) == len(first) and (t.ids == first.ids).all()) for t in tables)
        return first if same else None

    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """Every child's batch frame, fused by (weighted) RRF in one kernel call."""
        table = self.table
        if table is None:
            raise SearchError(_STAGE, "retrieve_batch needs children with retrieve_batch over one document table")
        frames: list[CandidateFrame] = []
        weights: list[float] = []
        errors: list[BaseException] = []
        for index, child in enumerate(self.retrievers):
            try:
                frames.append(child.retrieve_batch(batch))  # type: ignore[attr-defined]
                weights.append(1.0 if self.weights is None else self.weights[index])
            except Exception as exc:
                if isinstance(exc, FilterError):  # the query's filter is bad: fails every child alike
                    raise FilterError(_STAGE, f"retrievers[{index}] ({retriever_name(child)}) failed: {exc}", exc,
                                      row=exc.row) from exc
                if self.strategy == "fail-fast":
                    raise SearchError(_STAGE, f"retrievers[{index}] ({retriever_name(child)}) failed: {exc}", cause=exc) from exc
                errors.append(exc)
                log(self.logger, "warning", f"retrievers[{index}] ({retriever_name(child)}) failed; skipped",
                    SearchError.wrap(_STAGE, exc))
        if not frames:
            raise SearchError(_STAGE, f"all {len(self.retrievers)} retrievers failed; first error: {errors[0]}", cause=errors[0])
        stacked = CandidateFrame.concat(frames)
        return fuse_frame(stacked, method="rrf", k=self.k, weights=weights, limit=batch.limit,
                          n_lists=len(frames), n_docs=max(len(table), 1))

    def __repr__(self) -> str:
        names = ", ".join(retriever_name(r) for r in self.retrievers)
        return f"CompositeRetriever([{names}], k={self.k:g}, strategy={self.strategy!r})"
