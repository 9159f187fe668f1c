"""Batch re-ranking jobs: read a run, re-rank each query's top-k with any Reranker, write a run."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._bridge import resolve, run_sync
from kolm_search._params import boolean, positive_int
from kolm_search.doctable import DocumentTable
from kolm_search.errors import KolmValueError, PipelineStage, SearchError
from kolm_search.planners import DefaultQueryPlanner
from kolm_search.runs import RUN_COLUMNS, as_run, check_ids, numeric_column
from kolm_search.stages import rerank_all
from kolm_search.types import SearchDocument, SearchPipelineContext, SearchRequest

__all__ = ["rerank_run"]

_log = logging.getLogger("kolm_search.rerank")
_STAGE = PipelineStage.RERANKER


def _inputs(run: Any, corpus: Any, queries: Any) -> tuple[pd.DataFrame, DocumentTable, dict[str, str]]:
    from kolm_search.io import Dataset, read_run

    if isinstance(run, (str, bytes, os.PathLike)):
        run = read_run(os.fsdecode(run))
    run = as_run(run)
    check_ids(run, "run")
    if isinstance(corpus, Dataset):
        queries = corpus.queries if queries is None else queries
        corpus = corpus.corpus
    table = corpus if isinstance(corpus, DocumentTable) else (
        DocumentTable.from_frame(corpus) if isinstance(corpus, pd.DataFrame) else DocumentTable.from_documents(corpus))
    if queries is None:
        raise KolmValueError("rerank_run needs the query texts: pass a Dataset as corpus, or queries=")
    if isinstance(queries, pd.DataFrame):
        texts = dict(zip(queries["qid"].astype(str), queries["query"].astype(str), strict=True))
    else:
        texts = {str(k): str(v) for k, v in dict(queries).items()}
    return run, table, texts


def rerank_run(run: Any, corpus: Any, reranker: Any, top_k: int = 100, batch_size: int = 1000, *,
               queries: Any = None, progress: bool = True) -> pd.DataFrame:
    """Re-rank the top ``top_k`` of every query of a run.

    Parameters
    ----------
    run : DataFrame ``qid, doc_id, score[, rank]``, BatchResult, or TREC run path
    corpus : Dataset, DataFrame ``id, content[, title]``, DocumentTable or documents
    reranker : Reranker
        Any object with ``rerank(docs, context)`` (sync or async), called as the pipeline's
        reranker stage calls it (:func:`kolm_search.stages.rerank_all`): a
        :class:`~kolm_search.ports.BatchReranker` (``MMRReranker``, ``CrossEncoderReranker``)
        gets each chunk of queries in one ``rerank_batch`` call, so its model sees every
        distinct document (MMR) or pair (cross-encoder) of the chunk once, in full batches;
        other rerankers are called per query, concurrently.
    top_k : int
        Documents re-ranked per query; those below keep their order under the block.
    batch_size : int
        Queries per chunk: only one chunk's documents are materialised at a time.
    queries : DataFrame ``qid, query`` or dict, optional
        Query texts (taken from ``corpus`` when it is a Dataset).
    progress : bool

    Returns
    -------
    DataFrame ``qid, doc_id, rank, score``
        New ranks; scores are the reranker's when it gives non-increasing scores to the
        block, else ``len - rank``; documents below keep their order with lower scores.
        Documents missing from the corpus cannot be re-ranked: they stay, right after the
        re-ranked block, and are listed in ``result.attrs["missing"]`` (and logged).
    """
    from tqdm.auto import tqdm

    top_k = positive_int("top_k", top_k)
    batch_size = positive_int("batch_size", batch_size)
    boolean("progress", progress)
    frame, table, texts = _inputs(run, corpus, queries)
    order_cols = ["rank"] if "rank" in frame.columns else []
    frame = frame.assign(_neg=-numeric_column(frame, "score", "run"))
    frame = frame.sort_values(["qid", *order_cols, "_neg"] if order_cols else ["qid", "_neg"], kind="stable")
    qids = list(dict.fromkeys(frame["qid"]))
    unknown = [q for q in qids if str(q) not in texts]
    if unknown:
        raise KolmValueError(f"{len(unknown)} run queries have no text, e.g. {unknown[0]!r}")
    groups = dict(tuple(frame.groupby("qid", sort=False)))
    parts: list[pd.DataFrame] = []
    missing: list[tuple[Any, str]] = []
    planner = DefaultQueryPlanner()

    def prepare(qid: Any) -> tuple[list[SearchDocument], SearchPipelineContext, npt.NDArray[Any], npt.NDArray[Any]]:
        rows = groups[qid]
        ids = rows["doc_id"].astype(str).to_numpy()
        head, tail = ids[:top_k], ids[top_k:]
        codes = table.codes(head, missing="ignore")
        present = codes >= 0
        for d in head[~present]:
            missing.append((qid, str(d)))
        docs = table.documents(codes[present], rows["score"].to_numpy()[:top_k][present])
        req = SearchRequest(query=texts[str(qid)], limit=top_k)
        ctx = SearchPipelineContext(request=req, plan=planner.plan(req), started_at=0.0)
        return docs, ctx, head[~present], tail

    def assemble(qid: Any, docs: list[SearchDocument], out: list[SearchDocument], absent: Any, tail: Any) -> pd.DataFrame:
        if sorted(d.id for d in out) != sorted(d.id for d in docs):
            raise SearchError(_STAGE, "the reranker must return the same documents it was given", query=qid)
        new_ids = [d.id for d in out] + list(absent) + list(tail)
        n = len(new_ids)
        scores = np.arange(n, 0, -1, dtype=np.float64)
        raw = [d.score for d in out]
        block = [float(s) for s in raw if s is not None]
        if out and len(block) == len(raw) and all(a >= b for a, b in itertools.pairwise(block)):
            scores[: len(out)] = block
            floor = min(block)
            scores[len(out):] = floor - np.arange(1, n - len(out) + 1)
        return pd.DataFrame({"qid": [qid] * n, "doc_id": new_ids, "rank": np.arange(n), "score": scores})

    async def call(fn: Any, *args: Any) -> Any:
        try:
            return await resolve(fn(*args))
        except SearchError:
            raise
        except Exception as exc:
            raise SearchError(_STAGE, str(exc) or type(exc).__name__, cause=exc) from exc

    async def chunk(qs: Sequence[Any]) -> list[pd.DataFrame]:
        prepared = [prepare(q) for q in qs]
        outs = await rerank_all(reranker, [(d, c) for d, c, _, _ in prepared], call=call, queries=qs)
        return [assemble(q, d, out, absent, tail)
                for q, (d, _, absent, tail), out in zip(qs, prepared, outs, strict=True)]

    with tqdm(total=len(qids), desc="rerank", unit="q", disable=not progress, leave=False) as bar:
        for start in range(0, len(qids), batch_size):
            qs = qids[start:start + batch_size]
            parts.extend(run_sync(chunk(qs)))
            bar.update(len(qs))
    result = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(RUN_COLUMNS))
    result.attrs["missing"] = missing
    if missing:
        _log.warning("%d documents of the run are not in the corpus (kept unranked under the block), e.g. %r",
                     len(missing), missing[0])
    return result
