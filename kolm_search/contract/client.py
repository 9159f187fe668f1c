"""``SearchClient``: the default integration surface (guards + schema validation)."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

from kolm_search._bridge import run_sync
from kolm_search.contract.batch import BatchResult
from kolm_search.contract.client_store import load_client, save_client
from kolm_search.contract.config import SearchPipelineModules, SearchPipelineOptions
from kolm_search.contract.guards import batch_requests, coerce_request
from kolm_search.contract.pipeline import SearchPipeline
from kolm_search.contract.ports import Updatable, implements
from kolm_search.contract.schema import validate_each, validate_with_schema
from kolm_search.errors import KolmTypeError
from kolm_search.types import SearchRequest, SearchResponse

__all__ = ["SearchClient"]


class SearchClient:
    """Public API wrapper: input guards, schema validation and defaults over a pipeline.

    Parameters
    ----------
    modules : SearchPipelineModules or dict
        Port implementations (prefer the factories in :mod:`kolm_search.recipes.presets`).
    options : SearchPipelineOptions or dict, optional
        Pipeline configuration.

    Guards (``SearchError`` with ``stage="client"``): empty or whitespace-only query, query
    over ``max_query_length``, bad ``limit``/``offset``/``mode``. ``input_schema`` is checked
    first, ``output_schema`` on the response; failures raise ``SchemaValidationError``.
    """

    def __init__(self, modules: SearchPipelineModules | dict[str, Any], options: SearchPipelineOptions | dict[str, Any] | None = None) -> None:
        self.pipeline = SearchPipeline(modules, options)
        self._update_lock = threading.Lock()

    @property
    def modules(self) -> SearchPipelineModules:
        return self.pipeline.modules

    @property
    def options(self) -> SearchPipelineOptions:
        return self.pipeline.options

    async def search(self, request: SearchRequest | dict[str, Any]) -> SearchResponse:
        """Validate ``request``, run the pipeline, validate the response."""
        if self.options.input_schema is not None:
            raw = request.to_dict() if isinstance(request, SearchRequest) else request
            if not isinstance(raw, dict):
                coerce_request(raw)  # raises SearchError(stage="client") naming the type
            validate_with_schema(self.options.input_schema, dict(raw), "input")
        req = coerce_request(request)
        response = await self.pipeline.search(req)
        if self.options.output_schema is not None:
            validate_with_schema(self.options.output_schema, response.to_dict(), "output")
        return response

    def search_sync(self, request: SearchRequest | dict[str, Any]) -> SearchResponse:
        """Blocking :meth:`search` (inside a running event loop, on a worker thread: notebooks work)."""
        return run_sync(self.search(request))

    #: The coroutine :meth:`search` under the explicit name (see "Sync and async twins" in the README).
    search_async = search

    async def search_batch_async(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                                 mode: str | None = None, filters: dict[str, Any] | None = None,
                                 score_cache: Any = None) -> BatchResult:
        """Async :meth:`search_batch`."""
        batch = batch_requests(queries, self.options, limit=limit, offset=offset, mode=mode, filters=filters,
                               input_schema=self.options.input_schema)
        result = await self.pipeline.run_batch(batch, score_cache=score_cache)
        if self.options.output_schema is not None:  # builds the responses that single search checks
            validate_each(self.options.output_schema, ((q, r.to_dict()) for q, r in zip(result.qids, result.responses,
                                                                                          strict=True)), "output")
        return result

    def search_batch(self, queries: Any, *, limit: int | None = None, offset: int = 0,
                     mode: str | None = None, filters: dict[str, Any] | None = None,
                     score_cache: Any = None) -> BatchResult:
        """Search many queries at once (see :meth:`SearchPipeline.search_batch`); ``input_schema``
        and ``output_schema`` check each query's request and response as :meth:`search` does
        (an issue's path starts with the qid)."""
        batch = batch_requests(queries, self.options, limit=limit, offset=offset, mode=mode, filters=filters,
                               input_schema=self.options.input_schema)
        result = self.pipeline.run_batch_sync(batch, score_cache=score_cache)
        if self.options.output_schema is not None:  # builds the responses that single search checks
            validate_each(self.options.output_schema, ((q, r.to_dict()) for q, r in zip(result.qids, result.responses,
                                                                                          strict=True)), "output")
        return result

    #: The blocking :meth:`search_batch` under the explicit name.
    search_batch_sync = search_batch

    # -- incremental updates (an extension beyond the spec) -------------------------------
    def add(self, documents: Any, *, embeddings: Any = None) -> None:
        """Add documents to the retriever (BM25, dense, or a composite of them) without a rebuild.

        Safe while other threads search: a copy of the retriever is changed and merged, then
        swapped in (searches under way finish on the old one). Cached responses from before
        are not served again (the cache key holds the index revision). ``embeddings`` (n, d)
        go to dense retrievers. Raises ``KolmValueError`` for an id already indexed and
        ``KolmTypeError`` for a retriever that is not :class:`~kolm_search.contract.ports.Updatable`,
        before any change.
        """
        self._update("add", documents, embeddings)

    def delete(self, ids: Any) -> None:
        """Delete documents by id (see :meth:`add`); unknown ids raise ``KolmValueError``."""
        self._update("delete", ids)

    def _update(self, op: str, arg: Any, embeddings: Any = None) -> None:
        with self._update_lock:  # two concurrent updates must not both copy the same old retriever
            modules = self.pipeline.modules
            retriever = modules.retriever
            if not implements(retriever, Updatable):
                raise KolmTypeError(f"{type(retriever).__name__} does not support add/delete")
            changed: Any = copy.copy(retriever)  # shares the arrays, which a merge replaces and never writes
            if op == "delete":
                changed.delete(arg)
            elif embeddings is None:
                changed.add(arg)
            else:
                changed.add(arg, embeddings)
            changed.merge()
            modules.retriever = changed

    def save(self, path: str | Path) -> None:
        """Write the client to folder ``path``: its retriever by the retrievers' own ``save``,
        the planner, the plain options and the names of the modules to pass again at load in
        ``client.json`` (:mod:`kolm_search.contract.client_store` describes the layout and what is saved)."""
        save_client(self, path)

    @classmethod
    def load(cls, path: str | Path, **modules: Any) -> SearchClient:
        """The client saved in ``path`` by :meth:`save`; ``modules`` give what is not saved
        (``embedder=`` for a dense retriever; any reranker, cache, logger... it had)."""
        saved_modules, options = load_client(path, **modules)
        return cls(saved_modules, options)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_update_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._update_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SearchClient({self.pipeline!r})"

