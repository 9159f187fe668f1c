"""What ``search_batch`` takes and gives: query lists and frames in, :class:`BatchResult` out.

The stages themselves are :mod:`kolm_search.stages`, shared with single search; a batch's
result is a run DataFrame, with per-query ``SearchResponse``s built only on demand. Caching is
per single search and is not used here.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from kolm_search._params import mapping
from kolm_search.candidates import Candidates
from kolm_search.errors import ParameterError, PipelineStage, SearchError
from kolm_search.guards import coerce_request
from kolm_search.types import (
    QueryPlan,
    SearchPagination,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
)

__all__ = ["BatchResult", "parse_queries", "raw_requests", "run_frame"]

S = PipelineStage


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


def _check_qids(qids: pd.Series) -> None:
    """``SearchError(client)`` naming the row of a missing (None/NaN/NA) or unhashable qid, or a
    duplicate."""
    missing = qids.isna().to_numpy()
    if missing.any():
        row = int(np.argmax(missing))
        raise SearchError(S.CLIENT, f"queries DataFrame row {row} has a missing qid ({qids.iloc[row]!r}); "
                                    "every query needs an id")
    if qids.dtype == object:  # typed columns (int, str, ...) hold hashable values only
        for row, qid in enumerate(qids):
            if not _hashable(qid):
                raise SearchError(S.CLIENT, f"queries DataFrame row {row}: qid {reprlib.repr(qid)[:60]} is not hashable "
                                            f"({type(qid).__name__}); use str or int ids")
    dup = qids.duplicated().to_numpy()
    if dup.any():
        row = int(np.argmax(dup))
        first = next(i for i, q in enumerate(qids) if q == qids.iloc[row])
        raise SearchError(S.CLIENT, f"queries DataFrame has duplicate qid {qids.iloc[row]!r} (rows {first} and {row})")


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def parse_queries(queries: Any, *, limit: int | None, offset: int, mode: str | None,
                  filters: dict[str, Any] | None) -> tuple[list[Any], list[SearchRequest]]:
    """Query ids and requests from a list of str / SearchRequest / dict, or a DataFrame.

    Raises ``SearchError(stage="client")`` naming the row or position: a DataFrame without
    ``qid``/``query``, a missing, unhashable or duplicate qid, an item that is not a request,
    ``filters`` that are not a dict. Each request's fields are checked later, as in single search.
    """
    try:
        mapping("filters", {} if filters is None else filters)
    except ParameterError as exc:
        raise SearchError(S.CLIENT, str(exc), cause=exc) from exc
    defaults = {"limit": limit, "offset": offset, "mode": mode, "filters": dict(filters or {})}
    if isinstance(queries, pd.DataFrame):
        missing = [c for c in ("qid", "query") if c not in queries.columns]
        if missing:
            raise SearchError(S.CLIENT, f"queries DataFrame lacks column(s) {missing}; has {list(queries.columns)}")
        _check_qids(queries["qid"])
        return list(queries["qid"]), [SearchRequest(query=q, **defaults) for q in queries["query"]]  # type: ignore[arg-type]
    if isinstance(queries, (str, bytes, Mapping)) or not isinstance(queries, Sequence):
        raise SearchError(S.CLIENT, f"queries must be a list or a DataFrame with qid and query, got {type(queries).__name__}")
    requests = []
    for i, q in enumerate(queries):
        if isinstance(q, str):
            requests.append(SearchRequest(query=q, **defaults))  # type: ignore[arg-type]
            continue
        try:
            req = coerce_request(q)
        except SearchError as exc:
            raise SearchError(S.CLIENT, f"queries[{i}]: {exc.detail}", cause=exc) from exc
        requests.append(replace(req, limit=req.limit if req.limit is not None else limit,
                                mode=req.mode if req.mode is not None else mode))  # type: ignore[arg-type]
    return list(range(len(requests))), requests


def raw_requests(queries: Any, *, limit: int | None, offset: Any, mode: Any, filters: Any) -> list[dict[str, Any]]:
    """Each query as the dict single search would get (what an ``input_schema`` checks): a
    request's own fields, the keywords it falls back to, and for strings and DataFrame rows the
    keywords given (``offset`` when not 0). Call after :func:`parse_queries` accepted ``queries``."""
    given = {k: v for k, v in (("limit", limit), ("mode", mode), ("filters", filters)) if v is not None}
    if offset != 0:
        given["offset"] = offset
    texts = list(queries["query"]) if isinstance(queries, pd.DataFrame) else list(queries)
    out = []
    for q in texts:
        if isinstance(q, str) or isinstance(queries, pd.DataFrame):
            out.append({"query": q, **given})
            continue
        raw = q.to_dict() if isinstance(q, SearchRequest) else dict(q)
        out.append(raw | {k: given[k] for k in ("limit", "mode") if k in given and raw.get(k) is None})
    return out


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


