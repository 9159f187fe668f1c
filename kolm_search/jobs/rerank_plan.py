"""A batch re-ranking job's plan: inputs checked once, queries cut into chunks, a fingerprint of
what the output depends on, and one chunk computed at a time.

The same plan runs in this process (:func:`kolm_search.jobs.rerank.rerank_run`) and on a Dask
cluster (:func:`kolm_search.distributed.rerank_run`): chunk ``i`` is always the same queries,
computed by the same code, so a job's parts are the same wherever they were computed and a
job can be resumed by either.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kolm_search._bridge import resolve
from kolm_search.contract.planners import DefaultQueryPlanner
from kolm_search.contract.reranking import rerank_all
from kolm_search.engine.doctable import DocumentTable
from kolm_search.engine.runs import RUN_COLUMNS, as_run, check_ids, numeric_column
from kolm_search.errors import KolmValueError, PipelineStage, SearchError
from kolm_search.types import SearchDocument, SearchPipelineContext, SearchRequest

__all__ = ["JOB_VERSION", "RerankJob", "empty_run"]

#: Bumped when the output of a chunk changes for the same inputs (a resumable job refuses a
#: folder written by another version rather than mixing parts).
JOB_VERSION = "rerank_run/1"
_STAGE = PipelineStage.RERANKER
_log = logging.getLogger("kolm_search.rerank")


def empty_run() -> pd.DataFrame:
    """A run of no rows: ``qid, doc_id, rank, score``."""
    return pd.DataFrame(columns=list(RUN_COLUMNS))


def _strings_digest(digest: Any, values: Sequence[Any]) -> None:
    texts = [str(v) for v in values]
    digest.update(np.fromiter((len(t) for t in texts), np.int64, len(texts)).tobytes())
    digest.update("".join(texts).encode("utf-8", "surrogatepass"))


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


@dataclass
class RerankJob:
    """A run to re-rank, sorted by query then rank (or score), with its corpus and query texts.

    Build with :meth:`build`; chunk ``i`` is queries ``qids[i * batch_size : (i + 1) * batch_size]``.
    """

    frame: pd.DataFrame
    table: DocumentTable
    texts: dict[str, str]
    top_k: int
    batch_size: int
    qids: list[Any]
    bounds: npt.NDArray[np.int64]  # rows of query j: frame[bounds[j]:bounds[j + 1]]
    codes: npt.NDArray[np.int64]  # each row's document code (-1: not in the corpus)
    missing: list[tuple[Any, str]]  # (qid, doc_id) of the re-ranked blocks absent from the corpus

    @classmethod
    def build(cls, run: Any, corpus: Any, queries: Any, top_k: int, batch_size: int) -> RerankJob:
        frame, table, texts = _inputs(run, corpus, queries)
        order_cols = ["rank"] if "rank" in frame.columns else []
        frame = frame.assign(_neg=-numeric_column(frame, "score", "run"))
        frame = frame.sort_values(["qid", *order_cols, "_neg"], kind="stable").drop(columns="_neg")
        frame = frame.reset_index(drop=True)
        qid_col = frame["qid"].to_numpy()
        starts = np.flatnonzero(np.r_[True, qid_col[1:] != qid_col[:-1]]) if len(frame) else np.zeros(0, np.int64)
        bounds = np.r_[starts, len(frame)].astype(np.int64)
        qids = [qid_col[s] for s in starts]
        unknown = [q for q in qids if str(q) not in texts]
        if unknown:
            raise KolmValueError(f"{len(unknown)} run queries have no text, e.g. {unknown[0]!r}")
        codes = table.codes(frame["doc_id"].astype(str).to_numpy(), missing="ignore")
        position = np.arange(len(frame)) - np.repeat(starts, np.diff(bounds))
        absent = np.flatnonzero((position < top_k) & (codes < 0))
        missing = [(qid_col[r], str(frame["doc_id"].iat[r])) for r in absent]
        return cls(frame, table, texts, top_k, batch_size, qids, bounds, codes, missing)

    @property
    def n_chunks(self) -> int:
        return -(-len(self.qids) // self.batch_size)

    def chunk(self, i: int) -> range:
        """Positions (in :attr:`qids`) of chunk ``i``'s queries."""
        return range(i * self.batch_size, min((i + 1) * self.batch_size, len(self.qids)))

    def fingerprint(self, reranker: str) -> dict[str, str]:
        """What the output depends on: the run, the query texts, the corpus documents the run
        names, the reranker's fingerprint, ``top_k`` and the chunking."""
        run = hashlib.sha256()
        for column in ("qid", "doc_id"):
            run.update(f"{column}:{self.frame[column].dtype}".encode())
            _strings_digest(run, self.frame[column].tolist())
        run.update(np.ascontiguousarray(self.frame["score"].to_numpy(np.float64)).tobytes())
        if "rank" in self.frame.columns:
            run.update(np.ascontiguousarray(self.frame["rank"].to_numpy(np.int64)).tobytes())
        texts = hashlib.sha256()
        _strings_digest(texts, [v for q in self.qids for v in (q, self.texts[str(q)])])
        docs = hashlib.sha256()  # every document the run names (so the digest does not move with top_k)
        rows = self.table.frame.iloc[np.unique(self.codes[self.codes >= 0])].itertuples(index=False, name=None)
        docs.update(json.dumps(list(rows), sort_keys=True, ensure_ascii=False, default=repr).encode("utf-8", "surrogatepass"))
        return {"job": JOB_VERSION, "run": "sha256:" + run.hexdigest(), "queries": "sha256:" + texts.hexdigest(),
                "corpus": "sha256:" + docs.hexdigest(), "reranker": reranker, "top_k": str(self.top_k),
                "batch_size": str(self.batch_size)}

    def _prepare(self, j: int, planner: DefaultQueryPlanner) -> tuple[list[SearchDocument], SearchPipelineContext,
                                                                       npt.NDArray[Any], npt.NDArray[Any]]:
        lo, hi = int(self.bounds[j]), int(self.bounds[j + 1])
        ids = self.frame["doc_id"].iloc[lo:hi].astype(str).to_numpy()
        head, tail = ids[: self.top_k], ids[self.top_k:]
        codes = self.codes[lo:min(hi, lo + self.top_k)]
        present = codes >= 0
        docs = self.table.documents(codes[present], self.frame["score"].to_numpy()[lo:lo + len(head)][present])
        req = SearchRequest(query=self.texts[str(self.qids[j])], limit=self.top_k)
        ctx = SearchPipelineContext(request=req, plan=planner.plan(req), started_at=0.0)
        return docs, ctx, head[~present], tail

    @staticmethod
    def _assemble(qid: Any, docs: list[SearchDocument], out: list[SearchDocument], absent: Any,
                  tail: Any) -> pd.DataFrame:
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

    async def compute(self, i: int, reranker: Any) -> pd.DataFrame:
        """Chunk ``i`` re-ranked: ``qid, doc_id, rank, score`` (the block re-ranked, absent
        documents right after it, the tail below in its order)."""
        async def call(fn: Any, *args: Any) -> Any:
            try:
                return await resolve(fn(*args))
            except SearchError:
                raise
            except Exception as exc:
                raise SearchError(_STAGE, str(exc) or type(exc).__name__, cause=exc) from exc

        planner = DefaultQueryPlanner()
        positions = list(self.chunk(i))
        qs = [self.qids[j] for j in positions]
        prepared = [self._prepare(j, planner) for j in positions]
        outs = await rerank_all(reranker, [(d, c) for d, c, _, _ in prepared], call=call, queries=qs)
        frames = [self._assemble(q, d, out, absent, tail)
                  for q, (d, _, absent, tail), out in zip(qs, prepared, outs, strict=True)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            {"qid": [], "doc_id": [], "rank": np.zeros(0, np.int64), "score": np.zeros(0)})

    def finish(self, result: pd.DataFrame) -> pd.DataFrame:
        """``result`` (the job's run) with ``attrs["missing"]``, the absent documents logged."""
        result.attrs["missing"] = list(self.missing)
        if self.missing:
            _log.warning("%d documents of the run are not in the corpus (kept unranked under the block), e.g. %r",
                         len(self.missing), self.missing[0])
        return result
