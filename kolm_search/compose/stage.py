"""``Stage``: the base of every retriever and reranker, and the algebra that composes them.

A stage has one columnar method, ``transform(batch, candidates) -> CandidateFrame``: a
*retrieving* stage (``is_source`` True: BM25, dense, feedback, composite, and any expression
that starts with one) makes candidates from the queries of ``batch`` and takes none; a
*re-ranking* stage (``is_source`` False: MMR, cross-encoders, LLM rerankers, fusion
rerankers) re-scores the candidates it is given. ``stage(queries)`` runs a retrieving stage
over queries in any form ``search_batch`` takes and returns the run DataFrame
(``qid, doc_id, rank, score``). The operators build new stages (PyTerrier's meanings; the
README's table has the details and the differences):

===========  =====================================================================
``a >> b``   ``b`` transforms ``a``'s candidates (``b`` must re-rank)
``a + b``    scores summed over the union of documents (a missing side adds 0)
``w * a``    scores times ``w`` (also ``a * w``)
``a | b``    documents of either (score 0); ``a & b``: ``a``'s documents that ``b`` has
``a % k``    the ``k`` best of ``a`` (``a`` is asked for ``k``)
``a ^ b``    ``b``'s documents not in ``a`` appended below ``a``'s
``a ** b``   ``a``'s candidates with ``b``'s score of each as a feature (``features``; flat:
             ``a ** b ** c`` = ``(a ** b) ** c``, ``b``'s then ``c``'s score)
===========  =====================================================================

Each node runs its operands once per batch (through :func:`~kolm_search.compose.runner.run_stage`)
and combines their frames in one vectorised call (:mod:`~kolm_search.compose.frame_ops`).
An ill-typed composition fails when it is written, with a ``KolmError`` naming the operator
and both operands. Parameters follow scikit-learn (:meth:`Stage.get_params`,
:meth:`Stage.set_params`, nested names ``left__k1``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from kolm_search.compose import frame_ops as ops
from kolm_search.compose.params import Parameters
from kolm_search.compose.runner import ServedByRunner, run_stage, stage_name
from kolm_search.contract.ports import Reranker, Retriever, implements
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.errors import KolmTypeError, KolmValueError

__all__ = ["Composed", "Concatenate", "Cutoff", "FeatureUnion", "Intersection", "Scale", "Stage", "Sum", "Then", "Union",
           "check_acyclic"]


def _fail(op: str, left: Any, right: Any, why: str, kind: type[Exception] = KolmTypeError) -> Exception:
    return kind(f"{stage_name(left)} {op} {stage_name(right)}: {why}")


class Stage(Parameters):
    """The base of every stage (see the module docstring).

    A subclass implements :meth:`transform` and says whether it retrieves (:attr:`is_source`);
    a retrieving stage also has ``table``, the :class:`~kolm_search.engine.doctable.DocumentTable`
    its document codes refer to. Its parameters are :meth:`stage_params` (what determines
    its output), changed by :meth:`apply_params` (:class:`~kolm_search.compose.params.Parameters`).
    """

    __pandas_priority__ = 10_000  # ``run + stage`` reaches Stage.__radd__, which refuses it
    __array_ufunc__ = None

    # -- what a stage declares ------------------------------------------------------------
    @property
    def is_source(self) -> bool:
        """True for a stage that makes candidates from queries (takes none), False for one that re-ranks."""
        return True

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        """The candidates of every query of ``batch``: a retrieving stage's own (``candidates``
        None), or a re-ranking stage's new scores and order of ``candidates``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement transform")

    def prefix_stable(self, batch: QueryBatch) -> bool:
        """Whether this retrieving stage's candidates for ``batch`` at any smaller limit are the
        first of each query's at ``batch.limit`` (same documents, scores and order): then an
        experiment runs it once at the deepest limit asked and cuts it for the rest. False
        unless a stage declares it (BM25 and exact dense do, for one text per query)."""
        return False

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]] | None:
        """The stages this stage runs (through :func:`~kolm_search.compose.runner.run_stage`) when
        it is asked for ``batch``, each with the batch it gives it (its limit): what an experiment
        reads before running, to compute a prefix-stable stage once at the deepest limit any of
        its pipelines asks (:func:`~kolm_search.compose.depths.planned_depths`). ``[]`` for a stage
        that runs none; None (the default) when not declared: the stages it runs are then shared
        as they are met. A declaration is kept with ``transform`` by both making their batches
        alike (``Cutoff._asked``); a wrong one costs work, never a different output."""
        return None

    def __call__(self, queries: Any, *, limit: int | None = None, offset: int = 0, mode: str | None = None,
                 filters: dict[str, Any] | None = None) -> pd.DataFrame:
        """The run DataFrame ``qid, doc_id, rank, score`` of ``queries`` (any form ``search_batch``
        takes; ``limit`` default 10), equal to ``search_batch``'s with this stage as retriever."""
        from kolm_search.compose.queries import run_queries

        return run_queries(self, queries, limit=limit, offset=offset, mode=mode, filters=filters)

    # -- operators ----------------------------------------------------------------------------
    def __rshift__(self, other: Any) -> Stage:
        right = _operand(">>", self, other)
        if right.is_source:
            raise _fail(">>", self, right, "the right side retrieves; after '>>' comes a stage that re-ranks "
                                           "the candidates it is given")
        return Then(self, right)

    def __rrshift__(self, other: Any) -> Stage:
        return _operand(">>", self, other, other_is_left=True) >> self

    def __add__(self, other: Any) -> Stage:
        return Sum(self, _same_kind("+", self, other))

    def __radd__(self, other: Any) -> Stage:
        return Sum(_same_kind("+", self, other, other_is_left=True), self)

    def __mul__(self, other: Any) -> Stage:
        return Scale(self, _weight(self, other))

    def __rmul__(self, other: Any) -> Stage:
        return Scale(self, _weight(self, other, other_is_left=True))

    def __or__(self, other: Any) -> Stage:
        return Union(self, _same_kind("|", self, other))

    def __ror__(self, other: Any) -> Stage:
        return Union(_same_kind("|", self, other, other_is_left=True), self)

    def __and__(self, other: Any) -> Stage:
        return Intersection(self, _same_kind("&", self, other))

    def __rand__(self, other: Any) -> Stage:
        return Intersection(_same_kind("&", self, other, other_is_left=True), self)

    def __xor__(self, other: Any) -> Stage:
        return Concatenate(self, _same_kind("^", self, other))

    def __rxor__(self, other: Any) -> Stage:
        return Concatenate(_same_kind("^", self, other, other_is_left=True), self)

    def __pow__(self, other: Any) -> Stage:
        return FeatureUnion(self, _operand("**", self, other))

    def __rpow__(self, other: Any) -> Stage:
        return FeatureUnion(_operand("**", self, other, other_is_left=True), self)

    def __mod__(self, other: Any) -> Stage:
        return Cutoff(self, _cutoff(self, other))


