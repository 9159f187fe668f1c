"""Re-ranking by scores, through a score cache: the one mechanism behind ``score_cache=``.

- :func:`rerank_pointwise` is how every pointwise reranker (:class:`~kolm_search.contract.ports.ScoresPairs`)
  re-ranks: the pairs of every query of a batch scored in one ``score_pairs`` call (only those
  missing from the cache, when one is given), each query's documents ordered by score,
  descending, ties in their input order; a pair scored NaN (the scorer could not score it) is
  placed after the scored ones, in input order, and never cached.
- :class:`PointwiseReranker` is the base of the built-in pointwise rerankers (cross-encoders,
  the LLM grader): a subclass writes ``score_pairs`` and ``fingerprint``, and is built with
  ``score_cache=`` or without.
- :class:`CachedReranker` puts a :class:`~kolm_search.adapters.ScoreCache` between any
  pointwise or listwise (:class:`~kolm_search.contract.ports.RanksWindows`) reranker and its model;
  ``rerank_run``, ``search_batch`` and ``Experiment`` build it when given ``score_cache=``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kolm_search._bridge import off_loop
from kolm_search.adapters.score_keys import ScoreStore, pair_keys
from kolm_search.compose.kinds import RerankerStage
from kolm_search.contract.port_calls import fingerprint_of
from kolm_search.contract.ports import RanksWindows, ScoresPairs, implements
from kolm_search.errors import KolmTypeError, KolmValueError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["CachedReranker", "PointwiseReranker", "order_by_scores", "rerank_pointwise", "scores_of", "with_score_cache"]

Items = Sequence[tuple[list[SearchDocument], SearchPipelineContext]]


def _checked(raw: Any, n: int, what: str) -> npt.NDArray[np.float32]:
    try:
        scores = np.asarray(raw, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise KolmValueError(f"{what} must return {n} numbers, got {raw!r:.80}") from exc
    if scores.shape != (n,):
        raise KolmValueError(f"{what} returned {scores.size} scores for {n} pairs")
    if np.isinf(scores).any():
        raise KolmValueError(f"{what} returned infinite scores")
    return scores


async def scores_of(scorer: Any, pairs: Sequence[tuple[str, SearchDocument]], cache: ScoreStore | None = None,
                    fingerprint: str | None = None) -> npt.NDArray[np.float32]:
    """Scores of ``pairs`` (float32, ``(len(pairs),)``): read from ``cache`` (keyed by
    ``fingerprint``) where present, the rest computed in one ``score_pairs`` call (each
    distinct pair once) and stored, NaN ones excepted. A sync scorer runs off the event loop."""
    what = f"{type(scorer).__name__}.score_pairs"
    if not pairs:
        return np.zeros(0, np.float32)
    if cache is None:
        return _checked(await off_loop(scorer.score_pairs, list(pairs)), len(pairs), what)
    assert fingerprint is not None
    keys = pair_keys(fingerprint, pairs)
    found = await off_loop(cache.get, keys)
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        if k not in found:
            first.setdefault(k, i)
    if first:
        idx = list(first.values())
        fresh = _checked(await off_loop(scorer.score_pairs, [pairs[i] for i in idx]), len(idx), what)
        found.update((keys[i], fresh[j:j + 1]) for j, i in enumerate(idx))
        await off_loop(cache.put, {keys[i]: fresh[j:j + 1] for j, i in enumerate(idx) if not np.isnan(fresh[j])})
    out = np.empty(len(pairs), np.float32)
    for i, k in enumerate(keys):
        vec = found[k]
        if vec.shape != (1,):
            raise KolmValueError(f"score cache {cache!r} holds {vec.size} values for a pair")
        out[i] = vec[0]
    return out


def order_by_scores(docs: Sequence[SearchDocument], scores: npt.NDArray[np.float32]) -> list[SearchDocument]:
    """``docs`` by ``scores``, descending, ties in input order, each carrying its score; NaN
    ones after the rest, in input order, scored one below the lowest (0 when none is scored)."""
    scores = np.asarray(scores, dtype=np.float32)
    failed = np.isnan(scores)
    floor = float(scores[~failed].min()) - 1.0 if (~failed).any() else 0.0
    filled = np.where(failed, np.float32(floor), scores)
    order = np.lexsort((np.arange(len(docs)), -filled.astype(np.float64), failed))
    return [replace(docs[i], score=float(filled[i])) for i in order]


async def rerank_pointwise(scorer: Any, items: Items, cache: ScoreStore | None = None,
                           fingerprint: str | None = None) -> list[list[SearchDocument]]:
    """Re-rank each ``(docs, context)`` of ``items`` by ``scorer.score_pairs`` (see the module
    docstring); the query of a pair is the request's ``query``."""
    pairs = [(ctx.request.query, d) for docs, ctx in items for d in docs]
    scores = await scores_of(scorer, pairs, cache, fingerprint)
    out, start = [], 0
    for docs, _ in items:
        out.append(order_by_scores(docs, scores[start:start + len(docs)]))
        start += len(docs)
    return out


