"""Re-ranking many queries' documents through one reranker port: :func:`rerank_all`, the
re-ranking step of the reranker stage (:mod:`kolm_search.contract.stages`), of a re-ranking
stage (:class:`~kolm_search.compose.kinds.RerankerStage`) and of batch re-ranking jobs
(:mod:`kolm_search.jobs.rerank_plan`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kolm_search.contract.ports import BatchReranker, implements
from kolm_search.errors import PipelineStage, SearchError
from kolm_search.types import SearchDocument, SearchPipelineContext, as_documents

__all__ = ["rerank_all"]

S = PipelineStage


async def rerank_all(reranker: Any, items: Sequence[tuple[list[SearchDocument], SearchPipelineContext]], *,
                     call: Callable[..., Awaitable[Any]], queries: Sequence[Any] | None = None,
                     by_position: bool = False) -> list[list[SearchDocument]]:
    """Re-ranked lists, one per ``(docs, context)`` item, checked: the re-ranking step of the
    reranker stage and of batch re-ranking jobs (:func:`kolm_search.jobs.rerank.rerank_run`).

    One ``rerank_batch`` call when there are several items and the reranker is a
    :class:`~kolm_search.contract.ports.BatchReranker`, else ``rerank`` per item, concurrently.
    ``call(fn, *args)`` makes each port call (timing, deadline and error wrapping are the
    caller's). ``queries`` names each item's query in errors (``SearchError.query``).
    """
    def at(exc: SearchError, i: int) -> SearchError:
        return exc if queries is None else exc.at_query(queries[i], by_position=by_position)

    async def one(i: int, docs: list[SearchDocument], context: SearchPipelineContext) -> Any:
        try:
            return await call(reranker.rerank, list(docs), context)
        except SearchError as exc:
            raise at(exc, i) from exc

    if len(items) > 1 and implements(reranker, BatchReranker):
        try:
            raw = await call(reranker.rerank_batch, [(list(d), c) for d, c in items])
        except SearchError as exc:
            raise SearchError(S.RERANKER, f"rerank_batch of {len(items)} queries: {exc.detail}", exc.cause) from exc
        if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or len(raw) != len(items):
            raise SearchError(S.RERANKER, f"rerank_batch must return one list per query ({len(items)}), got {raw!r:.80}")
    else:
        raw = await asyncio.gather(*(one(i, d, c) for i, (d, c) in enumerate(items)))
    out = []
    for i, r in enumerate(raw):
        try:
            out.append(as_documents(r, what=S.RERANKER))
        except (TypeError, ValueError) as exc:
            raise at(SearchError(S.RERANKER, str(exc), cause=exc), i) from exc
    return out
