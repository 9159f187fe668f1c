"""The ports: ``typing.Protocol`` classes that adapters implement (``ports.ts``, ported).

Every method may be written plain or ``async``: the pipeline awaits what is awaitable, so the
return annotations read "a value, or an awaitable of it". Any exception a port raises surfaces
as :class:`~kolm_search.errors.SearchError` carrying that port's stage. Optional capabilities
beyond a port's one method are Protocols too (``BatchRetriever``, ``EmbedsMany``, ``Updatable``,
...): an object has one by implementing its methods, and the contract layer finds it with
:func:`implements`. Calling ports and checking what they return: :mod:`~kolm_search.contract.port_calls`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeGuard, TypeVar, Union, runtime_checkable

import numpy as np
import numpy.typing as npt

from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.types import QueryPlan, SearchDocument, SearchPipelineContext, SearchRequest

__all__ = [
    "BatchReranker",
    "BatchRetriever",
    "CacheStore",
    "CachesScores",
    "Deduplicator",
    "Embedder",
    "EmbedsMany",
    "Fingerprinted",
    "FusesChildren",
    "HasIndexRevision",
    "HoldsIndexes",
    "IntentClassifier",
    "Logger",
    "MaybeAwaitable",
    "NonBlockingCache",
    "Persistable",
    "QueryExpander",
    "QueryPlanner",
    "RanksWindows",
    "ReportsDuplicates",
    "Reranker",
    "Retriever",
    "ScoresPairs",
    "Synthesizer",
    "Telemetry",
    "Updatable",
    "class_implements",
    "implements",
    "missing_methods",
]

T = TypeVar("T")
P = TypeVar("P")
MaybeAwaitable = Union[T, Awaitable[T]]
Vector = Union[Sequence[float], npt.NDArray[np.floating[Any]]]
Matrix = Union[Sequence[Sequence[float]], npt.NDArray[np.floating[Any]]]


@runtime_checkable
class QueryPlanner(Protocol):
    """Turns a request into a :class:`QueryPlan`. Required."""

    def plan(self, request: SearchRequest) -> MaybeAwaitable[QueryPlan]: ...


@runtime_checkable
class Retriever(Protocol):
    r"""Fetches candidates for ``context.plan`` (best first). Required.

    Built-in retrievers are also :class:`BatchRetriever`\ s (a columnar path for many
    queries); a retriever with only ``retrieve`` is called once per query in a batch.
    """

    def retrieve(self, context: SearchPipelineContext) -> MaybeAwaitable[Sequence[SearchDocument]]: ...


@runtime_checkable
class BatchRetriever(Protocol):
    """A retriever with a columnar path: ``search_batch`` calls ``retrieve_batch`` once for a
    whole batch instead of ``retrieve`` per query.

    ``retrieve_batch`` gets every (expanded) query text of the batch with its owner row,
    filters and embeddings (:class:`~kolm_search.engine.candidate_frame.QueryBatch`) and returns one
    :class:`~kolm_search.engine.candidate_frame.CandidateFrame` of ``batch.n_queries`` queries whose document
    codes are rows of ``table``, each query's list best first and at most ``batch.limit``
    long. ``table`` may be ``None`` when the retriever cannot serve a batch (a composite whose
    children do not share one table); ``retrieve`` is then used.
    """

    @property
    def table(self) -> DocumentTable | None: ...

    def retrieve(self, context: SearchPipelineContext) -> MaybeAwaitable[Sequence[SearchDocument]]: ...

    def retrieve_batch(self, batch: QueryBatch) -> MaybeAwaitable[CandidateFrame]: ...


@runtime_checkable
class FusesChildren(Protocol):
    """A retriever that fuses the ranked lists of child retrievers (``CompositeRetriever``).

    ``retrievers`` are the children. What the stage runner needs to know: each child's list is
    fetched at the batch's ``limit`` and fused before the cut, so a query's fused list equals
    its single search only when the batch's limit is its own; the runner therefore gives such a
    retriever one sub-batch per target limit (as it does for expanded queries).
    """

    retrievers: Sequence[Retriever]

    def retrieve(self, context: SearchPipelineContext) -> MaybeAwaitable[Sequence[SearchDocument]]: ...


@runtime_checkable
class Updatable(Protocol):
    """A retriever that takes added and deleted documents without a rebuild (beyond the spec).

    ``add(documents, embeddings=None)`` takes documents as ``DocumentTable.coerce`` does (and,
    for an index of vectors, their embeddings (n, d); an index that takes none refuses them);
    ``delete(ids)`` takes document ids; either raises before any change when it cannot apply.
    ``merge()`` applies changes held back, if any (the stage runner calls it before each
    search, so it must be cheap when there are none). ``revision`` is a string that changes
    with every change (``""`` for an index never changed): the response cache keys on it.

    ``SearchClient.add``/``delete`` change ``copy.copy(retriever)``, merge it and swap it in,
    so that searches under way keep the old one: a copy must not share what ``add`` changes
    in place (rebind new arrays rather than write into old ones, or define ``__copy__``).
    """

    @property
    def revision(self) -> str: ...

    def add(self, documents: Any, embeddings: Matrix | None = None) -> None: ...

    def delete(self, ids: Sequence[str]) -> None: ...

    def merge(self) -> None: ...


@runtime_checkable
class HasIndexRevision(Protocol):
    """A retriever made of indexes without being one (a composed stage): ``index_revision()``
    joins their revisions (:attr:`Updatable.revision`), which a client's response cache keys on."""

    def index_revision(self) -> str: ...


