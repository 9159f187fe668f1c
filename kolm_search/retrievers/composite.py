"""``CompositeRetriever``: fan out to child retrievers concurrently, fuse with RRF (or any
fusion method of :mod:`kolm_search.fusion`, with its ``params``)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from kolm_search._bridge import resolve
from kolm_search._logging import log
from kolm_search._params import one_of, positive_int
from kolm_search.compose.kinds import RetrieverStage
from kolm_search.compose.runner import mark_incomplete, revision_of, run_stage, settle
from kolm_search.compose.stage import Stage, check_acyclic
from kolm_search.contract.ports import (
    BatchRetriever,
    HoldsIndexes,
    Logger,
    Retriever,
    Updatable,
    implements,
)
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.same_documents import same_documents
from kolm_search.errors import PIPELINE_STAGES, FilterError, KolmTypeError, KolmValueError, SearchError
from kolm_search.fusion import check_k, check_weights, fuse_frame, merge_with_rrf
from kolm_search.fusion.frames import resolve as resolve_fusion
from kolm_search.fusion.methods import PER_RUN_PARAMS, reads_scores
from kolm_search.retrievers import incremental
from kolm_search.retrievers.composite_gather import gather_best_effort, gather_fail_fast, retriever_name
from kolm_search.retrievers.composite_saved import SavedComposite
from kolm_search.retrievers.incremental import SegmentedIndex
from kolm_search.types import SearchDocument, SearchPipelineContext, as_documents

__all__ = ["CompositeRetriever", "short_params"]

Strategy = Literal["fail-fast", "best-effort"]
_STAGE = PIPELINE_STAGES.COMPOSITE_RETRIEVER


def _child_frame(child: Any, batch: QueryBatch) -> CandidateFrame:
    """A child's frame of ``batch``: a stage's whole output through the stage runner of
    :mod:`kolm_search.compose` (shared and cached inside an experiment; a retriever's is at
    most ``batch.limit`` long, ``bm25 % 100``'s 100), else ``retrieve_batch``."""
    if isinstance(child, Stage):
        return run_stage(child, batch, None)
    return child.retrieve_batch(batch)


@saved_kind("composite")
class CompositeRetriever(SavedComposite, RetrieverStage):
    """Runs child retrievers concurrently and fuses their lists with (weighted) RRF, or
    another fusion method over normalised scores.

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
        One weight per child (weighted RRF, beyond the spec; with ``method="wsum"`` the
        weights of the convex combination).
    method : str, default "rrf"
        Fusion method: a name of :data:`~kolm_search.fusion.FUSION_METHODS` (``"rrf"``,
        ``"wsum"``, ``"sum"``, ``"mnz"``, ``"max"``, ``"bordafuse"``, ...); ``k`` applies
        where the method takes it. A method with required parameters takes them in ``params``.
    norm : str, optional
        Score normalisation of each child's list before fusion (``"min-max"``, ``"zmuv"``,
        ...; see :data:`~kolm_search.fusion.NORMALIZATIONS`); None keeps the scores.
    depth : int, optional
        Candidates asked of each child: ``max(depth, target_limit)`` (capped at the table's
        size on the batch path). Default: ``target_limit``, the spec's behaviour, so deeper
        pages also fuse deeper lists.
    params : dict, optional
        The method's parameters besides ``k`` as :func:`~kolm_search.fusion.fuse` takes them
        (ranx's names): ``gamma`` (``gmnz``), ``phi`` (``rbc``), ``sigma`` (``logn_isr``), ``w``
        and the trained tables ``probs``, ``log_odds``, ``map_scores`` of the supervised
        methods (one per child, in the children's order: ``FittedFusion.params`` of
        :func:`~kolm_search.fit_fusion` trained on the children's runs). Checked here; kept as
        plain numbers and lists (saved with the composite). With ``"best-effort"``, a child that
        fails takes its weight and its tables with it. ``k`` and ``weights`` found here are
        taken as those arguments (also by ``set_params(params=...)``, replacing the current ones).

    The fused list is cut at ``context.plan.target_limit``; each document carries its
    fused score. With the defaults (``method="rrf"``, no ``norm``, no ``depth``) the
    documents path is the spec's ``merge_with_rrf``; otherwise both paths fuse with
    :func:`~kolm_search.fusion.fuse_frame`, so ``retrieve`` and ``retrieve_batch`` agree.
    """

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        k: float = 60,
        strategy: Strategy = "fail-fast",
        logger: Logger | None = None,
        *,
        weights: Sequence[float] | None = None,
        method: str = "rrf",
        norm: str | None = None,
        depth: int | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        retrievers = list(retrievers)
        if not retrievers:
            raise KolmValueError("CompositeRetriever needs at least one retriever")
        for i, r in enumerate(retrievers):
            if not implements(r, Retriever):
                raise KolmTypeError(f"retrievers[{i}] ({type(r).__name__}) has no 'retrieve' method")
        self.retrievers = retrievers
        params, k, weights = _lift(params, k, weights)
        self.k = check_k(k)
        self.strategy: Strategy = one_of("strategy", strategy, ("fail-fast", "best-effort"))
        self.logger = logger
        self.weights = None if weights is None else list(check_weights(weights, len(retrievers)))
        self.depth: int | None = positive_int("depth", depth, none=True)
        self.method, self.norm, checked = resolve_fusion(method, norm, params, len(retrievers), k=self.k,
                                                         weights=self.weights)
        # checked, as numbers and lists (JSON, fingerprints), by name; none left (k, weights taken out) is None
        self.params: dict[str, Any] | None = {name: _plain(checked[name]) for name in sorted(params)} if params \
            else None

    @property
    def _spec_rrf(self) -> bool:
        """True when the spec's document path (``merge_with_rrf``, children cut at the target) applies."""
        return self.method == "rrf" and self.norm is None and self.depth is None

    def _fuse(self, frame: CandidateFrame, kept: Sequence[int], limit: int, n_docs: int) -> CandidateFrame:
        """Fuse ``frame``'s lists, list ``i`` made by child ``kept[i]`` (the weights and per-run
        parameters of those children)."""
        return fuse_frame(frame, method=self.method, k=self.k, weights=self._weights_of(kept), norm=self.norm,
                          limit=limit, n_lists=len(kept), n_docs=n_docs, params=self._params_of(kept))

    def _weights_of(self, kept: Sequence[int]) -> list[float] | None:
        """The weights of children ``kept`` (None when none were given: min, max and med take none)."""
        return None if self.weights is None else [self.weights[i] for i in kept]

    def _params_of(self, kept: Sequence[int]) -> dict[str, Any] | None:
        """:attr:`params` for children ``kept``: each per-run parameter's entries of those children."""
        if self.params is None:
            return None
        return {name: [value[i] for i in kept] if name in PER_RUN_PARAMS else value
                for name, value in self.params.items()}

    async def _run_child(self, index: int, context: SearchPipelineContext) -> list[SearchDocument]:
        retriever = self.retrievers[index]
        docs = await resolve(retriever.retrieve(context))
        return as_documents(docs, what=f"retrievers[{index}] ({retriever_name(retriever)})")

    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """Fan out, fuse, and return at most ``context.plan.target_limit`` documents."""
        target = int(context.plan.target_limit)
        child_context = context
        if self.depth is not None and self.depth > target:
            child_context = replace(context, plan=replace(context.plan, target_limit=self.depth))
        tasks: list[asyncio.Future[list[SearchDocument]]] = [
            asyncio.ensure_future(self._run_child(i, child_context)) for i in range(len(self.retrievers))
        ]
        if self.strategy == "fail-fast":
            lists = await gather_fail_fast(tasks, self.retrievers)
            kept = list(range(len(lists)))
        else:
            lists, kept = await gather_best_effort(tasks, self.retrievers, self.logger)
            if len(kept) < len(self.retrievers):
                mark_incomplete()  # not to be cached as this fusion's output
        if self._spec_rrf:
            return merge_with_rrf(lists, {}, target, self.k, weights=self._weights_of(kept))
        return self._fuse_documents(lists, kept, target)

    def _fuse_documents(self, lists: list[list[SearchDocument]], kept: Sequence[int],
                        limit: int) -> list[SearchDocument]:
        """Fuse document lists with :meth:`_fuse` (ids coded by first appearance)."""
        first: dict[str, SearchDocument] = {}
        code: dict[str, int] = {}
        frames: list[CandidateFrame] = []
        needs_scores = reads_scores(self.method, self.norm)
        for li, docs in enumerate(lists):
            codes, scores = [], []
            for rank, doc in enumerate(docs):
                if needs_scores and (doc.score is None or doc.score != doc.score):
                    raise SearchError(_STAGE, f"retrievers[{li}] returned document {doc.id!r} (rank {rank}) without a "
                                              f"score; fusion {self.method!r} (norm {self.norm!r}) needs scores")
                first.setdefault(doc.id, doc)
                codes.append(code.setdefault(doc.id, len(code)))
                scores.append(0.0 if doc.score is None else float(doc.score))
            frames.append(CandidateFrame.from_ptr([0, len(codes)], np.asarray(codes, np.int64),
                                                  np.asarray(scores, np.float64)))
        fused = self._fuse(CandidateFrame.concat(frames), kept, limit, max(len(code), 1))
        by_code = list(first.values())  # codes follow first appearance, as ``first`` does
        return [replace(by_code[int(c)], score=float(sc)) for c, sc in zip(fused.doc, fused.score, strict=True)]

    # -- incremental updates (every child a BM25, dense, feedback or composite retriever) ---
    @property
    def revision(self) -> str:
        """The children's revisions joined (``""`` while none has changed): of the indexes in
        a child that is a composed stage too (:func:`~kolm_search.compose.runner.revision_of`)."""
        revs = [revision_of(c) for c in self.retrievers]
        return ",".join(revs) if any(revs) else ""

    def indexes(self) -> list[SegmentedIndex]:
        """The indexes a change applies to: every child's (:class:`~kolm_search.contract.ports.HoldsIndexes`);
        a child that cannot change with the others raises ``KolmTypeError``."""
        out: list[SegmentedIndex] = []
        for i, child in enumerate(self.retrievers):
            if not implements(child, HoldsIndexes):
                name = type(child).__name__
                raise KolmTypeError(f"{name} does not support add/delete" if not implements(child, Updatable) else
                                    f"retrievers[{i}] ({name}) cannot change together with the other children (all or "
                                    "none): a composite takes add/delete when each child is a built-in index")
            out.extend(child.indexes())
        return out

    def add(self, documents: Any, embeddings: Any = None, *, defer: bool = False) -> None:
        """Add documents to every child, all or none (``embeddings`` go to dense children); a
        child without add/delete raises ``KolmTypeError`` before any change."""
        incremental.add(self.indexes(), documents, embeddings, defer=defer)
        if not defer:
            self.merge()

    def delete(self, ids: Sequence[str], *, defer: bool = False) -> None:
        """Delete documents by id from every child, all or none."""
        incremental.delete(self.indexes(), ids, defer=defer)
        if not defer:
            self.merge()

    def merge(self) -> None:
        """Merge every child's deferred changes, and those of the indexes among a child's stage
        parameters (a cutoff's, a fusion's: :func:`~kolm_search.compose.runner.settle`);
        children with equal tables then share one."""
        for child in self.retrievers:
            settle(child)
        shared: list[SegmentedIndex] = []
        for child in self.retrievers:
            if implements(child, HoldsIndexes):
                try:
                    shared.extend(child.indexes())
                except KolmTypeError:  # a composite of stages that cannot change (e.g. cutoffs): nothing to share
                    continue
        incremental.share_tables(shared)

    def __copy__(self) -> CompositeRetriever:
        """The same fusion over copies of the children (``SearchClient.add`` changes a copy), of this class."""
        return self.assemble([copy.copy(c) for c in self.retrievers], self.settings(), self.logger)

    def settings(self) -> dict[str, Any]:
        """The fusion settings by name (``k, strategy, weights, method, norm, depth, params``):
        what :meth:`assemble` takes besides the children. Lists are copies: a change to them does
        not reach this retriever past its checks."""
        return {"k": self.k, "strategy": self.strategy, "weights": None if self.weights is None else list(self.weights),
                "method": self.method, "norm": self.norm, "depth": self.depth, "params": copy.deepcopy(self.params)}

    @classmethod
    def assemble(cls, children: Sequence[Any], settings: dict[str, Any],
                 logger: Logger | None = None) -> CompositeRetriever:
        """An instance of this class over ``children`` with :meth:`settings` ``settings`` (how a
        copy, a load and a change of parameters build one; a subclass whose constructor takes
        its children otherwise overrides it)."""
        return cls(children, settings["k"], settings["strategy"], logger, weights=settings["weights"],
                   method=settings["method"], norm=settings["norm"], depth=settings["depth"],
                   params=settings.get("params"))

    # -- columnar fast path --------------------------------------------------------------
    @property
    def table(self) -> Any:
        """The document table that every child shares (same ids in the same order:
        :func:`~kolm_search.engine.same_documents.same_documents`, each table's ids digested once),
        or None when a child has no ``retrieve_batch``/table or the tables differ: the batch path
        is then off and ``retrieve`` is used per query."""
        if not all(implements(r, BatchRetriever) for r in self.retrievers):
            return None
        tables = [r.table for r in self.retrievers]
        first = tables[0]
        if first is None:
            return None
        return first if all(t is not None and same_documents(t, first) for t in tables) else None

    def _child_batch(self, batch: QueryBatch, table: Any) -> QueryBatch:
        """The batch each child is asked for: ``depth`` deep when deeper (at most the table's size), over ``table``."""
        if self.depth is not None and min(self.depth, len(table)) > batch.limit:
            batch = replace(batch, limit=min(self.depth, len(table)))
        return replace(batch, table=table)

    def asks(self, batch: QueryBatch) -> list[tuple[Stage, QueryBatch]] | None:
        """Each child that is a stage, with :meth:`_child_batch` (None while the children share no table)."""
        table = self.table
        if table is None:
            return None
        return [(child, self._child_batch(batch, table)) for child in self.retrievers if isinstance(child, Stage)]

    def retrieve_batch(self, batch: QueryBatch) -> CandidateFrame:
        """Every child's batch frame, fused by (weighted) RRF in one kernel call."""
        self.merge()
        table = self.table
        if table is None:
            raise SearchError(_STAGE, "retrieve_batch needs children with retrieve_batch over one document table")
        frames: list[CandidateFrame] = []
        kept: list[int] = []
        errors: list[BaseException] = []
        child_batch = self._child_batch(batch, table)
        for index, child in enumerate(self.retrievers):
            try:
                frames.append(_child_frame(child, child_batch))
                kept.append(index)
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
        if errors:
            mark_incomplete()  # not to be cached as this fusion's output
        return self._fuse(CandidateFrame.concat(frames), kept, batch.limit, max(len(table), 1))

    # -- stage parameters (kolm_search.compose) ---------------------------------------------
    def stage_params(self) -> dict[str, Any]:
        """The children as ``s0``, ``s1``, ... and ``k, method, norm, weights, depth, strategy, params``."""
        return {**{f"s{i}": r for i, r in enumerate(self.retrievers)}, **self.settings()}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set children or fusion parameters (checked as the constructor checks them; on error
        nothing changes)."""
        if not changes:
            return
        merged = {**self.stage_params(), **changes}
        given = changes.get("params")
        if isinstance(given, Mapping):  # new params' k and weights (a retrained fit's) replace the current ones
            if "k" in given and "k" not in changes:
                merged["k"] = given["k"]
            if "weights" in given and "weights" not in changes:
                merged["weights"] = None
        children = [merged[f"s{i}"] for i in range(len(self.retrievers))]
        rebuilt = self.assemble(children, merged, self.logger)  # checked as the constructor checks
        check_acyclic(self, rebuilt.retrievers)  # a child holding this retriever: refused, not a RecursionError later
        self.__dict__.update(rebuilt.__dict__)  # this retriever takes the state of its checked rebuild

    def __repr__(self) -> str:
        names = ", ".join(retriever_name(r) for r in self.retrievers)
        extra = "" if self._spec_rrf else f", method={self.method!r}, norm={self.norm!r}, depth={self.depth!r}"
        if self.params is not None:
            extra += f", params={short_params(self.params)}"
        return f"CompositeRetriever([{names}], k={self.k:g}, strategy={self.strategy!r}{extra})"


def _plain(value: Any) -> Any:
    """A checked fusion parameter as plain Python numbers and lists (arrays' ``tolist``)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _lift(params: Mapping[str, Any] | None, k: float, weights: Any) -> tuple[Mapping[str, Any] | None, float, Any]:
    """``k`` and ``weights`` found in ``params`` (as ``FittedFusion.params`` may hold them) taken
    out into the arguments (``k`` only when the argument is the default 60 or the same value;
    ``weights`` only when none were given), so each is kept in one place."""
    if params is None or not isinstance(params, Mapping) or not ({"k", "weights"} & set(params)):
        return params, k, weights
    rest = dict(params)
    if "weights" in rest:
        if weights is not None:
            raise KolmValueError("weights given twice (argument and params)")
        weights = rest.pop("weights")
    if "k" in rest:
        given = check_k(rest.pop("k"))  # a number before it is compared
        if k != 60 and given != k:
            raise KolmValueError(f"k given twice (argument {k!r} and params {given!r})")
        k = given
    return rest, k, weights


def short_params(params: Mapping[str, Any]) -> str:
    """``params`` for a repr: a list whose repr is long (of trained tables) by its length."""
    return "{" + ", ".join(f"{name!r}: " + (f"<{len(value)} per run>" if isinstance(value, list) and
                                            len(repr(value)) > 60 else repr(value))
                           for name, value in params.items()) + "}"
