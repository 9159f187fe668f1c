"""Rerankers: a cross-encoder (sentence-transformers) and weighted fusion of scorers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from kolm_search._bridge import off_loop
from kolm_search._extras import require
from kolm_search._params import positive_int
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["CrossEncoderReranker", "FusionReranker"]


class CrossEncoderReranker:
    """Scores (query, document) pairs with ``sentence_transformers.CrossEncoder``, in batches.

    Parameters
    ----------
    model_or_path : str, Path or CrossEncoder
    batch_size : int, default 32
    max_length : int, optional

    No cross-encoder weights load offline on this project's machines (every packaged one
    fetches from a hub), so the tests exercise this adapter with a small randomly initialised
    model: they check the code path, not ranking quality.
    """

    def __init__(self, model_or_path: Any, batch_size: int = 32, max_length: int | None = None,
                 device: str | None = None) -> None:
        st = require("sentence_transformers", "embeddings")
        if isinstance(model_or_path, (str, Path)):
            self.model = st.CrossEncoder(str(model_or_path), max_length=max_length, device=device or "cpu")
        else:
            self.model = model_or_path
        self.batch_size = positive_int("batch_size", batch_size)

    def score(self, query: str, docs: Sequence[SearchDocument]) -> np.ndarray:
        pairs = [(query, f"{d.title} {d.content}" if d.title else d.content) for d in docs]
        out = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float64).reshape(len(docs), -1)[:, 0]

    def rerank_batch(self, items: Sequence[tuple[list[SearchDocument], SearchPipelineContext]],
                     ) -> list[list[SearchDocument]]:
        """Re-rank many queries' candidates: the (query, document) pairs of every query go to
        the model in one ``predict`` call, in full batches."""
        pairs = [(ctx.request.query, f"{d.title} {d.content}" if d.title else d.content)
                 for docs, ctx in items for d in docs]
        if not pairs:
            return [[] for _ in items]
        raw = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        scores = np.asarray(raw, dtype=np.float64).reshape(len(pairs), -1)[:, 0]
        if not np.all(np.isfinite(scores)):
            raise KolmValueError("the cross-encoder returned non-finite scores")
        out, start = [], 0
        for docs, _ in items:
            block = scores[start:start + len(docs)]
            start += len(docs)
            out.append([replace(docs[i], score=float(block[i])) for i in np.argsort(-block, kind="stable")])
        return out

    def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: :meth:`rerank_batch` of one query."""
        return self.rerank_batch([(docs, context)])[0]


class FusionReranker:
    """Re-scores candidates by a weighted sum of min-max normalised scorers.

    Parameters
    ----------
    scorers : list of callables ``f(docs, context) -> scores (n,)`` (sync or async); the string
        ``"original"`` uses the candidates' incoming scores.
    weights : list of float, optional
        One per scorer (default equal).
    """

    def __init__(self, scorers: Sequence[Callable[..., Any] | str], weights: Sequence[float] | None = None) -> None:
        if not scorers:
            raise KolmValueError("FusionReranker needs at least one scorer")
        for s in scorers:
            if not (callable(s) or s == "original"):
                raise KolmValueError(f"a scorer must be callable or 'original', got {s!r}")
        self.scorers = list(scorers)
        w = np.ones(len(scorers)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (len(scorers),) or not np.all(np.isfinite(w)):
            raise KolmValueError(f"weights must be finite, one per scorer; got {weights!r}")
        self.weights = w

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        if not docs:
            return []
        total = np.zeros(len(docs))
        for scorer, w in zip(self.scorers, self.weights, strict=True):
            if scorer == "original":
                raw = np.array([d.score if d.score is not None else 0.0 for d in docs], dtype=np.float64)
            else:
                raw = np.asarray(await off_loop(scorer, docs, context), dtype=np.float64)  # type: ignore[arg-type]
            if raw.shape != (len(docs),) or not np.all(np.isfinite(raw)):
                raise KolmValueError(f"scorer {scorer!r} returned {raw.shape} values or non-finite ones for {len(docs)} documents")
            span = raw.max() - raw.min()
            total += w * ((raw - raw.min()) / span if span > 0 else np.ones_like(raw))
        order = np.argsort(-total, kind="stable")
        return [replace(docs[i], score=float(total[i])) for i in order]
