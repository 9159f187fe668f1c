"""Query and document features for learning to rank: stages that re-score the candidates they
are given with a property of the document or the query, to sit on the right of ``**``
(``(bm25 % 100) ** DocumentLength() ** QueryLength()``; more features in
:mod:`~kolm_search.retrievers.ltr_scores` and :mod:`~kolm_search.retrievers.ltr_terms`).

Each keeps the candidates and their order and replaces the score:

- :class:`DocumentLength`: the number of whitespace-separated tokens of the document's
  title and content (``log1p`` of it with ``log=True``, the default);
- :class:`QueryLength`: the number of whitespace-separated tokens of the query (its primary
  text), the same for every candidate of a query.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search.compose.runner import stage_name
from kolm_search.compose.stage import Stage
from kolm_search.engine.candidate_frame import CandidateFrame, QueryBatch
from kolm_search.engine.doctable import DocumentTable
from kolm_search.errors import KolmTypeError, SearchError

__all__ = ["DocumentLength", "QueryLength"]

_LENGTHS: weakref.WeakKeyDictionary[DocumentTable, npt.NDArray[np.float64]] = weakref.WeakKeyDictionary()


def _document_lengths(table: DocumentTable) -> npt.NDArray[np.float64]:
    """Tokens of each document's title and content (computed once per table object)."""
    found = _LENGTHS.get(table)
    if found is None:
        found = _LENGTHS[table] = np.array([len(t.split()) for t in table.texts(("title", "content"))], np.float64)
    return found


def _check_log(owner: str, log: Any) -> bool:
    if not isinstance(log, bool):
        raise KolmTypeError(f"{owner}.log must be a bool, got {type(log).__name__}")
    return log


class _LengthFeature(Stage):
    """A re-ranking stage whose score of a candidate is a length (see the module doc)."""

    def __init__(self, *, log: bool = True) -> None:
        self.log = _check_log(type(self).__name__, log)

    @property
    def is_source(self) -> bool:
        return False

    def stage_params(self) -> dict[str, Any]:
        return {"log": self.log}

    def apply_params(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - {"log"}
        if unknown:
            super().apply_params({k: changes[k] for k in unknown})
        if "log" in changes:
            self.log = _check_log(type(self).__name__, changes["log"])

    def lengths(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        """The raw length of every candidate."""
        raise NotImplementedError

    def transform(self, batch: QueryBatch, candidates: CandidateFrame | None) -> CandidateFrame:
        if candidates is None:
            raise SearchError(stage_name(self), "a feature stage needs candidates: write 'retriever ** feature'")
        score = self.lengths(batch, candidates)
        if self.log:
            score = np.log1p(score)
        return CandidateFrame(query=candidates.query, doc=candidates.doc, score=score, rank=candidates.rank,
                              n_queries=candidates.n_queries)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(log={self.log!r})"


class DocumentLength(_LengthFeature):
    """Each candidate's document length in tokens of title and content (``log1p`` with ``log``).

    Parameters
    ----------
    log : bool, default True
        Score ``log1p(length)`` instead of the length.
    """

    def lengths(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        if batch.table is None:
            raise SearchError(stage_name(self), "the batch carries no document table to read the lengths from")
        return _document_lengths(batch.table)[candidates.doc]


class QueryLength(_LengthFeature):
    """The query's length in tokens (its primary text), for each of its candidates.

    Parameters
    ----------
    log : bool, default True
        Score ``log1p(length)`` instead of the length.
    """

    def lengths(self, batch: QueryBatch, candidates: CandidateFrame) -> npt.NDArray[np.float64]:
        per_query = np.zeros(batch.n_queries, np.float64)
        seen = np.zeros(batch.n_queries, bool)
        for text, owner in zip(batch.texts, batch.owner, strict=True):
            if not seen[owner]:
                per_query[owner], seen[owner] = len(text.split()), True
        return per_query[candidates.query]
