"""How a composed stage calls its operands: :func:`run_stage`, the one place that checks a
stage's output, guards against cycles, and shares or caches outputs; and how such a stage
serves a client (:class:`ServedByRunner`), its indexes settled first (:func:`settle`).

Outside a :func:`sharing` block a call is ``stage.transform(batch, candidates)``, checked.
Inside one (an :class:`~kolm_search.evaluation.Experiment`, a grid search), an output is
kept under (stage fingerprint, input fingerprint) for the block's length, so that equal
prefixes of several pipelines run once, and, with a cache (:class:`~kolm_search.compose.cache.StageCache`),
read from and written to disk. A stage whose fingerprint cannot be made (a user object
declaring none) is shared by identity within the block and never written to disk; so is an
output marked incomplete (:func:`mark_incomplete`: a best-effort fusion whose child failed) and
every output made from it.

A retrieving stage that declares itself prefix-stable for a batch
(:meth:`~kolm_search.compose.stage.Stage.prefix_stable`: BM25, exact dense) is computed once
per block for several depths: at the block's ``depth`` at least (an experiment's limit), at the
deepest limit its pipelines will ask (``RunState.planned``, :mod:`~kolm_search.compose.depths`)
or a deeper one the block holds it for, then cut (``bm25 % 10``, ``bm25`` run BM25 once).

Inside a block each stage is fingerprinted once, and the input key of a stage given the
output of another (persistent) node is that node's key with the batch's digest, not a hash
of the candidates' arrays: equal keys promise equal outputs, so the node key names the
frame as well as its entries would (:func:`frame_key`).
"""

from __future__ import annotations

import reprlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from kolm_search._kernels import load
from kolm_search.compose.fingerprints import (
    batch_digest,
    fingerprints_once,
    frame_digest,
    input_digest,
    node_digest,
    value_fingerprint,
)
from kolm_search.compose.params import Parameters
from kolm_search.contract.incomplete import mark_incomplete, watching_incomplete
from kolm_search.contract.ports import Updatable, class_implements, implements
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.same_documents import same_documents
from kolm_search.errors import FrameValidationError, KolmError, KolmValueError, SearchError

if TYPE_CHECKING:
    from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["RunState", "ServedByRunner", "SharedOutputs", "frame_key", "indexes_in", "mark_incomplete",
           "retrieve_through_runner", "revision_of", "run_stage", "settle", "shared_value", "sharing", "stage_key",
           "stage_name", "watching_incomplete"]


def stage_name(stage: Any) -> str:
    """A short readable name of a stage for errors: its ``repr``, shortened."""
    if isinstance(stage, str):
        return stage
    short = reprlib.Repr()
    short.maxother = 100
    text = short.repr(stage)
    return f"<{type(stage).__name__}>" if "\n" in text else text


class SharedOutputs(Protocol):
    """A store of stage outputs on disk (:class:`~kolm_search.compose.cache.StageCache`)."""

    def get(self, stage_fp: str, input_fp: str, n_queries: int) -> CandidateFrame | None: ...

    def put(self, stage_fp: str, input_fp: str, frame: CandidateFrame, *,
            same_as: tuple[str, str] | None = None) -> None: ...


@dataclass
class RunState:
    """What a :func:`sharing` block holds: outputs by key, the optional disk cache, and how many
    times each stage fingerprint was computed (``computed``) or read back (``reused``). ``depth``:
    the least limit a prefix-stable retrieving stage is computed at (then cut to the limit asked;
    0: at the limit asked); ``planned``: by stage fingerprint, a deeper one, the deepest its
    pipelines will ask (:func:`~kolm_search.compose.depths.planned_depths`)."""

    cache: SharedOutputs | None = None
    depth: int = 0
    planned: dict[str, int] = field(default_factory=dict)
    memo: dict[tuple[str, str], CandidateFrame] = field(default_factory=dict)
    computed: Counter[str] = field(default_factory=Counter)
    reused: Counter[str] = field(default_factory=Counter)
    values: dict[Any, Any] = field(default_factory=dict)
    origins: dict[int, str] = field(default_factory=dict)  # id of a kept output -> the key that made it
    stored: dict[int, tuple[str, str]] = field(default_factory=dict)  # id of a kept output -> its cache entry
    incomplete: set[int] = field(default_factory=set)  # ids of kept outputs made without part of their input
    depths: dict[str, set[int]] = field(default_factory=dict)  # retrieving stage fp -> the limits it was asked at
    unnamed: set[tuple[str, str]] = field(default_factory=set)  # memo keys of stages keyed by identity (no fingerprint)

    def forget_incomplete(self) -> None:
        """Drop the kept outputs made without part of their input (:func:`mark_incomplete`), so
        that the next block (a later run, the failed child perhaps back) computes them again."""
        if self.incomplete:
            for key in [key for key, out in self.memo.items() if id(out) in self.incomplete]:
                del self.memo[key]
            self.incomplete.clear()

    def forget_unnamed(self) -> None:
        """Drop the kept outputs of stages without a fingerprint, keyed by identity, which
        ``set_params`` keeps (the next point of a grid would read the outputs before the change)."""
        for key in self.unnamed:
            self.memo.pop(key, None)
        self.unnamed.clear()


