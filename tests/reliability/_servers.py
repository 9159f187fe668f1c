"""Servers on 127.0.0.1 for the reliability tests: a raw-socket HTTP server that can misbehave
at any byte (drip, reset, lie about lengths), and a file server for downloads that can cut,
reset, slow down or omit ``Content-Length``."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import math
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Handler = Callable[[socket.socket, Request], None]


@dataclass
class RawServer:
    """A server on 127.0.0.1 answering each request with ``handler(conn, request)``."""

    handler: Handler
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            while len(body) < int(headers.get("content-length", 0)):
                body += conn.recv(65536)
            request = Request(method, path, headers, body)
            self.requests.append(request)
            self.handler(conn, request)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def reply(status: int, body: bytes | str | object, headers: dict[str, str] | None = None) -> bytes:
    data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
    head = {"Content-Length": str(len(data)), "Connection": "close", **(headers or {})}
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in head.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def ok(text: str = "hello") -> bytes:
    return reply(200, {"choices": [{"message": {"role": "assistant", "content": text}}]})


def reset(conn: socket.socket) -> None:
    """Close with RST instead of FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@dataclass
class Site:
    """What the server serves: ``files[path]``; ``cut[path] = (position, reset)`` stops early,
    ``slow`` seconds between 4 KiB chunks, ``no_length`` paths are sent without Content-Length;
    ``replies[path]`` is a queue of ``(status, headers)`` answered (empty body) before the file."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut: dict[str, tuple[int, bool]] = field(default_factory=dict)
    no_length: set[str] = field(default_factory=set)
    slow: float = 0.0
    hits: list[str] = field(default_factory=list)
    replies: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    base: str = ""

    def registry(self, path: str, body: bytes | None = None, md5: str | None = "auto") -> dict[str, dict[str, str]]:
        entry = {"url": self.base + path, "folder": "mini"}
        if md5 is not None:
            entry["md5"] = hashlib.md5(body if body is not None else self.files[path]).hexdigest() if md5 == "auto" else md5
        return {"mini": entry}


@contextlib.contextmanager
def serve() -> Iterator[Site]:
    state = Site()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits.append(self.path)
            if state.replies.get(self.path):
                status, headers = state.replies[self.path].pop(0)
                self.send_response(status)
                for key, value in {"Content-Length": "0", **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                return
            body = state.files.get(self.path)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            if self.path not in state.no_length:
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            position, rst = state.cut.get(self.path, (len(body), False))
            try:
                for start in range(0, position, 4096):
                    self.wfile.write(body[start:min(start + 4096, position)])
                    time.sleep(state.slow)
                if rst:
                    reset(self.connection)
                    self.connection.close()
            except OSError:
                pass
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def relevance(query: str, text: str) -> int:
    """The fake chat model's judgement: how many distinct query words the text contains."""
    return len(set(query.lower().split()) & set(text.lower().split()))


@dataclass
class ChatModel:
    """A deterministic chat-completions model behind a :class:`RawServer` (127.0.0.1 only).

    It reads the LLM rerankers' default prompts (kolm_search.adapters.prompts) and answers by
    :func:`relevance`: a grade ``min(3, relevance)``, yes/no (with log-probabilities of
    ``P(yes) = relevance / (relevance + 1)`` when asked for them and ``logprobs`` is on), or the
    window's passages ordered by (relevance desc, text). ``behaviour(kind, query, prompt)`` may return
    another answer for a request: ``"garbage"``, ``"empty"``, ``"slow"`` (sleeps ``slow``
    seconds first), ``"silent"`` (never answers), ``"bad_ids"`` (an id repeated, one unknown,
    one missing), or ``None`` for the right one. ``latency`` delays every answer; the most
    requests ever in flight at once is ``peak``.
    """

    behaviour: Callable[[str, str, str], str | None] = lambda kind, query, prompt: None
    latency: float = 0.0
    slow: float = 1.0
    logprobs: bool = True
    prompts: list[str] = field(default_factory=list)
    peak: int = 0
    _active: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def kind(prompt: str) -> str:
        return "listwise" if "passages, each with an identifier" in prompt else (
            "yes_no" if "Answer yes or no" in prompt else "grade")

    def answer(self, body: dict[str, object], kind: str, query: str, prompt: str) -> tuple[str, object]:
        if kind == "listwise":
            passages = [(int(i), t) for i, t in
                        (line[1:].split("] ", 1) for line in prompt.split("\n") if line.startswith("["))]
            order = sorted(passages, key=lambda p: (-relevance(query, p[1]), p[1]))
            return " > ".join(f"[{i}]" for i, _ in order), None
        document = prompt.split("Document: ", 1)[1].split("\n\n", 1)[0]
        r = relevance(query, document)
        if kind == "grade":
            return str(min(3, r)), None
        p = r / (r + 1.0)
        word = "yes" if p > 0.5 else "no"
        if not (self.logprobs and body.get("logprobs")):
            return word, None
        lp = {"yes": math.log(p) if p > 0 else -1e4, "no": math.log(1 - p) if p < 1 else -1e4}
        top = [{"token": w.capitalize() if i else w, "logprob": lp[w]} for i, w in enumerate(("yes", "no"))]
        return word, {"content": [{"token": word, "logprob": lp[word], "top_logprobs": top}]}

    def __call__(self, conn: socket.socket, request: Request) -> None:
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
        done = False

        def finished() -> None:  # before the reply goes out: once it has, the client may send the next request
            nonlocal done
            if not done:
                done = True
                with self._lock:
                    self._active -= 1

        try:
            body = json.loads(request.body)
            prompt = body["messages"][-1]["content"]
            self.prompts.append(prompt)
            kind = self.kind(prompt)
            query = prompt.split("Query: ", 1)[1].split("\n", 1)[0]
            special = self.behaviour(kind, query, prompt)
            if self.latency:
                time.sleep(self.latency)
            if special == "silent":
                time.sleep(3.0)
                return
            if special == "slow":
                time.sleep(self.slow)
            content, logprobs = self.answer(body, kind, query, prompt)
            if special == "garbage":
                content = "I would rather not say."
            elif special == "empty":
                content = ""
            elif special == "bad_ids":
                ids = content.split(" > ")
                content = " > ".join([ids[0], ids[0], "[99]", *ids[2:]])  # repeated, unknown, one missing
            choice: dict[str, object] = {"message": {"role": "assistant", "content": content}}
            if logprobs is not None:
                choice["logprobs"] = logprobs
            finished()
            conn.sendall(reply(200, {"choices": [choice]}))
        finally:
            finished()
