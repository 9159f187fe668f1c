"""Rerankers: a cross-encoder (sentence-transformers) and weighted fusion of scorers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import off_loop
from kolm_search._extras import require
from kolm_search._params import positive_int
from kolm_search._progress import progress_bar
from kolm_search.adapters._fingerprint import describe, folder_digest, torch_digest
from kolm_search.adapters.scorecache import ScoreCache
from kolm_search.adapters.scoring import PointwiseReranker
from kolm_search.compose.kinds import RerankerStage
from kolm_search.errors import KolmValueError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["CrossEncoderReranker", "FusionReranker"]


class CrossEncoderReranker(PointwiseReranker):
    """Scores (query, document) pairs with ``sentence_transformers.CrossEncoder``, in batches.

    A pointwise reranker (:class:`~kolm_search.contract.ports.ScoresPairs`): the pairs of every query of
    a batch go to the model in one call (:meth:`score_pairs`), only those missing from
    ``score_cache`` when one is given.

    Parameters
    ----------
    model_or_path : str, Path or CrossEncoder
    batch_size : int, default 32
    max_length : int, optional
    score_cache : ScoreCache, optional

    No cross-encoder weights load offline on this project's machines (every packaged one
    fetches from a hub), so the tests exercise this adapter with a small randomly initialised
    model: they check the code path, not ranking quality.
    """

    def __init__(self, model_or_path: Any, batch_size: int = 32, max_length: int | None = None,
                 device: str | None = None, *, score_cache: ScoreCache | None = None) -> None:
        st = require("sentence_transformers", "embeddings")
        if isinstance(model_or_path, (str, Path)):
            self.model = st.CrossEncoder(str(model_or_path), max_length=max_length, device=device or "cpu")
            self._path: Path | None = Path(model_or_path)
        else:
            self.model, self._path = model_or_path, None
        self.batch_size = positive_int("batch_size", batch_size)
        self.score_cache = score_cache
        self._fingerprint: str | None = None

    def stage_params(self) -> dict[str, Any]:
        """``batch_size`` (scikit-learn's ``get_params``; the model is fixed at construction)."""
        return {"batch_size": self.batch_size}

    def apply_params(self, changes: dict[str, Any]) -> None:
        unknown = set(changes) - {"batch_size"}
        if unknown:
            raise KolmValueError(f"CrossEncoderReranker has no settable parameter(s) {sorted(unknown)}; it has "
                                 "['batch_size'] (build a new one for another model)")
        if "batch_size" in changes:
            self.batch_size = positive_int("batch_size", changes["batch_size"])

    def fingerprint(self) -> str:
        """The model (its folder's files, or a loaded model's weights, by sha256), its maximum
        length and activation (:class:`~kolm_search.contract.ports.Fingerprinted`); computed once."""
        if self._fingerprint is None:
            weights = folder_digest(self._path) if self._path is not None and self._path.is_dir() \
                else torch_digest(self.model.model)
            self._fingerprint = describe("CrossEncoderReranker", weights=weights,
                                         max_length=self.model.max_seq_length,
                                         activation=type(self.model.activation_fn).__name__)
        return self._fingerprint

    def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> npt.NDArray[np.float32]:
        """The model's score of each (query, document title and content) pair: float32 (n,)."""
        texts = [(q, f"{d.title} {d.content}" if d.title else d.content) for q, d in pairs]
        out = np.empty(len(texts), np.float32)
        block = self.batch_size * 16
        with progress_bar(len(texts), "cross-encoder", "pair") as bar:
            for start in range(0, len(texts), block):
                part = texts[start:start + block]
                raw = self.model.predict(part, batch_size=self.batch_size, show_progress_bar=False,
                                         convert_to_numpy=True)
                out[start:start + len(part)] = np.asarray(raw, dtype=np.float32).reshape(len(part), -1)[:, 0]
                bar.update(len(part))
        if not np.all(np.isfinite(out)):
            raise KolmValueError("the cross-encoder returned non-finite scores")
        return out

    def score(self, query: str, docs: Sequence[SearchDocument]) -> npt.NDArray[np.float32]:
        """Scores of ``docs`` for ``query`` (float32 (n,))."""
        return self.score_pairs([(query, d) for d in docs])


class FusionReranker(RerankerStage):
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

    def stage_params(self) -> dict[str, Any]:
        """``scorers, weights`` (scikit-learn's ``get_params``)."""
        return {"scorers": list(self.scorers), "weights": [float(w) for w in self.weights]}

    def apply_params(self, changes: dict[str, Any]) -> None:
        """Set ``scorers`` or ``weights``, checked as the constructor checks them."""
        unknown = set(changes) - {"scorers", "weights"}
        if unknown:
            raise KolmValueError(f"FusionReranker has no parameter(s) {sorted(unknown)}; it has ['scorers', 'weights']")
        merged = {**self.stage_params(), **changes}
        self.__init__(merged["scorers"], merged["weights"])  # type: ignore[misc]

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
