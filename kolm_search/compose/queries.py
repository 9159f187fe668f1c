"""``stage(queries)``: a retrieving stage over queries in any form ``search_batch`` takes, as
the run DataFrame ``qid, doc_id, rank, score`` that ``search_batch`` with the stage as its
retriever returns (the default planner: queries normalised, not expanded)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kolm_search.config import SearchPipelineOptions
from kolm_search.errors import KolmTypeError
from kolm_search.frame import QueryBatch
from kolm_search.guards import batch_requests
from kolm_search.planners import DefaultQueryPlanner
from kolm_search.runs import RUN_COLUMNS
from kolm_search.types import SearchPipelineContext

__all__ = ["run_queries"]


def run_queries(stage: Any, queries: Any, *, limit: int | None = None, offset: int = 0, mode: str | None = None,
                filters: dict[str, Any] | None = None) -> pd.DataFrame:
    """The run of ``queries`` through a retrieving ``stage`` (see the module doc): each query's
    page ``[offset, offset + limit)``, ``rank`` counted over the full ranking, in input order."""
    from kolm_search.compose.runner import stage_name

    if not stage.is_source:
        raise KolmTypeError(f"{stage_name(stage)} re-ranks: a stage called on queries must retrieve "
                            "(put a retrieving stage first, e.g. bm25 >> reranker)")
    reqs = batch_requests(queries, SearchPipelineOptions(), limit=limit, offset=offset, mode=mode, filters=filters)
    table = stage.table
    planner = DefaultQueryPlanner()
    contexts = [SearchPipelineContext(request=r, plan=planner.plan(r), started_at=0.0) for r in reqs.resolved]
    parts: list[pd.DataFrame] = []
    modes = [c.plan.mode for c in contexts]
    for m in dict.fromkeys(modes):  # one batch per mode, as the stage runner makes them
        rows = [i for i, x in enumerate(modes) if x == m]
        sub = [contexts[i] for i in rows]
        target = np.array([c.plan.target_limit for c in sub], np.int64)
        first = np.array([c.request.offset for c in sub], np.int64)
        batch = QueryBatch.from_contexts(sub, limit=max(1, min(int(target.max()), len(table))))
        frame = stage.retrieve_batch(batch)
        keep = (frame.rank >= first[frame.query]) & (frame.rank < target[frame.query])
        qids = np.empty(len(rows), dtype=object)
        for k, i in enumerate(rows):
            qids[k] = reqs.qids[i]
        q = frame.query[keep]
        parts.append(pd.DataFrame({"qid": qids[q] if len(q) else np.zeros(0, object),
                                   "doc_id": table.ids[frame.doc[keep]] if len(q) else np.zeros(0, object),
                                   "rank": frame.rank[keep].astype(np.int64),
                                   "score": frame.score[keep].astype(np.float64),
                                   "_order": np.asarray(rows, np.int64)[q]}))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("qid", "doc_id") else float) for c in RUN_COLUMNS})
    run = pd.concat(parts, ignore_index=True).sort_values(["_order", "rank"], kind="stable")
    return run.drop(columns="_order").reset_index(drop=True)
