"""The LLM client against hostile HTTP servers on 127.0.0.1: redirects that would leak the key,
drips, resets, lying lengths, huge bodies, long Retry-After, garbage replies, TLS mismatch.

The servers are raw sockets (one thread per connection), so they can misbehave at any byte.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("httpx", reason="extra 'llm' not installed")

from kolm_search.adapters import OpenAICompatibleClient
from kolm_search.errors import KolmValueError, LLMRequestError
from tests.reliability._servers import Handler, RawServer, Request, ok, reply, reset

KEY = "sk-SECRET-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture()
def servers() -> Iterator[Callable[[Handler], RawServer]]:
    made: list[RawServer] = []

    def make(handler: Handler) -> RawServer:
        made.append(RawServer(handler))
        return made[-1]

    yield make
    for server in made:
        server.close()


def client(base: str, **kw: object) -> OpenAICompatibleClient:
    kw = {"backoff": 0.01, "timeout": 2.0, **kw}
    return OpenAICompatibleClient(base + "/v1", "m", api_key=KEY, **kw)  # type: ignore[arg-type]


def fails(c: OpenAICompatibleClient, match: str | None = None) -> LLMRequestError:
    with pytest.raises(LLMRequestError, match=match) as info:
        c.chat_sync(MESSAGES)
    exc = info.value
    assert KEY not in str(exc) and KEY not in repr(exc) and KEY not in repr(c)
    assert "127.0.0.1" in str(exc) or "localhost" in str(exc), str(exc)  # names the URL
    return exc


# ---------------------------------------------------------------- redirects and secrets
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", ["other-port", "other-host", "other-scheme", "userinfo"])
def test_redirect_to_another_origin_never_gets_the_key(servers, status: int, where: str) -> None:  # type: ignore[no-untyped-def]
    other = servers(lambda conn, req: conn.sendall(ok("stolen")))
    first = servers(lambda conn, req: None)
    location = {
        "other-port": f"{other.url()}/steal",
        "other-host": f"http://localhost:{first.port}/v1/chat/completions",  # same port, another host
        "other-scheme": f"https://127.0.0.1:{first.port}/v1/chat/completions",
        "userinfo": f"http://evil@127.0.0.1:{other.port}/steal",
    }[where]
    first.handler = lambda conn, req: conn.sendall(reply(status, b"", {"Location": location}))
    exc = fails(client(first.url(), extra_headers={"X-Api-Key": KEY}), f"HTTP {status} redirecting to")
    assert urllib.parse.urlsplit(location).hostname in str(exc)  # names where it was sent
    assert str(urllib.parse.urlsplit(location).port) in str(exc)
    assert len(first.requests) == 1 and first.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert other.requests == []  # the other origin never saw a request, let alone the key


@pytest.fixture(scope="module")
def redirecting() -> Iterator[tuple[RawServer, RawServer, list[tuple[int, str]]]]:
    """``first`` answers every request with ``redirect[0]``; ``other`` is another origin."""
    redirect: list[tuple[int, str]] = [(307, "/")]
    other = RawServer(lambda conn, req: conn.sendall(ok("stolen")))
    first = RawServer(lambda conn, req: conn.sendall(reply(redirect[0][0], b"", {"Location": redirect[0][1]})))
    yield first, other, redirect
    first.close()
    other.close()


header_text = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=20)


@settings(max_examples=40, deadline=None)
@given(status=st.sampled_from([301, 302, 303, 307, 308]),
       prefix=st.sampled_from(["", "/", "//", "http://", "https://", "http://127.0.0.1:{other}/",
                               "http://localhost:{first}/", "http://x@127.0.0.1:{first}", "HTTP://127.0.0.1:{first}/",
                               "http://127.0.0.1:{first}/", "http://[::1", "../../"]),
       rest=header_text)
def test_any_location_is_refused_or_same_origin(redirecting, status: int, prefix: str, rest: str) -> None:  # type: ignore[no-untyped-def]
    """Whatever the Location, the request goes to the configured origin only; the outcome is an
    LLMRequestError (the redirect is refused, or same-origin hops run out) and no other server is hit."""
    first, other, redirect = redirecting
    redirect[0] = (status, prefix.format(first=first.port, other=other.port) + rest)
    first.requests.clear()
    fails(client(first.url(), max_retries=0))
    assert other.requests == [] and 1 <= len(first.requests) <= 6


def test_same_origin_307_308_followed_others_refused(servers) -> None:  # type: ignore[no-untyped-def]
    def handler(conn: socket.socket, req: Request) -> None:
        if req.path == "/v1/chat/completions":
            conn.sendall(reply(307, b"", {"Location": "/v2/chat"}))
        elif req.path == "/v2/chat":
            conn.sendall(reply(308, b"", {"Location": f"http://127.0.0.1:{server.port}/v3/chat"}))
        elif req.path == "/v3/chat":
            conn.sendall(ok("moved"))
        elif req.path == "/loop/chat/completions":
            conn.sendall(reply(307, b"", {"Location": "/loop/chat/completions"}))
        else:
            conn.sendall(reply(302, b"", {"Location": "/v3/chat"}))

    server = servers(handler)
    assert client(server.url()).chat_sync(MESSAGES) == "moved"
    assert [r.path for r in server.requests] == ["/v1/chat/completions", "/v2/chat", "/v3/chat"]
    assert all(r.method == "POST" and json.loads(r.body)["messages"] == MESSAGES for r in server.requests)
    server.requests.clear()
    fails(OpenAICompatibleClient(server.url() + "/x", "m", api_key=KEY), "HTTP 302 redirecting to")
    t0 = time.monotonic()
    fails(OpenAICompatibleClient(server.url() + "/loop", "m", api_key=KEY), "more than 5 redirects")
    assert time.monotonic() - t0 < 3 and len(server.requests) == 1 + 6


def test_key_never_in_messages_repr_or_logs(servers, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """The server echoes every header back in a 400; userinfo in base_url is basic auth, never shown.
    (A key put in the URL's query is the caller's choice: httpx logs URLs at INFO.)"""
    server = servers(lambda conn, req: conn.sendall(reply(400, json.dumps(req.headers))))
    caplog.set_level(logging.DEBUG)
    base = f"http://user:{KEY}@127.0.0.1:{server.port}"
    c = OpenAICompatibleClient(base + "/v1?mode=x", "m", api_key=KEY)
    exc = fails(c, "HTTP 400")
    assert "***" in str(exc)  # the echoed key was there, and is redacted
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    c2 = OpenAICompatibleClient(base + "/v1", "m")
    fails(c2, "HTTP 400")
    assert server.requests[1].headers["authorization"].startswith("Basic ")
    assert KEY not in repr(c2) and caplog.records
    assert not [r for r in caplog.records if KEY in r.getMessage()]


# ---------------------------------------------------------------- deadlines
def drip(part: str) -> Handler:
    def handler(conn: socket.socket, req: Request) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"
        data = head + b"x" * 100000 if part == "body" else head
        start = len(head) if part == "body" else 5
        conn.sendall(data[:start])
        for i in range(start, min(len(data), start + 50)):  # 5 s of drip, then close
            time.sleep(0.1)
            conn.sendall(data[i:i + 1])

    return handler


@pytest.mark.parametrize("part", ["body", "headers"])
def test_drip_fails_at_the_total_deadline(servers, part: str) -> None:  # type: ignore[no-untyped-def]
    server = servers(drip(part))
    t0 = time.monotonic()
    exc = fails(client(server.url(), timeout=1.0, max_retries=1), "after 2 attempt.*timed out")
    elapsed = time.monotonic() - t0
    assert 1.9 <= elapsed < 3.5, elapsed  # two attempts of 1 s each, not one per byte
    assert "within 1s" in str(exc)


async def test_async_chat_has_the_same_deadline(servers) -> None:  # type: ignore[no-untyped-def]
    server = servers(drip("body"))
    t0 = time.monotonic()
    with pytest.raises(LLMRequestError, match="timed out"):
        await client(server.url(), timeout=0.5, max_retries=0).chat(MESSAGES)
    assert time.monotonic() - t0 < 2.5  # the drip lasts 5 s
    # chat_sync called from inside a running loop runs on its own thread, same deadline
    asyncio.get_running_loop()
    t0 = time.monotonic()
    with pytest.raises(LLMRequestError, match="timed out"):
        client(server.url(), timeout=0.3, max_retries=0).chat_sync(MESSAGES)
    assert time.monotonic() - t0 < 2.5


def test_hung_name_lookup_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A resolver that hangs: the attempt ends at its deadline and chat_sync returns then,
    without waiting for the lookup thread."""
    real = socket.getaddrinfo

    def slow(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host in ("hang.invalid", b"hang.invalid"):
            time.sleep(3)
            raise socket.gaierror("gave up")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    t0 = time.monotonic()
    with pytest.raises(LLMRequestError, match="timed out.*hang.invalid"):
        OpenAICompatibleClient("http://hang.invalid:8000/v1", "m", api_key=KEY, max_retries=0,
                               timeout=0.5).chat_sync(MESSAGES)
    assert time.monotonic() - t0 < 2.5  # the lookup hangs 3 s


def test_retry_after_over_the_cap_fails_fast(servers) -> None:  # type: ignore[no-untyped-def]
    server = servers(lambda conn, req: conn.sendall(reply(429, "slow down", {"Retry-After": "3600"})))
    t0 = time.monotonic()
    exc = fails(client(server.url(), max_retry_after=1.0), "retry after 3600s.*max_retry_after=1s")
    assert time.monotonic() - t0 < 2.5 and len(server.requests) == 1  # did not wait, did not retry
    assert "HTTP 429" in str(exc)


@pytest.mark.parametrize("value, low, high", [("0.3", 0.3, 3.0), ("junk", 0.0, 2.5), ("-5", 0.0, 2.5),
                                              ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0, 2.5)])
