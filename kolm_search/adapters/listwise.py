"""Listwise re-ranking: RankGPT's sliding window, and ``LLMListwiseReranker`` on it.

:func:`rerank_windows` re-ranks each query's list with any :class:`~kolm_search.contract.ports.RanksWindows`:
a window of ``window`` documents starts at the bottom of the list and moves up by ``step``
until it has ranked the top, each window ordered by ``rank_window`` and put back in place, so
the best documents of each window are carried up into the next (Sun et al., "Is ChatGPT Good
at Search? Investigating Large Language Models as Re-Ranking Agents", EMNLP 2023). Windows of
different queries run concurrently, at most ``max_concurrency`` at once; with a
:class:`~kolm_search.adapters.ScoreCache` a window already ranked (same query, same documents
in the same order, same reranker) is read instead.

A model's answer is repaired, never trusted (:func:`parse_permutation`): the identifiers it
names that exist, in its order, first occurrence only, then those it left out, in their
original order. An empty answer or a failed request (an HTTP error, a timeout) leaves the
window in its order. Every case is counted in ``LLMListwiseReranker.counts`` and logged.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from kolm_search._bridge import off_loop
from kolm_search._logging import log
from kolm_search._params import positive_int
from kolm_search._progress import progress_bar
from kolm_search.adapters._fingerprint import describe, text_digest
from kolm_search.adapters.llm import ChatModelParams, OpenAICompatibleClient
from kolm_search.adapters.prompts import LISTWISE, PromptTemplate
from kolm_search.adapters.score_keys import ScoreStore, window_key
from kolm_search.compose.kinds import RerankerStage
from kolm_search.errors import KolmValueError, LLMRequestError
from kolm_search.types import SearchDocument, SearchPipelineContext

__all__ = ["LLMListwiseReranker", "parse_permutation", "rerank_windows", "window_bounds"]

_log = logging.getLogger("kolm_search.rerank")
Items = Sequence[tuple[list[SearchDocument], SearchPipelineContext]]


def window_bounds(n: int, window: int, step: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` of each window over a list of ``n``, bottom first, the last at 0."""
    if n < 2:
        return []
    bounds, end = [], n
    while True:
        start = max(0, end - window)
        bounds.append((start, end))
        if start == 0:
            return bounds
        end -= step


def parse_permutation(answer: str, n: int) -> tuple[list[int], Counter[str]]:
    """The order an answer gives to ``n`` passages (positions 0..n-1) and what was repaired.

    Identifiers are the bracketed numbers (``[3] > [1]``), or every number when there are none;
    they count from 1. Returns the known ones in the answer's order, first occurrence only,
    then the missing ones in their original order, and the counts ``missing``, ``repeated``,
    ``unknown`` (identifiers outside 1..n).
    """
    found = re.findall(r"\[(\d+)\]", answer) or re.findall(r"\d+", answer)
    order: list[int] = []
    seen: set[int] = set()
    problems: Counter[str] = Counter()
    for token in found:
        i = int(token) - 1 if len(token) < 10 else -1
        if not 0 <= i < n:
            problems["unknown"] += 1
        elif i in seen:
            problems["repeated"] += 1
        else:
            seen.add(i)
            order.append(i)
    rest = [i for i in range(n) if i not in seen]
    if rest:
        problems["missing"] += len(rest)
    return order + rest, problems