T = TypeVar("T")
_STATE: ContextVar[RunState | None] = ContextVar("kolm_search_compose_state", default=None)
_ACTIVE: ContextVar[tuple[int, ...]] = ContextVar("kolm_search_compose_active", default=())


@contextmanager
def sharing(state: RunState | None = None) -> Iterator[RunState]:
    """Share (and with ``state.cache``, cache) stage outputs inside the block."""
    state = state or RunState()
    token = _STATE.set(state)
    try:
        yield state
    finally:
        _STATE.reset(token)


def shared_value(key: Any, make: Callable[[], T], copy: Callable[[T], T] | None = None) -> T:
    """``make()``, kept under ``key`` for the length of a :func:`sharing` block (outside one,
    made every time): what several stages derive alike from one input, e.g. the documents of
    the candidates that five rerankers re-rank. With ``copy``, a value kept is given as
    ``copy(value)`` (each taker its own: one writing into it reaches no other)."""
    state = _STATE.get()
    if state is None:
        return make()
    if key not in state.values:
        state.values[key] = make()
    return state.values[key] if copy is None else copy(state.values[key])


def check_output(stage: Any, out: Any, batch: QueryBatch) -> CandidateFrame:
    """``out`` if it is a candidate frame of the batch's queries over its table, else a
    ``SearchError`` naming the stage."""
    if not isinstance(out, CandidateFrame):
        raise SearchError(stage_name(stage), f"returned {type(out).__name__}, not a CandidateFrame")
    if out.n_queries != batch.n_queries:
        raise SearchError(stage_name(stage), f"returned a frame of {out.n_queries} queries for a batch of {batch.n_queries}")
    if batch.table is not None and len(out) and int(out.doc.max()) >= len(batch.table):
        raise SearchError(stage_name(stage), f"returned document code {int(out.doc.max())}; the table has {len(batch.table)} rows")
    if len(out) and not np.all(np.isfinite(out.score)):
        raise SearchError(stage_name(stage), "returned NaN or infinite scores")
    n_docs = len(batch.table) if batch.table is not None else int(out.doc.max(initial=-1)) + 1
    at = load("repeats").first_repeat(out.query, out.doc, n_docs)
    if at >= 0:
        raise SearchError(stage_name(stage), f"returned document code {int(out.doc[at])} twice for one query (batch row {int(out.query[at])})")
    return out


def frame_key(frame: CandidateFrame | None) -> str:
    """A key of a frame's entries: inside a :func:`sharing` block, the key of the persistent
    node that made it (when it did), else :func:`~kolm_search.compose.fingerprints.frame_digest`."""
    state = _STATE.get()
    if frame is not None and state is not None:
        found = state.origins.get(id(frame))
        if found is not None:
            return found
    return frame_digest(frame)


def stage_key(stage: Any) -> tuple[str, bool]:
    """(fingerprint, True), or (identity, False) without one: what keys a stage's outputs and plan."""
    try:
        return value_fingerprint(stage, what="stage"), True  # made once in the call (fingerprints_once)
    except KolmError:
        return f"object@{id(stage):x}", False


def _batch_key(batch: QueryBatch) -> str:
    """:func:`~kolm_search.compose.fingerprints.batch_digest` of ``batch``, made once per
    :func:`sharing` block for the objects it digests (its texts, owners, filters and
    embeddings, with its size, limit and mode): every pipeline of an experiment is given the
    same ones, also through the copies ``replace(batch, table=...)`` makes for each pipeline;
    a batch is never changed while stages run."""
    parts = (batch.texts, batch.owner, batch.filters, batch.embeddings)
    key = ("batch digest", tuple(id(p) for p in parts), batch.n_queries, batch.limit, batch.mode)
    found = shared_value(key, lambda: (parts, batch_digest(batch)))  # (the parts kept: their ids stay theirs)
    return found[1] if all(a is b for a, b in zip(found[0], parts, strict=True)) else batch_digest(batch)


def _key(stage: Any, batch: QueryBatch, candidates: CandidateFrame | None) -> tuple[str, str, bool]:
    """(stage key, input key, persistent): the fingerprint when the stage has one, else its identity."""
    fp, persistent = stage_key(stage)
    return fp, input_digest(batch, candidates, frame_fp=None if candidates is None else frame_key(candidates),
                            batch_fp=_batch_key(batch)), persistent


