"""OpenAI-compatible chat-completions adapters: a synthesizer and a query expander.

Works with any server speaking ``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp,
Ollama's compatible endpoint, ...). Standard library HTTP on a worker thread, a timeout per
attempt, retries with exponential backoff on 429 and 5xx (honouring a numeric
``Retry-After``) and on timeouts; anything else fails at once with :class:`LLMRequestError`.
In a pipeline a failing synthesizer surfaces as ``SearchError(stage="synthesizer")`` and a
failing expander makes :class:`~kolm_search.planners.ExpandingQueryPlanner` fall back to the
primary query.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from kolm_search.errors import LLMRequestError
from kolm_search.types import SearchPipelineContext

__all__ = ["LLMRequestError", "OpenAICompatibleClient", "OpenAICompatibleExpander", "OpenAICompatibleSynthesizer"]


class OpenAICompatibleClient:
    """Minimal chat-completions client.

    Parameters
    ----------
    base_url : str
        E.g. ``"https://api.openai.com/v1"`` or ``"http://127.0.0.1:8000/v1"``.
    model : str
    api_key : str, optional
        Sent as ``Authorization: Bearer ...``.
    timeout : float, default 30
        Seconds per attempt.
    max_retries : int, default 3
        Extra attempts after a 429, a 5xx or a timeout.
    backoff : float, default 0.5
        First wait in seconds, doubled each retry.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.5, extra_headers: Mapping[str, str] | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.extra_headers = dict(extra_headers or {})

    def _post(self, body: bytes) -> tuple[int, bytes, Mapping[str, str]]:
        headers = {"Content-Type": "application/json", **self.extra_headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read() if exc.fp else b"", dict(exc.headers or {})

    def chat_sync(self, messages: list[dict[str, str]], **params: Any) -> str:
        """Send ``messages``; return the first choice's content."""
        body = json.dumps({"model": self.model, "messages": messages, **params}).encode("utf-8")
        delay = self.backoff
        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                status, raw, headers = self._post(body)
            except TimeoutError as exc:
                status, raw, headers, last = -1, b"", {}, f"timed out after {self.timeout:g}s ({exc})"
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                    status, raw, headers, last = -1, b"", {}, f"timed out after {self.timeout:g}s"
                else:
                    raise LLMRequestError(f"cannot reach {self.url}: {exc.reason}") from exc
            if status == 200:
                try:
                    content = json.loads(raw)["choices"][0]["message"]["content"]
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    raise LLMRequestError(f"malformed reply from {self.url}: {raw[:200]!r}") from exc
                if not isinstance(content, str):
                    raise LLMRequestError(f"malformed reply from {self.url}: content is {type(content).__name__}")
                return content
            if status != -1:
                last = f"HTTP {status}: {raw[:200].decode('utf-8', 'replace')}"
            retriable = status == -1 or status == 429 or status >= 500
            if not retriable or attempt == self.max_retries:
                break
            wait = delay
            retry_after = {k.lower(): v for k, v in headers.items()}.get("retry-after")
            if retry_after and retry_after.replace(".", "", 1).isdigit():
                wait = max(wait, float(retry_after))
            time.sleep(wait)
            delay *= 2
        raise LLMRequestError(f"chat completion failed after {attempt + 1} attempt(s): {last}")

    async def chat(self, messages: list[dict[str, str]], **params: Any) -> str:
        """Async :meth:`chat_sync` (runs on a worker thread)."""
        return await asyncio.to_thread(self.chat_sync, messages, **params)


class OpenAICompatibleSynthesizer:
    """``Synthesizer``: answers the query from the final page of results.

    Parameters
    ----------
    client : OpenAICompatibleClient
    max_chars : int, default 1500
        Characters of each document put in the prompt.
    system_prompt : str, optional
    """

    DEFAULT_SYSTEM = ("Answer the question using only the numbered sources. Cite sources as [n]. "
                      "If they do not contain the answer, say so.")

    def __init__(self, client: OpenAICompatibleClient, max_chars: int = 1500, system_prompt: str | None = None,
                 **params: Any) -> None:
        self.client = client
        self.max_chars = int(max_chars)
        self.system_prompt = system_prompt or self.DEFAULT_SYSTEM
        self.params = params

    def messages(self, context: SearchPipelineContext) -> list[dict[str, str]]:
        sources = "\n\n".join(
            f"[{i}] {(d.title + ': ') if d.title else ''}{d.content[: self.max_chars]}"
            for i, d in enumerate(context.results, start=1)
        )
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": f"Sources:\n{sources}\n\nQuestion: {context.request.query}"}]

    async def synthesize(self, context: SearchPipelineContext) -> str | None:
        if not context.results:
            return None
        return (await self.client.chat(self.messages(context), **self.params)).strip() or None


class OpenAICompatibleExpander:
    """``QueryExpander``: asks the model for ``n`` alternative phrasings, one per line."""

    def __init__(self, client: OpenAICompatibleClient, n: int = 3, **params: Any) -> None:
        self.client = client
        self.n = int(n)
        self.params = params

    async def expand(self, query: str) -> list[str]:
        prompt = (f"Write {self.n} alternative search queries for: {query}\n"
                  "One per line, no numbering, no commentary.")
        text = await self.client.chat([{"role": "user", "content": prompt}], **self.params)
        lines = [re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip().strip('"') for line in text.splitlines()]
        return [line for line in lines if line][: self.n]
