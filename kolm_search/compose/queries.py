"""``stage(queries)``: a retrieving stage over queries in any form ``search_batch`` takes, as
the run DataFrame ``qid, doc_id, rank, score`` that ``search_batch`` with the stage as its
retriever returns (the default planner: queries normalised, not expanded).

:func:`prepare_queries` checks and plans the queries once (an experiment runs many stages
over one set); :func:`run_prepared` runs one stage over them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from kolm_search.contract.config import SearchPipelineOptions
from kolm_search.contract.guards import batch_requests
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.engine.candidate_frame import QueryBatch
from kolm_search.engine.column_digest import update_with_column
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.read_only import read_only_view
from kolm_search.errors import KolmTypeError
from kolm_search.types import SearchPipelineContext

__all__ = ["CodedRun", "PreparedQueries", "group_batch", "prepare_queries", "queries_digest", "run_coded", "run_prepared",
           "run_queries"]


@dataclass(frozen=True)
class PreparedQueries:
    """Checked and planned queries: their ids, and per search mode the batch rows, contexts,
    page starts and ends (``offset``, ``offset + limit``)."""

    qids: list[Any]
    groups: list[tuple[np.ndarray, list[SearchPipelineContext], np.ndarray, np.ndarray]]
    qid_column: Any = field(default=None, compare=False)  # the qids as the column a DataFrame would make
    last_qids: dict[int | None, tuple[np.ndarray, Any]] = field(default_factory=dict, compare=False, repr=False)
    last_rows: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, compare=False, repr=False)
    batches: dict[tuple[int, int], QueryBatch] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        qid_arr = np.empty(len(self.qids), dtype=object)
        for i, qid in enumerate(self.qids):  # element-wise: tuple qids stay tuples
            qid_arr[i] = qid
        object.__setattr__(self, "qid_column", pd.Series(qid_arr, dtype=None).array)


def prepare_queries(queries: Any, *, limit: int | None = None, offset: int = 0, mode: str | None = None,
                    filters: dict[str, Any] | None = None) -> PreparedQueries:
    """The queries checked as ``search_batch`` checks them and planned by the default planner,
    grouped by mode (one batch per mode, as the stage runner makes them)."""
    reqs = batch_requests(queries, SearchPipelineOptions(), limit=limit, offset=offset, mode=mode, filters=filters)
    planner = DefaultQueryPlanner()
    contexts = [SearchPipelineContext(request=r, plan=planner.plan(r), started_at=0.0) for r in reqs.resolved]
    modes = [c.plan.mode for c in contexts]
    groups = []
    for m in dict.fromkeys(modes):
        rows = np.array([i for i, x in enumerate(modes) if x == m], np.int64)
        sub = [contexts[i] for i in rows]
        groups.append((rows, sub, np.array([c.request.offset for c in sub], np.int64),
                       np.array([c.plan.target_limit for c in sub], np.int64)))
    return PreparedQueries(list(reqs.qids), groups)


@dataclass(frozen=True, eq=False)
class CodedRun:
    """A stage's run over prepared queries before its ids are looked up: per group of
    :attr:`PreparedQueries.groups`, the entries kept (``q``: rows of the queries, int64;
    ``doc``: document codes of ``ids``; ``rank``; ``score``), in rank order per query.

    :meth:`frame` makes the run DataFrame ``qid, doc_id, rank, score`` (what :func:`run_prepared`
    returns); an :class:`~kolm_search.evaluation.Experiment` keeps runs in this form and makes the
    DataFrame of a run when it is asked for. A part's group is ``None`` when it is the whole run in
    input order (a run read back from :class:`~kolm_search.compose.run_cache.RunCache`).
    ``source`` is the prepared queries, or what makes them when the DataFrame is made (a run
    read back needs no planned queries until then).
    """

    source: PreparedQueries | Callable[[], PreparedQueries]
    table: DocumentTable  # the documents the codes are rows of (their ids: ``table.ids_of``)
    parts: list[tuple[int | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]

    def __post_init__(self) -> None:
        # read-only views: the runs of equal pipelines (and the rerankers of one first stage) share
        # these arrays with each other and with the stage outputs kept, so none may be written through
        object.__setattr__(self, "parts", [(group, *map(read_only_view, arrays))
                                           for group, *arrays in self.parts])

    @property
    def prepared(self) -> PreparedQueries:
        """The prepared queries whose rows the entries' ``q`` are."""
        return self.source if isinstance(self.source, PreparedQueries) else self.source()

    @property
    def n_docs(self) -> int:
        """Rows of the document table the codes refer to."""
        return len(self.table)

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(q, doc, rank, score)`` of every entry in the run DataFrame's order (score float64)."""
        if len(self.parts) == 1:
            _, q, doc, rank, score = self.parts[0]
            return q, doc, rank, np.asarray(score, np.float64)
        q, doc, rank, score = (np.concatenate([p[i] for p in self.parts]) for i in range(1, 5))
        order = np.lexsort((rank, q))  # stable: as the DataFrame's sort by (query row, rank)
        return q[order], doc[order], rank[order], np.asarray(score[order], np.float64)

    def frame(self) -> pd.DataFrame:
        """The run DataFrame ``qid, doc_id, rank, score``: each query's page, ``rank`` counted
        over the full ranking, in input order."""
        frames: list[pd.DataFrame] = []
        for group, q, doc, rank, score in self.parts:
            # each column is this run's own (a write through a column's .array, which pandas' copy on
            # write does not see, reaches no other run); the qids' is reused, a wrapper's copy of it
            cols = {"qid": _qid_column(self.prepared, group, q).copy(),
                    "doc_id": self.table.ids_of(doc) if len(q) else np.zeros(0, object),
                    "rank": rank.astype(np.int64), "score": score.astype(np.float64)}
            if len(self.parts) > 1:
                cols["_order"] = q
            frames.append(pd.DataFrame(cols, copy=False))  # every column is this run's own: not copied again
        if not frames:
            return pd.DataFrame({"qid": np.zeros(0, object), "doc_id": np.zeros(0, object),
                                 "rank": np.zeros(0, np.int64), "score": np.zeros(0, np.float64)})
        frames = [f for f in frames if len(f)] or frames[:1]  # an empty part's ids would make the column object
        if len(frames) == 1:
            return frames[0].drop(columns="_order", errors="ignore")
        run = pd.concat(frames, ignore_index=True).sort_values(["_order", "rank"], kind="stable")
        return run.drop(columns="_order").reset_index(drop=True)


