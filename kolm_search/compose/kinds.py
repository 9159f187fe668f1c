"""The two kinds of stage over the ports: :class:`RetrieverStage` (the base of the built-in
retrievers: ``transform`` is ``retrieve_batch``) and :class:`RerankerStage` (the base of the
built-in rerankers: ``transform`` re-ranks each query's candidates through ``rerank_batch``
or ``rerank``), and :func:`as_stage`, which wraps any user port object as one of them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from kolm_search._bridge import TimedOut, call_with_deadline, inline, run_sync
from kolm_search._params import seconds
from kolm_search.compose.fingerprints import describe, table_digest
from kolm_search.compose.runner import ServedByRunner, frame_key, settle, shared_value, stage_name
from kolm_search.compose.stage import Stage
from kolm_search.contract.port_calls import fingerprint_of
from kolm_search.contract.ports import (
    BatchRetriever,
    Reranker,
    Retriever,
    Updatable,
    implements,
)
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, KolmValueError, SearchError
from kolm_search.types import QueryPlan, SearchDocument, SearchPipelineContext, SearchRequest, as_documents

__all__ = ["PortReranker", "PortRetriever", "RerankerStage", "RetrieverStage", "as_stage", "batch_contexts"]


def _settle(value: Any) -> Any:
    """A port's return value, awaited when it is awaitable (from sync code, inside a loop or not)."""
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value
        return run_sync(wait())
    return value


def _deadline_call(stage: Any, timeout: float) -> Callable[..., Any]:
    """An awaitable ``call(fn, *args)`` making one port call within ``timeout`` seconds (the call
    abandoned after it: :func:`~kolm_search._bridge.call_with_deadline`), a ``SearchError``
    naming ``stage`` when it passes. Calls of a plain (not ``async def``) function are made one
    at a time, as :func:`~kolm_search._bridge.inline` makes them without a timeout (a port need
    not be thread-safe), each one's time counted from its start."""
    turn = asyncio.Lock()  # (bound to the loop of its first use)

    async def call(fn: Callable[..., Any], *args: Any) -> Any:
        if inspect.iscoroutinefunction(fn):
            value = await call_with_deadline(fn, args, timeout)
        else:
            async with turn:
                value = await call_with_deadline(fn, args, timeout)
        if isinstance(value, TimedOut):
            name = getattr(fn, "__name__", type(fn).__name__)
            raise SearchError(stage_name(stage),
                              f"{name} did not answer within timeout={timeout:g}s (call abandoned){value.note}")
        return value
    return call