def _sides(this: Any, other: Any, other_is_left: bool) -> tuple[Any, Any]:
    return (other, this) if other_is_left else (this, other)


def _operand(op: str, this: Stage, other: Any, *, other_is_left: bool = False) -> Stage:
    """``other`` when it is a stage, else a ``KolmTypeError`` naming the operator and both
    operands (a user port object becomes a stage by ``as_stage(obj)``, said explicitly)."""
    if isinstance(other, Stage):
        return other
    left, right = _sides(this, other, other_is_left)
    hint = " (wrap a retriever or reranker of your own with kolm_search.as_stage)" \
        if implements(other, Retriever) or implements(other, Reranker) else ""
    raise _fail(op, left, right, f"{type(other).__name__} is not a stage{hint}")


def _same_kind(op: str, this: Stage, other: Any, *, other_is_left: bool = False) -> Stage:
    """``other`` as a stage of the same kind as ``this`` (both retrieve or both re-rank)."""
    found = _operand(op, this, other, other_is_left=other_is_left)
    left, right = _sides(this, found, other_is_left)
    if left.is_source != right.is_source:
        which = "left" if not left.is_source else "right"
        raise _fail(op, left, right, f"the {which} side re-ranks and the other retrieves; '{op}' combines two "
                                     "retrieving stages or two re-ranking stages (write 'a >> (r1 " + op + " r2)')")
    return found


