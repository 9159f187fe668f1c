"""``Fuse``: fusion of retrieving stages as a stage (every method of :func:`~kolm_search.fusion.fuse`)."""

from __future__ import annotations

from typing import Any

from kolm_search.compose.kinds import as_stage
from kolm_search.compose.runner import stage_name
from kolm_search.compose.stage import Composed
from kolm_search.contract.ports import Logger
from kolm_search.contract.saved_kinds import saved_kind
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.retrievers.composite import CompositeRetriever, Strategy
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["Fuse"]


@saved_kind("composite", loads=False)  # a composite whose children are stages: saved, and loaded, as one
class Fuse(CompositeRetriever):
    """The lists of ``stages`` fused into one per query, in one fusion-kernel call per batch.

    ``Fuse(bm25 % 100, dense % 100)`` is RRF over each stage's 100 best; ``presets.hybrid`` is
    ``Fuse(bm25, dense, k=60)``. A :class:`~kolm_search.retrievers.composite.CompositeRetriever`
    (so it saves, loads and takes ``add``/``delete`` when its stages are built-in indexes)
    whose children are stages: inside an :class:`~kolm_search.evaluation.Experiment` each
    child's output is shared with the other pipelines that hold it.

    Parameters
    ----------
    *stages : Stage or retriever port
        At least one; each retrieves (a user retriever is wrapped by :func:`as_stage`).
    method : str, default "rrf"
        Any unsupervised method of :data:`~kolm_search.fusion.FUSION_METHODS` that needs no
        ``params`` (``gmnz`` and ``rbc`` do: use :func:`~kolm_search.fusion.fuse` on the runs).
    k : float, default 60
        RRF constant (where the method takes it).
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
                 logger: Logger | None = None) -> None:
        if not stages:
            raise KolmValueError("Fuse needs at least one stage")
        if len(stages) == 1 and isinstance(stages[0], (list, tuple)):
            raise KolmTypeError("Fuse takes the stages as arguments: Fuse(a, b), not Fuse([a, b])")
        found = [as_stage(s) for s in stages]
        for i, s in enumerate(found):
            if not s.is_source:
                others = ", ".join(stage_name(x) for x in found)
                raise KolmTypeError(f"Fuse({others}): stages[{i}] ({stage_name(s)}) re-ranks; Fuse fuses retrieving "
                                    "stages (to fuse two re-rankings of one list: Fuse(a >> r1, a >> r2))")
        self._composed = any(isinstance(s, Composed) for s in found)
        super().__init__(found, k, strategy, logger, weights=weights, method=method, norm=norm,  # type: ignore[arg-type]
                         depth=depth)

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

    def apply_params(self, changes: dict[str, Any]) -> None:
        super().apply_params(changes)
        self._composed = any(isinstance(s, Composed) for s in self.retrievers)

    def __repr__(self) -> str:
        """``Fuse(a, b, ...)``: the stages' reprs and every setting that is not its default (two
        fusions that differ, e.g. in ``weights``, print differently)."""
        defaults = {"method": "rrf", "k": 60.0, "norm": None, "weights": None, "depth": None, "strategy": "fail-fast"}
        shown = {"method": self.method, "k": self.k, "norm": self.norm,
                 "weights": None if self.weights is None else [float(w) for w in self.weights],
                 "depth": self.depth, "strategy": self.strategy}
        settings = [f"{name}={value:g}" if name == "k" else f"{name}={value!r}"
                    for name, value in shown.items() if value != defaults[name]]
        return "Fuse(" + ", ".join([repr(s) for s in self.retrievers] + settings) + ")"
