"""The base of the learning-to-rank feature stages (:mod:`~kolm_search.retrievers.ltr_features`,
:mod:`~kolm_search.retrievers.ltr_scores`, :mod:`~kolm_search.retrievers.ltr_terms`): a
re-ranking stage that keeps the candidates it is given, in their order, and replaces each
one's score by a feature value, computed for the whole candidate frame of a batch at once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.compose.fingerprints import table_digest
from kolm_search.compose.runner import stage_name
from kolm_search.compose.stage import Stage
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import SearchError

__all__ = ["CandidateFeature", "primary_texts", "same_table"]


def primary_texts(batch: QueryBatch) -> list[str]:
    """Each batch query's primary text (its first; ``""`` for a query without one), (n_queries,)."""
    first = np.searchsorted(batch.owner, np.arange(batch.n_queries), side="left")
    return [batch.texts[i] if i < len(batch.texts) and batch.owner[i] == q else "" for q, i in enumerate(first)]


def same_table(stage: Stage, batch: QueryBatch, table: DocumentTable) -> None:
    """A ``SearchError`` naming ``stage`` unless the candidates' table (``batch.table``) holds the
    documents of ``table`` (the index the feature reads), row for row."""
    given = batch.table
    if given is None or given is table:
        return
    if len(given) != len(table) or table_digest(given) != table_digest(table):
        raise SearchError(stage_name(stage), f"the candidates come from a table of {len(given)} documents that is "
                                             f"not this feature's index ({len(table)} documents): build the feature "
                                             "on the retriever's documents")


class CandidateFeature(Stage):
    """A feature of each candidate as its score (see the module doc).

    A subclass names its parameters in :attr:`params`, checks them in :meth:`checked` (the
    merged values in, the checked values out; the constructor and ``set_params`` alike) and
    computes :meth:`feature`.
    """

    params: tuple[str, ...] = ()

    def _init(self, **values: Any) -> None:
        for name, value in self.checked(values).items():
            setattr(self, name, value)

    @property
    def is_source(self) -> bool:
        return False

    def checked(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` (every parameter) checked and normalised; raises a ``KolmError`` naming one."""
        return values

    def stage_params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.params}

    def apply_params(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - set(self.params)
        if unknown:
            super().apply_params({k: changes[k] for k in unknown})
        if changes:
            self._init(**{**self.stage_params(), **changes})

    def feature(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        """The feature of every candidate, float64 (n,)."""
        raise NotImplementedError

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        if candidates is None:
            raise SearchError(stage_name(self), "a feature stage needs candidates: write 'retriever ** feature'")
        score = np.asarray(self.feature(batch, candidates), dtype=np.float64)
        return CandidateFrame(query=candidates.query, doc=candidates.doc, score=score, rank=candidates.rank,
                              n_queries=candidates.n_queries)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.stage_params().items())
        return f"{type(self).__name__}({args})"