def _weight(this: Stage, other: Any, *, other_is_left: bool = False) -> float:
    if isinstance(other, bool) or not isinstance(other, numbers.Real) or not float(other) == float(other) \
            or abs(float(other)) == float("inf"):
        left, right = _sides(this, other, other_is_left)
        raise _fail("*", left, right, "a stage is scaled by a finite number")
    return float(other)


def _cutoff(this: Stage, k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or int(k) < 1:
        raise _fail("%", this, k, "the rank cutoff must be a positive int", KolmValueError)
    return int(k)


class Composed(ServedByRunner, Stage):
    """A stage made of others by an operator: ``operands`` in order, under :attr:`names`
    (their parameter names), and the operator's own parameters. As a retrieving stage it is
    a :class:`~kolm_search.contract.ports.BatchRetriever` (``table``, ``retrieve_batch``, ``retrieve``),
    so it can be a :class:`~kolm_search.contract.client.SearchClient`'s retriever."""

    names: tuple[str, ...] = ("left", "right")
    symbol = "?"

    def __init__(self, *operands: Stage) -> None:
        self.operands = list(operands)
        check_acyclic(self)

    @property
    def is_source(self) -> bool:
        return self.operands[0].is_source

    @property
    def table(self) -> Any:
        """The document table of the first retrieving operand (None for a re-ranking stage)."""
        for stage in self.operands:
            if stage.is_source:
                return stage.table  # type: ignore[attr-defined]
        return None

    def stage_params(self) -> dict[str, Any]:
        return dict(zip(self.names, self.operands, strict=True))

    def kind_fixed(self, name: str) -> bool:
        """Whether operand ``name`` must stay of its kind (retrieving or re-ranking) when set."""
        return True

    def apply_params(self, changes: dict[str, Any]) -> None:
        old = list(self.operands)
        try:
            for name, value in changes.items():
                if name not in self.names:
                    super().apply_params({name: value})
                i = self.names.index(name)
                if not isinstance(value, Stage) or (self.kind_fixed(name)
                                                    and value.is_source != self.operands[i].is_source):
                    raise KolmTypeError(f"{type(self).__name__}.{name} must be a stage of the same kind as "
                                        f"{stage_name(self.operands[i])}, got {stage_name(value)}")
                self.operands[i] = value
            check_acyclic(self)
        except (KolmTypeError, KolmValueError):  # all or nothing
            self.operands = old
            raise

    def __repr__(self) -> str:
        return "(" + f" {self.symbol} ".join(repr(s) for s in self.operands) + ")"


def check_acyclic(root: Stage, operands: Sequence[Any] | None = None) -> None:
    """``KolmValueError`` when ``root`` is reached again through its operands, or, given
    ``operands``, through those it is about to take (checked before they are set)."""
    def walk(node: Stage, path: tuple[int, ...]) -> None:
        if id(node) in path:
            symbol = f" {root.symbol}" if isinstance(root, Composed) else ""
            raise KolmValueError(f"{type(root).__name__}{symbol}: the composition holds itself "
                                 f"({stage_name(node)}): a cycle")
        for child in node.stage_params().values():
            if isinstance(child, Stage):
                walk(child, (*path, id(node)))
    if operands is None:
        walk(root, ())
        return
    for operand in operands:
        if isinstance(operand, Stage):
            walk(operand, (id(root),))


class _Binary(Composed):
    """Two operands, each given the batch; their frames combined by ``kernel``."""

    kernel: Callable[[CandidateFrame, CandidateFrame], CandidateFrame]

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        left, right = self.operands
        return type(self).kernel(run_stage(left, batch, candidates), run_stage(right, batch, candidates))

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]]:
        return [(stage, batch) for stage in self.operands]


class Then(_Binary):
    """``a >> b``: ``b`` transforms ``a``'s candidates."""

    symbol = ">>"

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        left, right = self.operands
        return run_stage(right, batch, run_stage(left, batch, candidates))


class Sum(_Binary):
    """``a + b``: scores summed over the union of documents (:func:`~kolm_search.compose.frame_ops.linear`)."""

    symbol = "+"
    kernel = staticmethod(ops.linear)


class Union(_Binary):
    """``a | b``: the documents of either (:func:`~kolm_search.compose.frame_ops.union`)."""

    symbol = "|"
    kernel = staticmethod(ops.union)