class PointwiseReranker(RerankerStage):
    """Base of pointwise rerankers: ``rerank`` / ``rerank_batch`` by :meth:`score_pairs`.

    A subclass implements ``score_pairs(pairs) -> float32 (n,)`` (sync or async) and
    ``fingerprint()``, and sets ``self.score_cache`` (a :class:`ScoreCache` or ``None``).
    """

    score_cache: ScoreStore | None = None

    def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> Any:
        raise NotImplementedError

    def fingerprint(self) -> str:
        raise NotImplementedError

    async def rerank_batch(self, items: Items) -> list[list[SearchDocument]]:
        """Re-rank many queries' candidates: every pair of the batch not in the score cache
        goes to :meth:`score_pairs` in one call."""
        cache = self.score_cache
        return await rerank_pointwise(self, items, cache, self.fingerprint() if cache is not None else None)

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: :meth:`rerank_batch` of one query."""
        return (await self.rerank_batch([(docs, context)]))[0]


class CachedReranker(RerankerStage):
    """A pointwise or listwise reranker whose model calls go through a :class:`ScoreCache`.

    Parameters
    ----------
    reranker : ScoresPairs or RanksWindows
        The reranker; its output is unchanged (the same order and scores, float32).
    cache : ScoreCache
    fingerprint : str, optional
        What the reranker is, when it declares no ``fingerprint()`` itself.

    Raises
    ------
    KolmTypeError
        ``reranker`` neither scores pairs nor ranks windows, or has no fingerprint.
    """

    def __init__(self, reranker: Any, cache: ScoreStore, *, fingerprint: str | None = None) -> None:
        if not implements(cache, ScoreStore):
            raise KolmTypeError(f"score_cache must be a ScoreCache (ScoreStore: get, put), "
                                f"got {type(cache).__name__}")
        self.pointwise = implements(reranker, ScoresPairs)
        if not (self.pointwise or implements(reranker, RanksWindows)):
            raise KolmTypeError(f"a score cache needs a reranker that scores pairs (ScoresPairs: score_pairs) or "
                                f"ranks windows (RanksWindows: rank_window); {type(reranker).__name__} does neither")
        self.reranker, self.cache = reranker, cache
        self._fingerprint = fingerprint_of(reranker, fingerprint)

    def fingerprint(self) -> str:
        """The wrapped reranker's (the cache changes nothing it returns)."""
        return self._fingerprint

    async def rerank_batch(self, items: Items) -> list[list[SearchDocument]]:
        if self.pointwise:
            return await rerank_pointwise(self.reranker, items, self.cache, self._fingerprint)
        from kolm_search.adapters.listwise import rerank_windows

        return await rerank_windows(self.reranker, items, self.cache, self._fingerprint)

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        return (await self.rerank_batch([(docs, context)]))[0]

    def __repr__(self) -> str:
        return f"CachedReranker({self.reranker!r}, {self.cache!r})"


def with_score_cache(reranker: Any, score_cache: ScoreStore | None, fingerprint: str | None = None) -> Any:
    """``reranker`` behind ``score_cache`` (a :class:`CachedReranker`), or as it is when there is
    no cache: what ``score_cache=`` of ``rerank_run``, ``search_batch`` and ``Experiment`` does."""
    return reranker if score_cache is None else CachedReranker(reranker, score_cache, fingerprint=fingerprint)
