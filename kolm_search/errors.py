"""The exception tree and the stage identifiers (:class:`PipelineStage`, the one list of names).

Every exception the package defines derives from :class:`KolmError`, so ``except KolmError``
catches anything kolm_search raises on purpose; where a class also means "bad value" or "bad
type" it keeps the matching builtin as a second base (``except ValueError`` keeps working)::

    Exception
     +-- KolmError                        anything kolm_search raises on purpose
          +-- SearchError                 a named pipeline stage failed (.stage, .detail, .cause,
          |    |                          .query: the query of a batch, None for single search)
          |    +-- FilterError            a query's filter cannot be applied (.row in the retriever's batch)
          +-- SchemaValidationError       an input/output schema rejected a request or response
          +-- KolmValueError (ValueError) bad argument or data; the message names field and value
          |    +-- FrameValidationError   a candidate frame, run or qrels breaks its schema
          |    +-- JobMismatchError       a job folder holds another job's output (.differences)
          +-- KolmTypeError (TypeError)   argument of the wrong type
          |    +-- ParameterError (also a KolmValueError)  a public argument out of its range or type
          +-- DownloadError (OSError)     a dataset download failed (network, checksum, archive)
          +-- LLMRequestError (RuntimeError)    a chat-completions call failed
          +-- DistributedError (RuntimeError)   a Dask partition or shard failed

``SearchError`` is what a search raises; ``KolmValueError``/``KolmTypeError`` are raised by the
numerical toolkit (fusion, frames, metrics, io) on bad arguments.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

__all__ = [
    "DEDUPLICATOR_STAGE",
    "DistributedError",
    "DownloadError",
    "FilterError",
    "FrameValidationError",
    "JobMismatchError",
    "KolmError",
    "KolmTypeError",
    "KolmValueError",
    "LLMRequestError",
    "PIPELINE_STAGES",
    "ParameterError",
    "PipelineStage",
    "PipelineStages",
    "SchemaIssue",
    "SchemaValidationError",
    "SearchError",
]


class PipelineStage(StrEnum):
    """Every stage name a search can report, in the order a search runs them: the one list of
    names that errors (:attr:`SearchError.stage`), timeouts
    (:data:`~kolm_search.contract.config.TIMED_STAGES`), ordering (:data:`~kolm_search.contract.stages.STAGE_ORDER`)
    and re-ranking jobs use. Members are ``str``: ``PipelineStage.EMBEDDER == "embedder"``.

    The spec's ten are :data:`PIPELINE_STAGES`; beyond them: ``DEDUPLICATOR`` (a failing
    deduplicator), ``PAGINATION`` (no port, ordering only) and ``TELEMETRY``.
    """

    CLIENT = "client"
    PLANNER = "planner"
    CACHE_GET = "cache.get"
    INTENT_CLASSIFIER = "intent-classifier"
    EMBEDDER = "embedder"
    RETRIEVER = "retriever"
    COMPOSITE_RETRIEVER = "composite-retriever"
    DEDUPLICATOR = "deduplicator"
    RERANKER = "reranker"
    PAGINATION = "pagination"
    SYNTHESIZER = "synthesizer"
    CACHE_SET = "cache.set"
    TELEMETRY = "telemetry"


class PipelineStages(Mapping[str, str]):
    """The spec's constant map of stage identifiers: a read-only view of the ten
    :class:`PipelineStage` members the spec names.

    Read as attributes (``PIPELINE_STAGES.EMBEDDER == "embedder"``) or as a mapping
    (``PIPELINE_STAGES["EMBEDDER"]``, iteration over the keys in the spec's order).
    """

    __slots__ = ()
    _KEYS = ("CLIENT", "CACHE_GET", "CACHE_SET", "PLANNER", "INTENT_CLASSIFIER", "EMBEDDER", "RETRIEVER",
             "RERANKER", "SYNTHESIZER", "COMPOSITE_RETRIEVER")

    def __getattr__(self, name: str) -> PipelineStage:
        if name in PipelineStages._KEYS:
            return PipelineStage[name]
        raise AttributeError(name)

    def __getitem__(self, key: str) -> PipelineStage:
        if key not in self._KEYS:
            raise KeyError(key)
        return PipelineStage[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._KEYS)

    def __len__(self) -> int:
        return len(self._KEYS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PIPELINE_STAGES is read-only")

    def __repr__(self) -> str:
        return "PIPELINE_STAGES(" + ", ".join(f"{k}={self[k].value!r}" for k in self._KEYS) + ")"


PIPELINE_STAGES = PipelineStages()
#: The deduplicator's stage name (the spec's table has no key for it): ``PipelineStage.DEDUPLICATOR``.
DEDUPLICATOR_STAGE = PipelineStage.DEDUPLICATOR


class KolmError(Exception):
    """Base of every exception kolm_search defines."""


class SearchError(KolmError):
    """A named pipeline stage failed.

    The context travels as attributes, never to be cut back out of the message (as httpx's
    errors carry ``request`` and ``response``).

    Parameters
    ----------
    stage : str
        A :class:`PipelineStage` (or a custom stage name).
    message : str
        What failed; the final message is ``"[stage] message"``, or ``"[stage] query Q:
        message"`` for a query of a batch.
    cause : BaseException, optional
        The original error; also chained as ``__cause__``.
    query : int or hashable, optional
        Which query of a batch failed: its position (``by_position=True``) or its qid;
        ``None`` for a single search or a failure of the batch as a whole.
    by_position : bool, default False
        ``query`` is a position in the batch (shown as ``query 2 (position in the batch)``).

    Attributes
    ----------
    stage, cause, query
        As given.
    detail : str
        The message without the stage prefix and without the query.
    """

    def __init__(self, stage: str, message: str, cause: BaseException | None = None, *, query: Any = None,
                 by_position: bool = False) -> None:
        prefix = f"[{stage}]"
        self.stage = stage
        self.detail = message[len(prefix):].lstrip() if message.startswith(prefix) else message
        self.cause = cause
        self.query = query
        self.by_position = by_position
        super().__init__(self._format())
        if cause is not None:
            self.__cause__ = cause

    def _format(self) -> str:
        if self.query is None:
            return f"[{self.stage}] {self.detail}"
        where = " (position in the batch)" if self.by_position else ""
        return f"[{self.stage}] query {self.query!r}{where}: {self.detail}"

    @property
    def message(self) -> str:
        """The formatted message, ``"[stage] Description."``."""
        return str(self.args[0])

    def at_query(self, query: Any, *, by_position: bool = False) -> SearchError:
        """A copy of this error (same class, stage, detail, cause) naming ``query`` of a batch."""
        located = copy.copy(self)
        located.query, located.by_position = query, by_position
        located.args = (located._format(),)
        return located

    def __reduce__(self) -> tuple[Any, ...]:
        make = functools.partial(type(self), query=self.query, by_position=self.by_position)
        return make, (self.stage, self.detail, self.cause), self.__dict__

    @classmethod
    def wrap(cls, stage: str, exc: BaseException) -> SearchError:
        """Wrap ``exc`` as a ``SearchError`` of ``stage`` (returned as is if already one)."""
        if isinstance(exc, SearchError):
            return exc
        detail = str(exc) or type(exc).__name__
        return cls(stage, f"{type(exc).__name__}: {detail}", cause=exc)


class FilterError(SearchError):
    """A retriever could not apply one query's filter (unknown field or operator, operand of
    the wrong type); ``row`` is that query's row in the retriever's ``QueryBatch`` (the stage
    runner names the query by its position in the whole batch: ``query``)."""

    def __init__(self, stage: str, message: str, cause: BaseException | None = None, *, row: int = 0,
                 query: Any = None, by_position: bool = False) -> None:
        super().__init__(stage, message, cause, query=query, by_position=by_position)
        self.row = row


@dataclass(frozen=True)
class SchemaIssue:
    """One validation failure: a message and the path to the failing field."""

    message: str
    path: Sequence[object] = field(default_factory=tuple)


class SchemaValidationError(KolmError):
    """An ``input_schema`` or ``output_schema`` rejected a request or a response.

    Distinct from :class:`SearchError`: a contract violation, not a pipeline failure.
    """

    def __init__(self, target: Literal["input", "output"], issues: Sequence[SchemaIssue]) -> None:
        self.target: Literal["input", "output"] = target
        self.issues: tuple[SchemaIssue, ...] = tuple(issues)
        shown = "; ".join(
            f"{'.'.join(str(p) for p in i.path) or '<root>'}: {i.message}" for i in self.issues[:5]
        )
        super().__init__(f"{target} schema validation failed: {shown}")


class KolmValueError(KolmError, ValueError):
    """A bad argument value; the message names the field and the offending value."""


class KolmTypeError(KolmError, TypeError):
    """An argument of the wrong type; the message names the field and the type."""


class ParameterError(KolmValueError, KolmTypeError):
    """A public argument is of the wrong type or out of its range (:mod:`kolm_search._params`);
    both a ``ValueError`` and a ``TypeError``, as scikit-learn's ``InvalidParameterError``, so
    either ``except`` keeps working. The message names the argument, what it must be and the
    value given."""


class DownloadError(KolmError, OSError):
    """A dataset could not be downloaded, verified or unpacked; nothing half-written is left."""


class FrameValidationError(KolmValueError):
    """A candidate frame, run or qrels table does not follow its documented schema."""


class JobMismatchError(KolmValueError):
    """A job's output folder holds the output of another job (other inputs, model or parameters).

    Attributes
    ----------
    path : str
        The folder.
    differences : dict str -> (recorded, now)
        Each fingerprint key that differs, with the folder's value and this job's.
    """

    def __init__(self, path: str, differences: Mapping[str, tuple[str, str]]) -> None:
        self.path = path
        self.differences = dict(differences)
        shown = "; ".join(f"{k} differs (recorded {a[:160]!r}, now {b[:160]!r})" for k, (a, b) in self.differences.items())
        super().__init__(f"job output {path!r} holds another job: {shown}. Pass restart=True (kolm-search rerank "
                         "--restart) to start over there, or choose another folder")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.path, self.differences)


class LLMRequestError(KolmError, RuntimeError):
    """A chat-completions call failed (HTTP status, timeout, transport, or a malformed reply).

    ``timed_out`` is true when the last attempt ran out of time (the server answered too slowly
    or not at all).
    """

    def __init__(self, message: str = "", *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class DistributedError(KolmError, RuntimeError):
    """A Dask partition or shard failed after Dask's own retries; nothing partial is returned."""
