"""``MMRReranker``: diversify the candidates by maximal marginal relevance on embeddings."""

from __future__ import annotations

from typing import Any

import numpy as np

from kolm_search._aio import embed_batch, resolve
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["MMRReranker"]


class MMRReranker:
    """Reranker selecting documents by MMR: relevance to the query minus redundancy.

    Parameters
    ----------
    embedder : Embedder
        Embeds the documents (title + content) and, when the context has none, the query.
    lambda_ : float, default 0.5
        1 keeps the relevance order, 0 maximises diversity.
    top_n : int, optional
        How many to select by MMR (default all); the rest keep their order after them.

    Documents keep their scores; only the order changes.
    """

    def __init__(self, embedder: Any, lambda_: float = 0.5, top_n: int | None = None) -> None:
        if not 0.0 <= float(lambda_) <= 1.0:
            raise KolmValueError(f"lambda_ must lie in [0, 1], got {lambda_!r}")
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
            raise KolmValueError(f"top_n must be a positive int or None, got {top_n!r}")
        self.embedder = embedder
        self.lambda_ = float(lambda_)
        self.top_n = top_n

    async def _embed(self, texts: list[str]) -> np.ndarray:
        mat = await embed_batch(self.embedder, texts)
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        return (mat / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        from kolm_search._kernels import load

        if len(docs) < 2:
            return list(docs)
        emb = await self._embed([f"{d.title} {d.content}" if d.title else d.content for d in docs])
        query = context.embeddings
        if query is None:
            query = np.asarray(await resolve(self.embedder.embed(context.plan.normalized_query)), dtype=np.float32)
        q = np.asarray(query, dtype=np.float32)
        q = q / (np.linalg.norm(q) or 1.0)
        if q.shape[0] != emb.shape[1]:
            raise KolmValueError(f"query embedding has dimension {q.shape[0]}, documents {emb.shape[1]}")
        relevance = (emb @ q).astype(np.float64)
        top = len(docs) if self.top_n is None else min(self.top_n, len(docs))
        order = load("mmr").mmr_select(relevance, np.ascontiguousarray(emb), self.lambda_, top)
        picked = set(order.tolist())
        return [docs[i] for i in order] + [d for i, d in enumerate(docs) if i not in picked]