def test_retry_after_honoured_within_the_cap(servers, value: str, low: float, high: float) -> None:  # type: ignore[no-untyped-def]
    answers = iter([reply(503, "busy", {"Retry-After": value}), ok("later")])
    server = servers(lambda conn, req: conn.sendall(next(answers)))
    t0 = time.monotonic()
    assert client(server.url()).chat_sync(MESSAGES) == "later"
    assert low <= time.monotonic() - t0 < high and len(server.requests) == 2


def test_retry_after_http_date_in_the_future_is_capped(servers) -> None:  # type: ignore[no-untyped-def]
    import email.utils

    when = email.utils.formatdate(time.time() + 7200, usegmt=True)
    server = servers(lambda conn, req: conn.sendall(reply(503, "", {"Retry-After": when})))
    fails(client(server.url(), max_retry_after=5), "retry after 7[12]\\d\\d")
    assert len(server.requests) == 1


@pytest.mark.parametrize("statuses, attempts, outcome", [
    ([503, 429, 200], 3, "ok"), ([500, 502, 504, 500], 4, "HTTP 500"), ([404], 1, "HTTP 404"),
    ([500, 401], 2, "after 2 attempt.*HTTP 401"),
])
def test_status_retries(servers, statuses: list[int], attempts: int, outcome: str) -> None:  # type: ignore[no-untyped-def]
    answers = iter(ok("ok") if s == 200 else reply(s, {"error": s}) for s in statuses)
    server = servers(lambda conn, req: conn.sendall(next(answers)))
    c = client(server.url(), max_retries=3)
    if outcome == "ok":
        assert c.chat_sync(MESSAGES) == "ok"
    else:
        fails(c, outcome)
    assert len(server.requests) == attempts