def _port_call(stage: Any, timeout: float | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` of a user port, awaited when it is awaitable, within ``timeout`` seconds (None: no limit)."""
    if timeout is None:
        return _settle(fn(*args))
    return run_sync(_deadline_call(stage, timeout)(fn, *args))


def _own(value: dict[str, Any] | None) -> dict[str, Any]:
    """A context's own copy of a dict of the batch (filters, plan metadata; its keys, not its values'
    insides, as :meth:`~kolm_search.engine.candidate_frame.QueryBatch.from_contexts` copies filters)."""
    return {} if value is None else dict(value)


def batch_contexts(batch: QueryBatch) -> list[SearchPipelineContext]:
    """One pipeline context per query of ``batch``: its texts (the first is the query), mode,
    limit and, when the batch has them, the first text's embedding."""
    starts = np.searchsorted(batch.owner, np.arange(batch.n_queries + 1))
    out = []
    for j in range(batch.n_queries):
        texts = batch.texts[starts[j]:starts[j + 1]] or [""]
        # the context's own filters, metadata and embedding (copies: every stage of an experiment is
        # given one batch, and a port writing into its context must reach no other stage)
        plan = QueryPlan(normalized_query=texts[0], mode=batch.mode, target_limit=batch.limit,  # type: ignore[arg-type]
                         expanded_queries=list(texts),
                         metadata=_own(None if batch.metadata is None else batch.metadata[j]))
        ctx = SearchPipelineContext(request=SearchRequest(query=texts[0], limit=batch.limit,
                                                          filters=_own(batch.filters[j])),
                                    plan=plan, started_at=0.0)
        if batch.embeddings is not None and starts[j + 1] > starts[j]:
            ctx.embeddings = np.array(batch.embeddings[starts[j]])
        out.append(ctx)
    return out


def _copies(docs: list[SearchDocument]) -> list[SearchDocument]:
    """Copies of ``docs`` (their tags and metadata too): the documents of one set of candidates are
    made once for every reranker over it in an experiment (:func:`~kolm_search.compose.runner.shared_value`),
    and each port is given its own (a port rescoring its documents in place leaves the others' as
    they were). About a fifth to a third of the time making them takes."""
    return [SearchDocument(d.id, d.content, d.title, d.source, None if d.tags is None else list(d.tags),
                           None if d.metadata is None else dict(d.metadata), d.score) for d in docs]


def _frame_of(lists: list[list[SearchDocument]], table: DocumentTable, stage: Any) -> CandidateFrame:
    """A frame of document lists (ids looked up in ``table``; a document without a score gets
    ``1 / (rank + 1)``; each query's scores, sorted descending, follow the list's order)."""
    counts = np.array([len(x) for x in lists], np.int64)
    flat = [d for x in lists for d in x]
    codes = table.codes([d.id for d in flat], missing="ignore") if flat else np.zeros(0, np.int64)
    if (codes < 0).any():
        bad = flat[int(np.argmax(codes < 0))].id
        raise SearchError(stage_name(stage), f"returned document {bad!r}, which is not in the table")
    query = np.repeat(np.arange(len(lists)), counts)
    _distinct(query, codes, len(table), lambda i: repr(flat[i].id), stage)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    rank = np.arange(len(flat)) - np.repeat(ptr[:-1], counts)
    score = np.array([np.nan if d.score is None else float(d.score) for d in flat], np.float64)
    score = np.where(np.isnan(score), 1.0 / (rank + 1.0), score)
    # a reranker that re-orders without re-scoring (MMR keeps the incoming scores): the scores,
    # sorted, follow its order, so that rank and score agree (evaluate and '+' read scores)
    score = score[np.lexsort((-score, query))]
    return CandidateFrame.from_ptr(ptr, codes, score)


def _distinct(query: np.ndarray, codes: np.ndarray, n_docs: int, id_at: Callable[[int], Any], stage: Any) -> None:
    """A ``SearchError`` naming ``stage`` and the document (``id_at(position)``, as text) when a query's
    list holds one twice (the operators match documents by (query, code): a second entry would
    be dropped or counted twice)."""
    keys = query.astype(np.int64) * max(n_docs, 1) + codes
    _, first, seen = np.unique(keys, return_index=True, return_counts=True)
    if (seen > 1).any():
        bad = id_at(int(first[np.argmax(seen > 1)]))
        raise SearchError(stage_name(stage), f"returned document {bad} twice for one query")


class RetrieverStage(Stage):
    """A retriever as a stage: ``transform(batch, None)`` is ``retrieve_batch(batch)``; its
    identity is its documents' digest and revision."""

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        if candidates is not None:
            raise SearchError(stage_name(self), "a retrieving stage takes no candidates")
        return _settle(self.retrieve_batch(batch))  # type: ignore[attr-defined]

    def stage_identity(self) -> str:
        """The documents' digest and revision of the index a search reads: the deferred changes of
        every index in it are merged first (:func:`~kolm_search.compose.runner.settle`: the output
        they key is made after the merge, and an index copied before it would otherwise share a
        key with outputs of documents it does not hold yet)."""
        settle(self)
        table = self.table if implements(self, BatchRetriever) else None
        revision = self.revision if implements(self, Updatable) else ""
        return "" if table is None else f"{table_digest(table)}@{revision}"


class RerankerStage(Stage):
    """A reranker as a stage: ``transform`` re-ranks each query's candidates (documents read
    from ``batch.table``) in one ``rerank_batch`` call, or ``rerank`` per query
    (:func:`kolm_search.contract.reranking.rerank_all`)."""

    @property
    def is_source(self) -> bool:
        return False

    def _port(self) -> Any:
        return self

    def _timeout(self) -> float | None:
        """Seconds each call of the re-ranking port may take (None: no limit)."""
        return None

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        from kolm_search.contract.reranking import rerank_all

        name = stage_name(self)
        if candidates is None:
            raise SearchError(name, "a re-ranking stage needs candidates: put a retrieving stage before it (a >> r)")
        table = batch.table
        if table is None:
            raise SearchError(name, "the batch carries no document table to read the candidates' documents from")
        ptr = candidates.ptr
        docs = shared_value(("documents", id(table), frame_key(candidates)),  # (each port its own copies)
                            lambda: table.documents(candidates.doc, candidates.score), copy=_copies)
        contexts = batch_contexts(batch)
        rows = [j for j in range(batch.n_queries) if ptr[j + 1] > ptr[j]]
        items = [(docs[ptr[j]:ptr[j + 1]], contexts[j]) for j in rows]
        lists: list[list[SearchDocument]] = [[] for _ in range(batch.n_queries)]
        if items:
            try:
                timeout = self._timeout()
                call = inline if timeout is None else _deadline_call(self, timeout)
                found = run_sync(rerank_all(self._port(), items, call=call))
            except SearchError as exc:  # the port's output refused: named by this stage, not "reranker"
                raise SearchError(name, exc.detail, exc.cause) from exc
            for j, out in zip(rows, found, strict=True):
                lists[j] = out
        return _frame_of(lists, table, self)


class PortRetriever(ServedByRunner, RetrieverStage):
    """A user retriever (``retrieve``, perhaps ``retrieve_batch`` and ``table``) as a stage.
    Without a batch path its ``retrieve`` is called per query and the ids it returns are
    looked up in ``table``. It retrieves through the stage runner (:class:`ServedByRunner`):
    checked as every stage's output is, also when called alone or serving a client, and a port
    calling it again is a cycle."""

    def __init__(self, port: Any, table: DocumentTable | None = None, timeout: float | None = None) -> None:
        self.port = port
        self.timeout = seconds(f"as_stage({type(port).__name__}): timeout", timeout)
        own = port.table if implements(port, BatchRetriever) else None
        if own is None and table is None:
            raise KolmValueError(f"as_stage({type(port).__name__}): a retriever without retrieve_batch and table "
                                 "needs table= (the DocumentTable its document ids are in)")
        self._table = own if own is not None else DocumentTable.coerce(table)
        self._batch = own is not None

    @property
    def table(self) -> DocumentTable:
        """The port's table as it is now (a port over an index that changes), or the ``table=`` given."""
        own = self.port.table if self._batch else None
        return self._table if own is None else own

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        if candidates is not None:
            raise SearchError(stage_name(self), "a retrieving stage takes no candidates")
        if self._batch:
            frame = _port_call(self, self.timeout, self.port.retrieve_batch, batch)
            if isinstance(frame, CandidateFrame):
                _distinct(frame.query, frame.doc, len(self.table), lambda i: f"code {int(frame.doc[i])}", self)
            return frame
        name = stage_name(self)
        lists = []
        for context in batch_contexts(batch):
            try:
                lists.append(as_documents(_port_call(self, self.timeout, self.port.retrieve, context), what=name))
            except (KolmTypeError, KolmValueError) as exc:
                raise SearchError(name, str(exc), cause=exc) from exc
        return _frame_of(lists, self.table, self)

    def components(self) -> list[Any]:
        """The user's retriever (its index merged before a search, its revision keying a client's cache)."""
        return [self.port]

    def fingerprint(self) -> str:
        """The port's own fingerprint with the table's digest and revision: its codes are rows of that table."""
        return describe("PortRetriever", [("port", fingerprint_of(self.port, what="stage")),
                                          ("index", self.stage_identity())], what="PortRetriever")

    def __repr__(self) -> str:
        return f"as_stage({self.port!r})"


class PortReranker(RerankerStage):
    """A user reranker (``rerank``, perhaps ``rerank_batch``; sync or async) as a stage."""

    def __init__(self, port: Any, timeout: float | None = None) -> None:
        self.port = port
        self.timeout = seconds(f"as_stage({type(port).__name__}): timeout", timeout)

    def _port(self) -> Any:
        return self.port

    def _timeout(self) -> float | None:
        return self.timeout

    def fingerprint(self) -> str:
        return fingerprint_of(self.port, what="stage")

    def __repr__(self) -> str:
        return f"as_stage({self.port!r})"


def as_stage(obj: Any, *, table: Any = None, timeout: float | None = None) -> Stage:
    """``obj`` as a :class:`Stage`: a stage as it is; a retriever (``retrieve``/``retrieve_batch``)
    as a :class:`PortRetriever` (``table``: where its ids are, when it has no batch path); a
    reranker (``rerank``/``rerank_batch``) as a :class:`PortReranker`.

    Parameters
    ----------
    timeout : float, optional
        Seconds each call of the port (``retrieve``, ``retrieve_batch``, ``rerank`` or
        ``rerank_batch``, sync or async) may take; a late call is abandoned (a coroutine
        cancelled, a plain function left on a daemon thread) and the stage fails with a
        ``SearchError`` naming it. A plain function's calls are still made one at a time.
        None (the default): no limit. Not part of the stage's fingerprint (it changes no
        output). Refused for a stage given as it is.

    Raises
    ------
    KolmTypeError
        ``obj`` is none of these.
    KolmValueError
        ``timeout`` is not a positive number of seconds, or is given with a stage.
    """
    if isinstance(obj, Stage):
        if timeout is not None:
            raise KolmValueError(f"as_stage({stage_name(obj)}, timeout=...): a stage is taken as it is; its own "
                                 "calls are not the ports' a timeout bounds")
        return obj
    if implements(obj, Retriever):
        return PortRetriever(obj, table, timeout)
    if implements(obj, Reranker):
        return PortReranker(obj, timeout)
    raise KolmTypeError(f"{type(obj).__name__} has neither retrieve(context) nor rerank(docs, context), so it cannot "
                        "be a stage")
