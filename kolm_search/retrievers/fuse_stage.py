"""``Fuse``: fusion of retrieving stages as a stage (every method of :func:`~kolm_search.fusion.fuse`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kolm_search.compose.kinds import as_stage
from kolm_search.compose.runner import stage_name
from kolm_search.compose.stage import Composed
from kolm_search.contract.ports import Logger
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.fusion.fitted import FittedFusion
from kolm_search.retrievers.composite import CompositeRetriever, Strategy, short_params
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["Fuse"]


@saved_kind("composite", loads=False)  # a composite whose children are stages: saved, and loaded, as one
class Fuse(CompositeRetriever):
    """The lists of ``stages`` fused into one per query, in one fusion-kernel call per batch.

    ``Fuse(bm25 % 100, dense % 100)`` is RRF over each stage's 100 best; ``presets.hybrid`` is
    ``Fuse(bm25, dense, k=60)``. A :class:`~kolm_search.retrievers.composite.CompositeRetriever`
    (so it saves, loads and takes ``add``/``delete`` when its stages are built-in indexes;
    ``Fuse.load`` gives a ``Fuse``, a saved client holding one gives a ``CompositeRetriever``)
    whose children are stages: inside an :class:`~kolm_search.evaluation.Experiment` each
    child's output is shared with the other pipelines that hold it.

    Parameters
    ----------
    *stages : Stage or retriever port
        At least one; each retrieves (a user retriever is wrapped by :func:`as_stage`).
    method : str, default "rrf"
        Any method of :data:`~kolm_search.fusion.FUSION_METHODS`; those with required
        parameters take them in ``params``.
    k : float, default 60
        RRF constant (where the method takes it).
    params : dict, optional
        The method's other parameters, as :func:`~kolm_search.fusion.fuse` takes them:
        ``{"gamma": 2.0}`` for ``gmnz``, ``{"phi": 0.8}`` for ``rbc``, and for a supervised
        method the trained tables, one per stage in the stages' order: with ``f =
        fit_fusion({"bm25": bm25_run, "dense": dense_run}, qrels, "probfuse")``,
        ``Fuse(bm25, dense, method=f.method, norm=f.norm, params=f.params)`` (``k`` and
        ``weights`` found there are taken as the arguments of those names), or, the stages
        matched to the fitted runs by name, ``Fuse.from_fitted(f, {"bm25": bm25, "dense": dense})``.
    norm : str, optional
        Score normalisation of each list (:data:`~kolm_search.fusion.NORMALIZATIONS`).
    weights : list of float, optional
        One per stage.
    depth : int, optional
        Candidates asked of each stage: ``max(depth, limit)``; default the batch's limit.
    strategy : {"fail-fast", "best-effort"}
        As for :class:`CompositeRetriever`.
    """

    def __init__(self, *stages: Any, method: str = "rrf", k: float = 60, norm: str | None = None,
                 weights: Any = None, depth: int | None = None, strategy: Strategy = "fail-fast",
                 logger: Logger | None = None, params: Any = None) -> None:
        if not stages:
            raise KolmValueError("Fuse needs at least one stage")
        if len(stages) == 1 and isinstance(stages[0], (list, tuple)):
            raise KolmTypeError("Fuse takes the stages as arguments: Fuse(a, b), not Fuse([a, b])")
        found = []
        for i, given in enumerate(stages):
            try:
                found.append(as_stage(given))
            except (KolmTypeError, KolmValueError) as exc:  # (which argument of which call: Fuse(bm25, 1))
                kind = KolmTypeError if isinstance(exc, KolmTypeError) else KolmValueError  # (a subclass's own
                raise kind(f"Fuse: stages[{i}]: {exc}") from exc  # constructor may take other arguments)
        for i, s in enumerate(found):
            if not s.is_source:
                others = ", ".join(stage_name(x) for x in found)
                raise KolmTypeError(f"Fuse({others}): stages[{i}] ({stage_name(s)}) re-ranks; Fuse fuses retrieving "
                                    "stages (to fuse two re-rankings of one list: Fuse(a >> r1, a >> r2))")
        self._composed = any(isinstance(s, Composed) for s in found)
        super().__init__(found, k, strategy, logger, weights=weights, method=method, norm=norm,  # type: ignore[arg-type]
                         depth=depth, params=params)

    @classmethod
    def from_fitted(cls, fitted: FittedFusion, stages: Mapping[str, Any], **options: Any) -> Fuse:
        """The fusion ``fitted`` (:func:`~kolm_search.fit_fusion`, ``optimize_fusion(...)["fusion"]``:
        its method, norm and parameters, trained tables included) of ``stages``, a dict from the
        fitted runs' names to the stages that made them, put in the fitted runs' order (a table
        given to the wrong stage cannot happen); ``options`` as for :class:`Fuse` (``depth``,
        ``strategy``, ``logger``).

        Raises
        ------
        KolmValueError
            The names are not the fitted runs' names, or ``options`` sets the method, norm,
            ``k``, ``weights`` or ``params`` (the fitted ones are used).
        """
        if not isinstance(fitted, FittedFusion):
            raise KolmTypeError(f"Fuse.from_fitted takes a FittedFusion (fit_fusion's result), got {type(fitted).__name__}")
        if not isinstance(stages, Mapping):
            raise KolmTypeError("Fuse.from_fitted takes the stages as a dict by the fitted runs' names, "
                                f"{list(fitted.runs)}")
        ordered = fitted.in_run_order(stages, "Fuse.from_fitted: stages")
        fixed = sorted({"method", "norm", "k", "weights", "params"} & set(options))
        if fixed:
            raise KolmValueError(f"Fuse.from_fitted: {fixed} come from the fitted fusion")
        return cls(*ordered, method=fitted.method, norm=fitted.norm, params=dict(fitted.params), **options)

    async def retrieve(self, context: SearchPipelineContext) -> list[SearchDocument]:
        """One query's documents. Over built-in retrievers only, the spec's path (as
        :class:`CompositeRetriever`); with a composed stage among them, :meth:`retrieve_batch`
        of a batch of one, so that ``bm25 % 100`` gives the fusion its 100 best here too."""
        if not self._composed:
            return await super().retrieve(context)
        table = self.table
        if table is None:
            return await super().retrieve(context)
        target = max(1, min(int(context.plan.target_limit), len(table)))
        frame = self.retrieve_batch(QueryBatch.from_contexts([context], limit=target))
        return table.documents(frame.doc, frame.score)

    @classmethod
    def assemble(cls, children: Sequence[Any], settings: dict[str, Any], logger: Logger | None = None) -> Fuse:
        """A ``Fuse`` of ``children`` with ``settings`` (:meth:`CompositeRetriever.assemble`:
        ``Fuse.load``, ``copy.copy`` and ``set_params`` give a ``Fuse``)."""
        return cls(*children, logger=logger, **{name: settings[name] for name in
                                                ("method", "k", "norm", "weights", "depth", "strategy")},
                   params=settings.get("params"))

    def __repr__(self) -> str:
        """``Fuse(a, b, ...)``: the stages' reprs and every setting that is not its default (two
        fusions that differ, e.g. in ``weights``, print differently)."""
        defaults = {"method": "rrf", "k": 60.0, "norm": None, "weights": None, "depth": None, "strategy": "fail-fast",
                    "params": None}
        shown: dict[str, Any] = {"method": self.method, "k": self.k, "norm": self.norm,
                                 "weights": None if self.weights is None else [float(w) for w in self.weights],
                                 "depth": self.depth, "strategy": self.strategy, "params": self.params}
        settings = [f"{name}={value:g}" if name == "k" else f"params={short_params(value)}" if name == "params"
                    else f"{name}={value!r}" for name, value in shown.items() if value != defaults[name]]
        return "Fuse(" + ", ".join([repr(s) for s in self.retrievers] + settings) + ")"