@runtime_checkable
class HoldsIndexes(Protocol):
    """An :class:`Updatable` made of the built-in incremental indexes (BM25, dense): ``indexes()``
    lists those a change applies to (itself; a feedback retriever's BM25 index; a composite's
    children's), so that a composite changes every child or none
    (:mod:`kolm_search.retrievers.incremental`)."""

    def indexes(self) -> Sequence[Any]: ...


@runtime_checkable
class Persistable(Protocol):
    """A retriever that writes itself to a folder and reads itself back (beyond the spec):
    ``save(path)`` replaces whatever index the folder held, all or nothing; the class method
    ``load(path, ...)`` returns the saved retriever, every file checked first."""

    def save(self, path: str | os.PathLike[str]) -> None: ...

    @classmethod
    def load(cls, path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Embedder(Protocol):
    """Embeds text (an :class:`EmbedsMany` also embeds a batch as one (n, d) matrix)."""

    def embed(self, text: str) -> MaybeAwaitable[Vector]: ...


@runtime_checkable
class EmbedsMany(Protocol):
    """An embedder with a batch call: ``embed_many(texts)`` returns one row per text, (n, d).

    :func:`embed_all` (the embedder stage, the dense index build, every adapter that embeds)
    prefers it to one ``embed`` call per text.
    """

    def embed(self, text: str) -> MaybeAwaitable[Vector]: ...

    def embed_many(self, texts: Sequence[str]) -> MaybeAwaitable[Matrix]: ...


@runtime_checkable
class QueryExpander(Protocol):
    """Alternative phrasings of a normalised query (the primary query excluded)."""

    def expand(self, query: str) -> MaybeAwaitable[Sequence[str]]: ...


@runtime_checkable
class Deduplicator(Protocol):
    """Removes duplicates from the candidate list, keeping order."""

    def deduplicate(self, docs: list[SearchDocument]) -> MaybeAwaitable[Sequence[SearchDocument]]: ...


@runtime_checkable
class ReportsDuplicates(Protocol):
    """A deduplicator that says what each dropped document duplicated (beyond the spec).

    ``deduplicate_pairs`` returns what ``deduplicate`` returns, and the ``(dropped_id, kept_id)``
    pairs of this call; the pipeline puts them in ``context.metadata["deduplicator"]["pairs"]``.
    """

    def deduplicate(self, docs: list[SearchDocument]) -> MaybeAwaitable[Sequence[SearchDocument]]: ...

    def deduplicate_pairs(self, docs: list[SearchDocument]) -> MaybeAwaitable[
            tuple[Sequence[SearchDocument], Sequence[tuple[str, str]]]]: ...


@runtime_checkable
class Reranker(Protocol):
    """Re-orders the candidates after deduplication."""

    def rerank(
        self, docs: list[SearchDocument], context: SearchPipelineContext
    ) -> MaybeAwaitable[Sequence[SearchDocument]]: ...


@runtime_checkable
class BatchReranker(Protocol):
    """A reranker that re-ranks many queries' candidates in one call (beyond the spec).

    ``rerank_batch`` gets ``(docs, context)`` pairs and returns one re-ranked list per pair,
    each a permutation of its documents; ``search_batch`` and
    :func:`kolm_search.jobs.rerank.rerank_run` prefer it to ``rerank`` per query, so a model sees
    every distinct document or pair of the batch once, in full batches.
    """

    def rerank(
        self, docs: list[SearchDocument], context: SearchPipelineContext
    ) -> MaybeAwaitable[Sequence[SearchDocument]]: ...

    def rerank_batch(
        self, items: Sequence[tuple[list[SearchDocument], SearchPipelineContext]]
    ) -> MaybeAwaitable[Sequence[Sequence[SearchDocument]]]: ...


@runtime_checkable
class Fingerprinted(Protocol):
    """A stage that says what determines its output (beyond the spec): ``fingerprint()`` is a
    string that changes whenever the output could (the model: name or path and a digest of its
    weights where cheap; every parameter that matters; the fingerprints of stages it holds), not
    with settings of speed only (batch sizes, threads). Equal fingerprints promise equal outputs
    for equal inputs; resumable jobs record it and the score cache keys on it."""

    def fingerprint(self) -> str: ...


@runtime_checkable
class ScoresPairs(Protocol):
    """A pointwise reranker (beyond the spec): ``score_pairs(pairs)`` scores ``(query text,
    document)`` pairs on their own, float32 ``(len(pairs),)``, higher is better, NaN where it
    could not. Its ``rerank`` orders each query's documents by them, descending, ties in input
    order (:func:`kolm_search.adapters.scoring.rerank_pointwise`), so a score cache can stand
    between a job and the model (:class:`~kolm_search.adapters.CachedReranker`)."""

    def rerank(
        self, docs: list[SearchDocument], context: SearchPipelineContext
    ) -> MaybeAwaitable[Sequence[SearchDocument]]: ...

    def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> MaybeAwaitable[npt.NDArray[np.float32]]: ...


@runtime_checkable
class RanksWindows(Protocol):
    """A listwise reranker ordering windows of candidates (RankGPT's sliding window):
    ``rank_window(query, docs)`` gives the window's new order (a permutation of positions), or
    ``None`` when it could not (the window keeps its order). Its ``rerank`` slides ``window``
    documents from the bottom of the list to the top in steps of ``step``, at most
    ``max_concurrency`` windows at once (:func:`kolm_search.adapters.listwise.rerank_windows`),
    so a score cache can stand between the passes and the model, keyed by window content."""

    window: int
    step: int
    max_concurrency: int

    def rerank(
        self, docs: list[SearchDocument], context: SearchPipelineContext
    ) -> MaybeAwaitable[Sequence[SearchDocument]]: ...

    def rank_window(self, query: str, docs: Sequence[SearchDocument]) -> MaybeAwaitable[Sequence[int] | None]: ...


@runtime_checkable
class Synthesizer(Protocol):
    """Writes an answer from the final page of results (``None`` for no answer)."""

    def synthesize(self, context: SearchPipelineContext) -> MaybeAwaitable[str | None]: ...


@runtime_checkable
class IntentClassifier(Protocol):
    """Labels the normalised query; ``None`` when inconclusive."""

    def classify(self, query: str) -> MaybeAwaitable[str | None]: ...


@runtime_checkable
class CacheStore(Protocol):
    """Key/value store for responses. Values are JSON-ready dicts."""

    def get(self, key: str) -> MaybeAwaitable[Any | None]: ...

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> MaybeAwaitable[None]: ...


@runtime_checkable
class CachesScores(Protocol):
    """A store of a reranker's scores (``score_cache=`` of ``search_batch``; the built-in one is
    :class:`~kolm_search.adapters.ScoreCache`): ``in_front_of(reranker)`` is a reranker that
    returns what ``reranker`` returns, reading each score from the store where it is there and
    storing the ones it computes."""

    def in_front_of(self, reranker: Any, fingerprint: str | None = None) -> Any: ...


@runtime_checkable
class NonBlockingCache(Protocol):
    """A cache whose calls return at once (memory only: at most a lock held for a dict update).

    ``get_nowait`` / ``set_nowait`` do what ``get`` / ``set`` do; the pipeline calls them
    inline, with no worker thread and no deadline (``cache_timeout_seconds`` is for caches
    that may wait on a disk, a lock or a network).
    """

    def get(self, key: str) -> MaybeAwaitable[Any | None]: ...

    def set(self, key: str, value: Any, ttl_seconds: float | None = None) -> MaybeAwaitable[None]: ...

    def get_nowait(self, key: str) -> Any | None: ...

    def set_nowait(self, key: str, value: Any, ttl_seconds: float | None = None) -> None: ...


@runtime_checkable
class Telemetry(Protocol):
    """Observability sink; receives ``"search.completed"`` after each successful search."""

    def track(self, event: str, payload: dict[str, Any]) -> MaybeAwaitable[None]: ...


@runtime_checkable
class Logger(Protocol):
    """Minimal logger: ``logging.Logger`` satisfies it.

    Objects with a console-like ``warn`` instead of ``warning`` are accepted too.
    """

    def debug(self, msg: str, /, *args: Any, **kwargs: Any) -> None: ...

    def info(self, msg: str, /, *args: Any, **kwargs: Any) -> None: ...

    def warning(self, msg: str, /, *args: Any, **kwargs: Any) -> None: ...

    def error(self, msg: str, /, *args: Any, **kwargs: Any) -> None: ...


def implements(port: Any, protocol: type[P]) -> TypeGuard[P]:
    """``isinstance(port, protocol)`` for a capability Protocol made of methods, answered once per
    class when the class defines them (Python 3.11's runtime check costs tens of microseconds a
    call, which single search would pay at every stage)."""
    return class_implements(type(port), protocol) or isinstance(port, protocol)


def class_implements(cls: type, protocol: type) -> bool:
    """Whether class ``cls`` defines every method of ``protocol`` (cached): how a stage, whose
    capabilities are its class's methods, is asked (:func:`implements` also takes an object
    given its methods one by one)."""
    key = (cls, protocol)
    found = _BY_CLASS.get(key)
    if found is None:
        found = _BY_CLASS[key] = all(callable(getattr(cls, m, None)) for m in _methods(protocol))
    return found


_BY_CLASS: dict[tuple[type, type], bool] = {}  # (class, protocol) -> the class defines every method


def missing_methods(port: Any, protocol: type) -> list[str]:
    """The methods ``protocol`` declares that ``port`` lacks (or holds as non-callables)."""
    if isinstance(port, protocol) and all(callable(getattr(port, m)) for m in _methods(protocol)):
        return []
    return [m for m in _methods(protocol) if not callable(getattr(port, m, None))]


def _methods(protocol: type) -> list[str]:
    """The public methods a Protocol class declares, in declaration order."""
    return [name for name, value in vars(protocol).items()
            if (callable(value) or isinstance(value, classmethod)) and not name.startswith("_")]