def _keep(state: RunState, key: tuple[str, str], out: CandidateFrame, persistent: bool) -> None:
    """Keep ``out`` under ``key`` for the block; a persistent key also names the frame (:func:`frame_key`)."""
    state.memo[key] = out
    if persistent:
        state.origins[id(out)] = node_digest(*key)
    else:
        state.unnamed.add(key)


def _compute(stage: Any, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
    table, own = batch.table, getattr(stage, "table", None) if candidates is None else None  # (a retriever's)
    if own is not None and table is not None and not same_documents(own, table):  # codes read as other documents
        raise SearchError(stage_name(stage), f"indexes other documents than the pipeline's table ({len(own)} against {len(table)}, or other ids): the stages of one composition index one corpus")
    active = _ACTIVE.get()
    if id(stage) in active:
        raise KolmValueError(f"stage {stage_name(stage)} is reached again while it runs: the composition has a cycle "
                             "(through a user object that calls a stage holding it)")
    token = _ACTIVE.set((*active, id(stage)))
    try:
        out = stage.transform(batch, candidates)
    except SearchError:
        raise
    except FrameValidationError as exc:
        raise SearchError(stage_name(stage), f"returned a frame that breaks the schema: {exc}", cause=exc) from exc
    except KolmError:
        raise
    except Exception as exc:  # a user port's own failure: named by its stage, the original as cause
        raise SearchError(stage_name(stage), f"failed: {type(exc).__name__}: {exc}", cause=exc) from exc
    finally:
        _ACTIVE.reset(token)
    return check_output(stage, out, batch)


def indexes_in(stage: Any) -> list[tuple[Any, Any]]:
    """Every :class:`~kolm_search.contract.ports.Updatable` index in ``stage``, each with the
    stage that holds it: ``stage`` itself and, recursively, what it is made of
    (:meth:`~kolm_search.compose.params.Parameters.components`: its stage parameters, an
    :func:`~kolm_search.compose.as_stage` wrapper's port), each once."""
    seen: set[int] = set()
    found: list[tuple[Any, Any]] = []

    def walk(node: Any, owner: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        stage = isinstance(node, Parameters)  # (a stage's capabilities are its class's methods)
        if class_implements(type(node), Updatable) if stage else implements(node, Updatable):
            found.append((node, owner))
        if stage:
            for part in node.components():
                walk(part, part if isinstance(part, Parameters) else node)

    walk(stage, stage)
    return found


def settle(stage: Any) -> None:
    """Apply the deferred changes (``add``/``delete`` with ``defer=True``) of every index in
    ``stage`` (:func:`indexes_in`). A search merges its own index, but the runner reads the
    pipeline's ``table`` before the search to look the codes up: it settles the pipeline first.
    A merge that fails is a ``SearchError`` naming the stage that holds the index."""
    for index, owner in indexes_in(stage):
        try:
            index.merge()
        except KolmError:
            raise
        except Exception as exc:  # a user port's failure, named by its stage as one in its search is
            raise SearchError(stage_name(owner), f"merging deferred changes failed: {type(exc).__name__}: {exc}",
                              cause=exc) from exc


def revision_of(stage: Any) -> str:
    """The revisions (:attr:`~kolm_search.contract.ports.Updatable.revision`) of every index in
    ``stage`` (:func:`indexes_in`) joined: ``""`` while none has changed; another string at every
    ``add``/``delete`` of one (a client's response cache keys on it)."""
    found = [str(index.revision) for index, _ in indexes_in(stage)]
    return ",".join(found) if any(found) else ""


def retrieve_through_runner(stage: Any, batch: QueryBatch, table: Any) -> CandidateFrame:
    """A retrieving ``stage``'s candidates of ``batch`` over ``table``, at most ``batch.limit`` per
    query, through :func:`run_stage` (checked, and shared with the other pipelines of an
    experiment that start with it)."""
    from kolm_search.compose.frame_ops import cutoff

    return cutoff(run_stage(stage, replace(batch, table=table), None), batch.limit)


class ServedByRunner:
    """``retrieve_batch`` and ``retrieve`` of a stage whose ``transform`` computes its candidates
    (an operator, a user port): both go through :func:`retrieve_through_runner`, so such a stage
    serves a :class:`~kolm_search.contract.client.SearchClient` and is checked as an operand is."""

    table: Any

    def index_revision(self) -> str:
        """The revisions of the indexes in this stage (:func:`revision_of`), which a client's
        response cache keys on (:class:`~kolm_search.contract.ports.HasIndexRevision`)."""
        return revision_of(self)

    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """The candidates of ``batch`` (at most ``batch.limit`` per query), as the stage runner asks them."""
        settle(self)  # (deferred changes merged before the table is read)
        table = self.table
        if table is None:
            raise SearchError(stage_name(self), "a re-ranking stage cannot retrieve: put a retrieving stage first")
        return retrieve_through_runner(self, batch, table)

    def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """One query's documents (:meth:`retrieve_batch` of a batch of one)."""
        settle(self)  # (before the table is read: see retrieve_batch)
        table = self.table
        if table is None:
            raise SearchError(stage_name(self), "a re-ranking stage cannot retrieve: put a retrieving stage first")
        frame = self.retrieve_batch(QueryBatch.from_contexts([context], limit=max(1, min(context.plan.target_limit,
                                                                                          len(table)))))
        return table.documents(frame.doc, frame.score)


def run_stage(stage: Any, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
    """``stage.transform(batch, candidates)``, checked, shared and cached (see the module doc)."""
    state = _STATE.get()
    if state is None:
        return _compute(stage, batch, candidates)
    with fingerprints_once():  # each stage fingerprinted once in the outermost call (not for a whole block: a
        wide = _widened(state, stage, batch, candidates)  # stage may be refitted or reset between calls)
        return _shared(state, stage, batch, candidates) if wide is None else _cut(state, stage, batch, wide)


def _widened(state: RunState, stage: Any, batch: QueryBatch, candidates: CandidateFrame | None) -> QueryBatch | None:
    """The batch a retrieving stage prefix-stable for ``batch`` is computed for instead: the same
    queries at a deeper limit the block holds its output for, else at ``state.depth`` when that
    is deeper (or at the depth planned for it, :attr:`RunState.planned`); None to compute ``batch`` itself."""
    if candidates is not None or not stage.prefix_stable(batch):
        return None
    stage_fp, persistent = stage_key(stage)
    if not persistent:
        return None
    for deeper in sorted(state.depths.get(stage_fp, ()), reverse=True):
        if deeper > batch.limit:
            wide = replace(batch, limit=deeper)
            if _key(stage, wide, None)[:2] in state.memo:
                return wide
    depth = max(state.depth, state.planned.get(stage_fp, 0))
    return replace(batch, limit=depth) if depth > batch.limit else None


def _cut(state: RunState, stage: Any, batch: QueryBatch, wide: QueryBatch) -> CandidateFrame:
    """``stage``'s output for ``batch``: its output for the deeper ``wide`` (shared, cached),
    each query's list cut to ``batch.limit``, kept under ``batch``'s key."""
    from kolm_search.compose.frame_ops import cutoff

    stage_fp, input_fp, persistent = _key(stage, batch, None)
    found = state.memo.get((stage_fp, input_fp))
    if found is not None:
        state.reused[stage_fp] += 1
        if id(found) in state.incomplete:
            mark_incomplete()
        return found
    deep = _shared(state, stage, wide, None)
    out = cutoff(deep, batch.limit)
    if id(deep) in state.incomplete:  # (_shared marked the caller's output incomplete)
        state.memo[(stage_fp, input_fp)] = out
        state.incomplete.add(id(out))
    else:
        _keep(state, (stage_fp, input_fp), out, persistent)
    return out


def _shared(state: RunState, stage: Any, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
    stage_fp, input_fp, persistent = _key(stage, batch, candidates)
    key = (stage_fp, input_fp)
    if candidates is None and persistent:  # the limits a source is asked at (_widened looks in the memo for them)
        state.depths.setdefault(stage_fp, set()).add(batch.limit)
    found = state.memo.get(key)
    if found is None and persistent and state.cache is not None:
        found = state.cache.get(stage_fp, input_fp, batch.n_queries)
        if found is not None:
            _keep(state, key, found, persistent)
            state.stored[id(found)] = key
    if found is not None:
        state.reused[stage_fp] += 1
        if id(found) in state.incomplete:
            mark_incomplete()  # the caller's output is made from it
        return found
    with watching_incomplete() as flag:
        flag[0] = candidates is not None and id(candidates) in state.incomplete
        out = _compute(stage, batch, candidates)
    _keep(state, key, out, persistent)
    state.computed[stage_fp] += 1
    if flag[0]:  # named by its entries, not by the node (whose key names the complete output)
        state.origins.pop(id(out), None)
        state.incomplete.add(id(out))
        mark_incomplete()
    elif persistent and state.cache is not None:
        state.cache.put(stage_fp, input_fp, out, same_as=state.stored.get(id(out)))  # ``a >> r``: ``r``'s frame
        state.stored.setdefault(id(out), key)
    return out