# ---------------------------------------------------------------- broken transports
def test_reset_and_lying_length_are_llm_errors_and_retried(servers) -> None:  # type: ignore[no-untyped-def]
    full = ok("complete answer")

    def cut(conn: socket.socket, req: Request) -> None:
        conn.sendall(full[: len(full) - 5])
        if len(server.requests) % 2:
            reset(conn)

    server = servers(cut)
    fails(client(server.url(), max_retries=3), "after 4 attempt.*broke")
    assert len(server.requests) == 4


@pytest.fixture(scope="module")
def scripted() -> Iterator[tuple[RawServer, list[Handler], OpenAICompatibleClient]]:
    """One server for the hypothesis examples: it runs ``handlers[0]``; one client, no retries."""
    handlers: list[Handler] = [lambda conn, req: None]
    server = RawServer(lambda conn, req: handlers[0](conn, req))
    yield server, handlers, client(server.url(), max_retries=0, timeout=2.0)
    server.close()


@settings(max_examples=40, deadline=None)
@given(position=st.integers(0, len(ok("a full reply of some length")) - 1), rst=st.booleans(),
       chunked=st.booleans())
def test_any_cut_is_an_llm_error(scripted, position: int, rst: bool, chunked: bool) -> None:  # type: ignore[no-untyped-def]
    server, handlers, c = scripted
    payload = json.dumps({"choices": [{"message": {"content": "a full reply of some length"}}]}).encode()
    full = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(payload) + payload
            + b"\r\n0\r\n\r\n") if chunked else ok("a full reply of some length")
    position = min(position, len(full) - 1)

    def handler(conn: socket.socket, req: Request) -> None:
        conn.sendall(full[:position])
        if rst:
            reset(conn)

    handlers[0] = handler
    server.requests.clear()
    fails(c)
    assert len(server.requests) == 1