async def rerank_windows(ranker: Any, items: Items, cache: ScoreStore | None = None,
                         fingerprint: str | None = None) -> list[list[SearchDocument]]:
    """Each query's documents re-ranked by sliding windows of ``ranker`` (module docstring).

    Documents come back scored ``len - rank`` (the order is all a listwise model gives).
    """
    window, step = positive_int("window", ranker.window), positive_int("step", ranker.step)
    slots = asyncio.Semaphore(positive_int("max_concurrency", ranker.max_concurrency))

    async def ranked(query: str, docs: list[SearchDocument]) -> list[int] | None:
        key = window_key(fingerprint, query, docs) if cache is not None and fingerprint else None
        if key is not None and cache is not None:
            hit = (await off_loop(cache.get, [key])).get(key)
            if hit is not None and hit.shape == (len(docs),):
                return np.argsort(-hit, kind="stable").tolist()
        async with slots:
            raw = await off_loop(ranker.rank_window, query, list(docs))
        if raw is None:
            return None
        order = [int(i) for i in raw]
        if sorted(order) != list(range(len(docs))):
            raise KolmValueError(f"{type(ranker).__name__}.rank_window must return a permutation of "
                                 f"range({len(docs)}), got {order!r:.80}")
        if key is not None and cache is not None:
            scores = np.empty(len(docs), np.float32)
            scores[order] = np.arange(len(docs), 0, -1, dtype=np.float32)
            await off_loop(cache.put, {key: scores})
        return order

    async def one(docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        current = list(docs)
        for start, end in window_bounds(len(current), window, step):
            win = current[start:end]
            order = await ranked(context.request.query, win)
            bar.update(1)
            if order is not None:
                current[start:end] = [win[i] for i in order]
        n = len(current)
        return [replace(d, score=float(n - i)) for i, d in enumerate(current)]

    total = sum(len(window_bounds(len(d), window, step)) for d, _ in items)
    with progress_bar(total, "listwise", "window") as bar:
        return list(await asyncio.gather(*(one(d, c) for d, c in items)))


class LLMListwiseReranker(ChatModelParams, RerankerStage):
    """Re-ranks by asking a chat model to order windows of passages (RankGPT's sliding window).

    Parameters
    ----------
    client : OpenAICompatibleClient
    window : int, default 20
        Passages per prompt.
    step : int, default 10
        How far the window moves up each time (``window - step`` passages overlap).
    prompt : PromptTemplate, default :data:`~kolm_search.adapters.prompts.LISTWISE`
        Placeholders ``query``, ``passages``, ``n``; the answer must list ``[i]`` identifiers.
    max_chars : int, default 500
        Characters of each passage (title and content, whitespace collapsed) in the prompt.
    max_concurrency : int, default 8
        Windows (of different queries) in flight at once.
    score_cache : ScoreCache, optional
        Windows already ranked are read from it.
    **params
        Sent with each request (``temperature=0``, ``max_tokens=...``).

    Attributes
    ----------
    counts : Counter
        ``windows`` asked, ``failed`` (``timed_out`` among them), ``empty`` answers,
        ``repaired`` answers and the ``missing``, ``repeated`` and ``unknown`` identifiers.
    """

    def __init__(self, client: OpenAICompatibleClient, *, window: int = 20, step: int = 10,
                 prompt: PromptTemplate = LISTWISE, max_chars: int = 500, max_concurrency: int = 8,
                 score_cache: ScoreStore | None = None, **params: Any) -> None:
        self.client = client
        self.window = positive_int("window", window)
        self.step = positive_int("step", step)
        if self.window < 2 or self.step > self.window:
            raise KolmValueError(f"window must be at least 2 and step at most window; got window={window}, step={step}")
        self.prompt = prompt.check(("query", "passages", "n"), "LLMListwiseReranker prompt")
        self.max_chars = positive_int("max_chars", max_chars)
        self.max_concurrency = positive_int("max_concurrency", max_concurrency)
        self.score_cache = score_cache
        self.params = params
        self.counts: Counter[str] = Counter()

    def stage_params(self) -> dict[str, Any]:
        """``window, step, prompt, max_chars, max_concurrency, params`` (the request parameters
        given as ``**params``; scikit-learn's ``get_params``). The client is fixed."""
        return {"window": self.window, "step": self.step, "prompt": self.prompt, "max_chars": self.max_chars,
                "max_concurrency": self.max_concurrency, "params": dict(self.params)}

    def fingerprint(self) -> str:
        """The model, the server, the prompt, the window and the request parameters."""
        return describe("LLMListwiseReranker", model=self.client.model, url=self.client.endpoint,
                        prompt=text_digest(self.prompt.system + "\x00" + self.prompt.user), window=self.window,
                        step=self.step, max_chars=self.max_chars, params=sorted(self.params.items()))

    def _passage(self, i: int, doc: SearchDocument) -> str:
        text = " ".join(f"{doc.title} {doc.content}".split() if doc.title else doc.content.split())
        return f"[{i}] {text[: self.max_chars]}"

    def _report(self, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= 3:
            more = " (further ones are counted in LLMListwiseReranker.counts)" if self.counts[kind] == 3 else ""
            log(_log, "warning", message + more)

    async def rank_window(self, query: str, docs: Sequence[SearchDocument]) -> list[int] | None:
        """The window's order from the model's answer (repaired), or ``None`` (empty, failed)."""
        self.counts["windows"] += 1
        passages = "\n".join(self._passage(i, d) for i, d in enumerate(docs, start=1))
        messages = self.prompt.messages(query=query, passages=passages, n=len(docs))
        try:
            answer = await self.client.chat(messages, **self.params)
        except LLMRequestError as exc:
            if exc.timed_out:
                self.counts["timed_out"] += 1
            self._report("failed", f"listwise window of {len(docs)} kept in its order: {exc}")
            return None
        if not answer.strip():
            self._report("empty", f"listwise window of {len(docs)} kept in its order: the model answered nothing")
            return None
        order, problems = parse_permutation(answer, len(docs))
        if problems:
            self.counts.update(problems)
            self._report("repaired", f"listwise answer repaired ({dict(problems)}): {answer[:120]!r}")
        return order

    async def rerank_batch(self, items: Items) -> list[list[SearchDocument]]:
        """Re-rank many queries' candidates, their windows concurrently."""
        cache = self.score_cache
        return await rerank_windows(self, items, cache, self.fingerprint() if cache is not None else None)

    async def rerank(self, docs: list[SearchDocument], context: SearchPipelineContext) -> list[SearchDocument]:
        """The spec's port: :meth:`rerank_batch` of one query."""
        return (await self.rerank_batch([(docs, context)]))[0]

    def __repr__(self) -> str:
        return f"LLMListwiseReranker({self.client.model!r}, window={self.window}, step={self.step})"
