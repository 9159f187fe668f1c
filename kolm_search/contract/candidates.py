"""What the stage runner (:mod:`kolm_search.contract.stages`) passes along, and checks on the way: a
query's :class:`Candidates` (document-table codes until documents are needed) and its
:class:`Outcome`, the :class:`Run` state of one search or batch, the planner's output
(:func:`check_plan`) and the deduplicator's report (:func:`dedup_report`)."""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.errors import PipelineStage, SearchError
from kolm_search.types import SEARCH_MODES, QueryPlan, SearchDocument

__all__ = ["Candidates", "Outcome", "Run", "check_plan", "dedup_report"]

S = PipelineStage


class Candidates:
    """One query's ranked candidates: document-table codes and scores, or documents."""

    __slots__ = ("_docs", "codes", "scores", "table")

    def __init__(self, table: Any = None, codes: Any = None, scores: Any = None,
                 docs: list[SearchDocument] | None = None) -> None:
        self.table, self.codes, self.scores, self._docs = table, codes, scores, docs

    def __len__(self) -> int:
        return len(self._docs) if self._docs is not None else len(self.codes)

    def docs(self) -> list[SearchDocument]:
        if self._docs is None:
            self._docs = self.table.documents(self.codes, self.scores)
        return self._docs

    def slice(self, start: int, stop: int) -> Candidates:
        if self._docs is not None:
            return Candidates(docs=self._docs[start:stop])
        return Candidates(self.table, self.codes[start:stop], self.scores[start:stop])

    def ids_scores(self) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.float64]]:
        """Document ids (object) and scores (float64, NaN where a document has none)."""
        if self._docs is None:
            return np.asarray(self.table.ids_of(self.codes), dtype=object), np.asarray(self.scores, dtype=np.float64)
        ids = np.array([d.id for d in self._docs], dtype=object)
        return ids, np.array([np.nan if d.score is None else d.score for d in self._docs], dtype=np.float64)


@dataclass
class Outcome:
    """What the stages produce for one query: its page, how many candidates survived
    deduplication and re-ranking, and the synthesizer's answer."""

    page: Candidates
    total: int
    answer: str | None


@dataclass
class Run:
    """What one search or batch keeps while it runs: each stage's time (ms, for telemetry) and
    each stage's deadline (shared by every call of the stage in the run)."""

    durations: dict[str, float] = field(default_factory=dict)
    deadlines: dict[str, float] = field(default_factory=dict)

    def timed(self, stage: str, t0: float) -> None:
        """Add the time since ``t0`` (``time.perf_counter()``) to ``stage``'s duration."""
        self.durations[stage] = self.durations.get(stage, 0.0) + (time.perf_counter() - t0) * 1000.0


def check_plan(plan: Any) -> None:
    """``SearchError(stage="planner")`` unless ``plan`` is a ``QueryPlan`` whose mode is known,
    whose ``target_limit`` is a positive int and whose queries are strings (single and batch
    search then read it alike)."""
    if not isinstance(plan, QueryPlan):
        raise SearchError(S.PLANNER, f"planner must return a QueryPlan, got {type(plan).__name__}")
    target = plan.target_limit
    if isinstance(target, bool) or not isinstance(target, numbers.Integral) or target < 1:
        raise SearchError(S.PLANNER, f"planner returned target_limit {target!r}; expected a positive integer")
    if plan.mode not in SEARCH_MODES:
        raise SearchError(S.PLANNER, f"planner returned mode {plan.mode!r}; expected one of {list(SEARCH_MODES)}")
    queries = plan.expanded_queries
    if not isinstance(plan.normalized_query, str) or not isinstance(queries, list) or not queries or \
            not all(isinstance(q, str) for q in queries):
        raise SearchError(S.PLANNER, f"planner returned queries {plan.normalized_query!r}, {queries!r:.80}; "
                                     "expected a string and a non-empty list of strings")


def dedup_report(before: list[SearchDocument], after: list[SearchDocument],
                 pairs: Sequence[tuple[str, str]] | None = None) -> dict[str, Any]:
    """``{"kept": ids, "dropped": ids[, "pairs": (dropped, kept)]}`` for ``context.metadata``."""
    kept = [d.id for d in after]
    remaining: dict[str, int] = {}
    for d in after:
        remaining[d.id] = remaining.get(d.id, 0) + 1
    dropped = []
    for d in before:
        if remaining.get(d.id, 0):
            remaining[d.id] -= 1
        else:
            dropped.append(d.id)
    report: dict[str, Any] = {"kept": kept, "dropped": dropped}
    if pairs is not None:
        report["pairs"] = [tuple(p) for p in pairs]
    return report