def test_refused_and_tls_to_plain_http(servers) -> None:  # type: ignore[no-untyped-def]
    fails(OpenAICompatibleClient("http://127.0.0.1:9/v1", "m", api_key=KEY, max_retries=0), "cannot reach")
    server = servers(lambda conn, req: conn.sendall(ok()))
    raw = socket.create_server(("127.0.0.1", 0))  # accepts, never answers the TLS hello
    try:
        for base in (f"https://127.0.0.1:{server.port}", f"https://127.0.0.1:{raw.getsockname()[1]}"):
            t0 = time.monotonic()
            with pytest.raises(LLMRequestError) as info:
                OpenAICompatibleClient(base + "/v1", "m", api_key=KEY, max_retries=0, timeout=1).chat_sync(MESSAGES)
            assert KEY not in str(info.value) and time.monotonic() - t0 < 2.5
    finally:
        raw.close()
    with pytest.raises(KolmValueError, match="base_url"):
        OpenAICompatibleClient("ftp://127.0.0.1/v1", "m")


# ---------------------------------------------------------------- sizes
def test_huge_bodies_stop_at_the_cap(servers) -> None:  # type: ignore[no-untyped-def]
    cap = 1 << 20
    big = json.dumps({"choices": [{"message": {"content": "x" * (2 * cap)}}]}).encode()

    def announce(conn: socket.socket, req: Request) -> None:  # a 10 GB Content-Length, then nothing
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
        time.sleep(3)

    t0 = time.monotonic()
    fails(client(servers(announce).url(), max_response_bytes=cap, timeout=5), "announces 10000000000 bytes")
    assert time.monotonic() - t0 < 2.5  # failed on the header, did not wait 3 s for the body

    def stream(conn: socket.socket, req: Request) -> None:  # no length: read until close
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + big)

    fails(client(servers(stream).url(), max_response_bytes=cap), "longer than max_response_bytes=1048576")
    bomb = gzip.compress(big * 4)
    assert len(bomb) < cap // 10

    def gz(conn: socket.socket, req: Request) -> None:
        conn.sendall(reply(200, bomb, {"Content-Encoding": "gzip"}))

    fails(client(servers(gz).url(), max_response_bytes=cap), "longer than max_response_bytes")
    small = servers(lambda conn, req: conn.sendall(ok("y" * 1000)))
    assert client(small.url(), max_response_bytes=cap).chat_sync(MESSAGES) == "y" * 1000


# ---------------------------------------------------------------- garbage replies
def expected(value: object) -> str | None:
    """Oracle: the content the client must return for a 200 JSON body, else None (error)."""
    try:
        content = value["choices"][0]["message"]["content"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["choices", "message", "content", "x"]),
                                                                 inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(value=json_values | st.builds(lambda t: {"choices": [{"message": {"content": t}}]}, json_values),
       junk=st.one_of(st.none(), st.binary(max_size=30), st.just(b"[" * 100000)))
def test_any_200_body_is_content_or_llm_error(scripted, value: object, junk: bytes | None) -> None:  # type: ignore[no-untyped-def]
    server, handlers, c = scripted
    body = json.dumps(value).encode() if junk is None else junk
    handlers[0] = lambda conn, req: conn.sendall(reply(200, body))
    want = expected(value)
    if junk is not None:
        try:  # random bytes may happen to be a valid reply
            want = expected(json.loads(junk))
        except (ValueError, RecursionError):
            want = None
    if want is None:
        fails(c, "malformed reply")
    else:
        assert c.chat_sync(MESSAGES) == want


def test_one_retry_policy_for_llm_calls_and_downloads() -> None:
    from kolm_search._http import RetryPolicy, parse_retry_after

    policy = RetryPolicy(max_retries=3, backoff=0.5, max_retry_after=30)
    assert [policy.wait(a) for a in range(4)] == [0.5, 1.0, 2.0, None]  # doubling, then no retry left
    assert policy.wait(0, retry_after=7.0) == 7.0 and policy.wait(2, retry_after=0.1) == 2.0
    assert policy.wait(0, retry_after=31.0) is None  # longer than max_retry_after: not worth waiting
    assert [s for s in (200, 404, 429, 500, 503) if policy.retryable(s)] == [429, 500, 503]
    assert parse_retry_after("12") == 12.0 and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    assert client("http://127.0.0.1:9", max_retries=1, backoff=0.25).retry == RetryPolicy(1, 0.25, 30.0)
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)
