"""``LLMPointwiseReranker``: a relevance score per (query, document) from a chat model.

Two ways to score, on any OpenAI-compatible server (:class:`~kolm_search.adapters.OpenAICompatibleClient`):

- ``mode="grade"`` asks for a grade on a stated scale (``scale=(0, 3)``) and scores the pair
  by the first number of the answer;
- ``mode="yes_no"`` asks whether the document is relevant and scores it by the probability
  of "yes" against "no" from the log-probabilities of the answer's first token, when the server
  returns them (``logprobs=True, top_logprobs=k`` are sent), else by the answer itself (1 or 0).

Many requests are in flight at once, up to ``max_concurrency``. A bad answer never fails the
job: an answer without a grade on the scale, an empty answer, a failed request (an HTTP error,
a timeout) scores the pair NaN, which ranks it after the scored ones in its original order
(:func:`~kolm_search.adapters.scoring.order_by_scores`) and keeps it out of the score cache;
each case is counted in ``counts`` and logged (the first three of each kind).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from kolm_search._logging import log
from kolm_search._params import one_of, positive_int, real
from kolm_search._progress import progress_bar
from kolm_search.adapters._fingerprint import describe, text_digest
from kolm_search.adapters.llm import ChatModelParams, ChatReply, OpenAICompatibleClient
from kolm_search.adapters.prompts import POINTWISE_GRADE, POINTWISE_YES_NO, PromptTemplate
from kolm_search.adapters.score_keys import ScoreStore
from kolm_search.adapters.scoring import PointwiseReranker
from kolm_search.errors import KolmValueError, LLMRequestError
from kolm_search.types import SearchDocument

__all__ = ["LLMPointwiseReranker", "yes_probability"]

_log = logging.getLogger("kolm_search.rerank")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _word(token: Any) -> str:
    return re.sub(r"[^a-z]", "", token.lower()) if isinstance(token, str) else ""


def yes_probability(logprobs: list[dict[str, Any]] | None) -> float | None:
    """P(yes) / (P(yes) + P(no)) from the first generated token and its alternatives, or
    ``None`` when neither word is among them (or there are no log-probabilities)."""
    if not logprobs:
        return None
    first = logprobs[0]
    options = [first, *(first.get("top_logprobs") or [])]
    best: dict[str, float] = {}
    for option in options:
        if not isinstance(option, dict):
            continue
        word, lp = _word(option.get("token")), option.get("logprob")
        if word in ("yes", "no") and isinstance(lp, (int, float)) and math.isfinite(lp):
            best[word] = max(best.get(word, -math.inf), float(lp))
    if not best:
        return None
    yes, no = math.exp(best.get("yes", -math.inf)), math.exp(best.get("no", -math.inf))
    return yes / (yes + no) if yes + no > 0 else None


class LLMPointwiseReranker(ChatModelParams, PointwiseReranker):
    """Scores each (query, document) pair with a chat model (see the module docstring).

    Parameters
    ----------
    client : OpenAICompatibleClient
    mode : {"grade", "yes_no"}, default "grade"
    scale : (int, int), default (0, 3)
        The lowest and highest grade (``mode="grade"``).
    prompt : PromptTemplate, optional
        Default :data:`~kolm_search.adapters.prompts.POINTWISE_GRADE` (placeholders ``query``,
        ``document``, ``low``, ``high``) or :data:`~kolm_search.adapters.prompts.POINTWISE_YES_NO`
        (``query``, ``document``).
    max_chars : int, default 1000
        Characters of each document (title and content) in the prompt.
    max_concurrency : int, default 8
        Requests in flight at once.
    top_logprobs : int, default 5
        Alternatives asked for the first token (``mode="yes_no"``).
    score_cache : ScoreCache, optional
        Pairs already scored are read from it.
    **params
        Sent with each request; ``temperature`` defaults to 0.

    Attributes
    ----------
    counts : Counter
        ``requests``, ``failed`` (``timed_out`` among them), ``empty``, ``unparseable`` and
        (``yes_no``) ``no_logprobs`` answers.
    """

    def __init__(self, client: OpenAICompatibleClient, *, mode: Literal["grade", "yes_no"] = "grade",
                 scale: tuple[int, int] = (0, 3), prompt: PromptTemplate | None = None, max_chars: int = 1000,
                 max_concurrency: int = 8, top_logprobs: int = 5, score_cache: ScoreStore | None = None,
                 **params: Any) -> None:
        self.client = client
        self.mode = one_of("mode", mode, ("grade", "yes_no"))
        try:
            low, high = scale
            ordered = real("scale[0]", low) < real("scale[1]", high)
        except (TypeError, ValueError):
            ordered = False
        if not ordered:
            raise KolmValueError(f"scale must be (lowest, highest) grades with lowest < highest, got {scale!r}")
        self.scale: tuple[float, float] = (low, high)
        fields = ("query", "document", "low", "high") if mode == "grade" else ("query", "document")
        default = POINTWISE_GRADE if mode == "grade" else POINTWISE_YES_NO
        self.prompt = (prompt or default).check(fields, "LLMPointwiseReranker prompt")
        self._prompt_given = prompt  # None: the mode's default (stage_params)
        self.max_chars = positive_int("max_chars", max_chars)
        self.max_concurrency = positive_int("max_concurrency", max_concurrency)
        self.top_logprobs = positive_int("top_logprobs", top_logprobs)
        self.score_cache = score_cache
        self._request_params = dict(params)  # as given (stage_params); self.params is what is sent
        self.params = {"temperature": 0, **params}
        if mode == "yes_no":
            self.params = {"logprobs": True, "top_logprobs": self.top_logprobs, **self.params}
        self.counts: Counter[str] = Counter()

    def stage_params(self) -> dict[str, Any]:
        """``mode, scale, prompt, max_chars, max_concurrency, top_logprobs, params`` (``prompt``
        ``None`` for the mode's default, ``params`` the request parameters given as ``**params``;
        scikit-learn's ``get_params``). The client is fixed."""
        return {"mode": self.mode, "scale": self.scale, "prompt": self._prompt_given, "max_chars": self.max_chars,
                "max_concurrency": self.max_concurrency, "top_logprobs": self.top_logprobs,
                "params": dict(self._request_params)}

    def fingerprint(self) -> str:
        """The model, the server, the mode and scale, the prompt and the request parameters."""
        return describe("LLMPointwiseReranker", model=self.client.model, url=self.client.endpoint, mode=self.mode,
                        scale=self.scale, prompt=text_digest(self.prompt.system + "\x00" + self.prompt.user),
                        max_chars=self.max_chars, params=sorted(self.params.items()))

    def _report(self, kind: str, message: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= 3:
            more = " (further ones are counted in LLMPointwiseReranker.counts)" if self.counts[kind] == 3 else ""
            log(_log, "warning", message + more)

    def _score(self, reply: ChatReply) -> float:
        answer = reply.content.strip()
        if self.mode == "yes_no":
            p = yes_probability(reply.logprobs)
            if p is not None:
                return p
            self.counts["no_logprobs"] += 1
            word = _word(answer.split()[0]) if answer else ""
            if word in ("yes", "no"):
                return 1.0 if word == "yes" else 0.0
        else:
            found = _NUMBER.search(answer)
            if found is not None:
                grade = float(found.group())
                if self.scale[0] <= grade <= self.scale[1]:
                    return grade
        if not answer:
            self._report("empty", "a pair is ranked unscored: the model answered nothing")
        else:
            self._report("unparseable", f"a pair is ranked unscored: no {self.mode.replace('_', '/')} in the "
                                        f"answer {answer[:80]!r}")
        return math.nan

    async def score_pairs(self, pairs: Sequence[tuple[str, SearchDocument]]) -> npt.NDArray[np.float32]:
        """Scores of ``pairs`` (float32; NaN where the answer gave none), ``max_concurrency``
        requests at a time."""
        slots = asyncio.Semaphore(self.max_concurrency)
        low, high = self.scale

        async def one(query: str, doc: SearchDocument) -> float:
            text = f"{doc.title} {doc.content}" if doc.title else doc.content
            messages = self.prompt.messages(query=query, document=text[: self.max_chars], low=low, high=high)
            async with slots:
                self.counts["requests"] += 1
                try:
                    reply = await self.client.complete(messages, **self.params)
                except LLMRequestError as exc:
                    if exc.timed_out:
                        self.counts["timed_out"] += 1
                    self._report("failed", f"a pair is ranked unscored: {exc}")
                    return math.nan
                finally:
                    bar.update(1)
            return self._score(reply)

        with progress_bar(len(pairs), "llm pointwise", "pair") as bar:
            return np.asarray(await asyncio.gather(*(one(q, d) for q, d in pairs)), dtype=np.float32)

    def __repr__(self) -> str:
        return f"LLMPointwiseReranker({self.client.model!r}, mode={self.mode!r})"
