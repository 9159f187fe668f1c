"""A chat-completions server on 127.0.0.1 with a fixed latency, for bench_rerank_jobs.py: it
sleeps ``LATENCY`` seconds (asyncio, so any number of requests wait at once) and answers a
grade ("2") or, for a listwise prompt of n passages, "[1] > [2] > ... > [n]" reversed.

Run as ``python _fake_llm.py LATENCY``: prints the port, then serves until killed.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency: float) -> None:
    """Requests on one connection, one after the other (HTTP/1.1 keep-alive, as vLLM or llama.cpp)."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))  # type: ignore[union-attr]
            body = json.loads(await reader.readexactly(length))
            prompt = body["messages"][-1]["content"]
            await asyncio.sleep(latency)
            found = re.search(r"Below are (\d+) passages", prompt)
            content = " > ".join(f"[{i}]" for i in range(int(found.group(1)), 0, -1)) if found else "2"
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
            await writer.drain()
    finally:
        writer.close()


async def main(latency: float) -> None:
    server = await asyncio.start_server(lambda r, w: handle(r, w, latency), "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1])))
