"""What ``search_batch`` gives: :class:`BatchResult`, a run DataFrame with per-query
``SearchResponse``s built only on demand.

What it takes (query lists and frames, checked as single search checks a request) is
:func:`kolm_search.contract.guards.batch_requests`; the stages themselves are :mod:`kolm_search.contract.stages`,
shared with single search. Caching is per single search and is not used here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.contract.candidates import Candidates, Outcome
from kolm_search.contract.guards import BatchRequests
from kolm_search.types import (
    QueryPlan,
    SearchPagination,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
)

__all__ = ["BatchResult", "run_frame"]

@dataclass
class BatchResult:
    """The outcome of ``search_batch``.

    Attributes
    ----------
    run : DataFrame
        ``qid, doc_id, rank, score``: each query's page, ``rank`` zero-based over the full
        ranking (so ``offset`` shows), sorted by input order of the queries then rank.
    qids : list
        Query ids in input order.
    duration_ms : float
        Wall-clock time of the whole batch.
    """

    run: pd.DataFrame
    qids: list[Any]
    requests: list[SearchRequest]
    plans: list[QueryPlan]
    duration_ms: float
    _resolved: list[SearchRequest] = field(repr=False, default_factory=list)
    _pages: list[Any] = field(repr=False, default_factory=list)
    _totals: list[int] = field(repr=False, default_factory=list)
    _answers: list[str | None] = field(repr=False, default_factory=list)
    _responses: list[SearchResponse] | None = field(default=None, repr=False)

    @property
    def responses(self) -> list[SearchResponse]:
        """Per-query ``SearchResponse``s (built on first access)."""
        if self._responses is None:
            out = []
            for req, res, plan, page, total, answer in zip(self.requests, self._resolved, self.plans, self._pages,
                                                            self._totals, self._answers, strict=True):
                assert res.limit is not None
                out.append(SearchResponse(
                    request=req, plan=plan, results=page.docs(),
                    pagination=SearchPagination(offset=res.offset, limit=res.limit, total_candidates=total),
                    duration_ms=self.duration_ms, answer=answer,
                    metadata=SearchResponseMetadata(result_count=len(page), cache_hit=False)))
            self._responses = out
        return self._responses

    def expanded_queries(self) -> pd.DataFrame:
        """The weighted queries of pseudo-relevance feedback (``plan.metadata["feedback"]``, see
        :class:`~kolm_search.retrievers.feedback.FeedbackRetriever`): ``qid, position, query, term,
        weight``: ``position`` the expanded text's place among the query's planned texts (0: the
        primary), ``query`` that text. No rows for a query searched without feedback.

        Deprecated: in kolm_search 0.1.0 the ``position`` column was called ``text``, although it held the
        position, not a text; it is no longer there (a column of the old name with a new meaning
        would mislead silently)."""
        rows: list[tuple[Any, int, str, str, float]] = []
        for qid, plan in zip(self.qids, self.plans, strict=True):
            feedback = plan.metadata.get("feedback") if isinstance(plan.metadata, dict) else None
            if isinstance(feedback, dict):
                texts = list(plan.expanded_queries) or [plan.normalized_query]
                for i, weights in enumerate(feedback.get("expanded", [])):
                    text = texts[i] if i < len(texts) else ""
                    rows.extend((qid, i, text, term, float(w)) for term, w in weights.items())
        return pd.DataFrame(rows, columns=["qid", "position", "query", "term", "weight"])

    def __len__(self) -> int:
        return len(self.qids)

    @classmethod
    def of(cls, batch: BatchRequests, plans: list[QueryPlan], outcomes: Sequence[Outcome]) -> BatchResult:
        """The result of the checked queries ``batch``: their plans and each query's outcome."""
        pages = [o.page for o in outcomes]
        return cls(run=run_frame(batch.qids, batch.resolved, pages), qids=batch.qids, requests=batch.requests,
                   plans=plans, duration_ms=(time.perf_counter() - batch.started) * 1000.0, _resolved=batch.resolved,
                   _pages=pages, _totals=[o.total for o in outcomes], _answers=[o.answer for o in outcomes])


def run_frame(qids: list[Any], reqs: list[SearchRequest], pages: list[Candidates]) -> pd.DataFrame:
    """The run ``qid, doc_id, rank, score`` of each query's page (``rank`` counts from the
    full ranking, so ``offset`` shows; documents without a score get ``1 / (rank + 1)``)."""
    counts = np.array([len(p) for p in pages], dtype=np.int64)
    n = int(counts.sum())
    qid_arr = np.empty(len(qids), dtype=object)
    for i, qid in enumerate(qids):  # element-wise: tuple qids stay tuples
        qid_arr[i] = qid
    qid_col = np.repeat(qid_arr, counts) if n else np.zeros(0, dtype=object)
    # a page is empty unless offset < candidates <= n_docs: only non-empty pages need theirs
    offsets = np.array([r.offset if len(p) else 0 for r, p in zip(reqs, pages, strict=True)], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
    rank = np.arange(n) - np.repeat(starts, counts) + np.repeat(offsets, counts)
    parts = [p.ids_scores() for p in pages]
    ids = np.concatenate([p[0] for p in parts]) if n else np.zeros(0, dtype=object)
    scores = np.concatenate([p[1] for p in parts]) if n else np.zeros(0, np.float64)
    if np.isnan(scores).any():  # documents without a score: order by rank instead
        scores = np.where(np.isnan(scores), 1.0 / (rank + 1.0), scores)
    return pd.DataFrame({"qid": qid_col, "doc_id": ids, "rank": rank.astype(np.int64), "score": scores})