def run_coded(stage: Any, prepared: PreparedQueries) -> CodedRun:
    """The run of ``prepared`` through a retrieving ``stage``, ids not yet looked up
    (:meth:`CodedRun.frame` makes the DataFrame)."""
    from kolm_search.compose.runner import retrieve_through_runner, settle, stage_name

    if not stage.is_source:
        raise KolmTypeError(f"{stage_name(stage)} re-ranks: a stage called on queries must retrieve "
                            "(put a retrieving stage first, e.g. bm25 >> reranker)")
    settle(stage)  # deferred changes merged: the table read here is the one the search's codes are rows of
    table = getattr(stage, "table", None)
    if table is None:
        raise KolmTypeError(f"{stage_name(stage)} has no document table: a retrieving stage's codes are rows of "
                            "its 'table' (a DocumentTable)")
    parts: list[tuple[int | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for group, (rows, _, first, target) in enumerate(prepared.groups):
        batch = group_batch(prepared, group, table)
        # run and checked as an operand is: in an experiment a pipeline that is a retriever alone
        # shares its output with the pipelines that start with it (``bm25`` beside ``bm25 >> mmr``)
        frame = retrieve_through_runner(stage, batch, table)
        query, doc, rank, score = frame.query, frame.doc, frame.rank, frame.score
        if len(frame) and (int(first.max()) > 0 or int(rank.max()) >= int(target.min())):  # else every entry is kept
            keep = (rank >= first[query]) & (rank < target[query])
            query, doc, rank, score = query[keep], doc[keep], rank[keep], score[keep]
        parts.append((group, _query_rows(prepared, group, rows, query), doc, rank, score))
    return CodedRun(prepared, table, parts)


def run_prepared(stage: Any, prepared: PreparedQueries) -> pd.DataFrame:
    """The run of ``prepared`` through a retrieving ``stage``: each query's page, ``rank``
    counted over the full ranking, in input order (:meth:`CodedRun.frame` of :func:`run_coded`)."""
    return run_coded(stage, prepared).frame()


def queries_digest(queries: Any, **options: Any) -> str | None:
    """A digest of a queries DataFrame as :func:`prepare_queries` reads it (its ``qid`` and
    ``query`` columns, each qid with its type) and the ``options`` given with it (``limit``,
    ``offset``, ...), or None when it cannot be made alike each time (not a DataFrame, a qid
    neither str nor int, a query that is no str): then nothing is cached by it."""
    if not isinstance(queries, pd.DataFrame) or "qid" not in queries.columns or "query" not in queries.columns:
        return None
    qid, query = queries["qid"], queries["query"]
    if not isinstance(qid, pd.Series) or not isinstance(query, pd.Series):  # a name given to two columns
        return None
    fast = _arrow_digest(qid, query, options)
    if fast is not None:
        return fast
    qids, texts = qid.tolist(), query.tolist()
    if not all(type(q) in (str, int) for q in qids) or not all(type(t) is str for t in texts):
        return None
    head = f"queries/1|{json.dumps(options, sort_keys=True, default=repr)}|{len(qids)}"
    body = "\x1e".join(f"{type(q).__name__}:{q!r}\x1f{len(t)}:{t}" for q, t in zip(qids, texts, strict=True))
    return hashlib.sha256(f"{head}\x1d{body}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _arrow_digest(qid: pd.Series, query: pd.Series, options: dict[str, Any]) -> str | None:
    """:func:`queries_digest` without a loop over the queries: the options, then the ``qid``
    and ``query`` columns from their buffers
    (:func:`~kolm_search.engine.column_digest.update_with_column`: integer or string qids and
    string queries without missing values, each column's dtype with it); None otherwise (the
    digest is then made per query, in another namespace)."""
    sha = hashlib.sha256(f"queries/3|{json.dumps(options, sort_keys=True, default=repr)}|{len(qid)}".encode())
    if update_with_column(sha, "qid", qid) not in ("int", "str") or update_with_column(sha, "query", query) != "str":
        return None
    return sha.hexdigest()[:32]


def group_batch(prepared: PreparedQueries, group: int, table: DocumentTable) -> QueryBatch:
    """The batch :func:`run_coded` asks a stage over ``table`` for, for the queries of ``group``:
    as deep as the deepest page asked (at most the table's size, at least 1)."""
    return _batch(prepared, group, max(1, min(int(prepared.groups[group][3].max()), len(table))))


def _batch(prepared: PreparedQueries, group: int, limit: int) -> QueryBatch:
    """The batch of a group's contexts (made once per limit: every stage of an experiment is
    given the same texts, owners, filters and embeddings; stages derive theirs by ``replace``)."""
    found = prepared.batches.get((group, limit))
    if found is None:
        found = prepared.batches[(group, limit)] = QueryBatch.from_contexts(prepared.groups[group][1], limit=limit)
    return found


def _query_rows(prepared: PreparedQueries, group: int, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``rows[query]``, the rows of the queries of a group's entries; the last array of the
    group reused when ``query`` is the same (the rerankers of one first stage keep its queries)."""
    last = prepared.last_rows.get(group)
    if last is not None and (last[0] is query or np.array_equal(last[0], query)):
        return last[1]
    q = rows[query]
    prepared.last_rows[group] = (query, q)
    return q


def _qid_column(prepared: PreparedQueries, group: int | None, q: np.ndarray) -> Any:
    """The qids of batch rows ``q`` as a column, the last one of the group reused when ``q`` is
    the same (the rerankers of one first stage keep its number of candidates per query)."""
    if not len(q):
        return np.zeros(0, object)
    last = prepared.last_qids.get(group)
    if last is not None and (last[0] is q or np.array_equal(last[0], q)):
        return last[1]
    column = prepared.qid_column.take(q)
    prepared.last_qids[group] = (q, column)
    return column


def run_queries(stage: Any, queries: Any, *, limit: int | None = None, offset: int = 0, mode: str | None = None,
                filters: dict[str, Any] | None = None) -> pd.DataFrame:
    """:func:`run_prepared` of :func:`prepare_queries` (what ``stage(queries)`` does)."""
    return run_prepared(stage, prepare_queries(queries, limit=limit, offset=offset, mode=mode, filters=filters))