class Intersection(_Binary):
    """``a & b``: ``a``'s documents that ``b`` has (:func:`~kolm_search.compose.frame_ops.intersection`)."""

    symbol = "&"
    kernel = staticmethod(ops.intersection)


class Concatenate(_Binary):
    """``a ^ b``: ``b``'s documents not in ``a`` appended (:func:`~kolm_search.compose.frame_ops.concatenate`)."""

    symbol = "^"
    kernel = staticmethod(ops.concatenate)


class FeatureUnion(Composed):
    """``a ** b ** c``: ``a``'s candidates with the scores of ``b``, ``c``, ... as features, in
    order (:func:`~kolm_search.compose.frame_ops.feature_union`). The union is flat, so ``**``
    is associative as PyTerrier's is: an operand that is itself a feature union gives its
    operands in its place (``a ** b ** c``, which Python reads ``a ** (b ** c)``, ``(a ** b) ** c``
    and ``FeatureUnion(a, b, c)`` are one stage; its operands are the parameters ``s0, s1, ...``).
    A re-ranking operand after the first scores the first's candidates (or, when the first
    re-ranks too, the candidates the union is given); a retrieving one retrieves on its own and
    gives its score where it found the document, 0 elsewhere."""

    symbol = "**"

    def __init__(self, *operands: Stage) -> None:
        flat = _flat_union(operands)
        if len(flat) < 2:
            raise KolmValueError(f"a feature union takes at least two stages, got {len(flat)}")
        self.names = tuple(f"s{i}" for i in range(len(flat)))
        super().__init__(*flat)

    def kind_fixed(self, name: str) -> bool:
        return name == self.names[0]  # after the first, an operand may retrieve or re-rank

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        first, *rest = _flat_union(self.operands)  # flat also when set_params gave an operand that is a union
        out = run_stage(first, batch, candidates)
        given = out if first.is_source else candidates
        return ops.feature_union(out, *(run_stage(s, batch, None if s.is_source else given) for s in rest))

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]]:
        return [(stage, batch) for stage in _flat_union(self.operands)]


def _flat_union(operands: Any) -> list[Stage]:
    """``operands`` with every feature union among them replaced by its operands, recursively."""
    out: list[Stage] = []
    for stage in operands:
        out += _flat_union(stage.operands) if isinstance(stage, FeatureUnion) else [stage]
    return out


class _Unary(Composed):
    names = ("stage",)
    param = "k"

    def __init__(self, stage: Stage, value: Any) -> None:
        self.value = value
        super().__init__(stage)

    def stage_params(self) -> dict[str, Any]:
        return {"stage": self.operands[0], self.param: self.value}

    def apply_params(self, changes: dict[str, Any]) -> None:
        changes = dict(changes)
        value = self._check(changes.pop(self.param)) if self.param in changes else self.value
        super().apply_params(changes)  # the operand checked before either changes
        self.value = value

    def _check(self, value: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"({self.operands[0]!r} {self.symbol} {self.value!r})"


class Cutoff(_Unary):
    """``a % k``: the ``k`` best of each query; ``a`` is asked for ``k`` (a retriever retrieves ``k``)."""

    symbol = "%"

    def _check(self, value: Any) -> int:
        return _cutoff(self.operands[0], value)

    def _asked(self, batch: QueryBatch) -> QueryBatch:
        """The batch the operand is asked for: ``k`` deep (at most the table's size, at least 1)."""
        k = int(self.value)
        return replace(batch, limit=k if batch.table is None else max(1, min(k, len(batch.table))))

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        return ops.cutoff(run_stage(self.operands[0], self._asked(batch), candidates), int(self.value))

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]]:
        return [(self.operands[0], self._asked(batch))]


class Scale(_Unary):
    """``w * a``: scores times ``w`` (re-ranked when ``w < 0``)."""

    symbol = "*"
    param = "weight"

    def _check(self, value: Any) -> float:
        return _weight(self.operands[0], value)

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        return ops.scale(run_stage(self.operands[0], batch, candidates), float(self.value))

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]]:
        return [(self.operands[0], batch)]

    def __repr__(self) -> str:
        return f"({self.value!r} * {self.operands[0]!r})"
