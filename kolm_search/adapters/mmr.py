"""``MMRReranker``: diversify the candidates by maximal marginal relevance on embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._params import positive_int, probability
from kolm_search.compose.kinds import RerankerStage
from kolm_search.contract.port_calls import embed_all, fingerprint_of
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["MMRReranker"]


class MMRReranker(RerankerStage):
    """Reranker selecting documents by MMR: relevance to the query minus redundancy.

    Parameters
    ----------
    embedder : Embedder
        Embeds the documents (title + content) and, when the context has none, the query.
    lambda_ : float, default 0.5
        1 orders by relevance, 0 maximises diversity. Relevance is the cosine of the query's
        and the document's embeddings, not the incoming score: at 1 the candidates are
        re-ordered by that cosine, not kept in their incoming order.
    top_n : int, optional
        How many to select by MMR (default all); the rest keep their order after them.

    Through the port (``rerank``/``rerank_batch``) documents keep their scores; only the order
    changes. As a stage (``bm25 % 100 >> mmr``) the incoming scores, sorted, follow the new
    order, so that ranks and scores agree.
    """

    def __init__(self, embedder: Any, lambda_: float = 0.5, top_n: int | None = None) -> None:
        self.embedder = embedder
        self.lambda_ = probability("lambda_", lambda_)
        self.top_n: int | None = positive_int("top_n", top_n, none=True)

    @staticmethod
    def _text(doc: SearchDocument) -> str:
        return f"{doc.title} {doc.content}" if doc.title else doc.content

    async def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        mat = await embed_all(self.embedder, texts)  # checked; a sync embedder runs off the event loop
        norms = np.linalg.norm(mat, axis=1, keepdims=True)
        return np.ascontiguousarray(mat / np.where(norms > 0, norms, 1.0), dtype=np.float32)

    async def rerank_batch(self, items: Sequence[tuple[list[SearchDocument], SearchPipelineContext]],
                           ) -> list[list[SearchDocument]]:
        """Re-rank many queries' candidates: every distinct document text and every query
        without an embedding in its context is embedded once, in one ``embed_many`` call each
        (an embedder that orders texts by length then pads little), and MMR runs per query on
        rows of those matrices."""
        from kolm_search._kernels import load

        texts: dict[str, int] = {}
        for docs, _ in items:
            for d in docs:
                texts.setdefault(self._text(d), len(texts))
        doc_emb = await self._embed(list(texts)) if texts else np.zeros((0, 0), np.float32)
        pending = [i for i, (docs, ctx) in enumerate(items) if len(docs) >= 2 and ctx.embeddings is None]
        query_emb = await self._embed([items[i][1].plan.normalized_query for i in pending]) if pending else None
        query_rows = {i: row for row, i in enumerate(pending)}
        mmr = load("mmr").mmr_select
        out: list[list[SearchDocument]] = []
        for i, (docs, ctx) in enumerate(items):
            if len(docs) < 2:
                out.append(list(docs))
                continue
            q = np.asarray(ctx.embeddings if i not in query_rows else query_emb[query_rows[i]],  # type: ignore[index]
                           dtype=np.float32)
            q = q / (np.linalg.norm(q) or 1.0)
            emb = doc_emb[[texts[self._text(d)] for d in docs]]
            if q.shape != (emb.shape[1],):
                raise KolmValueError(f"query embedding has shape {q.shape}, documents dimension {emb.shape[1]}")
            top = len(docs) if self.top_n is None else min(self.top_n, len(docs))
            order = mmr((emb @ q).astype(np.float64), emb, self.lambda_, top)
            picked = set(order.tolist())
            out.append([docs[j] for j in order] + [d for j, d in enumerate(docs) if j not in picked])
        return out

    def stage_params(self) -> dict[str, Any]:
        """``embedder, lambda_, top_n`` (scikit-learn's ``get_params``)."""
        return {"embedder": self.embedder, "lambda_": self.lambda_, "top_n": self.top_n}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set parameters, checked as the constructor checks them (on error nothing changes)."""
        unknown = set(changes) - set(self.stage_params())
        if unknown:
            raise KolmValueError(f"MMRReranker has no parameter(s) {sorted(unknown)}; it has {sorted(self.stage_params())}")
        merged = {**self.stage_params(), **changes}
        self.__init__(merged["embedder"], merged["lambda_"], merged["top_n"])  # type: ignore[misc]

    def fingerprint(self) -> str:
        """``lambda_``, ``top_n`` and the embedder's fingerprint
        (:class:`~kolm_search.contract.ports.Fingerprinted`; an embedder without one is a ``KolmTypeError``)."""
        from kolm_search.adapters._fingerprint import describe

        return describe("MMRReranker", lambda_=self.lambda_, top_n=self.top_n,
                        embedder=fingerprint_of(self.embedder, what="MMRReranker's embedder"))

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: :meth:`rerank_batch` of one query."""
        return (await self.rerank_batch([(docs, context)]))[0]

    def __repr__(self) -> str:
        return f"MMRReranker(lambda_={self.lambda_!r}, top_n={self.top_n!r})"
