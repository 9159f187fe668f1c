"""Batch search: many queries through one pipeline as columnar arrays.

The flow of a batch: resolve and plan every request (concurrently) -> intent -> one
``embed_many`` over every expanded query of every query -> one ``retrieve_batch`` call
(built-in retrievers score the batch in one kernel call; a retriever with only
``retrieve`` is called concurrently per query and converted at the edge) -> dedup and
rerank per query where configured -> pagination -> a run DataFrame, with per-query
``SearchResponse``s built only on demand. Queries with different modes run as one
sub-batch per mode. Caching is per single search and is not used here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._aio import log, resolve
from kolm_search.errors import DEDUPLICATOR_STAGE, PIPELINE_STAGES, SearchError
from kolm_search.frame import CandidateFrame, QueryBatch
from kolm_search.guards import coerce_request, resolve_request
from kolm_search.types import (
    QueryPlan,
    SearchDocument,
    SearchPagination,
    SearchPipelineContext,
    SearchRequest,
    SearchResponse,
    SearchResponseMetadata,
    as_documents,
)

if TYPE_CHECKING:
    from kolm_search.pipeline import SearchPipeline

__all__ = ["BatchResult", "run_batch"]

S = PIPELINE_STAGES


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

    def __len__(self) -> int:
        return len(self.qids)


def parse_queries(queries: Any, *, limit: int | None, offset: int, mode: str | None,
                  filters: dict[str, Any] | None) -> tuple[list[Any], list[SearchRequest]]:
    """Query ids and requests from a list of str / SearchRequest / dict, or a DataFrame."""
    defaults = {"limit": limit, "offset": offset, "mode": mode, "filters": dict(filters or {})}
    if isinstance(queries, pd.DataFrame):
        missing = [c for c in ("qid", "query") if c not in queries.columns]
        if missing:
            raise SearchError(S.CLIENT, f"queries DataFrame lacks column(s) {missing}; has {list(queries.columns)}")
        if queries["qid"].duplicated().any():
            dup = queries["qid"][queries["qid"].duplicated()].iloc[0]
            raise SearchError(S.CLIENT, f"queries DataFrame has duplicate qid {dup!r}")
        return list(queries["qid"]), [SearchRequest(query=q, **defaults) for q in queries["query"]]  # type: ignore[arg-type]
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Sequence):
        raise SearchError(S.CLIENT, f"queries must be a list or a DataFrame with qid and query, got {type(queries).__name__}")
    requests = []
    for i, q in enumerate(queries):
        if isinstance(q, str):
            requests.append(SearchRequest(query=q, **defaults))  # type: ignore[arg-type]
            continue
        try:
            req = coerce_request(q)
        except SearchError as exc:
            raise SearchError(S.CLIENT, f"queries[{i}]: {exc.message[len('[client] '):]}", cause=exc) from exc
        requests.append(replace(req, limit=req.limit if req.limit is not None else limit,
                                mode=req.mode if req.mode is not None else mode))  # type: ignore[arg-type]
    return list(range(len(requests))), requests


class _Cands:
    """One query's ranked candidates: columnar (table codes) or already SearchDocuments."""

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

    def slice(self, start: int, stop: int) -> _Cands:
        if self._docs is not None:
            return _Cands(docs=self._docs[start:stop])
        return _Cands(self.table, self.codes[start:stop], self.scores[start:stop])

    def ids_scores(self) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.float64]]:
        if self._docs is None:
            return self.table.ids[self.codes], np.asarray(self.scores, dtype=np.float64)
        ids = np.array([d.id for d in self._docs], dtype=object)
        return ids, np.array([d.score if d.score is not None else np.nan for d in self._docs], dtype=np.float64)


