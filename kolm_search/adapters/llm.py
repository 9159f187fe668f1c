"""OpenAI-compatible chat-completions adapters: a synthesizer and a query expander.

Works with any server speaking ``POST {base_url}/chat/completions`` (OpenAI, vLLM, llama.cpp,
Ollama's compatible endpoint, ...). HTTP is `httpx <https://www.python-httpx.org>`_ (extra
``llm``: ``pip install 'kolm-search[llm]'``), natively async; :meth:`OpenAICompatibleClient.chat_sync`
runs the same code through :func:`kolm_search._bridge.run_sync` (a loop of its own; a closing
loop never waits for a name lookup that the deadline gave up on).

What the client guarantees:

- **Credentials stay with their origin.** Redirects are not followed, except a ``307``/``308``
  to the same scheme, host and port (at most 5 hops); any other redirect is an
  :class:`LLMRequestError` naming the location, so the ``Authorization`` header and the
  ``extra_headers`` never reach another host. The api key never appears in an error message,
  a ``repr`` or a log line (user:password in ``base_url`` is sent as basic auth, never logged).
- **A total deadline per attempt.** ``timeout`` bounds the whole attempt (connect, send,
  headers, body, same-origin redirects), not each read: a server dripping a byte every half
  second fails at ``timeout``.
- **Bounded replies.** A ``Content-Length`` above ``max_response_bytes`` fails before the body
  is read; a longer streamed body is cut at the cap (decoded bytes, so a gzip bomb is bounded too).
- **Bounded waits.** Retries (``max_retries``) after a 429, a 5xx, a timeout or a connection
  that broke mid-reply, with exponential backoff; a ``Retry-After`` (seconds or HTTP date) is
  honoured up to ``max_retry_after`` seconds; a longer one fails at once, without waiting.
- **One error type.** Every failure (status, refused or reset connection, TLS, timeout, a body
  shorter than its ``Content-Length``, invalid JSON, a reply of the wrong shape) is an
  :class:`LLMRequestError` naming the URL (without its user info or query).

In a pipeline a failing synthesizer surfaces as ``SearchError(stage="synthesizer")`` and a
failing expander makes :class:`~kolm_search.contract.planners.ExpandingQueryPlanner` fall back to the
primary query.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kolm_search._bridge import off_loop, run_sync
from kolm_search._extras import require
from kolm_search._http import RetryPolicy, parse_retry_after
from kolm_search._params import mapping, non_negative_int, positive_int, real, seconds
from kolm_search.compose.params import merged_params
from kolm_search.errors import KolmTypeError, KolmValueError, LLMRequestError
from kolm_search.types import SearchPipelineContext

__all__ = ["ChatModelParams", "ChatReply", "LLMRequestError", "OpenAICompatibleClient", "OpenAICompatibleExpander",
           "OpenAICompatibleSynthesizer"]

_MAX_HOPS = 5


@dataclass(frozen=True)
class _Reply:
    """What one attempt got: a status and body, or (``status == -1``) a transport failure worth a retry."""

    status: int
    shown: str
    body: bytes = b""
    retry_after: float | None = None
    broken: str = ""
    timed_out: bool = False


@dataclass(frozen=True)
class ChatReply:
    """The first choice of a chat completion.

    Attributes
    ----------
    content : str
        The message text.
    logprobs : list of dict, optional
        ``choices[0].logprobs.content`` when the server returned log-probabilities (asked with
        ``logprobs=True, top_logprobs=k``): one ``{"token", "logprob", "top_logprobs"}`` per
        generated token, as OpenAI and vLLM send them; ``None`` otherwise.
    """

    content: str
    logprobs: list[dict[str, Any]] | None = None


def _origin(url: Any) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


def _header_value(name: str, value: object) -> str:
    """``value`` stripped; a clear error (the value not shown: it may be a secret) unless it is
    printable ASCII that can go in an HTTP header."""
    if not isinstance(value, str):
        raise KolmTypeError(f"{name} must be a str, got {type(value).__name__}")
    text = value.strip()
    if not text or not all(32 <= ord(c) < 127 for c in text):
        raise KolmValueError(f"{name} must be non-empty printable ASCII without line breaks (value not shown)")
    return text


class OpenAICompatibleClient:
    """Minimal chat-completions client (see the module docstring for its guarantees).

    Parameters
    ----------
    base_url : str
        E.g. ``"https://api.openai.com/v1"`` or ``"http://127.0.0.1:8000/v1"`` (http or https).
    model : str
    api_key : str, optional
        Sent as ``Authorization: Bearer ...``, only to ``base_url``'s origin.
    timeout : float, default 30
        Seconds for a whole attempt (connect, request, reply), not per read.
    max_retries : int, default 3
        Extra attempts after a 429, a 5xx, a timeout or a connection broken mid-reply.
    backoff : float, default 0.5
        First wait in seconds, doubled each retry.
    extra_headers : mapping, optional
        Sent with every request (same origin only, like the key); values never shown in ``repr``.
    max_retry_after : float, default 30
        Longest ``Retry-After`` honoured, in seconds; a server asking for more fails at once.
    max_response_bytes : int, default 16 MiB
        Largest reply body read (after content decoding).
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 30.0,
                 max_retries: int = 3, backoff: float = 0.5, extra_headers: Mapping[str, str] | None = None,
                 max_retry_after: float = 30.0, max_response_bytes: int = 16 << 20) -> None:
        parts = urllib.parse.urlsplit(str(base_url).strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise KolmValueError(f"base_url must be an http(s) URL with a host, got {self._clean(base_url)!r}")
        self._auth = (urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")) \
            if parts.username or parts.password else None
        netloc = parts.netloc.rpartition("@")[2]
        self.url = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/chat/completions",
                                            parts.query, ""))
        self.model = model
        self.api_key = _header_value("api_key", api_key) if api_key else api_key
        self.timeout: float = seconds("timeout", timeout, none=False)
        #: When to try again (429, 5xx, a timeout, a connection broken mid-reply) and how long to
        #: wait: the policy downloads share (:class:`kolm_search._http.RetryPolicy`).
        self.retry = RetryPolicy(non_negative_int("max_retries", max_retries), real("backoff", backoff, low=0.0),
                                 real("max_retry_after", max_retry_after, low=0.0))
        self.max_response_bytes: int = positive_int("max_response_bytes", max_response_bytes)
        self.extra_headers = {_header_value("extra_headers key", k): _header_value(f"extra_headers[{k!r}]", v)
                              for k, v in (extra_headers or {}).items()}
        self._ssl_context: Any = None
        self._pools: dict[asyncio.AbstractEventLoop, list[Any]] = {}  # loop -> [AsyncClient, requests in flight]

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else "'***'"
        return (f"{type(self).__name__}(url={self._clean(self.url)!r}, model={self.model!r}, api_key={key}, "
                f"timeout={self.timeout:g}, max_retries={self.retry.max_retries}, extra_headers={sorted(self.extra_headers)})")

    @property
    def endpoint(self) -> str:
        """The chat-completions URL without user info or query (safe to show or record)."""
        return self._clean(self.url)

    @staticmethod
    def _clean(url: object) -> str:
        """``url`` without user info, query or fragment (safe to show)."""
        try:
            parts = urllib.parse.urlsplit(str(url))
            return urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))
        except ValueError:
            return "<invalid URL>"

    def _redact(self, text: str) -> str:
        for secret in (self.api_key, *(self._auth or ())):
            if secret:
                text = text.replace(secret, "***")
        return text

    def _error(self, message: str, *, timed_out: bool = False) -> LLMRequestError:
        return LLMRequestError(self._redact(message), timed_out=timed_out)

    def chat_sync(self, messages: list[dict[str, str]], **params: Any) -> str:
        """Send ``messages``; return the first choice's content (blocking)."""
        return run_sync(self.chat(messages, **params))

    async def chat(self, messages: list[dict[str, str]], **params: Any) -> str:
        """Send ``messages``; return the first choice's content.

        Raises
        ------
        LLMRequestError
            Any failure, after the retries described in the module docstring.
        """
        return (await self.complete(messages, **params)).content

    async def complete(self, messages: list[dict[str, str]], **params: Any) -> ChatReply:
        """Send ``messages``; return the first choice (content, and log-probabilities when the
        server sent them). Fails as :meth:`chat` does."""
        httpx = require("httpx", "llm")
        try:
            body = json.dumps({"model": self.model, "messages": messages, **params}).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise self._error(f"request to {self._clean(self.url)} is not JSON-serialisable: {exc}") from None
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self.extra_headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        loop = asyncio.get_running_loop()
        entry = await self._acquire(httpx, loop)
        try:
            return await self._complete(httpx, entry[0], body, headers)
        finally:
            entry[1] -= 1
            if entry[1] == 0:  # the last request in flight on this loop closes the pool
                if self._pools.get(loop) is entry:
                    del self._pools[loop]
                await entry[0].aclose()

    async def _acquire(self, httpx: Any, loop: asyncio.AbstractEventLoop) -> list[Any]:
        """``[httpx.AsyncClient, requests using it]`` for ``loop``: concurrent requests share one
        connection pool (keep-alive); it is closed when the last of them ends."""
        if self._ssl_context is None:  # built once, off the loop: loading the CA bundle takes ~0.1 s
            self._ssl_context = await off_loop(httpx.create_ssl_context)
        entry = self._pools.get(loop)
        if entry is None:
            auth = None if self.api_key else self._auth  # the api key wins over user:password in base_url
            http = httpx.AsyncClient(follow_redirects=False, auth=auth, timeout=self.timeout, verify=self._ssl_context,
                                     limits=httpx.Limits(max_connections=None, max_keepalive_connections=32))
            entry = self._pools[loop] = [http, 0]
        entry[1] += 1
        return entry

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ssl_context"], state["_pools"] = None, {}  # neither pickles; both are made again on use
        return state

    async def _complete(self, httpx: Any, http: Any, body: bytes, headers: dict[str, str]) -> ChatReply:
        """The attempts of one request on ``http`` (retries, deadlines, errors: the module docstring)."""
        for attempt in range(self.retry.max_retries + 1):
            try:
                async with asyncio.timeout(self.timeout):
                    reply = await self._attempt(httpx, http, body, headers)
            except TimeoutError:
                shown = self._clean(self.url)
                reply = _Reply(-1, shown, broken=f"timed out: no complete reply from {shown} within {self.timeout:g}s",
                               timed_out=True)
            status = reply.status
            if status == 200:
                return self._choice(reply.body, reply.shown)
            last = reply.broken or f"HTTP {status} from {reply.shown}: {reply.body[:200].decode('utf-8', 'replace')}"
            if not (status == -1 or self.retry.retryable(status)) or attempt == self.retry.max_retries:
                break
            wait = self.retry.wait(attempt, reply.retry_after)
            if wait is None:
                raise self._error(f"{last}; the server asks to retry after {reply.retry_after:g}s, more "
                                  f"than max_retry_after={self.retry.max_retry_after:g}s: not waiting")
            await asyncio.sleep(wait)
        raise self._error(f"chat completion failed after {attempt + 1} attempt(s): {last}", timed_out=reply.timed_out)

    #: The coroutine :meth:`chat` under the explicit name (see "Sync and async twins" in the README).
    chat_async = chat

    async def _attempt(self, httpx: Any, http: Any, body: bytes,
                       headers: dict[str, str]) -> _Reply:
        """One attempt: POST, following same-origin 307/308 only; a failure not worth a retry
        raises :class:`LLMRequestError`."""
        url = httpx.URL(self.url)
        for _hop in range(_MAX_HOPS + 1):
            shown = self._clean(url)
            try:
                async with http.stream("POST", url, content=body, headers=headers) as resp:
                    status = resp.status_code
                    if resp.has_redirect_location:
                        target = url.join(resp.headers["location"])
                        if status in (307, 308) and _origin(target) == _origin(url):
                            url = target
                            continue
                        raise self._error(f"{shown} answered HTTP {status} redirecting to {self._clean(target)}; "
                                          "not followed (only 307/308 to the same origin are, so credentials "
                                          "never leave it): set base_url to the final address")
                    raw = await self._read(resp, shown)
                    return _Reply(status, shown, raw, parse_retry_after(resp.headers.get("retry-after")))
            except LLMRequestError:
                raise
            except httpx.TimeoutException as exc:
                return _Reply(-1, shown, broken=f"timed out after {self.timeout:g}s talking to {shown} "
                                                f"({type(exc).__name__})", timed_out=True)
            except (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                raise self._error(f"cannot reach {shown}: {type(exc).__name__}: {exc}") from exc
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
                return _Reply(-1, shown, broken=f"connection to {shown} broke: {type(exc).__name__}: {exc}")
            except (httpx.HTTPError, httpx.StreamError, OSError, ValueError) as exc:
                raise self._error(f"request to {shown} failed: {type(exc).__name__}: {exc}") from exc
        raise self._error(f"more than {_MAX_HOPS} redirects from {self._clean(self.url)}")

    async def _read(self, resp: Any, shown: str) -> bytes:
        """The reply body, at most ``max_response_bytes`` (checked on the header, then while reading)."""
        cap = self.max_response_bytes
        length = resp.headers.get("content-length", "").strip()
        if length.isdigit() and int(length) > cap:
            raise self._error(f"reply from {shown} announces {int(length)} bytes, more than "
                              f"max_response_bytes={cap}")
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise self._error(f"reply from {shown} is longer than max_response_bytes={cap}")
            chunks.append(chunk)
        return b"".join(chunks)

    def _choice(self, raw: bytes, shown: str) -> ChatReply:
        try:
            choice = json.loads(raw)["choices"][0]
            content = choice["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
            raise self._error(f"malformed reply from {shown} ({type(exc).__name__}): {raw[:200]!r}") from None
        if not isinstance(content, str):
            raise self._error(f"malformed reply from {shown}: content is {type(content).__name__}, not str")
        found = choice.get("logprobs") if isinstance(choice, dict) else None
        tokens = found.get("content") if isinstance(found, dict) else None
        logprobs = [t for t in tokens if isinstance(t, dict)] if isinstance(tokens, list) else None
        return ChatReply(content, logprobs or None)


class ChatModelParams:
    """``apply_params`` of a reranker built as ``cls(client, score_cache=..., **stage_params,
    **params)`` (the LLM rerankers): the changed parameters checked by building a new one
    (on error nothing changes), then the constructor run again; the client, the score cache
    and ``counts`` are kept."""

    client: OpenAICompatibleClient
    score_cache: Any
    counts: Counter[str]

    def apply_params(self, changes: dict[str, Any]) -> None:
        merged = merged_params(self, changes, fixed="the client")  # type: ignore[arg-type]
        extra = mapping("params", merged.pop("params"))
        type(self)(self.client, score_cache=self.score_cache, **merged, **extra)  # type: ignore[call-arg]
        counts = self.counts
        self.__init__(self.client, score_cache=self.score_cache, **merged, **extra)  # type: ignore[misc]
        self.counts = counts


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
        self.max_chars = positive_int("max_chars", max_chars)
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
        self.n = positive_int("n", n)
        self.params = params

    async def expand(self, query: str) -> list[str]:
        prompt = (f"Write {self.n} alternative search queries for: {query}\n"
                  "One per line, no numbering, no commentary.")
        text = await self.client.chat([{"role": "user", "content": prompt}], **self.params)
        lines = [re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip().strip('"') for line in text.splitlines()]
        return [line for line in lines if line][: self.n]
