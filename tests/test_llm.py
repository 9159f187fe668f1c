"""OpenAI-compatible adapters against a fake chat-completions server on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("httpx", reason="extra 'llm' not installed")

from kolm_search import DefaultQueryPlanner, ExpandingQueryPlanner, SearchClient, SearchError
from kolm_search.adapters import (
    LLMRequestError,
    OpenAICompatibleClient,
    OpenAICompatibleExpander,
    OpenAICompatibleSynthesizer,
)
from kolm_search.errors import KolmValueError
from tests.fakes import ListLogger, ListRetriever


class Script:
    """Replies the server gives, in order; the last one repeats."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, object, dict[str, str], float]] = []
        self.requests: list[dict] = []

    def next(self) -> tuple[int, object, dict[str, str], float]:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def ok(text: str) -> tuple[int, object, dict[str, str], float]:
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}, {}, 0.0


@pytest.fixture()
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            status, reply, headers, delay = script.next()
            time.sleep(delay)
            data = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            try:
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", script
    httpd.shutdown()
    httpd.server_close()


def client(base: str, **kw: object) -> OpenAICompatibleClient:
    return OpenAICompatibleClient(base, "test-model", api_key="sk-test", backoff=0.01, **kw)  # type: ignore[arg-type]


def test_success_request_shape(server) -> None:  # type: ignore[no-untyped-def]
    base, script = server
    script.replies = [ok("hello")]
    assert client(base).chat_sync([{"role": "user", "content": "hi"}], temperature=0) == "hello"
    req = script.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test"
    assert req["body"] == {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_retries_5xx_and_429_then_succeeds(server) -> None:  # type: ignore[no-untyped-def]
    base, script = server
    script.replies = [(500, {"error": "x"}, {}, 0.0), (429, {"error": "slow down"}, {"Retry-After": "0.05"}, 0.0), ok("fine")]
    t0 = time.perf_counter()
    assert client(base).chat_sync([{"role": "user", "content": "q"}]) == "fine"
    assert len(script.requests) == 3 and time.perf_counter() - t0 >= 0.05


@pytest.mark.parametrize(
    "reply, match, attempts",
    [
        ((500, {"error": "down"}, {}, 0.0), "after 3 attempt.*HTTP 500", 3),
        ((400, {"error": "bad request"}, {}, 0.0), "after 1 attempt.*HTTP 400", 1),
        ((200, b"{not json", {}, 0.0), "malformed reply", 1),
        ((200, {"choices": []}, {}, 0.0), "malformed reply", 1),
        ((200, {"choices": [{"message": {"content": 5}}]}, {}, 0.0), "malformed", 1),
        ((200, {"choices": []}, {}, 1.0), "timed out", 3),
    ],
)
def test_failures(server, reply, match: str, attempts: int) -> None:  # type: ignore[no-untyped-def]
    base, script = server
    script.replies = [reply]
    with pytest.raises(LLMRequestError, match=match):
        client(base, max_retries=2, timeout=0.3).chat_sync([{"role": "user", "content": "q"}])
    assert len(script.requests) == attempts


def test_unreachable() -> None:
    with pytest.raises(LLMRequestError, match="cannot reach"):
        OpenAICompatibleClient("http://127.0.0.1:9/v1", "m", max_retries=0).chat_sync([])


async def test_synthesizer_in_pipeline(server) -> None:  # type: ignore[no-untyped-def]
    base, script = server
    script.replies = [ok("  The answer [1].  ")]
    synth = OpenAICompatibleSynthesizer(client(base), max_chars=20)
    c = SearchClient({"planner": DefaultQueryPlanner(), "retriever": ListRetriever(), "synthesizer": synth})
    resp = await c.search({"query": "what is 3", "limit": 2})
    assert resp.answer == "The answer [1]."
    prompt = script.requests[0]["body"]["messages"][1]["content"]
    assert "[1] document number 0" in prompt and "[2] document number 1" in prompt and "Question: what is 3" in prompt
    script.replies = [(503, {}, {}, 0.0)]
    with pytest.raises(SearchError) as info:
        await c.search({"query": "again", "limit": 2})
    assert info.value.stage == "synthesizer" and isinstance(info.value.cause, LLMRequestError)


async def test_expander_and_graceful_degradation(server) -> None:  # type: ignore[no-untyped-def]
    base, script = server
    script.replies = [ok("1. kolm search setup\n- install kolm\n\n\"configure kolm\"\nextra line")]
    planner = ExpandingQueryPlanner(OpenAICompatibleExpander(client(base), n=3))
    c = SearchClient({"planner": planner, "retriever": ListRetriever()})
    resp = await c.search({"query": "Install kolm-search"})
    assert resp.plan.expanded_queries == ["install kolm-search", "kolm search setup", "install kolm", "configure kolm"]
    script.replies = [(500, {}, {}, 0.0)]
    logger = ListLogger()
    degraded = SearchClient({"planner": ExpandingQueryPlanner(OpenAICompatibleExpander(client(base, max_retries=1)), logger=logger),
                             "retriever": ListRetriever()})
    resp = await degraded.search({"query": "x"})
    assert resp.plan.expanded_queries == ["x"] and logger.warnings()


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "httpx", None)  # import httpx now raises ImportError
    with pytest.raises(ImportError, match=r"kolm-search\[llm\]"):
        OpenAICompatibleClient("http://127.0.0.1:9/v1", "m").chat_sync([])


@pytest.mark.parametrize("kwargs, match", [
    ({"base_url": "127.0.0.1:8000/v1"}, "base_url"), ({"base_url": "file:///etc/passwd"}, "base_url"),
    ({"timeout": 0}, "timeout"), ({"timeout": float("nan")}, "timeout"), ({"max_retries": -1}, "max_retries"),
    ({"max_retry_after": -1}, "max_retry_after"), ({"max_response_bytes": 0}, "max_response_bytes"),
])
def test_bad_options_are_clear_errors(kwargs: dict, match: str) -> None:
    args = {"base_url": "http://127.0.0.1:8000/v1", "model": "m", **kwargs}
    with pytest.raises(KolmValueError, match=match):
        OpenAICompatibleClient(**args)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"api_key": "sk-hidden\r\nX-Evil: 1"}, KolmValueError, "api_key"), ({"api_key": "sk-hidden\u00e9"}, KolmValueError, "api_key"),
    ({"extra_headers": {"X-Key": "hid\nhidden"}}, KolmValueError, "X-Key"), ({"extra_headers": {"X-Key": 5}}, TypeError, "X-Key"),
])
def test_header_values_that_cannot_be_sent(kwargs: dict, error: type, match: str) -> None:
    """Refused at construction, the value never shown (a key with a trailing newline is stripped)."""
    with pytest.raises(error, match=match) as info:
        OpenAICompatibleClient("http://127.0.0.1:8000/v1", "m", **kwargs)
    assert "hidden" not in str(info.value)
    assert OpenAICompatibleClient("http://127.0.0.1:8000/v1", "m", api_key=" sk-x\n").api_key == "sk-x"


def test_repr_hides_the_key_and_header_values() -> None:
    c = OpenAICompatibleClient("http://u:pw-secret@127.0.0.1:8000/v1", "m", api_key="sk-hidden",
                               extra_headers={"X-Key": "hdr-secret"})
    shown = repr(c)
    assert "sk-hidden" not in shown and "pw-secret" not in shown and "hdr-secret" not in shown
    assert "127.0.0.1:8000/v1/chat/completions" in shown and "X-Key" in shown
    assert c.url == "http://127.0.0.1:8000/v1/chat/completions"  # user info is sent as basic auth instead