class _Interner:
    """Doc ids -> batch-local codes, for retrievers that return SearchDocuments."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.docs: list[SearchDocument] = []

    def add(self, docs: list[SearchDocument]) -> npt.NDArray[np.int64]:
        out = np.empty(len(docs), np.int64)
        for i, d in enumerate(docs):
            code = self.codes.get(d.id)
            if code is None:
                code = self.codes[d.id] = len(self.docs)
                self.docs.append(d)
            out[i] = code
        return out


async def _retrieve(pipe: SearchPipeline, rows: list[int], reqs: list[SearchRequest], plans: list[QueryPlan],
                    contexts: list[SearchPipelineContext], mode: str) -> list[_Cands]:
    """Candidates of the rows of one mode (columnar for batch retrievers)."""
    retriever = pipe.modules.retriever
    batch_fn = getattr(retriever, "retrieve_batch", None)
    if callable(batch_fn) and getattr(retriever, "supports_batch", True):
        texts: list[str] = []
        owner: list[int] = []
        emb_rows: list[npt.NDArray[np.float32]] = []
        for j, r in enumerate(rows):
            ctx = contexts[r]
            qs = list(plans[r].expanded_queries) or [plans[r].normalized_query]
            texts.extend(qs)
            owner.extend([j] * len(qs))
            if ctx.expanded_embeddings is not None:
                emb_rows.append(ctx.expanded_embeddings)
            elif ctx.embeddings is not None:
                emb_rows.append(ctx.embeddings[None, :])
        emb = np.concatenate(emb_rows) if emb_rows and sum(len(e) for e in emb_rows) == len(texts) else None
        batch = QueryBatch(texts=texts, owner=np.asarray(owner, np.int64), n_queries=len(rows),
                           limit=max(plans[r].target_limit for r in rows), filters=[dict(reqs[r].filters) for r in rows],
                           embeddings=emb, mode=mode)
        try:
            frame: CandidateFrame = await resolve(batch_fn(batch))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc
        table = retriever.table  # type: ignore[attr-defined]
        ptr = frame.ptr
        out = []
        for j, r in enumerate(rows):
            sl = slice(ptr[j], min(ptr[j + 1], ptr[j] + plans[r].target_limit))
            out.append(_Cands(table, frame.doc[sl], frame.score[sl]))
        return out

    async def one(r: int) -> _Cands:
        try:
            raw = await resolve(retriever.retrieve(contexts[r]))
            return _Cands(docs=as_documents(raw, what="retriever"))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError.wrap(S.RETRIEVER, exc) from exc

    return list(await asyncio.gather(*(one(r) for r in rows)))


async def run_batch(pipe: SearchPipeline, queries: Any, *, limit: int | None = None, offset: int = 0,
                    mode: str | None = None, filters: dict[str, Any] | None = None) -> BatchResult:
    """The core of ``SearchPipeline.search_batch`` (see the module docstring)."""
    t0 = time.perf_counter()
    started_at = time.time() * 1000.0
    qids, originals = parse_queries(queries, limit=limit, offset=offset, mode=mode, filters=filters)
    reqs = []
    for i, req in enumerate(originals):
        try:
            reqs.append(resolve_request(req, pipe.options))
        except SearchError as exc:
            raise SearchError(S.CLIENT, f"query {qids[i]!r}: {exc.message[len('[client] '):]}", cause=exc) from exc
    durations: dict[str, float] = {}
    m = pipe.modules
    plans: list[QueryPlan] = list(await asyncio.gather(*(pipe._stage(S.PLANNER, durations, m.planner.plan, r) for r in reqs)))
    for p in plans:
        if not isinstance(p, QueryPlan):
            raise SearchError(S.PLANNER, f"planner must return a QueryPlan, got {type(p).__name__}")
    if m.intent_classifier is not None:
        intents = await asyncio.gather(*(pipe._stage(S.INTENT_CLASSIFIER, durations, m.intent_classifier.classify, p.normalized_query) for p in plans))
        for p, intent in zip(plans, intents, strict=True):
            p.intent = intent
    contexts = [SearchPipelineContext(request=r, plan=p, started_at=started_at) for r, p in zip(reqs, plans, strict=True)]
    await _embed_batch(pipe, contexts, durations)
    candidates: list[_Cands] = [_Cands(docs=[]) for _ in reqs]
    for batch_mode in dict.fromkeys(p.mode for p in plans):
        rows = [i for i, p in enumerate(plans) if p.mode == batch_mode]
        t_r = time.perf_counter()
        got = await _retrieve(pipe, rows, reqs, plans, contexts, batch_mode)
        durations[S.RETRIEVER] = durations.get(S.RETRIEVER, 0.0) + (time.perf_counter() - t_r) * 1000.0
        for r, cands in zip(rows, got, strict=True):
            candidates[r] = cands

    async def finish(i: int) -> tuple[_Cands, int, str | None]:
        cands = candidates[i]
        req = reqs[i]
        assert req.limit is not None
        if m.deduplicator is None and m.reranker is None and m.synthesizer is None:
            return cands.slice(req.offset, req.offset + req.limit), len(cands), None
        docs = cands.docs()
        contexts[i].candidates = docs
        if m.deduplicator is not None:
            from kolm_search.pipeline import dedup_report

            before = docs
            docs = await pipe._docs_stage(DEDUPLICATOR_STAGE, durations, m.deduplicator.deduplicate, list(docs))
            contexts[i].metadata["deduplicator"] = dedup_report(before, docs, m.deduplicator)
        if m.reranker is not None:
            docs = await pipe._docs_stage(S.RERANKER, durations, m.reranker.rerank, list(docs), contexts[i])
        page = docs[req.offset:req.offset + req.limit]
        contexts[i].results = page
        answer = None
        if m.synthesizer is not None:
            answer = await pipe._stage(S.SYNTHESIZER, durations, m.synthesizer.synthesize, contexts[i])
        return _Cands(docs=page), len(docs), answer

    finished = await asyncio.gather(*(finish(i) for i in range(len(reqs))))
    pages = [f[0] for f in finished]
    run = _run_frame(qids, reqs, pages)
    result = BatchResult(run=run, qids=qids, requests=originals, plans=plans,
                         duration_ms=(time.perf_counter() - t0) * 1000.0, _resolved=reqs, _pages=pages,
                         _totals=[f[1] for f in finished], _answers=[f[2] for f in finished])
    if m.telemetry is not None:
        try:
            await resolve(m.telemetry.track("search.batch_completed", {
                "duration_ms": result.duration_ms, "query_count": len(reqs),
                "result_count": len(run), "stage_durations": dict(durations)}))
        except Exception as exc:
            log(pipe.options.logger, "warning", "telemetry.track failed (ignored)", exc)
    return result


def _run_frame(qids: list[Any], reqs: list[SearchRequest], pages: list[_Cands]) -> pd.DataFrame:
    counts = np.array([len(p) for p in pages], dtype=np.int64)
    n = int(counts.sum())
    qid_col = np.repeat(np.asarray(qids, dtype=object), counts) if n else np.zeros(0, dtype=object)
    offsets = np.array([r.offset for r in reqs], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
    rank = np.arange(n) - np.repeat(starts, counts) + np.repeat(offsets, counts)
    parts = [p.ids_scores() for p in pages]
    ids = np.concatenate([p[0] for p in parts]) if n else np.zeros(0, dtype=object)
    scores = np.concatenate([p[1] for p in parts]) if n else np.zeros(0, np.float64)
    if np.isnan(scores).any():  # documents without a score: order by rank instead
        scores = np.where(np.isnan(scores), 1.0 / (rank + 1.0), scores)
    return pd.DataFrame({"qid": qid_col, "doc_id": ids, "rank": rank.astype(np.int64), "score": scores})


async def _embed_batch(pipe: SearchPipeline, contexts: list[SearchPipelineContext], durations: dict[str, float]) -> None:
    """One embedding call for every expanded query of every non-fulltext query."""
    from kolm_search.pipeline import embedding_matrix

    embedder = pipe.modules.embedder
    rows = [c for c in contexts if c.plan.mode != "fulltext"]
    if not rows:
        return
    if embedder is None:
        if any(c.plan.mode == "vector" for c in rows):
            raise SearchError(S.EMBEDDER, "mode 'vector' needs an embedder, but none is configured")
        return
    texts = [q for c in rows for q in c.plan.expanded_queries]
    t0 = time.perf_counter()
    try:
        many = getattr(embedder, "embed_many", None)
        if callable(many):
            mat = embedding_matrix(await resolve(many(texts)), len(texts), what="embed_many")
        else:
            vecs = await asyncio.gather(*(resolve(embedder.embed(t)) for t in texts))
            mat = embedding_matrix([embedding_matrix(v, 1, what="embed")[0] for v in vecs], len(texts), what="embed")
    except SearchError:
        raise
    except Exception as exc:
        raise SearchError.wrap(S.EMBEDDER, exc) from exc
    finally:
        durations[S.EMBEDDER] = (time.perf_counter() - t0) * 1000.0
    pos = 0
    for c in rows:
        n = len(c.plan.expanded_queries)
        block = mat[pos:pos + n]
        pos += n
        c.embeddings = block[0]
        c.expanded_embeddings = block if n > 1 else None

